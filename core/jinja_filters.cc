// The built-in filters, as jinja2 3.1 defines them, with Hugging Face's tojson (json.dumps, ensure_ascii off).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "core/jinja_builtins.h"
#include "core/jinja_text.h"
#include "core/status.h"

namespace tandem::jinja {
namespace {

#define TANDEM_FILTER(name) absl::StatusOr<Value> name(Renderer& r, const Value& in, CallArgs& args)

bool Flag(const Value& v) { return v.Truthy(); }

absl::StatusOr<std::string> Str(Renderer& r, const Value& v) { return ToStr(v, r.budget()); }

// A sort key as jinja2's ignore_case: strings lower-cased unless case_sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::String(text::Lower(v.str()));
  return v;
}

absl::Status SortValues(Renderer& r, std::vector<Value>& keys, std::vector<size_t>& order, bool reverse) {
  absl::Status st;
  order.resize(keys.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (!st.ok()) return false;
    absl::StatusOr<bool> lt = reverse ? Less(keys[b], keys[a], r.budget()) : Less(keys[a], keys[b], r.budget());
    if (!lt.ok()) {
      st = lt.status();
      return false;
    }
    return *lt;
  });
  return st;
}

TANDEM_FILTER(FilterAbs) {
  TANDEM_RETURN_IF_ERROR(Bind("abs", args, {}).status());
  if (in.kind() == Kind::kFloat) return Value::Float(std::fabs(in.float_value()));
  if (in.kind() == Kind::kInt || in.kind() == Kind::kBool) {
    if (in.int_value() == std::numeric_limits<int64_t>::min()) return InvalidArgument("integer overflow");
    return Value::Int(std::llabs(in.int_value()));
  }
  return InvalidArgument("bad operand type for abs(): '", in.TypeName(), "'");
}

TANDEM_FILTER(FilterAttr) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("attr", args, {"name"}));
  TANDEM_ASSIGN_OR_RETURN(std::string name, StringArg("attr", a[0]));
  // Python's getattr alone: a dict's keys are not its attributes.
  if (in.kind() == Kind::kDict && FindMethod(in, name) == nullptr) {
    return Value::Undefined(Cat("'dict object' has no attribute '", name, "'"));
  }
  return r.GetAttr(in, name);
}

TANDEM_FILTER(FilterCapitalize) {
  TANDEM_RETURN_IF_ERROR(Bind("capitalize", args, {}).status());
  TANDEM_ASSIGN_OR_RETURN(std::string s, Str(r, in));
  return r.MakeString(text::Capitalize(s), in.is_safe());
}

TANDEM_FILTER(FilterCenter) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("center", args, {"width"}));
  TANDEM_ASSIGN_OR_RETURN(std::string s, Str(r, in));
  CallArgs call;
  call.args.push_back(a[0].is_undefined() ? Value::Int(80) : a[0]);
  TANDEM_ASSIGN_OR_RETURN(Value str, r.MakeString(std::move(s)));
  return FindStringMethod("center")(r, str, call);
}

TANDEM_FILTER(FilterLength) {
  TANDEM_RETURN_IF_ERROR(Bind("length", args, {}).status());
  switch (in.kind()) {
    case Kind::kUndefined: return Value::Int(0);
    case Kind::kString: return Value::Int(static_cast<int64_t>(text::Length(in.str())));
    case Kind::kList:
      if (in.list().generator) return InvalidArgument("object of type 'generator' has no len()");
      return Value::Int(static_cast<int64_t>(in.list().items.size()));
    case Kind::kDict: return Value::Int(static_cast<int64_t>(in.dict().entries.size()));
    case Kind::kLoop: return Value::Int(static_cast<int64_t>(in.loop().items.size()));
    default: return InvalidArgument("object of type '", in.TypeName(), "' has no len()");
  }
}

TANDEM_FILTER(FilterDefault) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("default", args, {"default_value", "boolean"}));
  if (in.is_undefined() || (Flag(a[1]) && !in.Truthy())) {
    return a[0].is_undefined() ? Value::String("") : a[0];
  }
  return in;
}

TANDEM_FILTER(FilterDictsort) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("dictsort", args, {"case_sensitive", "by", "reverse"}));
  if (in.kind() != Kind::kDict) return InvalidArgument("dictsort: can only sort a mapping");
  int pos = 0;
  if (!a[1].is_undefined()) {
    TANDEM_ASSIGN_OR_RETURN(std::string by, StringArg("dictsort", a[1]));
    if (by == "value") {
      pos = 1;
    } else if (by != "key") {
      return InvalidArgument("You can only sort by either \"key\" or \"value\"");
    }
  }
  std::vector<Value> keys;
  for (const auto& e : in.dict().entries) keys.push_back(SortKey(pos == 0 ? e.first : e.second, Flag(a[0])));
  std::vector<size_t> order;
  TANDEM_RETURN_IF_ERROR(SortValues(r, keys, order, Flag(a[2])));
  std::vector<Value> items;
  for (size_t i : order) {
    const auto& e = in.dict().entries[i];
    TANDEM_ASSIGN_OR_RETURN(Value pair, Value::List({e.first, e.second}, /*tuple=*/true));
    items.push_back(std::move(pair));
  }
  return Value::List(std::move(items));
}

TANDEM_FILTER(FilterEscape) {
  TANDEM_RETURN_IF_ERROR(Bind("escape", args, {}).status());
  if (in.is_safe()) return in;
  TANDEM_ASSIGN_OR_RETURN(std::string s, Str(r, in));
  return r.MakeString(text::HtmlEscape(s), true);
}

TANDEM_FILTER(FilterForceEscape) {
  TANDEM_RETURN_IF_ERROR(Bind("forceescape", args, {}).status());
  TANDEM_ASSIGN_OR_RETURN(std::string s, Str(r, in));
  return r.MakeString(text::HtmlEscape(s), true);
}

TANDEM_FILTER(FilterFirst) {
  TANDEM_RETURN_IF_ERROR(Bind("first", args, {}).status());
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(in));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

TANDEM_FILTER(FilterLast) {
  TANDEM_RETURN_IF_ERROR(Bind("last", args, {}).status());
  if (in.kind() == Kind::kList && in.list().generator) {
    return InvalidArgument("'generator' object is not reversible");
  }
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(in));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

// Python's float(str): decimal text with surrounding whitespace, "inf" and "nan" too.
std::optional<double> ParseFloat(const std::string& s) {
  const std::string t = text::Strip(s, text::Side::kBoth, std::nullopt);
  if (t.empty()) return std::nullopt;
  std::string clean;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_' && i > 0 && i + 1 < t.size() && isdigit(t[i - 1]) && isdigit(t[i + 1])) continue;
    clean.push_back(t[i]);
  }
  const std::string lower = text::Lower(clean);
  for (const char* ok : {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan", "+nan", "-nan"}) {
    if (lower == ok) return std::strtod(lower.c_str(), nullptr);
  }
  if (lower.find_first_not_of("0123456789+-.e") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return v;
}

TANDEM_FILTER(FilterFloat) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("float", args, {"default"}));
  const Value fallback = a[0].is_undefined() ? Value::Float(0.0) : a[0];
  if (in.is_number()) return Value::Float(in.float_value());
  if (in.is_string()) {
    if (std::optional<double> f = ParseFloat(in.str())) return Value::Float(*f);
  }
  return fallback;
}

TANDEM_FILTER(FilterInt) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("int", args, {"default", "base"}));
  const Value fallback = a[0].is_undefined() ? Value::Int(0) : a[0];
  const int64_t base = a[1].is_undefined() ? 10 : AsInt(a[1]).value_or(10);
  if (in.kind() == Kind::kInt || in.kind() == Kind::kBool) return Value::Int(in.int_value());
  if (in.kind() == Kind::kFloat) {
    const double f = in.float_value();
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
    return Value::Int(static_cast<int64_t>(f));
  }
  if (!in.is_string()) return fallback;
  // int(s, base), then int(float(s)) as jinja2 tries.
  std::string t = text::Strip(in.str(), text::Side::kBoth, std::nullopt);
  std::string clean;
  for (char c : t) {
    if (c != '_') clean.push_back(c);
  }
  if (!clean.empty() && base >= 2 && base <= 36) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(clean.c_str(), &end, static_cast<int>(base));
    if (end == clean.c_str() + clean.size() && errno == 0 && clean.find_first_of(" \t") == std::string::npos) {
      return Value::Int(v);
    }
  }
  if (std::optional<double> f = ParseFloat(in.str()); f && std::isfinite(*f) && std::fabs(*f) < 9.2e18) {
    return Value::Int(static_cast<int64_t>(*f));
  }
  return fallback;
}

TANDEM_FILTER(FilterFormat) {
  if (!args.kwargs.empty() && !args.args.empty()) {
    return InvalidArgument("can't handle positional and keyword arguments at the same time");
  }
  TANDEM_ASSIGN_OR_RETURN(std::string fmt, Str(r, in));
  Value values;
  if (!args.kwargs.empty()) {
    std::vector<std::pair<Value, Value>> entries;
    for (auto& [k, v] : args.kwargs) entries.emplace_back(Value::String(k), v);
    TANDEM_ASSIGN_OR_RETURN(values, Value::Dict(std::move(entries)));
  } else {
    TANDEM_ASSIGN_OR_RETURN(values, Value::List(args.args, /*tuple=*/true));
  }
  TANDEM_ASSIGN_OR_RETURN(std::string out, PercentFormat(r, fmt, values));
  return r.MakeString(std::move(out));
}

TANDEM_FILTER(FilterIndent) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("indent", args, {"width", "first", "blank"}));
  std::string indent;
  if (a[0].is_string()) {
    indent = a[0].str();
  } else if (a[0].is_undefined()) {
    indent = "    ";
  } else if (std::optional<int64_t> w = AsInt(a[0])) {
    if (*w > 0) {
      TANDEM_RETURN_IF_ERROR(r.budget().CheckSize(static_cast<size_t>(std::min<int64_t>(*w, 1 << 30))));
      indent.assign(static_cast<size_t>(*w), ' ');
    }
  } else {
    return InvalidArgument("indent() width must be an integer or a string");
  }
  TANDEM_ASSIGN_OR_RETURN(std::string s, Str(r, in));
  s += "\n";  // jinja2 appends a newline so that splitlines keeps a trailing empty line
  const std::vector<std::string> lines = text::SplitLines(s);
  std::string out;
  if (Flag(a[2])) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + indent;
      out += lines[i];
      TANDEM_RETURN_IF_ERROR(r.budget().CheckSize(out.size()));
    }
  } else {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) {
        out += "\n";
        if (!lines[i].empty()) out += indent;
      }
      out += lines[i];
      TANDEM_RETURN_IF_ERROR(r.budget().CheckSize(out.size()));
    }
  }
  if (Flag(a[1])) out = indent + out;
  return r.MakeString(std::move(out), in.is_safe());
}

TANDEM_FILTER(FilterItems) {
  TANDEM_RETURN_IF_ERROR(Bind("items", args, {}).status());
  if (in.is_undefined()) return Value::Generator({});
  if (in.kind() != Kind::kDict) return InvalidArgument("Can only get item pairs from a mapping.");
  std::vector<Value> items;
  for (const auto& [k, v] : in.dict().entries) {
    TANDEM_ASSIGN_OR_RETURN(Value pair, Value::List({k, v}, /*tuple=*/true));
    items.push_back(std::move(pair));
  }
  return Value::Generator(std::move(items));
}

TANDEM_FILTER(FilterJoin) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("join", args, {"d", "attribute"}));
  TANDEM_ASSIGN_OR_RETURN(std::string sep, a[0].is_undefined() ? std::string() : Str(r, a[0]));
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(in));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (!a[1].is_undefined()) {
      TANDEM_ASSIGN_OR_RETURN(item, GetPath(r, item, a[1], Value()));
    }
    TANDEM_ASSIGN_OR_RETURN(std::string s, Str(r, item));
    if (i > 0) out += sep;
    out += s;
    TANDEM_RETURN_IF_ERROR(r.budget().CheckSize(out.size()));
  }
  return r.MakeString(std::move(out));
}

TANDEM_FILTER(FilterList) {
  TANDEM_RETURN_IF_ERROR(Bind("list", args, {}).status());
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(in));
  return Value::List(std::move(items));
}

TANDEM_FILTER(FilterLower) {
  TANDEM_RETURN_IF_ERROR(Bind("lower", args, {}).status());
  TANDEM_ASSIGN_OR_RETURN(std::string s, Str(r, in));
  return r.MakeString(text::Lower(s), in.is_safe());
}

TANDEM_FILTER(FilterUpper) {
  TANDEM_RETURN_IF_ERROR(Bind("upper", args, {}).status());
  TANDEM_ASSIGN_OR_RETURN(std::string s, Str(r, in));
  return r.MakeString(text::Upper(s), in.is_safe());
}

TANDEM_FILTER(FilterTitle) {
  TANDEM_RETURN_IF_ERROR(Bind("title", args, {}).status());
  TANDEM_ASSIGN_OR_RETURN(std::string s, Str(r, in));
  return r.MakeString(text::TitleFilter(s), in.is_safe());
}

TANDEM_FILTER(FilterTrim) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("trim", args, {"chars"}));
  TANDEM_ASSIGN_OR_RETURN(std::string s, Str(r, in));
  std::optional<std::string> chars;
  if (!a[0].is_undefined() && !a[0].is_none()) {
    TANDEM_ASSIGN_OR_RETURN(chars, StringArg("trim", a[0]));
  }
  return r.MakeString(text::Strip(s, text::Side::kBoth, chars), in.is_safe());
}

TANDEM_FILTER(FilterMap) {
  std::vector<Value> out;
  if (!in.Truthy()) return Value::Generator({});
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(in));
  if (args.args.empty()) {
    Value attribute, fallback = Value::None();
    bool has_attribute = false;
    for (auto& [k, v] : args.kwargs) {
      if (k == "attribute") {
        attribute = v;
        has_attribute = true;
      } else if (k == "default") {
        fallback = v;
      } else {
        return InvalidArgument("Unexpected keyword argument '", k, "'");
      }
    }
    if (!has_attribute) return InvalidArgument("map requires a filter argument");
    for (const Value& item : items) {
      TANDEM_ASSIGN_OR_RETURN(Value v, GetPath(r, item, attribute, fallback));
      out.push_back(std::move(v));
    }
    return Value::Generator(std::move(out));
  }
  TANDEM_ASSIGN_OR_RETURN(std::string name, StringArg("map", args.args[0]));
  if (FindFilter(name) == nullptr) return InvalidArgument("No filter named '", name, "'.");
  for (const Value& item : items) {
    CallArgs rest;
    rest.args.assign(args.args.begin() + 1, args.args.end());
    rest.kwargs = args.kwargs;
    TANDEM_ASSIGN_OR_RETURN(Value v, r.ApplyFilter(name, item, rest));
    out.push_back(std::move(v));
  }
  return Value::Generator(std::move(out));
}

// select, reject, selectattr, rejectattr: keep the items whose (attribute's) test is `keep`.
absl::StatusOr<Value> SelectOrReject(Renderer& r, const Value& in, CallArgs& args, bool by_attr, bool keep) {
  if (!in.Truthy()) return Value::Generator({});
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(in));
  size_t off = 0;
  Value attr;
  if (by_attr) {
    if (args.args.empty()) return InvalidArgument("Missing parameter for attribute name");
    attr = args.args[0];
    off = 1;
  }
  std::optional<std::string> test;
  if (args.args.size() > off) {
    TANDEM_ASSIGN_OR_RETURN(test, StringArg("select", args.args[off]));
    if (FindTest(*test) == nullptr) return InvalidArgument("No test named '", *test, "'.");
  }
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attr) {
      TANDEM_ASSIGN_OR_RETURN(subject, GetPath(r, item, attr, Value()));
    }
    bool pass = subject.Truthy();
    if (test) {
      CallArgs rest;
      rest.args.assign(args.args.begin() + static_cast<std::ptrdiff_t>(off + 1), args.args.end());
      rest.kwargs = args.kwargs;
      TANDEM_ASSIGN_OR_RETURN(pass, r.ApplyTest(*test, subject, rest));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

TANDEM_FILTER(FilterSelect) { return SelectOrReject(r, in, args, false, true); }
TANDEM_FILTER(FilterReject) { return SelectOrReject(r, in, args, false, false); }
TANDEM_FILTER(FilterSelectAttr) { return SelectOrReject(r, in, args, true, true); }
TANDEM_FILTER(FilterRejectAttr) { return SelectOrReject(r, in, args, true, false); }

// min and max: the first of the extreme items, by attribute and ignoring case unless told.
absl::StatusOr<Value> MinMax(Renderer& r, const Value& in, CallArgs& args, bool max) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(max ? "max" : "min", args, {"case_sensitive", "attribute"}));
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(in));
  if (items.empty()) return Value::Undefined(Cat("No aggregated item, sequence was empty."));
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value key = items[i];
    if (!a[1].is_undefined()) {
      TANDEM_ASSIGN_OR_RETURN(key, GetPath(r, key, a[1], Value()));
    }
    key = SortKey(key, Flag(a[0]));
    if (i > 0) {
      TANDEM_ASSIGN_OR_RETURN(bool better, max ? Less(best_key, key, r.budget()) : Less(key, best_key, r.budget()));
      if (!better) continue;
    }
    best = i;
    best_key = std::move(key);
  }
  return items[best];
}

TANDEM_FILTER(FilterMax) { return MinMax(r, in, args, true); }
TANDEM_FILTER(FilterMin) { return MinMax(r, in, args, false); }

TANDEM_FILTER(FilterReplace) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("replace", args, {"old", "new", "count"}));
  TANDEM_ASSIGN_OR_RETURN(std::string s, Str(r, in));
  TANDEM_ASSIGN_OR_RETURN(std::string old, Str(r, a[0]));
  TANDEM_ASSIGN_OR_RETURN(std::string repl, Str(r, a[1]));
  const int64_t count = a[2].is_undefined() || a[2].is_none() ? -1 : AsInt(a[2]).value_or(-1);
  const size_t n = text::Length(s) + 1;
  if (repl.size() > old.size() && n > 0 && (repl.size() - old.size()) > r.budget().max_bytes / n) {
    return ResourceExhausted("a string would exceed the limit of ", r.budget().max_bytes, " bytes");
  }
  return r.MakeString(text::Replace(s, old, repl, count), in.is_safe());
}

TANDEM_FILTER(FilterReverse) {
  TANDEM_RETURN_IF_ERROR(Bind("reverse", args, {}).status());
  if (in.is_string()) {
    std::u32string cps = text::Decode(in.str());
    std::reverse(cps.begin(), cps.end());
    return r.MakeString(text::Encode(cps));
  }
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(in));
  std::reverse(items.begin(), items.end());
  return Value::Generator(std::move(items));
}

TANDEM_FILTER(FilterRound) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("round", args, {"precision", "method"}));
  const int64_t precision = a[0].is_undefined() ? 0 : AsInt(a[0]).value_or(0);
  std::string method = "common";
  if (!a[1].is_undefined()) {
    TANDEM_ASSIGN_OR_RETURN(method, StringArg("round", a[1]));
  }
  if (method != "common" && method != "ceil" && method != "floor") {
    return InvalidArgument("method must be common, ceil or floor");
  }
  if (!in.is_number()) return InvalidArgument("type ", in.TypeName(), " doesn't define __round__ method");
  if (method == "common" && in.kind() != Kind::kFloat) {
    // round(int, n) stays an int: unchanged for n >= 0, else to a multiple of 10^-n, halves to even.
    const int64_t v = in.int_value();
    if (precision >= 0) return Value::Int(v);
    if (precision < -18) return Value::Int(0);
    int64_t q = 1;
    for (int64_t i = 0; i < -precision; ++i) q *= 10;
    int64_t down = v / q * q;
    if (v < 0 && down != v) down -= q;
    const int64_t rest = v - down;  // 0 <= rest < q
    const bool up = rest * 2 > q || (rest * 2 == q && (down / q) % 2 != 0);
    int64_t out = 0;
    if (__builtin_add_overflow(down, up ? q : 0, &out)) return InvalidArgument("integer overflow");
    return Value::Int(out);
  }
  const double x = in.float_value();
  if (!std::isfinite(x)) return Value::Float(x);
  const int p = static_cast<int>(std::clamp<int64_t>(precision, -308, 308));
  if (method == "common") {
    // Python's round(x, n): the correctly rounded decimal, ties to even, which is what printf does.
    if (p >= 0) {
      char buf[512];
      std::snprintf(buf, sizeof(buf), "%.*f", std::min(p, 340), x);
      return Value::Float(std::strtod(buf, nullptr));
    }
    const double scale = std::pow(10.0, -p);
    return Value::Float(std::nearbyint(x / scale) * scale);
  }
  const double scale = std::pow(10.0, p);
  return Value::Float((method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
}

TANDEM_FILTER(FilterSafe) {
  TANDEM_RETURN_IF_ERROR(Bind("safe", args, {}).status());
  TANDEM_ASSIGN_OR_RETURN(std::string s, Str(r, in));
  return r.MakeString(std::move(s), true);
}

TANDEM_FILTER(FilterSort) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("sort", args, {"reverse", "case_sensitive", "attribute"}));
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(in));
  std::vector<Value> keys;
  for (const Value& item : items) {
    Value key = item;
    if (!a[2].is_undefined()) {
      TANDEM_ASSIGN_OR_RETURN(key, GetPath(r, item, a[2], Value()));
    }
    keys.push_back(SortKey(key, Flag(a[1])));
  }
  std::vector<size_t> order;
  TANDEM_RETURN_IF_ERROR(SortValues(r, keys, order, Flag(a[0])));
  std::vector<Value> out;
  for (size_t i : order) out.push_back(items[i]);
  return Value::List(std::move(out));
}

TANDEM_FILTER(FilterString) {
  TANDEM_RETURN_IF_ERROR(Bind("string", args, {}).status());
  if (in.is_string()) return in;
  TANDEM_ASSIGN_OR_RETURN(std::string s, Str(r, in));
  return r.MakeString(std::move(s));
}

TANDEM_FILTER(FilterSum) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("sum", args, {"attribute", "start"}));
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(in));
  Value total = a[1].is_undefined() ? Value::Int(0) : a[1];
  for (const Value& item : items) {
    Value v = item;
    if (!a[0].is_undefined()) {
      TANDEM_ASSIGN_OR_RETURN(v, GetPath(r, item, a[0], Value()));
    }
    TANDEM_ASSIGN_OR_RETURN(total, BinaryOp(r, "+", total, v));
  }
  return total;
}

TANDEM_FILTER(FilterToJson) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a,
                          Bind("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonOptions o;
  o.ensure_ascii = Flag(a[0]);
  if (!a[1].is_undefined() && !a[1].is_none()) {
    o.has_indent = true;
    o.item_separator.resize(1);  // "," (not assigned from a literal: GCC 12's -Wrestrict misfires on that)
    o.item_separator[0] = ',';
    if (a[1].is_string()) {
      o.indent = a[1].str();
    } else if (std::optional<int64_t> n = AsInt(a[1])) {
      o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(*n, 0, 64)), ' ');
    } else {
      return InvalidArgument("tojson: indent must be an integer or a string");
    }
  }
  if (!a[2].is_undefined() && !a[2].is_none()) {
    TANDEM_ASSIGN_OR_RETURN(std::vector<Value> seps, r.Iterate(a[2]));
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string()) {
      return InvalidArgument("tojson: separators must be two strings");
    }
    o.item_separator = seps[0].str();
    o.key_separator = seps[1].str();
  }
  o.sort_keys = Flag(a[3]);
  TANDEM_ASSIGN_OR_RETURN(std::string s, ToJson(in, o, r.budget()));
  return r.MakeString(std::move(s));
}

TANDEM_FILTER(FilterUnique) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("unique", args, {"case_sensitive", "attribute"}));
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(in));
  std::vector<Value> out;
  std::vector<Value> seen;
  for (const Value& item : items) {
    Value key = item;
    if (!a[1].is_undefined()) {
      TANDEM_ASSIGN_OR_RETURN(key, GetPath(r, item, a[1], Value()));
    }
    key = SortKey(key, Flag(a[0]));
    if (!key.is_hashable()) return InvalidArgument("unhashable type: '", key.TypeName(), "'");
    bool dup = false;
    for (const Value& s : seen) {
      TANDEM_ASSIGN_OR_RETURN(dup, Equal(s, key, r.budget()));
      if (dup) break;
    }
    if (dup) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

TANDEM_FILTER(FilterWordcount) {
  TANDEM_RETURN_IF_ERROR(Bind("wordcount", args, {}).status());
  TANDEM_ASSIGN_OR_RETURN(std::string s, Str(r, in));
  // \w+ runs: letters, digits and underscores (non-ASCII counts as a letter).
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : text::Decode(s)) {
    const bool w = c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                   (c >= 0x80 && !text::IsSpace(c));
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::Int(n);
}

#undef TANDEM_FILTER

}  // namespace

FilterFn FindFilterIn(std::string_view name) {
  static const auto* filters = new absl::flat_hash_map<std::string_view, FilterFn>{
      {"abs", FilterAbs}, {"attr", FilterAttr}, {"capitalize", FilterCapitalize}, {"center", FilterCenter},
      {"count", FilterLength}, {"length", FilterLength}, {"d", FilterDefault}, {"default", FilterDefault},
      {"dictsort", FilterDictsort}, {"e", FilterEscape}, {"escape", FilterEscape},
      {"forceescape", FilterForceEscape}, {"first", FilterFirst}, {"last", FilterLast}, {"float", FilterFloat},
      {"int", FilterInt}, {"format", FilterFormat}, {"indent", FilterIndent}, {"items", FilterItems},
      {"join", FilterJoin}, {"list", FilterList}, {"lower", FilterLower}, {"upper", FilterUpper},
      {"title", FilterTitle}, {"trim", FilterTrim}, {"map", FilterMap}, {"select", FilterSelect},
      {"reject", FilterReject}, {"selectattr", FilterSelectAttr}, {"rejectattr", FilterRejectAttr},
      {"max", FilterMax}, {"min", FilterMin}, {"replace", FilterReplace}, {"reverse", FilterReverse},
      {"round", FilterRound}, {"safe", FilterSafe}, {"sort", FilterSort}, {"string", FilterString},
      {"sum", FilterSum}, {"tojson", FilterToJson}, {"unique", FilterUnique}, {"wordcount", FilterWordcount},
  };
  const auto it = filters->find(name);
  return it == filters->end() ? nullptr : it->second;
}

}  // namespace tandem::jinja

// Methods of Python's str, list and dict that templates call (message.content.split(...), tool.items(), ...),
// and Python's two string formatting languages.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/container/flat_hash_map.h"
#include "core/jinja_builtins.h"
#include "core/jinja_text.h"
#include "core/status.h"

namespace tandem::jinja {
namespace {

#define TANDEM_METHOD(name) absl::StatusOr<Value> name(Renderer& r, const Value& self, CallArgs& args)

absl::StatusOr<std::optional<std::string>> OptionalString(std::string_view fn, const Value& v) {
  if (v.is_undefined() || v.is_none()) return std::optional<std::string>();
  TANDEM_ASSIGN_OR_RETURN(std::string s, StringArg(fn, v));
  return std::optional<std::string>(std::move(s));
}

int64_t IntOr(const Value& v, int64_t fallback) {
  if (v.is_undefined() || v.is_none()) return fallback;
  return AsInt(v).value_or(fallback);
}

absl::StatusOr<Value> StringList(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const std::string& p : parts) items.push_back(Value::String(p));
  return Value::List(std::move(items));
}

// The code point range [start, end) of str.find/startswith's optional bounds, as byte offsets.
std::pair<size_t, size_t> Bounds(const std::string& s, const Value& start, const Value& end) {
  if ((start.is_undefined() || start.is_none()) && (end.is_undefined() || end.is_none())) return {0, s.size()};
  const std::u32string cps = text::Decode(s);
  const auto n = static_cast<int64_t>(cps.size());
  auto clamp = [n](int64_t i) {
    if (i < 0) i += n;
    return std::clamp<int64_t>(i, 0, n);
  };
  const int64_t a = clamp(IntOr(start, 0));
  const int64_t b = clamp(IntOr(end, n));
  const size_t ba = text::Encode(std::u32string_view(cps).substr(0, a)).size();
  const size_t bb = b <= a ? ba : ba + text::Encode(std::u32string_view(cps).substr(a, b - a)).size();
  return {ba, std::max(ba, bb)};
}

absl::StatusOr<Value> StartsOrEnds(Renderer& r, const Value& self, CallArgs& args, bool starts) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(starts ? "startswith" : "endswith", args, {"x", "start", "end"}));
  const std::string& s = self.str();
  const auto [lo, hi] = Bounds(s, a[1], a[2]);
  const std::string_view part = std::string_view(s).substr(lo, hi - lo);
  std::vector<Value> options;
  if (a[0].kind() == Kind::kList && a[0].list().tuple) {
    options = a[0].list().items;
  } else {
    options.push_back(a[0]);
  }
  for (const Value& o : options) {
    if (!o.is_string()) {
      return InvalidArgument(starts ? "startswith" : "endswith",
                             " first arg must be str or a tuple of str, not ", o.TypeName());
    }
    const std::string& x = o.str();
    if (x.size() <= part.size() &&
        (starts ? part.substr(0, x.size()) == x : part.substr(part.size() - x.size()) == x)) {
      return Value::Bool(true);
    }
  }
  return Value::Bool(false);
}

TANDEM_METHOD(StrStartswith) { return StartsOrEnds(r, self, args, true); }
TANDEM_METHOD(StrEndswith) { return StartsOrEnds(r, self, args, false); }

absl::StatusOr<Value> StripMethod(Renderer& r, const Value& self, CallArgs& args, text::Side side) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("strip", args, {"chars"}));
  TANDEM_ASSIGN_OR_RETURN(std::optional<std::string> chars, OptionalString("strip", a[0]));
  return r.MakeString(text::Strip(self.str(), side, chars), self.is_safe());
}
TANDEM_METHOD(StrStrip) { return StripMethod(r, self, args, text::Side::kBoth); }
TANDEM_METHOD(StrLstrip) { return StripMethod(r, self, args, text::Side::kLeft); }
TANDEM_METHOD(StrRstrip) { return StripMethod(r, self, args, text::Side::kRight); }

absl::StatusOr<Value> SplitMethod(Renderer& r, const Value& self, CallArgs& args, bool right) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(right ? "rsplit" : "split", args, {"sep", "maxsplit"}));
  TANDEM_ASSIGN_OR_RETURN(std::optional<std::string> sep, OptionalString("split", a[0]));
  if (sep && sep->empty()) return InvalidArgument("empty separator");
  const int64_t maxsplit = IntOr(a[1], -1);
  TANDEM_RETURN_IF_ERROR(r.budget().Spend(static_cast<int64_t>(self.str().size() / 16)));
  return StringList(right ? text::RSplit(self.str(), sep, maxsplit) : text::Split(self.str(), sep, maxsplit));
}
TANDEM_METHOD(StrSplit) { return SplitMethod(r, self, args, false); }
TANDEM_METHOD(StrRsplit) { return SplitMethod(r, self, args, true); }

TANDEM_METHOD(StrSplitlines) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("splitlines", args, {"keepends"}));
  if (a[0].Truthy()) return InvalidArgument("splitlines(keepends=True) is not supported");
  return StringList(text::SplitLines(self.str()));
}

TANDEM_METHOD(StrUpper) {
  TANDEM_RETURN_IF_ERROR(Bind("upper", args, {}).status());
  return r.MakeString(text::Upper(self.str()), self.is_safe());
}
TANDEM_METHOD(StrLower) {
  TANDEM_RETURN_IF_ERROR(Bind("lower", args, {}).status());
  return r.MakeString(text::Lower(self.str()), self.is_safe());
}
TANDEM_METHOD(StrTitle) {
  TANDEM_RETURN_IF_ERROR(Bind("title", args, {}).status());
  return r.MakeString(text::TitleMethod(self.str()), self.is_safe());
}
TANDEM_METHOD(StrCapitalize) {
  TANDEM_RETURN_IF_ERROR(Bind("capitalize", args, {}).status());
  return r.MakeString(text::Capitalize(self.str()), self.is_safe());
}

TANDEM_METHOD(StrReplace) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("replace", args, {"old", "new", "count"}));
  TANDEM_ASSIGN_OR_RETURN(std::string old, StringArg("replace", a[0]));
  TANDEM_ASSIGN_OR_RETURN(std::string repl, StringArg("replace", a[1]));
  const size_t n = text::Length(self.str()) + 1;
  if (repl.size() > old.size() && (repl.size() - old.size()) > r.budget().max_bytes / n) {
    return ResourceExhausted("a string would exceed the limit of ", r.budget().max_bytes, " bytes");
  }
  return r.MakeString(text::Replace(self.str(), old, repl, IntOr(a[2], -1)), self.is_safe());
}

// find/rfind/index/rindex/count: positions in code points, as Python.
absl::StatusOr<Value> FindMethodImpl(Renderer& r, const Value& self, CallArgs& args, std::string_view fn) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(fn, args, {"sub", "start", "end"}));
  TANDEM_ASSIGN_OR_RETURN(std::string sub, StringArg(fn, a[0]));
  const std::string& s = self.str();
  const auto [lo, hi] = Bounds(s, a[1], a[2]);
  const std::string_view part = std::string_view(s).substr(lo, hi - lo);
  if (fn == "count") {
    if (sub.empty()) return Value::Int(static_cast<int64_t>(text::Length(part)) + 1);
    int64_t n = 0;
    for (size_t p = part.find(sub); p != std::string_view::npos; p = part.find(sub, p + sub.size())) ++n;
    return Value::Int(n);
  }
  const bool reverse = fn == "rfind" || fn == "rindex";
  const size_t at = reverse ? part.rfind(sub) : part.find(sub);
  if (at == std::string_view::npos) {
    if (fn == "index" || fn == "rindex") return InvalidArgument("substring not found");
    return Value::Int(-1);
  }
  return Value::Int(static_cast<int64_t>(text::Length(std::string_view(s).substr(0, lo + at))));
}
TANDEM_METHOD(StrFind) { return FindMethodImpl(r, self, args, "find"); }
TANDEM_METHOD(StrRfind) { return FindMethodImpl(r, self, args, "rfind"); }
TANDEM_METHOD(StrIndex) { return FindMethodImpl(r, self, args, "index"); }
TANDEM_METHOD(StrRindex) { return FindMethodImpl(r, self, args, "rindex"); }
TANDEM_METHOD(StrCount) { return FindMethodImpl(r, self, args, "count"); }

TANDEM_METHOD(StrJoin) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("join", args, {"iterable"}));
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(a[0]));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return InvalidArgument("sequence item ", i, ": expected str instance, ", items[i].TypeName(), " found");
    }
    if (i > 0) out += self.str();
    out += items[i].str();
    TANDEM_RETURN_IF_ERROR(r.budget().CheckSize(out.size()));
  }
  return r.MakeString(std::move(out));
}

TANDEM_METHOD(StrFormatMethod) {
  TANDEM_ASSIGN_OR_RETURN(std::string out, StrFormat(r, self.str(), args));
  return r.MakeString(std::move(out));
}

// isdigit, isalpha, ... over ASCII classes (and non-ASCII letters as letters).
template <int kClass>
absl::StatusOr<Value> StrIs(Renderer& r, const Value& self, CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(Bind("is", args, {}).status());
  const std::u32string cps = text::Decode(self.str());
  if (cps.empty()) return Value::Bool(false);
  bool cased = false;
  for (char32_t c : cps) {
    const bool digit = c >= '0' && c <= '9';
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= 0x80 && text::IsCased(c));
    bool ok = true;
    switch (kClass) {
      case 0: ok = digit; break;
      case 1: ok = alpha; break;
      case 2: ok = digit || alpha; break;
      case 3: ok = text::IsSpace(c); break;
      case 4: ok = !text::IsUpperChar(c); cased = cased || text::IsLowerChar(c); break;
      case 5: ok = !text::IsLowerChar(c); cased = cased || text::IsUpperChar(c); break;
    }
    if (!ok) return Value::Bool(false);
  }
  return Value::Bool(kClass < 4 || cased);
}

absl::StatusOr<Value> Pad(Renderer& r, const Value& self, CallArgs& args, char align) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("center", args, {"width", "fillchar"}));
  std::optional<int64_t> width = AsInt(a[0]);
  if (!width) return InvalidArgument("integer argument expected, got ", a[0].TypeName());
  std::string fill = " ";
  if (!a[1].is_undefined()) {
    TANDEM_ASSIGN_OR_RETURN(fill, StringArg("center", a[1]));
    if (text::Length(fill) != 1) return InvalidArgument("The fill character must be exactly one character long");
  }
  const std::string& s = self.str();
  const auto len = static_cast<int64_t>(text::Length(s));
  if (*width <= len) return self;
  const int64_t total = *width - len;
  TANDEM_RETURN_IF_ERROR(r.budget().CheckSize(static_cast<size_t>(std::min<int64_t>(total, 1LL << 40)) * fill.size()));
  int64_t left = 0;
  if (align == '>') left = total;
  if (align == '^') left = total / 2 + (total & *width & 1);  // Python's center puts the odd one left when width is odd
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return r.MakeString(std::move(out));
}
TANDEM_METHOD(StrCenter) { return Pad(r, self, args, '^'); }
TANDEM_METHOD(StrLjust) { return Pad(r, self, args, '<'); }
TANDEM_METHOD(StrRjust) { return Pad(r, self, args, '>'); }

TANDEM_METHOD(StrZfill) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("zfill", args, {"width"}));
  const int64_t width = IntOr(a[0], 0);
  const std::string& s = self.str();
  const auto len = static_cast<int64_t>(text::Length(s));
  if (width <= len) return self;
  TANDEM_RETURN_IF_ERROR(r.budget().CheckSize(static_cast<size_t>(width)));
  const bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
  std::string out = sign ? s.substr(0, 1) : "";
  out += std::string(static_cast<size_t>(width - len), '0');
  out += sign ? s.substr(1) : s;
  return r.MakeString(std::move(out));
}

absl::StatusOr<Value> Partition(Renderer& r, const Value& self, CallArgs& args, bool right) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("partition", args, {"sep"}));
  TANDEM_ASSIGN_OR_RETURN(std::string sep, StringArg("partition", a[0]));
  if (sep.empty()) return InvalidArgument("empty separator");
  const std::string& s = self.str();
  const size_t at = right ? s.rfind(sep) : s.find(sep);
  std::vector<Value> parts;
  if (at == std::string::npos) {
    parts = right ? std::vector<Value>{Value::String(""), Value::String(""), self}
                  : std::vector<Value>{self, Value::String(""), Value::String("")};
  } else {
    parts = {Value::String(s.substr(0, at)), Value::String(sep), Value::String(s.substr(at + sep.size()))};
  }
  return Value::List(std::move(parts), /*tuple=*/true);
}
TANDEM_METHOD(StrPartition) { return Partition(r, self, args, false); }
TANDEM_METHOD(StrRpartition) { return Partition(r, self, args, true); }

absl::StatusOr<Value> RemoveAffix(Renderer& r, const Value& self, CallArgs& args, bool prefix) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(prefix ? "removeprefix" : "removesuffix", args, {"affix"}));
  TANDEM_ASSIGN_OR_RETURN(std::string x, StringArg("removeprefix", a[0]));
  const std::string& s = self.str();
  if (prefix && s.compare(0, x.size(), x) == 0) return Value::String(s.substr(x.size()));
  if (!prefix && x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0) {
    return Value::String(s.substr(0, s.size() - x.size()));
  }
  return self;
}
TANDEM_METHOD(StrRemoveprefix) { return RemoveAffix(r, self, args, true); }
TANDEM_METHOD(StrRemovesuffix) { return RemoveAffix(r, self, args, false); }

// ---- list and tuple ----

TANDEM_METHOD(ListIndex) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("index", args, {"value"}));
  const auto& items = self.list().items;
  for (size_t i = 0; i < items.size(); ++i) {
    TANDEM_ASSIGN_OR_RETURN(bool eq, Equal(items[i], a[0], r.budget()));
    if (eq) return Value::Int(static_cast<int64_t>(i));
  }
  return InvalidArgument("value is not in list");
}

TANDEM_METHOD(ListCount) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("count", args, {"value"}));
  int64_t n = 0;
  for (const Value& item : self.list().items) {
    TANDEM_ASSIGN_OR_RETURN(bool eq, Equal(item, a[0], r.budget()));
    n += eq ? 1 : 0;
  }
  return Value::Int(n);
}

TANDEM_METHOD(ListCopy) {
  TANDEM_RETURN_IF_ERROR(Bind("copy", args, {}).status());
  return Value::List(self.list().items, self.list().tuple);
}

// ---- dict ----

TANDEM_METHOD(DictGet) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("get", args, {"key", "default"}));
  if (!a[0].is_hashable()) return InvalidArgument("unhashable type: '", a[0].TypeName(), "'");
  if (const Value* v = self.dict().Find(a[0])) return *v;
  return a[1].is_undefined() ? Value::None() : a[1];
}

TANDEM_METHOD(DictItems) {
  TANDEM_RETURN_IF_ERROR(Bind("items", args, {}).status());
  std::vector<Value> items;
  for (const auto& [k, v] : self.dict().entries) {
    TANDEM_ASSIGN_OR_RETURN(Value pair, Value::List({k, v}, /*tuple=*/true));
    items.push_back(std::move(pair));
  }
  return Value::List(std::move(items));
}

TANDEM_METHOD(DictKeys) {
  TANDEM_RETURN_IF_ERROR(Bind("keys", args, {}).status());
  std::vector<Value> items;
  for (const auto& e : self.dict().entries) items.push_back(e.first);
  return Value::List(std::move(items));
}

TANDEM_METHOD(DictValues) {
  TANDEM_RETURN_IF_ERROR(Bind("values", args, {}).status());
  std::vector<Value> items;
  for (const auto& e : self.dict().entries) items.push_back(e.second);
  return Value::List(std::move(items));
}

TANDEM_METHOD(DictCopy) {
  TANDEM_RETURN_IF_ERROR(Bind("copy", args, {}).status());
  return Value::Dict(self.dict().entries);
}

#undef TANDEM_METHOD

// ---- formatting ----

// One format spec, [[fill]align][sign][#][0][width][,][.precision][type], applied as Python's format().
absl::StatusOr<std::string> FormatWithSpec(Renderer& r, const Value& v, std::string_view spec) {
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2 && is_align(spec[1]) && static_cast<unsigned char>(spec[0]) < 0x80) {
    fill = std::string(1, spec[0]);
    align = spec[1];
    i = 2;
  } else if (!spec.empty() && is_align(spec[0])) {
    align = spec[0];
    i = 1;
  }
  char sign = '-';
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  bool alt = false;
  if (i < spec.size() && spec[i] == '#') {
    alt = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '0') {
    if (align == 0) {
      fill = "0";
      align = '=';
    }
    ++i;
  }
  int64_t width = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])) && width < 100000) {
    width = width * 10 + (spec[i++] - '0');
  }
  bool group = false;
  if (i < spec.size() && spec[i] == ',') {
    group = true;
    ++i;
  }
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    precision = 0;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])) && precision < 1000) {
      precision = precision * 10 + (spec[i++] - '0');
    }
  }
  char type = 0;
  if (i < spec.size()) type = spec[i++];
  if (i != spec.size()) return InvalidArgument("Invalid format specifier '", spec, "'");

  std::string body;
  std::string prefix;  // the sign, which '=' alignment pads after
  if (v.is_string() || (!v.is_number() && type == 0)) {
    if (type != 0 && type != 's') return InvalidArgument("Unknown format code '", std::string(1, type), "' for str");
    TANDEM_ASSIGN_OR_RETURN(body, ToStr(v, r.budget()));
    if (precision >= 0) {
      const std::u32string cps = text::Decode(body);
      if (static_cast<size_t>(precision) < cps.size()) body = text::Encode(std::u32string_view(cps).substr(0, precision));
    }
    if (align == 0) align = '<';
  } else if (v.is_number()) {
    const bool is_int = v.kind() != Kind::kFloat;
    if (is_int && (type == 0 || type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b' ||
                   type == 'c')) {
      const int64_t n = v.int_value();
      uint64_t mag = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
      if (type == 'c') {
        text::AppendUtf8(body, static_cast<char32_t>(n));
      } else {
        const int base = type == 'x' || type == 'X' ? 16 : type == 'o' ? 8 : type == 'b' ? 2 : 10;
        const char* digits = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
        do {
          body.insert(body.begin(), digits[mag % base]);
          mag /= base;
        } while (mag > 0);
        if (group && base == 10) {
          for (int k = static_cast<int>(body.size()) - 3; k > 0; k -= 3) body.insert(body.begin() + k, ',');
        }
        if (alt && base != 10) prefix = type == 'o' ? "0o" : type == 'b' ? "0b" : type == 'X' ? "0X" : "0x";
      }
      if (n < 0) {
        prefix.insert(0, "-");
      } else if (sign != '-') {
        prefix.insert(0, 1, sign);
      }
    } else {
      double f = v.float_value();
      if (type == 0 && precision < 0) {
        body = is_int ? std::to_string(v.int_value()) : FloatRepr(std::fabs(f));
        if (is_int && v.int_value() < 0) body.erase(0, 1);
      } else {
        char t = type == 0 ? 'g' : type;
        if (t == '%') f *= 100;
        if (t != 'f' && t != 'F' && t != 'e' && t != 'E' && t != 'g' && t != 'G' && t != '%') {
          return InvalidArgument("Unknown format code '", std::string(1, t), "' for ", v.TypeName());
        }
        char fmt[16];
        std::snprintf(fmt, sizeof(fmt), "%%%s.%d%c", alt ? "#" : "", precision < 0 ? 6 : std::min(precision, 340),
                      t == '%' ? 'f' : t);
        char buf[512];
        std::snprintf(buf, sizeof(buf), fmt, std::fabs(f));
        body = buf;
        if (t == '%') body += "%";
        if (group) {
          const size_t dot = std::min(body.find('.'), body.find_first_not_of("0123456789"));
          for (int k = static_cast<int>(dot) - 3; k > 0; k -= 3) body.insert(body.begin() + k, ',');
        }
      }
      if (std::signbit(f) && !std::isnan(f)) {
        prefix = "-";
      } else if (sign != '-') {
        prefix = std::string(1, sign);
      }
    }
    if (align == 0) align = '>';
  } else {
    return InvalidArgument("unsupported format string passed to ", v.TypeName(), ".__format__");
  }
  const auto len = static_cast<int64_t>(text::Length(prefix) + text::Length(body));
  if (width <= len) return prefix + body;
  TANDEM_RETURN_IF_ERROR(r.budget().CheckSize(static_cast<size_t>(width) * fill.size()));
  const int64_t pad = width - len;
  std::string pads;
  auto padding = [&](int64_t n) {
    std::string p;
    for (int64_t k = 0; k < n; ++k) p += fill;
    return p;
  };
  switch (align) {
    case '<': return prefix + body + padding(pad);
    case '>': return padding(pad) + prefix + body;
    case '=': return prefix + padding(pad) + body;
    default: return padding(pad / 2) + prefix + body + padding(pad - pad / 2);
  }
}

}  // namespace

absl::StatusOr<std::string> PercentFormat(Renderer& r, std::string_view fmt, const Value& args) {
  std::vector<Value> values;
  const Value* mapping = nullptr;
  if (args.kind() == Kind::kList && args.list().tuple) {
    values = args.list().items;
  } else if (args.kind() == Kind::kDict) {
    mapping = &args;
  } else {
    values.push_back(args);
  }
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) return InvalidArgument("incomplete format");
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string_view::npos || mapping == nullptr) return InvalidArgument("format requires a mapping");
      const Value* v = mapping->dict().Find(fmt.substr(i + 1, close - i - 1));
      if (v == nullptr) return InvalidArgument("KeyError: '", fmt.substr(i + 1, close - i - 1), "'");
      arg = v;
      i = close + 1;
      if (i >= fmt.size()) return InvalidArgument("incomplete format");
    }
    // flags, width, precision, conversion: mapped onto a format() spec.
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) flags += fmt[i++];
    std::string width;
    while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) width += fmt[i++];
    std::string precision;
    if (i < fmt.size() && fmt[i] == '.') {
      precision = ".";
      ++i;
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) precision += fmt[i++];
      if (precision == ".") precision = ".0";
    }
    if (i >= fmt.size()) return InvalidArgument("incomplete format");
    const char conv = fmt[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (arg == nullptr) {
      if (mapping != nullptr) {
        arg = mapping;
      } else {
        if (next >= values.size()) return InvalidArgument("not enough arguments for format string");
        arg = &values[next++];
      }
    }
    // As a format() spec: printf pads on the left unless "-", with zeros for numbers under "0".
    const bool numeric = conv != 's' && conv != 'r' && conv != 'a' && conv != 'c';
    const bool zero = flags.find('0') != std::string::npos && numeric && flags.find('-') == std::string::npos;
    std::string spec = zero ? "" : flags.find('-') != std::string::npos ? "<" : ">";
    if (numeric && flags.find('+') != std::string::npos) {
      spec += "+";
    } else if (numeric && flags.find(' ') != std::string::npos) {
      spec += " ";
    }
    if (zero) spec += "0";
    spec += width;
    Value subject = *arg;
    switch (conv) {
      case 's': {
        TANDEM_ASSIGN_OR_RETURN(std::string s, ToStr(subject, r.budget()));
        subject = Value::String(std::move(s));
        spec += precision;
        break;
      }
      case 'r':
      case 'a': {
        TANDEM_ASSIGN_OR_RETURN(std::string s, ToRepr(subject, r.budget()));
        subject = Value::String(std::move(s));
        spec += precision;
        break;
      }
      case 'd':
      case 'i':
      case 'u':
        if (!subject.is_number()) return InvalidArgument("%d format: a real number is required, not ", subject.TypeName());
        subject = Value::Int(subject.kind() == Kind::kFloat ? static_cast<int64_t>(subject.float_value())
                                                            : subject.int_value());
        spec += "d";
        break;
      case 'x':
      case 'X':
      case 'o':
        if (!AsInt(subject)) return InvalidArgument("%", std::string(1, conv), " format: an integer is required");
        if (flags.find('#') != std::string::npos) spec.insert(0, "#");
        spec += conv;
        break;
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
        if (!subject.is_number()) return InvalidArgument("must be real number, not ", subject.TypeName());
        subject = Value::Float(subject.float_value());
        spec += (precision.empty() ? ".6" : precision) + std::string(1, conv);
        break;
      case 'c':
        spec += "c";
        break;
      default: return InvalidArgument("unsupported format character '", std::string(1, conv), "'");
    }
    TANDEM_ASSIGN_OR_RETURN(std::string piece, FormatWithSpec(r, subject, spec));
    out += piece;
    TANDEM_RETURN_IF_ERROR(r.budget().CheckSize(out.size()));
  }
  if (mapping == nullptr && next < values.size()) {
    return InvalidArgument("not all arguments converted during string formatting");
  }
  return out;
}

absl::StatusOr<std::string> StrFormat(Renderer& r, std::string_view fmt, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      return InvalidArgument("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string_view::npos) return InvalidArgument("Single '{' encountered in format string");
    std::string_view field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string_view spec;
    if (const size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    char conversion = 0;
    if (const size_t bang = field.find('!'); bang != std::string_view::npos) {
      if (bang + 2 != field.size()) return InvalidArgument("expected ':' after conversion specifier");
      conversion = field[bang + 1];
      field = field.substr(0, bang);
    }
    if (field.find_first_of(".[") != std::string_view::npos) {
      return InvalidArgument("attribute and item lookups in format fields are not supported");
    }
    Value arg;
    if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t index = auto_index++;
      if (!field.empty()) {
        index = 0;
        for (char d : field) index = index * 10 + (d - '0');
      }
      if (index >= args.args.size()) return InvalidArgument("Replacement index ", index, " out of range");
      arg = args.args[index];
    } else {
      bool found = false;
      for (const auto& [k, v] : args.kwargs) {
        if (k == field) {
          arg = v;
          found = true;
        }
      }
      if (!found) return InvalidArgument("KeyError: '", field, "'");
    }
    if (conversion == 'r' || conversion == 'a') {
      TANDEM_ASSIGN_OR_RETURN(std::string s, ToRepr(arg, r.budget()));
      arg = Value::String(std::move(s));
    } else if (conversion == 's') {
      TANDEM_ASSIGN_OR_RETURN(std::string s, ToStr(arg, r.budget()));
      arg = Value::String(std::move(s));
    } else if (conversion != 0) {
      return InvalidArgument("Unknown conversion specifier ", std::string(1, conversion));
    }
    TANDEM_ASSIGN_OR_RETURN(std::string piece, FormatWithSpec(r, arg, spec));
    out += piece;
    TANDEM_RETURN_IF_ERROR(r.budget().CheckSize(out.size()));
  }
  return out;
}

MethodFn FindStringMethod(std::string_view name) {
  static const auto* methods = new absl::flat_hash_map<std::string_view, MethodFn>{
      {"startswith", StrStartswith}, {"endswith", StrEndswith}, {"strip", StrStrip}, {"lstrip", StrLstrip},
      {"rstrip", StrRstrip}, {"split", StrSplit}, {"rsplit", StrRsplit}, {"splitlines", StrSplitlines},
      {"upper", StrUpper}, {"lower", StrLower}, {"title", StrTitle}, {"capitalize", StrCapitalize},
      {"replace", StrReplace}, {"find", StrFind}, {"rfind", StrRfind}, {"index", StrIndex},
      {"rindex", StrRindex}, {"count", StrCount}, {"join", StrJoin}, {"format", StrFormatMethod},
      {"isdigit", StrIs<0>}, {"isnumeric", StrIs<0>}, {"isdecimal", StrIs<0>}, {"isalpha", StrIs<1>},
      {"isalnum", StrIs<2>}, {"isspace", StrIs<3>}, {"islower", StrIs<4>}, {"isupper", StrIs<5>},
      {"center", StrCenter}, {"ljust", StrLjust}, {"rjust", StrRjust}, {"zfill", StrZfill},
      {"partition", StrPartition}, {"rpartition", StrRpartition}, {"removeprefix", StrRemoveprefix},
      {"removesuffix", StrRemovesuffix},
  };
  const auto it = methods->find(name);
  return it == methods->end() ? nullptr : it->second;
}

MethodFn FindListMethod(std::string_view name) {
  if (name == "index") return ListIndex;
  if (name == "count") return ListCount;
  if (name == "copy") return ListCopy;
  return nullptr;
}

MethodFn FindDictMethod(std::string_view name) {
  if (name == "get") return DictGet;
  if (name == "items") return DictItems;
  if (name == "keys") return DictKeys;
  if (name == "values") return DictValues;
  if (name == "copy") return DictCopy;
  return nullptr;
}

}  // namespace tandem::jinja

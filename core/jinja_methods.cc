// Methods of Python's str, list and dict that templates call: message.content.split(...), tool.items(), ...
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

// Argument i, a str or None (or not passed); an undefined value passed is a TypeError, as in Python.
absl::StatusOr<std::optional<std::string>> OptionalString(std::string_view fn, const BoundArgs& a, size_t i) {
  if (!a.given(i) || a[i].is_none()) return std::optional<std::string>();
  if (!a[i].is_string()) return InvalidArgument(fn, "(): must be str or None, not ", a[i].TypeName());
  return std::optional<std::string>(a[i].str());
}

// Argument i, an int or None (or not passed).
absl::StatusOr<int64_t> OptionalInt(std::string_view fn, const BoundArgs& a, size_t i, int64_t fallback) {
  if (!a.given(i) || a[i].is_none()) return fallback;
  std::optional<int64_t> n = AsInt(a[i]);
  if (!n) return InvalidArgument(fn, "(): '", a[i].TypeName(), "' object cannot be interpreted as an integer");
  return *n;
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
  TANDEM_ASSIGN_OR_RETURN(BoundArgs a, Bind(starts ? "startswith" : "endswith", args, {"x", "start", "end"}, 1));
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
  TANDEM_ASSIGN_OR_RETURN(BoundArgs a, Bind("strip", args, {"chars"}));
  TANDEM_ASSIGN_OR_RETURN(std::optional<std::string> chars, OptionalString("strip", a, 0));
  return r.MakeString(text::Strip(self.str(), side, chars), self.is_safe());
}
TANDEM_METHOD(StrStrip) { return StripMethod(r, self, args, text::Side::kBoth); }
TANDEM_METHOD(StrLstrip) { return StripMethod(r, self, args, text::Side::kLeft); }
TANDEM_METHOD(StrRstrip) { return StripMethod(r, self, args, text::Side::kRight); }

absl::StatusOr<Value> SplitMethod(Renderer& r, const Value& self, CallArgs& args, bool right) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs a, Bind(right ? "rsplit" : "split", args, {"sep", "maxsplit"}));
  TANDEM_ASSIGN_OR_RETURN(std::optional<std::string> sep, OptionalString("split", a, 0));
  if (sep && sep->empty()) return InvalidArgument("empty separator");
  TANDEM_ASSIGN_OR_RETURN(const int64_t maxsplit, OptionalInt("split", a, 1, -1));
  TANDEM_RETURN_IF_ERROR(r.budget().Spend(static_cast<int64_t>(self.str().size() / 16)));
  return StringList(right ? text::RSplit(self.str(), sep, maxsplit) : text::Split(self.str(), sep, maxsplit));
}
TANDEM_METHOD(StrSplit) { return SplitMethod(r, self, args, false); }
TANDEM_METHOD(StrRsplit) { return SplitMethod(r, self, args, true); }

TANDEM_METHOD(StrSplitlines) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs a, Bind("splitlines", args, {"keepends"}));
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
  TANDEM_ASSIGN_OR_RETURN(BoundArgs a, Bind("replace", args, {"old", "new", "count"}, 2));
  TANDEM_ASSIGN_OR_RETURN(std::string old, StringArg("replace", a[0]));
  TANDEM_ASSIGN_OR_RETURN(std::string repl, StringArg("replace", a[1]));
  const size_t n = text::Length(self.str()) + 1;
  if (repl.size() > old.size() && (repl.size() - old.size()) > r.budget().max_bytes / n) {
    return ResourceExhausted("a string would exceed the limit of ", r.budget().max_bytes, " bytes");
  }
  TANDEM_ASSIGN_OR_RETURN(const int64_t count, OptionalInt("replace", a, 2, -1));
  return r.MakeString(text::Replace(self.str(), old, repl, count), self.is_safe());
}

// find/rfind/index/rindex/count: positions in code points, as Python.
absl::StatusOr<Value> FindMethodImpl(Renderer& r, const Value& self, CallArgs& args, std::string_view fn) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs a, Bind(fn, args, {"sub", "start", "end"}, 1));
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
  TANDEM_ASSIGN_OR_RETURN(BoundArgs a, Bind("join", args, {"iterable"}, 1));
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
  TANDEM_ASSIGN_OR_RETURN(BoundArgs a, Bind("center", args, {"width", "fillchar"}, 1));
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
  TANDEM_ASSIGN_OR_RETURN(BoundArgs a, Bind("zfill", args, {"width"}, 1));
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
  TANDEM_ASSIGN_OR_RETURN(BoundArgs a, Bind("partition", args, {"sep"}, 1));
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
  TANDEM_ASSIGN_OR_RETURN(BoundArgs a, Bind(prefix ? "removeprefix" : "removesuffix", args, {"affix"}, 1));
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
  TANDEM_ASSIGN_OR_RETURN(BoundArgs a, Bind("index", args, {"value"}, 1));
  const auto& items = self.list().items;
  for (size_t i = 0; i < items.size(); ++i) {
    TANDEM_ASSIGN_OR_RETURN(bool eq, Equal(items[i], a[0], r.budget()));
    if (eq) return Value::Int(static_cast<int64_t>(i));
  }
  return InvalidArgument("value is not in list");
}

TANDEM_METHOD(ListCount) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs a, Bind("count", args, {"value"}, 1));
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
  TANDEM_ASSIGN_OR_RETURN(BoundArgs a, Bind("get", args, {"key", "default"}, 1));
  if (a[0].is_undefined()) return a[1].is_undefined() ? Value::None() : a[1];  // Undefined hashes, matches nothing
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

}  // namespace

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

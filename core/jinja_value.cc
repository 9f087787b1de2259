// Jinja values with Python's semantics (core/jinja_value.h).
#include "core/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/jinja_text.h"
#include "core/status.h"

namespace tandem::jinja {
namespace {

int DepthOf(const Value& v) { return v.depth(); }

absl::Status TooDeep() {
  return InvalidArgument("a value is nested more than ", kMaxValueDepth, " levels deep");
}

// Text that grows within the budget: each append spends steps for its bytes and fails past max_bytes.
class Writer {
 public:
  explicit Writer(Budget& budget) : budget_(budget) {}
  absl::Status Add(std::string_view s) {
    TANDEM_RETURN_IF_ERROR(budget_.CheckSize(out_.size() + s.size()));
    TANDEM_RETURN_IF_ERROR(budget_.Spend(1 + static_cast<int64_t>(s.size() / 64)));
    out_ += s;
    return absl::OkStatus();
  }
  std::string& out() { return out_; }
  Budget& budget() { return budget_; }

 private:
  Budget& budget_;
  std::string out_;
};

absl::Status WriteRepr(const Value& v, Writer& w, int depth);

absl::Status WriteStr(const Value& v, Writer& w, int depth) {
  if (depth > kMaxValueDepth + 2) return TooDeep();
  switch (v.kind()) {
    case Kind::kUndefined: return absl::OkStatus();
    case Kind::kString: return w.Add(v.str());
    case Kind::kNamespace: {
      TANDEM_RETURN_IF_ERROR(w.Add("<Namespace {"));
      bool first = true;
      for (const auto& [name, val] : v.ns()->attrs) {
        if (!first) TANDEM_RETURN_IF_ERROR(w.Add(", "));
        first = false;
        TANDEM_RETURN_IF_ERROR(w.Add(StringRepr(name)));
        TANDEM_RETURN_IF_ERROR(w.Add(": "));
        TANDEM_RETURN_IF_ERROR(WriteRepr(val, w, depth + 1));
      }
      return w.Add("}>");
    }
    default: return WriteRepr(v, w, depth);
  }
}

absl::Status WriteRepr(const Value& v, Writer& w, int depth) {
  if (depth > kMaxValueDepth + 2) return TooDeep();
  TANDEM_RETURN_IF_ERROR(w.budget().Spend(1));
  switch (v.kind()) {
    case Kind::kUndefined: return w.Add("Undefined");
    case Kind::kNone: return w.Add("None");
    case Kind::kBool: return w.Add(v.bool_value() ? "True" : "False");
    case Kind::kInt: return w.Add(std::to_string(v.int_value()));
    case Kind::kFloat: return w.Add(FloatRepr(v.float_value()));
    case Kind::kString: return w.Add(StringRepr(v.str()));
    case Kind::kList: {
      const ListData& l = v.list();
      if (l.generator) return w.Add("<generator object>");
      TANDEM_RETURN_IF_ERROR(w.Add(l.tuple ? "(" : "["));
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i > 0) TANDEM_RETURN_IF_ERROR(w.Add(", "));
        TANDEM_RETURN_IF_ERROR(WriteRepr(l.items[i], w, depth + 1));
      }
      if (l.tuple && l.items.size() == 1) TANDEM_RETURN_IF_ERROR(w.Add(","));
      return w.Add(l.tuple ? ")" : "]");
    }
    case Kind::kDict: {
      TANDEM_RETURN_IF_ERROR(w.Add("{"));
      bool first = true;
      for (const auto& [key, val] : v.dict().entries) {
        if (!first) TANDEM_RETURN_IF_ERROR(w.Add(", "));
        first = false;
        TANDEM_RETURN_IF_ERROR(WriteRepr(key, w, depth + 1));
        TANDEM_RETURN_IF_ERROR(w.Add(": "));
        TANDEM_RETURN_IF_ERROR(WriteRepr(val, w, depth + 1));
      }
      return w.Add("}");
    }
    case Kind::kNamespace: return WriteStr(v, w, depth);
    case Kind::kCallable: {
      const Callable& c = v.callable();
      if (c.type == Callable::Type::kMacro) return w.Add(Cat("<Macro '", c.name, "'>"));
      if (c.type == Callable::Type::kMethod) return w.Add(Cat("<built-in method ", c.name, ">"));
      return w.Add(Cat("<built-in function ", c.name, ">"));
    }
    case Kind::kLoop: {
      const LoopState& l = v.loop();
      return w.Add(Cat("<LoopContext ", l.index0 + 1, "/", l.items.size(), ">"));
    }
  }
  return absl::OkStatus();
}

void AppendJsonString(std::string& out, std::string_view s, bool ensure_ascii) {
  char buf[16];
  auto escape = [&](char32_t c) -> bool {
    switch (c) {
      case '"': out += "\\\""; return true;
      case '\\': out += "\\\\"; return true;
      case '\n': out += "\\n"; return true;
      case '\r': out += "\\r"; return true;
      case '\t': out += "\\t"; return true;
      case '\b': out += "\\b"; return true;
      case '\f': out += "\\f"; return true;
      default: break;
    }
    if (c < 0x20) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      out += buf;
      return true;
    }
    return false;
  };
  out.push_back('"');
  if (!ensure_ascii) {
    for (char c : s) {
      if (!escape(static_cast<unsigned char>(c))) out.push_back(c);
    }
  } else {
    // Everything outside ' '..'~' as \uXXXX, past the BMP as a surrogate pair.
    for (char32_t c : text::Decode(s)) {
      if (escape(c)) continue;
      if (c < 0x7F) {
        out.push_back(static_cast<char>(c));
      } else if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
        out += buf;
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
        out += buf;
      }
    }
  }
  out.push_back('"');
}

std::string JsonKey(const Value& k) {
  switch (k.kind()) {
    case Kind::kString: return k.str();
    case Kind::kBool: return k.bool_value() ? "true" : "false";
    case Kind::kNone: return "null";
    case Kind::kInt: return std::to_string(k.int_value());
    case Kind::kFloat: return FloatRepr(k.float_value());
    default: return "";
  }
}

absl::Status WriteJson(const Value& v, const JsonOptions& o, Writer& w, int level) {
  if (level > kMaxValueDepth + 2) return TooDeep();
  TANDEM_RETURN_IF_ERROR(w.budget().Spend(1));
  auto newline = [&](int lvl) -> absl::Status {
    if (!o.has_indent) return absl::OkStatus();
    std::string s = "\n";
    for (int i = 0; i < lvl; ++i) s += o.indent;
    return w.Add(s);
  };
  switch (v.kind()) {
    case Kind::kNone: return w.Add("null");
    case Kind::kBool: return w.Add(v.bool_value() ? "true" : "false");
    case Kind::kInt: return w.Add(std::to_string(v.int_value()));
    case Kind::kFloat: {
      const double f = v.float_value();
      if (std::isnan(f)) return w.Add("NaN");
      if (std::isinf(f)) return w.Add(f > 0 ? "Infinity" : "-Infinity");
      return w.Add(FloatRepr(f));
    }
    case Kind::kString: {
      std::string s;
      AppendJsonString(s, v.str(), o.ensure_ascii);
      return w.Add(s);
    }
    case Kind::kList: {
      const ListData& l = v.list();
      if (l.generator) return InvalidArgument("Object of type generator is not JSON serializable");
      if (l.items.empty()) return w.Add("[]");
      TANDEM_RETURN_IF_ERROR(w.Add("["));
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i > 0) TANDEM_RETURN_IF_ERROR(w.Add(o.item_separator));
        TANDEM_RETURN_IF_ERROR(newline(level + 1));
        TANDEM_RETURN_IF_ERROR(WriteJson(l.items[i], o, w, level + 1));
      }
      TANDEM_RETURN_IF_ERROR(newline(level));
      return w.Add("]");
    }
    case Kind::kDict: {
      const DictData& d = v.dict();
      if (d.entries.empty()) return w.Add("{}");
      std::vector<const std::pair<Value, Value>*> order;
      for (const auto& e : d.entries) {
        if (!e.first.is_hashable()) return InvalidArgument("keys must be str, int, float, bool or None");
        order.push_back(&e);
      }
      if (o.sort_keys) {
        absl::Status st;
        std::stable_sort(order.begin(), order.end(), [&](auto* a, auto* b) {
          absl::StatusOr<bool> lt = Less(a->first, b->first, w.budget());
          if (!lt.ok()) {
            if (st.ok()) st = lt.status();
            return false;
          }
          return *lt;
        });
        TANDEM_RETURN_IF_ERROR(st);
      }
      TANDEM_RETURN_IF_ERROR(w.Add("{"));
      for (size_t i = 0; i < order.size(); ++i) {
        if (i > 0) TANDEM_RETURN_IF_ERROR(w.Add(o.item_separator));
        TANDEM_RETURN_IF_ERROR(newline(level + 1));
        std::string key;
        AppendJsonString(key, JsonKey(order[i]->first), o.ensure_ascii);
        TANDEM_RETURN_IF_ERROR(w.Add(key));
        TANDEM_RETURN_IF_ERROR(w.Add(o.key_separator));
        TANDEM_RETURN_IF_ERROR(WriteJson(order[i]->second, o, w, level + 1));
      }
      TANDEM_RETURN_IF_ERROR(newline(level));
      return w.Add("}");
    }
    default:
      return InvalidArgument("Object of type ", v.TypeName(), " is not JSON serializable");
  }
}

// Equality of two hashable scalars, as Python's dict sees keys (1, 1.0 and True are one key).
bool KeyEqual(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return a.float_value() == b.float_value();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  if (a.is_string()) return a.str() == b.str();
  return a.is_none();
}

}  // namespace

absl::Status Budget::Spend(int64_t n) {
  steps -= n;
  if (steps < 0) return ResourceExhausted("the template ran past its step limit");
  return absl::OkStatus();
}

absl::Status Budget::CheckSize(size_t bytes) const {
  if (bytes > max_bytes) return ResourceExhausted("a string would exceed the limit of ", max_bytes, " bytes");
  return absl::OkStatus();
}

Value Value::Undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.data_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.data_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.data_ = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.data_ = f;
  return v;
}

Value Value::String(std::string s, bool safe) {
  Value v;
  v.kind_ = Kind::kString;
  v.safe_ = safe;
  v.data_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

absl::StatusOr<Value> Value::List(std::vector<Value> items, bool tuple) {
  auto l = std::make_shared<ListData>();
  for (const Value& item : items) l->depth = std::max(l->depth, DepthOf(item) + 1);
  if (l->depth > kMaxValueDepth) return TooDeep();
  l->items = std::move(items);
  l->tuple = tuple;
  Value v;
  v.kind_ = Kind::kList;
  v.data_ = std::shared_ptr<const ListData>(std::move(l));
  return v;
}

absl::StatusOr<Value> Value::Generator(std::vector<Value> items) {
  TANDEM_ASSIGN_OR_RETURN(Value v, List(std::move(items)));
  std::const_pointer_cast<ListData>(std::get<std::shared_ptr<const ListData>>(v.data_))->generator = true;
  return v;
}

absl::StatusOr<Value> Value::Dict(std::vector<std::pair<Value, Value>> entries) {
  auto d = std::make_shared<DictData>();
  d->entries.reserve(entries.size());
  for (auto& [key, val] : entries) {
    if (!key.is_hashable()) return InvalidArgument("unhashable type: '", key.TypeName(), "'");
    d->depth = std::max(d->depth, DepthOf(val) + 1);
    bool replaced = false;
    // Small dicts are the rule (messages, tool schemas); a linear scan keeps the insertion order simply.
    for (auto& e : d->entries) {
      if (KeyEqual(e.first, key)) {
        e.second = std::move(val);
        replaced = true;
        break;
      }
    }
    if (!replaced) d->entries.emplace_back(std::move(key), std::move(val));
  }
  if (d->depth > kMaxValueDepth) return TooDeep();
  Value v;
  v.kind_ = Kind::kDict;
  v.data_ = std::shared_ptr<const DictData>(std::move(d));
  return v;
}

Value Value::FromNamespace(Namespace* ns) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.data_ = ns;
  return v;
}

absl::StatusOr<Value> Value::FromCallable(std::shared_ptr<const Callable> fn) {
  if (fn->depth > kMaxValueDepth) return TooDeep();
  Value v;
  v.kind_ = Kind::kCallable;
  v.data_ = std::move(fn);
  return v;
}

absl::StatusOr<Value> Value::FromLoop(std::shared_ptr<LoopState> loop) {
  for (const Value& item : loop->items) loop->depth = std::max(loop->depth, DepthOf(item) + 1);
  if (loop->depth > kMaxValueDepth) return TooDeep();
  Value v;
  v.kind_ = Kind::kLoop;
  v.data_ = std::move(loop);
  return v;
}

namespace {
absl::StatusOr<Value> FromJsonAt(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) return TooDeep();
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::None();
    case nlohmann::ordered_json::value_t::boolean: return Value::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        TANDEM_ASSIGN_OR_RETURN(Value item, FromJsonAt(e, depth + 1));
        items.push_back(std::move(item));
      }
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<Value, Value>> entries;
      entries.reserve(j.size());
      for (const auto& [key, e] : j.items()) {
        TANDEM_ASSIGN_OR_RETURN(Value item, FromJsonAt(e, depth + 1));
        entries.emplace_back(Value::String(key), std::move(item));
      }
      return Value::Dict(std::move(entries));
    }
    default: return InvalidArgument("JSON value of type ", j.type_name(), " has no template value");
  }
}
}  // namespace

absl::StatusOr<Value> Value::FromJson(const nlohmann::ordered_json& j) { return FromJsonAt(j, 1); }

int64_t Value::int_value() const {
  if (kind_ == Kind::kBool) return std::get<bool>(data_) ? 1 : 0;
  if (kind_ == Kind::kFloat) return static_cast<int64_t>(std::get<double>(data_));
  return std::get<int64_t>(data_);
}

double Value::float_value() const {
  if (kind_ == Kind::kFloat) return std::get<double>(data_);
  return static_cast<double>(int_value());
}

const std::string& Value::str() const { return *std::get<std::shared_ptr<const std::string>>(data_); }

const std::string& Value::undefined_hint() const {
  static const std::string kEmpty;
  const auto* p = std::get_if<std::shared_ptr<const std::string>>(&data_);
  return p != nullptr && *p != nullptr ? **p : kEmpty;
}

const void* Value::identity() const {
  switch (kind_) {
    case Kind::kList: return &list();
    case Kind::kDict: return &dict();
    case Kind::kNamespace: return ns();
    case Kind::kCallable: return &callable();
    case Kind::kLoop: return &loop();
    case Kind::kString: return &str();
    default: return nullptr;
  }
}

bool Value::is_hashable() const {
  return kind_ == Kind::kNone || kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat ||
         kind_ == Kind::kString;
}

int Value::depth() const {
  switch (kind_) {
    case Kind::kList: return list().depth;
    case Kind::kDict: return dict().depth;
    case Kind::kCallable: return callable().depth;
    case Kind::kLoop: return loop().depth;
    default: return 0;
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return bool_value();
    case Kind::kInt: return int_value() != 0;
    case Kind::kFloat: return float_value() != 0.0;
    case Kind::kString: return !str().empty();
    case Kind::kList: return list().generator || !list().items.empty();
    case Kind::kDict: return !dict().entries.empty();
    default: return true;
  }
}

std::string_view Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return list().generator ? "generator" : list().tuple ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return callable().type == Callable::Type::kMacro ? "Macro" : "function";
    case Kind::kLoop: return "LoopContext";
  }
  return "object";
}

const Value* DictData::Find(const Value& key) const {
  if (key.is_string()) return Find(std::string_view(key.str()));
  for (const auto& e : entries) {
    if (KeyEqual(e.first, key)) return &e.second;
  }
  return nullptr;
}

const Value* DictData::Find(std::string_view key) const {
  for (const auto& e : entries) {
    if (e.first.is_string() && e.first.str() == key) return &e.second;
  }
  return nullptr;
}

const Value* Namespace::Find(std::string_view name) const {
  for (const auto& [n, v] : attrs) {
    if (n == name) return &v;
  }
  return nullptr;
}

void Namespace::Set(std::string_view name, Value v) {
  for (auto& [n, old] : attrs) {
    if (n == name) {
      old = std::move(v);
      return;
    }
  }
  attrs.emplace_back(std::string(name), std::move(v));
}

absl::StatusOr<bool> Equal(const Value& a, const Value& b, Budget& budget) {
  TANDEM_RETURN_IF_ERROR(budget.Spend(1));
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return a.float_value() == b.float_value();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.str() == b.str();
    case Kind::kList: {
      const ListData& x = a.list();
      const ListData& y = b.list();
      if (&x == &y) return true;
      if (x.generator || y.generator) return false;
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        TANDEM_ASSIGN_OR_RETURN(bool eq, Equal(x.items[i], y.items[i], budget));
        if (!eq) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const DictData& x = a.dict();
      const DictData& y = b.dict();
      if (&x == &y) return true;
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [key, val] : x.entries) {
        const Value* other = y.Find(key);
        if (other == nullptr) return false;
        TANDEM_ASSIGN_OR_RETURN(bool eq, Equal(val, *other, budget));
        if (!eq) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

absl::StatusOr<bool> Less(const Value& a, const Value& b, Budget& budget) {
  TANDEM_RETURN_IF_ERROR(budget.Spend(1));
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return a.float_value() < b.float_value();
    return a.int_value() < b.int_value();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order is code point order
  if (a.kind() == Kind::kList && b.kind() == Kind::kList && a.list().tuple == b.list().tuple &&
      !a.list().generator && !b.list().generator) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      TANDEM_ASSIGN_OR_RETURN(bool eq, Equal(x[i], y[i], budget));
      if (!eq) return Less(x[i], y[i], budget);
    }
    return x.size() < y.size();
  }
  return InvalidArgument("'<' not supported between instances of '", a.TypeName(), "' and '", b.TypeName(), "'");
}

absl::StatusOr<std::string> ToStr(const Value& v, Budget& budget) {
  if (v.is_string()) return v.str();
  Writer w(budget);
  TANDEM_RETURN_IF_ERROR(WriteStr(v, w, 0));
  return std::move(w.out());
}

absl::StatusOr<std::string> ToRepr(const Value& v, Budget& budget) {
  Writer w(budget);
  TANDEM_RETURN_IF_ERROR(WriteRepr(v, w, 0));
  return std::move(w.out());
}

absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& opts, Budget& budget) {
  Writer w(budget);
  TANDEM_RETURN_IF_ERROR(WriteJson(v, opts, w, 0));
  return std::move(w.out());
}

std::string FloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest round-trip digits in scientific form, "d.ddde±x", then laid out as Python's repr does.
  const auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string_view sci(buf, res.ptr - buf);
  std::string sign;
  if (!sci.empty() && sci[0] == '-') {
    sign = "-";
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  int exp = 0;
  std::from_chars(sci.data() + e + 1 + (sci[e + 1] == '+' ? 1 : 0), sci.data() + sci.size(), exp);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exp + 1;  // digits d1 d2 ... mean 0.d1d2... x 10^decpt
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= static_cast<int>(digits.size())) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + ebuf;
}

std::string StringRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : text::Decode(s)) {
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0xA0) || c == 0xAD) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if ((c >= 0xDC80 && c <= 0xDCFF) || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
               (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || c == 0x1680 ||
               (c >= 0xD800 && c <= 0xDFFF) || (c >= 0xE000 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB)) {
      // Python's repr escapes what it does not print: separators, format characters, private use.
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      text::AppendUtf8(out, c);
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace tandem::jinja

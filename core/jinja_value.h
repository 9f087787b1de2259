// The values a Jinja template computes with, behaving as the Python objects jinja2 would hold: Python's
// truthiness, equality, ordering, str() and repr(), and json.dumps for `tojson`. Lists and dicts are immutable
// once built (Hugging Face renders in an immutable sandbox) and shared by pointer; dicts keep insertion order.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem::jinja {

class Value;
class Renderer;
struct ListData;
struct DictData;
struct Namespace;
struct Callable;
struct LoopState;

// The work one render may still do. Evaluating a node, visiting a value while comparing, printing or
// serializing it, and copying 64 bytes of text each cost a step; no string may grow past max_bytes. Running out
// is a ResourceExhausted error, so an untrusted template cannot hang or exhaust memory.
struct Budget {
  int64_t steps = std::numeric_limits<int64_t>::max();
  size_t max_bytes = std::numeric_limits<size_t>::max();
  absl::Status Spend(int64_t n);
  absl::Status CheckSize(size_t bytes) const;
};

// Lists, dicts, bound methods and loops nested deeper than this are refused when built, so destroying or
// printing one never recurses past it.
inline constexpr int kMaxValueDepth = 256;

enum class Kind : uint8_t {
  kUndefined,  // a name or key that does not exist: prints as "", is falsy, fails when used further
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,       // also tuples (ListData::tuple), which print with parentheses
  kDict,
  kNamespace,  // namespace(): the one mutable object, attributes set with {% set ns.x = ... %}
  kCallable,   // macros, built-in functions, bound methods
  kLoop,       // the `loop` variable of a for loop
};

class Value {
 public:
  Value() = default;  // undefined
  static Value Undefined(std::string hint = {});
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  // `safe` marks jinja2's Markup (the `safe` and `escape` filters): adding a plain string to it escapes that.
  static Value String(std::string s, bool safe = false);
  // Fail when the result would nest deeper than kMaxValueDepth.
  static absl::StatusOr<Value> List(std::vector<Value> items, bool tuple = false);
  static absl::StatusOr<Value> Generator(std::vector<Value> items);
  static absl::StatusOr<Value> Dict(std::vector<std::pair<Value, Value>> entries);  // later keys replace earlier
  static Value FromNamespace(Namespace* ns);  // not owned: the renderer keeps namespaces for the whole render
  static absl::StatusOr<Value> FromCallable(std::shared_ptr<const Callable> fn);
  static absl::StatusOr<Value> FromLoop(std::shared_ptr<LoopState> loop);
  // JSON as Python's json.loads gives it; object key order is kept. Fails past kMaxValueDepth.
  static absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_safe() const { return safe_; }

  bool bool_value() const { return std::get<bool>(data_); }
  int64_t int_value() const;  // kInt, or a bool as 0/1
  double float_value() const;  // any number
  const std::string& str() const;  // kString
  const std::string& undefined_hint() const;  // kUndefined: what was missing, for the error message
  const ListData& list() const { return *std::get<std::shared_ptr<const ListData>>(data_); }
  const DictData& dict() const { return *std::get<std::shared_ptr<const DictData>>(data_); }
  Namespace* ns() const { return std::get<Namespace*>(data_); }
  const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  LoopState& loop() const { return *std::get<std::shared_ptr<LoopState>>(data_); }
  // The pointer identity of a list, dict, namespace or callable (jinja2's `sameas`); null otherwise.
  const void* identity() const;
  // A dict key: None, a bool, a number or a string (Python's hashable scalars; tuples are not taken).
  bool is_hashable() const;
  int depth() const;  // nesting depth of lists, dicts and what holds them; 0 for scalars

  bool Truthy() const;
  // Python's type name, for messages: "str", "int", "dict", "NoneType", ...
  std::string_view TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool safe_ = false;
  std::variant<std::monostate, bool, int64_t, double, std::shared_ptr<const std::string>,
               std::shared_ptr<const ListData>, std::shared_ptr<const DictData>, Namespace*,
               std::shared_ptr<const Callable>, std::shared_ptr<LoopState>>
      data_;
};

struct ListData {
  std::vector<Value> items;
  bool tuple = false;
  // What jinja2's map, select, items ... return: a Python generator, which is always truthy, has no length or
  // index, and prints as "<generator object>". Iterating it works as a list's.
  bool generator = false;
  int depth = 1;
};

struct DictData {
  std::vector<std::pair<Value, Value>> entries;  // insertion order, keys unique under Python equality
  int depth = 1;
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
};

// Arguments of a call: positional, then keyword in the order written.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

struct Callable {
  enum class Type { kBuiltin, kMacro, kMethod };
  Type type = Type::kBuiltin;
  std::string name;
  int depth = 0;  // of what a bound method holds
  std::function<absl::StatusOr<Value>(Renderer&, CallArgs&)> fn;
};

// A for loop's state; one object for the whole loop, as jinja2's LoopContext.
struct LoopState {
  std::vector<Value> items;
  size_t index0 = 0;
  int depth = 1;
  Value last_changed;  // what loop.changed() saw last
  bool changed_called = false;
};

// namespace(): attributes in insertion order.
struct Namespace {
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* Find(std::string_view name) const;
  void Set(std::string_view name, Value v);
};

// Python's `==`: numbers by value (True == 1 == 1.0), strings, lists and tuples (not with each other) and dicts
// deeply, everything else by identity. Fails only when the budget runs out.
absl::StatusOr<bool> Equal(const Value& a, const Value& b, Budget& budget);
// Python's `<`; a TypeError (as Python raises) for values that do not order.
absl::StatusOr<bool> Less(const Value& a, const Value& b, Budget& budget);

// str(): what {{ value }} prints. Strings as themselves, None as "None", True as "True", floats as repr().
absl::StatusOr<std::string> ToStr(const Value& v, Budget& budget);
// repr(): how a value prints inside a list or dict ('quoted' strings).
absl::StatusOr<std::string> ToRepr(const Value& v, Budget& budget);

// json.dumps(value, ensure_ascii=..., indent=..., separators=..., sort_keys=...), as Hugging Face's `tojson`.
struct JsonOptions {
  bool ensure_ascii = false;
  std::string indent;     // with has_indent: the text of one level ("" for indent=0)
  bool has_indent = false;
  std::string item_separator = ", ";  // "," by default when indenting, as Python
  std::string key_separator = ": ";
  bool sort_keys = false;
};
absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& opts, Budget& budget);

// Python's float repr: the shortest text that reads back, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string FloatRepr(double f);
// repr() of a str: single quotes unless the text holds ' and no ", Python's escapes.
std::string StringRepr(std::string_view s);

}  // namespace tandem::jinja

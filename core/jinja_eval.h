// The Jinja evaluator: runs a parsed template (core/jinja_ast.h) against a context, with jinja2's scoping
// (a for loop's body and a macro call get their own scope; if and set do not), and Python's semantics for
// operators and attribute access. The built-in filters, tests, methods and globals are in jinja_builtins.cc.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/jinja.h"
#include "core/jinja_ast.h"

namespace tandem::jinja {

// Variables of one scope; lookups go to the parent, then the context, then the built-in globals.
struct Scope {
  explicit Scope(Scope* p) : parent(p) {}
  const Value* Find(std::string_view name) const;
  void Set(std::string_view name, Value v);
  // Marks this scope and its ancestors as referenced by a macro, so they outlive the statement that made them.
  void Capture();

  Scope* parent;
  std::vector<std::pair<std::string, Value>> vars;
  bool captured = false;
};

// "L:C: message", keeping the status code.
absl::Status AtPos(const absl::Status& s, Pos pos);

class Renderer {
 public:
  Renderer(const Context& context, const RenderOptions& opts);
  absl::StatusOr<std::string> Run(const Body& body);

  Budget& budget() { return budget_; }
  const RenderOptions& options() const { return opts_; }

  // For the built-ins. Errors of these carry no position; the evaluator adds the call's.
  absl::StatusOr<Value> CallValue(const Value& callee, CallArgs& args, Pos pos);
  absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& input, CallArgs& args);
  absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& v, CallArgs& args);
  // jinja2's sandboxed getattr (attribute, then item) and getitem (item, then attribute); a miss is Undefined.
  absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name);
  absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
  // A string within max_output_bytes, its copying charged to the budget.
  absl::StatusOr<Value> MakeString(std::string s, bool safe = false);
  Namespace* NewNamespace();
  // The values a for loop (or list()) would visit: list items, dict keys, a string's characters.
  absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
  // The error of using an undefined value: "'x' is undefined" or its hint.
  static absl::Status UndefinedError(const Value& v);

 private:
  enum class Jump { kNone, kBreak, kContinue };

  absl::Status ExecBody(const Body& body, Scope* scope);
  absl::Status ExecStmt(const Stmt& s, Scope* scope);
  absl::Status ExecFor(const Stmt& s, Scope* scope);
  absl::Status ExecSet(const Stmt& s, Scope* scope);
  absl::Status ExecMacroDef(const Stmt& s, Scope* scope);
  absl::Status ExecCallBlock(const Stmt& s, Scope* scope);
  absl::StatusOr<std::string> Capture(const Body& body, Scope* scope);
  absl::Status Emit(std::string_view text);
  absl::Status Assign(const std::vector<std::string>& targets, bool unpack, const Value& v, Scope* scope);

  absl::StatusOr<Value> Eval(const Expr& e, Scope* scope);
  absl::StatusOr<Value> EvalInner(const Expr& e, Scope* scope);
  absl::StatusOr<Value> EvalCall(const Expr& e, Scope* scope);
  absl::StatusOr<Value> EvalFilter(const Expr& e, Scope* scope, const Value* block_input);
  absl::Status EvalArgs(const Expr& e, size_t first, Scope* scope, CallArgs& args);
  absl::StatusOr<Value> Lookup(std::string_view name, Scope* scope) const;
  absl::StatusOr<Value> CallMacro(const Stmt& def, Scope* defining, CallArgs& args);

  // Scopes that a macro may still use once their statement is done; freed with the renderer.
  std::unique_ptr<Scope> NewScope(Scope* parent) { return std::make_unique<Scope>(parent); }
  void Release(std::unique_ptr<Scope> scope);

  const Context& context_;
  const RenderOptions& opts_;
  Budget budget_;
  std::string* out_ = nullptr;
  Jump jump_ = Jump::kNone;
  int depth_ = 0;
  int64_t iterations_ = 0;
  Pos call_pos_;  // of the call being made, for a macro's argument errors
  std::deque<Namespace> namespaces_;
  std::vector<std::unique_ptr<Scope>> kept_scopes_;
};

// ---- jinja_builtins.cc ----
using FilterFn = absl::StatusOr<Value> (*)(Renderer&, const Value& input, CallArgs& args);
using TestFn = absl::StatusOr<bool> (*)(Renderer&, const Value& v, CallArgs& args);
FilterFn FindFilter(std::string_view name);
TestFn FindTest(std::string_view name);
// A method of a str, list, dict or loop ("startswith", "items", "cycle"); null when there is none.
using MethodFn = absl::StatusOr<Value> (*)(Renderer&, const Value& self, CallArgs& args);
MethodFn FindMethod(const Value& self, std::string_view name);
// A method the immutable sandbox refuses (list.append, dict.pop, ...): reading it gives Undefined, calling it
// fails.
bool IsUnsafeMethod(const Value& self, std::string_view name);
// range, dict, namespace, joiner, raise_exception, strftime_now; Undefined for other names.
Value FindGlobal(std::string_view name);

// Python's seq[i] (negative from the end; Undefined past either end) and seq[start:stop:step] over lists,
// tuples and strings (by code point); what does not slice gives Undefined, as jinja2's getitem.
absl::StatusOr<Value> IndexValue(const Value& seq, int64_t index);
absl::StatusOr<Value> SliceValue(Renderer& r, const Value& seq, const Value& start, const Value& stop,
                                 const Value& step);

// Arithmetic and comparison with Python's rules ("+", "-", "*", "/", "//", "%", "**", "~"; "==", "!=", "<",
// "<=", ">", ">=", "in", "notin").
absl::StatusOr<Value> BinaryOp(Renderer& r, std::string_view op, const Value& a, const Value& b);
absl::StatusOr<bool> CompareOp(Renderer& r, std::string_view op, const Value& a, const Value& b);

}  // namespace tandem::jinja

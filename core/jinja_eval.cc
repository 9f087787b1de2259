// The Jinja evaluator (core/jinja_eval.h) and Template (core/jinja.h).
#include "core/jinja_eval.h"

#include <utility>

#include "core/jinja_lexer.h"
#include "core/jinja_text.h"
#include "core/status.h"

namespace tandem::jinja {
namespace {

// Counts nesting on the way down; evaluation fails past Limits::max_depth.
struct Nest {
  explicit Nest(int& d) : depth(d) { ++depth; }
  ~Nest() { --depth; }
  int& depth;
};

std::string NoAttrHint(const Value& obj, std::string_view name) {
  if (obj.is_none()) return Cat("'None' has no attribute '", name, "'");
  return Cat("'", obj.TypeName(), " object' has no attribute '", name, "'");
}

}  // namespace

absl::Status AtPos(const absl::Status& s, Pos pos) {
  return absl::Status(s.code(), Cat(pos.line, ":", pos.col, ": ", s.message()));
}

const Value* Scope::Find(std::string_view name) const {
  for (const auto& [n, v] : vars) {
    if (n == name) return &v;
  }
  return nullptr;
}

void Scope::Set(std::string_view name, Value v) {
  for (auto& [n, old] : vars) {
    if (n == name) {
      old = std::move(v);
      return;
    }
  }
  vars.emplace_back(std::string(name), std::move(v));
}

void Scope::Capture() {
  for (Scope* s = this; s != nullptr && !s->captured; s = s->parent) s->captured = true;
}

Renderer::Renderer(const Context& context, const RenderOptions& opts) : context_(context), opts_(opts) {
  budget_.steps = opts.limits.max_steps;
  budget_.max_bytes = opts.limits.max_output_bytes;
}

absl::Status Renderer::UndefinedError(const Value& v) {
  const std::string& hint = v.undefined_hint();
  return InvalidArgument(hint.empty() ? "a value is undefined" : hint);
}

void Renderer::Release(std::unique_ptr<Scope> scope) {
  if (scope != nullptr && scope->captured) kept_scopes_.push_back(std::move(scope));
}

Namespace* Renderer::NewNamespace() { return &namespaces_.emplace_back(); }

absl::StatusOr<Value> Renderer::MakeString(std::string s, bool safe) {
  TANDEM_RETURN_IF_ERROR(budget_.CheckSize(s.size()));
  TANDEM_RETURN_IF_ERROR(budget_.Spend(static_cast<int64_t>(s.size() / 64)));
  return Value::String(std::move(s), safe);
}

absl::StatusOr<std::string> Renderer::Run(const Body& body) {
  std::string out;
  out_ = &out;
  auto root = NewScope(nullptr);
  TANDEM_RETURN_IF_ERROR(ExecBody(body, root.get()));
  Release(std::move(root));
  return out;
}

absl::Status Renderer::Emit(std::string_view text) {
  if (out_->size() + text.size() > opts_.limits.max_output_bytes) {
    return ResourceExhausted("the output would exceed the limit of ", opts_.limits.max_output_bytes, " bytes");
  }
  TANDEM_RETURN_IF_ERROR(budget_.Spend(1 + static_cast<int64_t>(text.size() / 64)));
  out_->append(text);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Renderer::Capture(const Body& body, Scope* scope) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  absl::Status st = ExecBody(body, scope);
  out_ = saved;
  TANDEM_RETURN_IF_ERROR(st);
  return buf;
}

// ---- statements ----

absl::Status Renderer::ExecBody(const Body& body, Scope* scope) {
  for (const auto& s : body) {
    TANDEM_RETURN_IF_ERROR(ExecStmt(*s, scope));
    if (jump_ != Jump::kNone) return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Renderer::ExecStmt(const Stmt& s, Scope* scope) {
  Nest nest(depth_);
  if (depth_ > opts_.limits.max_depth) {
    return AtPos(ResourceExhausted("the template nests deeper than ", opts_.limits.max_depth), s.pos);
  }
  TANDEM_RETURN_IF_ERROR(AtPos(budget_.Spend(1), s.pos));
  switch (s.kind) {
    case StmtKind::kText: return Emit(s.text);
    case StmtKind::kPrint: {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, scope));
      absl::StatusOr<std::string> text = ToStr(v, budget_);
      if (!text.ok()) return AtPos(text.status(), s.pos);
      if (absl::Status st = Emit(*text); !st.ok()) return AtPos(st, s.pos);
      return absl::OkStatus();
    }
    case StmtKind::kIf: {
      for (const auto& [cond, body] : s.branches) {
        TANDEM_ASSIGN_OR_RETURN(Value c, Eval(*cond, scope));
        if (c.Truthy()) return ExecBody(body, scope);
      }
      return ExecBody(s.else_body, scope);
    }
    case StmtKind::kFor: return ExecFor(s, scope);
    case StmtKind::kSet: return ExecSet(s, scope);
    case StmtKind::kSetBlock: {
      auto inner = NewScope(scope);
      absl::StatusOr<std::string> text = Capture(s.body, inner.get());
      Release(std::move(inner));
      if (!text.ok()) return text.status();
      TANDEM_ASSIGN_OR_RETURN(Value v, MakeString(*std::move(text)));
      if (s.expr != nullptr) {
        TANDEM_ASSIGN_OR_RETURN(v, EvalFilter(*s.expr, scope, &v));
      }
      scope->Set(s.targets[0], std::move(v));
      return absl::OkStatus();
    }
    case StmtKind::kMacro: return ExecMacroDef(s, scope);
    case StmtKind::kCallBlock: return ExecCallBlock(s, scope);
    case StmtKind::kFilterBlock: {
      auto inner = NewScope(scope);
      absl::StatusOr<std::string> text = Capture(s.body, inner.get());
      Release(std::move(inner));
      if (!text.ok()) return text.status();
      TANDEM_ASSIGN_OR_RETURN(Value input, MakeString(*std::move(text)));
      TANDEM_ASSIGN_OR_RETURN(Value v, EvalFilter(*s.expr, scope, &input));
      absl::StatusOr<std::string> shown = ToStr(v, budget_);
      if (!shown.ok()) return AtPos(shown.status(), s.pos);
      return Emit(*shown);
    }
    case StmtKind::kWith: {
      std::vector<std::pair<std::string, Value>> values;
      for (const auto& [name, expr] : s.assigns) {
        TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
        values.emplace_back(name, std::move(v));
      }
      auto inner = NewScope(scope);
      for (auto& [name, v] : values) inner->Set(name, std::move(v));
      absl::Status st = ExecBody(s.body, inner.get());
      Release(std::move(inner));
      return st;
    }
    case StmtKind::kBreak: jump_ = Jump::kBreak; return absl::OkStatus();
    case StmtKind::kContinue: jump_ = Jump::kContinue; return absl::OkStatus();
    case StmtKind::kGeneration: return ExecBody(s.body, scope);
  }
  return absl::OkStatus();
}

absl::Status Renderer::Assign(const std::vector<std::string>& targets, bool unpack, const Value& v, Scope* scope) {
  if (!unpack && targets.size() == 1) {
    scope->Set(targets[0], v);
    return absl::OkStatus();
  }
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  if (items.size() != targets.size()) {
    if (items.size() > targets.size()) {
      return InvalidArgument("too many values to unpack (expected ", targets.size(), ")");
    }
    return InvalidArgument("not enough values to unpack (expected ", targets.size(), ", got ", items.size(), ")");
  }
  for (size_t i = 0; i < targets.size(); ++i) scope->Set(targets[i], std::move(items[i]));
  return absl::OkStatus();
}

absl::Status Renderer::ExecFor(const Stmt& s, Scope* scope) {
  TANDEM_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr, scope));
  absl::StatusOr<std::vector<Value>> all = Iterate(iterable);
  if (!all.ok()) return AtPos(all.status(), s.expr->pos);
  auto state = std::make_shared<LoopState>();
  auto count_iteration = [&]() -> absl::Status {
    if (++iterations_ > opts_.limits.max_loop_iterations) {
      return AtPos(ResourceExhausted("loops ran more than ", opts_.limits.max_loop_iterations, " iterations"),
                   s.pos);
    }
    return absl::OkStatus();
  };
  if (s.cond == nullptr) {
    state->items = *std::move(all);
  } else {
    // "for x in xs if cond": the loop (and loop.length) sees only the items that pass.
    for (Value& item : *all) {
      TANDEM_RETURN_IF_ERROR(count_iteration());
      auto probe = NewScope(scope);
      if (absl::Status st = Assign(s.targets, s.unpack, item, probe.get()); !st.ok()) return AtPos(st, s.pos);
      absl::StatusOr<Value> keep = Eval(*s.cond, probe.get());
      Release(std::move(probe));
      if (!keep.ok()) return keep.status();
      if (keep->Truthy()) state->items.push_back(std::move(item));
    }
  }
  if (state->items.empty()) return ExecBody(s.else_body, scope);
  absl::StatusOr<Value> loop = Value::FromLoop(state);
  if (!loop.ok()) return AtPos(loop.status(), s.pos);
  for (size_t i = 0; i < state->items.size(); ++i) {
    TANDEM_RETURN_IF_ERROR(count_iteration());
    state->index0 = i;
    auto iter = NewScope(scope);
    if (absl::Status st = Assign(s.targets, s.unpack, state->items[i], iter.get()); !st.ok()) {
      return AtPos(st, s.pos);
    }
    iter->Set("loop", *loop);
    absl::Status st = ExecBody(s.body, iter.get());
    Release(std::move(iter));
    TANDEM_RETURN_IF_ERROR(st);
    const Jump jump = jump_;
    jump_ = Jump::kNone;
    if (jump == Jump::kBreak) break;
  }
  return absl::OkStatus();
}

absl::Status Renderer::ExecSet(const Stmt& s, Scope* scope) {
  TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, scope));
  if (!s.attr.empty()) {
    TANDEM_ASSIGN_OR_RETURN(Value target, Lookup(s.targets[0], scope));
    if (target.kind() != Kind::kNamespace) {
      return AtPos(InvalidArgument("cannot assign attribute on non-namespace object"), s.pos);
    }
    target.ns()->Set(s.attr, std::move(v));
    return absl::OkStatus();
  }
  if (absl::Status st = Assign(s.targets, s.unpack, v, scope); !st.ok()) return AtPos(st, s.pos);
  return absl::OkStatus();
}

absl::Status Renderer::ExecMacroDef(const Stmt& s, Scope* scope) {
  scope->Capture();
  auto fn = std::make_shared<Callable>();
  fn->type = Callable::Type::kMacro;
  fn->name = s.text;
  const Stmt* def = &s;
  fn->fn = [def, scope](Renderer& r, CallArgs& args) { return r.CallMacro(*def, scope, args); };
  TANDEM_ASSIGN_OR_RETURN(Value v, Value::FromCallable(std::move(fn)));
  scope->Set(s.text, std::move(v));
  return absl::OkStatus();
}

absl::Status Renderer::ExecCallBlock(const Stmt& s, Scope* scope) {
  scope->Capture();
  auto caller = std::make_shared<Callable>();
  caller->type = Callable::Type::kMacro;
  caller->name = "caller";
  const Stmt* def = &s;
  caller->fn = [def, scope](Renderer& r, CallArgs& args) { return r.CallMacro(*def, scope, args); };
  TANDEM_ASSIGN_OR_RETURN(Value caller_value, Value::FromCallable(std::move(caller)));
  const Expr& call = *s.expr;
  TANDEM_ASSIGN_OR_RETURN(Value callee, Eval(*call.children[0], scope));
  CallArgs args;
  TANDEM_RETURN_IF_ERROR(EvalArgs(call, 1, scope, args));
  args.kwargs.emplace_back("caller", std::move(caller_value));
  TANDEM_ASSIGN_OR_RETURN(Value result, CallValue(callee, args, call.pos));
  absl::StatusOr<std::string> text = ToStr(result, budget_);
  if (!text.ok()) return AtPos(text.status(), s.pos);
  return Emit(*text);
}

absl::StatusOr<Value> Renderer::CallMacro(const Stmt& def, Scope* defining, CallArgs& args) {
  const Pos pos = call_pos_;  // the call's place, for errors in binding the arguments
  auto local = NewScope(defining);
  const size_t n = def.params.size();
  std::vector<bool> given(n, false);
  std::vector<Value> varargs;
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (i < n) {
      local->Set(def.params[i].name, std::move(args.args[i]));
      given[i] = true;
    } else if (def.uses_varargs) {
      varargs.push_back(std::move(args.args[i]));
    } else {
      return AtPos(InvalidArgument("macro '", def.text, "' takes not more than ", n, " argument(s)"), pos);
    }
  }
  std::vector<std::pair<Value, Value>> kwargs;
  for (auto& [name, v] : args.kwargs) {
    bool matched = false;
    for (size_t i = 0; i < n; ++i) {
      if (def.params[i].name != name) continue;
      if (given[i]) {
        return AtPos(InvalidArgument("macro '", def.text, "' got multiple values for argument '", name, "'"), pos);
      }
      local->Set(name, std::move(v));
      given[i] = matched = true;
      break;
    }
    if (matched) continue;
    if (name == "caller") {
      local->Set("caller", std::move(v));
    } else if (def.uses_kwargs) {
      kwargs.emplace_back(Value::String(name), std::move(v));
    } else {
      return AtPos(InvalidArgument("macro '", def.text, "' takes no keyword argument '", name, "'"), pos);
    }
  }
  Nest nest(depth_);
  if (depth_ > opts_.limits.max_depth) {
    return AtPos(ResourceExhausted("macro calls nest deeper than ", opts_.limits.max_depth), pos);
  }
  // Defaults are evaluated at the call, in the macro's scope, so one may use the parameters before it.
  for (size_t i = 0; i < n; ++i) {
    if (given[i]) continue;
    const Param& p = def.params[i];
    if (p.default_value != nullptr) {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*p.default_value, local.get()));
      local->Set(p.name, std::move(v));
    } else {
      local->Set(p.name, Value::Undefined(Cat("parameter '", p.name, "' was not provided")));
    }
  }
  if (def.uses_varargs) {
    absl::StatusOr<Value> v = Value::List(std::move(varargs), /*tuple=*/true);
    if (!v.ok()) return AtPos(v.status(), pos);
    local->Set("varargs", *std::move(v));
  }
  if (def.uses_kwargs) {
    absl::StatusOr<Value> v = Value::Dict(std::move(kwargs));
    if (!v.ok()) return AtPos(v.status(), pos);
    local->Set("kwargs", *std::move(v));
  }
  absl::StatusOr<std::string> text = Capture(def.body, local.get());
  Release(std::move(local));
  if (!text.ok()) return text.status();
  absl::StatusOr<Value> result = MakeString(*std::move(text));
  if (!result.ok()) return AtPos(result.status(), pos);
  return result;
}

// ---- expressions ----

absl::StatusOr<Value> Renderer::Lookup(std::string_view name, Scope* scope) const {
  for (Scope* s = scope; s != nullptr; s = s->parent) {
    if (const Value* v = s->Find(name)) return *v;
  }
  for (const auto& [n, v] : context_) {
    if (n == name) return v;
  }
  Value global = FindGlobal(name);
  if (!global.is_undefined()) return global;
  return Value::Undefined(Cat("'", name, "' is undefined"));
}

absl::StatusOr<Value> Renderer::Eval(const Expr& e, Scope* scope) {
  Nest nest(depth_);
  if (depth_ > opts_.limits.max_depth) {
    return AtPos(ResourceExhausted("the template nests deeper than ", opts_.limits.max_depth), e.pos);
  }
  if (absl::Status st = budget_.Spend(1); !st.ok()) return AtPos(st, e.pos);
  return EvalInner(e, scope);
}

absl::Status Renderer::EvalArgs(const Expr& e, size_t first, Scope* scope, CallArgs& args) {
  for (size_t i = first; i < e.children.size(); ++i) {
    TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.children[i], scope));
    args.args.push_back(std::move(v));
  }
  for (const auto& [name, expr] : e.kwargs) {
    TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
    args.kwargs.emplace_back(name, std::move(v));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Renderer::EvalInner(const Expr& e, Scope* scope) {
  auto at = [&](absl::StatusOr<Value> r) -> absl::StatusOr<Value> {
    if (!r.ok()) return AtPos(r.status(), e.pos);
    return r;
  };
  switch (e.kind) {
    case ExprKind::kLiteral: return e.value;
    case ExprKind::kName: return Lookup(e.name, scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.children.size());
      for (const auto& c : e.children) {
        TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*c, scope));
        items.push_back(std::move(v));
      }
      return at(Value::List(std::move(items), e.kind == ExprKind::kTuple));
    }
    case ExprKind::kDict: {
      std::vector<std::pair<Value, Value>> entries;
      for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
        TANDEM_ASSIGN_OR_RETURN(Value k, Eval(*e.children[i], scope));
        TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.children[i + 1], scope));
        entries.emplace_back(std::move(k), std::move(v));
      }
      return at(Value::Dict(std::move(entries)));
    }
    case ExprKind::kGetAttr: {
      TANDEM_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0], scope));
      if (obj.is_undefined()) return AtPos(UndefinedError(obj), e.pos);
      return at(GetAttr(obj, e.name));
    }
    case ExprKind::kGetItem: {
      TANDEM_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0], scope));
      const Expr& index = *e.children[1];
      if (index.kind == ExprKind::kSlice) {
        CallArgs parts;
        for (const auto& c : index.children) {
          Value v = Value::None();
          if (c != nullptr) {
            TANDEM_ASSIGN_OR_RETURN(v, Eval(*c, scope));
          }
          parts.args.push_back(std::move(v));
        }
        if (obj.is_undefined()) return AtPos(UndefinedError(obj), e.pos);
        return at(SliceValue(*this, obj, parts.args[0], parts.args[1], parts.args[2]));
      }
      TANDEM_ASSIGN_OR_RETURN(Value key, Eval(index, scope));
      if (obj.is_undefined()) return AtPos(UndefinedError(obj), e.pos);
      return at(GetItem(obj, key));
    }
    case ExprKind::kSlice: return AtPos(InvalidArgument("a slice outside of []"), e.pos);
    case ExprKind::kCall: return EvalCall(e, scope);
    case ExprKind::kFilter: return EvalFilter(e, scope, nullptr);
    case ExprKind::kTest: {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.children[0], scope));
      CallArgs args;
      TANDEM_RETURN_IF_ERROR(EvalArgs(e, 1, scope, args));
      absl::StatusOr<bool> r = ApplyTest(e.name, v, args);
      if (!r.ok()) return AtPos(r.status(), e.pos);
      return Value::Bool(*r != e.negated);
    }
    case ExprKind::kUnary: {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.children[0], scope));
      if (e.name == "not") return Value::Bool(!v.Truthy());
      if (v.is_undefined()) return AtPos(UndefinedError(v), e.pos);
      if (!v.is_number()) {
        return AtPos(InvalidArgument("bad operand type for unary ", e.name, ": '", v.TypeName(), "'"), e.pos);
      }
      if (e.name == "+") return v.kind() == Kind::kBool ? Value::Int(v.int_value()) : v;
      if (v.kind() == Kind::kFloat) return Value::Float(-v.float_value());
      if (v.int_value() == std::numeric_limits<int64_t>::min()) {
        return AtPos(InvalidArgument("integer overflow"), e.pos);
      }
      return Value::Int(-v.int_value());
    }
    case ExprKind::kBinary: {
      TANDEM_ASSIGN_OR_RETURN(Value a, Eval(*e.children[0], scope));
      if (e.name == "and") return a.Truthy() ? Eval(*e.children[1], scope) : a;
      if (e.name == "or") return a.Truthy() ? a : Eval(*e.children[1], scope);
      TANDEM_ASSIGN_OR_RETURN(Value b, Eval(*e.children[1], scope));
      return at(BinaryOp(*this, e.name, a, b));
    }
    case ExprKind::kCompare: {
      TANDEM_ASSIGN_OR_RETURN(Value left, Eval(*e.children[0], scope));
      for (size_t i = 0; i < e.ops.size(); ++i) {
        TANDEM_ASSIGN_OR_RETURN(Value right, Eval(*e.children[i + 1], scope));
        absl::StatusOr<bool> r = CompareOp(*this, e.ops[i], left, right);
        if (!r.ok()) return AtPos(r.status(), e.pos);
        if (!*r) return Value::Bool(false);
        left = std::move(right);
      }
      return Value::Bool(true);
    }
    case ExprKind::kCondExpr: {
      TANDEM_ASSIGN_OR_RETURN(Value c, Eval(*e.children[0], scope));
      if (c.Truthy()) return Eval(*e.children[1], scope);
      if (e.children[2] == nullptr) return Value::Undefined("the inline if-expression evaluated to false");
      return Eval(*e.children[2], scope);
    }
  }
  return Value::Undefined();
}

absl::StatusOr<Value> Renderer::EvalCall(const Expr& e, Scope* scope) {
  const Expr& callee = *e.children[0];
  CallArgs args;
  // obj.method(...): call the method directly rather than make a bound method first. A method wins over a
  // dict key of the same name, as Python's getattr comes first.
  if (callee.kind == ExprKind::kGetAttr) {
    TANDEM_ASSIGN_OR_RETURN(Value obj, Eval(*callee.children[0], scope));
    if (obj.is_undefined()) return AtPos(UndefinedError(obj), callee.pos);
    MethodFn m = IsUnsafeMethod(obj, callee.name) ? nullptr : FindMethod(obj, callee.name);
    if (m != nullptr) {
      TANDEM_RETURN_IF_ERROR(EvalArgs(e, 1, scope, args));
      absl::StatusOr<Value> r = m(*this, obj, args);
      if (!r.ok()) return AtPos(r.status(), e.pos);
      return r;
    }
    absl::StatusOr<Value> fn = GetAttr(obj, callee.name);
    if (!fn.ok()) return AtPos(fn.status(), callee.pos);
    TANDEM_RETURN_IF_ERROR(EvalArgs(e, 1, scope, args));
    return CallValue(*fn, args, e.pos);
  }
  TANDEM_ASSIGN_OR_RETURN(Value fn, Eval(callee, scope));
  TANDEM_RETURN_IF_ERROR(EvalArgs(e, 1, scope, args));
  return CallValue(fn, args, e.pos);
}

absl::StatusOr<Value> Renderer::CallValue(const Value& callee, CallArgs& args, Pos pos) {
  if (callee.is_undefined()) return AtPos(UndefinedError(callee), pos);
  if (callee.kind() != Kind::kCallable) {
    return AtPos(InvalidArgument("'", callee.TypeName(), "' object is not callable"), pos);
  }
  const Callable& fn = callee.callable();
  call_pos_ = pos;
  absl::StatusOr<Value> r = fn.fn(*this, args);
  // A macro's errors already name their place (in its body, or the call for its arguments); a built-in's get
  // the call's.
  if (!r.ok() && fn.type != Callable::Type::kMacro) return AtPos(r.status(), pos);
  return r;
}

absl::StatusOr<Value> Renderer::EvalFilter(const Expr& e, Scope* scope, const Value* block_input) {
  Value input;
  if (e.children[0] != nullptr) {
    if (e.children[0]->kind == ExprKind::kFilter) {
      TANDEM_ASSIGN_OR_RETURN(input, EvalFilter(*e.children[0], scope, block_input));
    } else {
      TANDEM_ASSIGN_OR_RETURN(input, Eval(*e.children[0], scope));
    }
  } else if (block_input != nullptr) {
    input = *block_input;
  }
  CallArgs args;
  TANDEM_RETURN_IF_ERROR(EvalArgs(e, 1, scope, args));
  absl::StatusOr<Value> r = ApplyFilter(e.name, input, args);
  if (!r.ok()) return AtPos(r.status(), e.pos);
  return r;
}

absl::StatusOr<Value> Renderer::ApplyFilter(std::string_view name, const Value& input, CallArgs& args) {
  FilterFn f = FindFilter(name);
  if (f == nullptr) return InvalidArgument("no filter named '", name, "'");
  TANDEM_RETURN_IF_ERROR(budget_.Spend(1));
  return f(*this, input, args);
}

absl::StatusOr<bool> Renderer::ApplyTest(std::string_view name, const Value& v, CallArgs& args) {
  TestFn t = FindTest(name);
  if (t == nullptr) return InvalidArgument("no test named '", name, "'");
  TANDEM_RETURN_IF_ERROR(budget_.Spend(1));
  return t(*this, v, args);
}

absl::StatusOr<Value> Renderer::GetAttr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  // A method first (Python's getattr), then an item.
  if (IsUnsafeMethod(obj, name)) {
    return Value::Undefined(Cat("access to attribute '", name, "' of '", obj.TypeName(), "' object is unsafe"));
  }
  if (MethodFn m = FindMethod(obj, name)) {
    auto fn = std::make_shared<Callable>();
    fn->type = Callable::Type::kMethod;
    fn->name = Cat(name, " of ", obj.TypeName(), " object");
    fn->depth = obj.depth() + 1;
    fn->fn = [m, obj](Renderer& r, CallArgs& args) { return m(r, obj, args); };
    return Value::FromCallable(std::move(fn));
  }
  switch (obj.kind()) {
    case Kind::kDict:
      if (const Value* v = obj.dict().Find(name)) return *v;
      break;
    case Kind::kNamespace:
      if (const Value* v = obj.ns()->Find(name)) return *v;
      break;
    case Kind::kLoop: {
      const LoopState& l = obj.loop();
      const auto n = static_cast<int64_t>(l.items.size());
      const auto i = static_cast<int64_t>(l.index0);
      if (name == "index") return Value::Int(i + 1);
      if (name == "index0") return Value::Int(i);
      if (name == "revindex") return Value::Int(n - i);
      if (name == "revindex0") return Value::Int(n - i - 1);
      if (name == "first") return Value::Bool(i == 0);
      if (name == "last") return Value::Bool(i == n - 1);
      if (name == "length") return Value::Int(n);
      if (name == "depth") return Value::Int(1);
      if (name == "depth0") return Value::Int(0);
      if (name == "previtem") {
        return i > 0 ? l.items[i - 1] : Value::Undefined("there is no previous item");
      }
      if (name == "nextitem") {
        return i + 1 < n ? l.items[i + 1] : Value::Undefined("there is no next item");
      }
      break;
    }
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kBool:
      if (name == "real") return obj.kind() == Kind::kFloat ? obj : Value::Int(obj.int_value());
      if (name == "imag") return obj.kind() == Kind::kFloat ? Value::Float(0) : Value::Int(0);
      break;
    default: break;
  }
  return Value::Undefined(NoAttrHint(obj, name));
}

absl::StatusOr<Value> Renderer::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  switch (obj.kind()) {
    case Kind::kDict:
      if (key.is_hashable()) {
        if (const Value* v = obj.dict().Find(key)) return *v;
      }
      break;
    case Kind::kList:
    case Kind::kString:
      if (key.kind() == Kind::kInt || key.kind() == Kind::kBool) return IndexValue(obj, key.int_value());
      break;
    default: break;
  }
  // An item that is not there, then the attribute of that name (jinja2's getitem).
  if (key.is_string()) return GetAttr(obj, key.str());
  if (obj.kind() == Kind::kDict) {
    absl::StatusOr<std::string> k = ToRepr(key, budget_);
    return Value::Undefined(Cat("'dict object' has no attribute ", k.ok() ? *k : "?"));
  }
  return Value::Undefined(Cat("'", obj.TypeName(), " object' has no element"));
}

absl::StatusOr<std::vector<Value>> Renderer::Iterate(const Value& v) {
  std::vector<Value> out;
  switch (v.kind()) {
    case Kind::kUndefined: return out;
    case Kind::kList: return v.list().items;
    case Kind::kLoop: return v.loop().items;
    case Kind::kDict:
      out.reserve(v.dict().entries.size());
      for (const auto& e : v.dict().entries) out.push_back(e.first);
      return out;
    case Kind::kString: {
      TANDEM_RETURN_IF_ERROR(budget_.Spend(static_cast<int64_t>(v.str().size())));
      std::u32string cps = text::Decode(v.str());
      out.reserve(cps.size());
      for (char32_t c : cps) {
        std::string s;
        text::AppendUtf8(s, c);
        out.push_back(Value::String(std::move(s)));
      }
      return out;
    }
    default: return InvalidArgument("'", v.TypeName(), "' object is not iterable");
  }
}

// ---- Template ----

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(source));
  TANDEM_ASSIGN_OR_RETURN(Body body, jinja::Parse(tokens));
  return Template(std::make_shared<const Body>(std::move(body)));
}

absl::StatusOr<std::string> Template::Render(const Context& context, const RenderOptions& opts) const {
  Renderer r(context, opts);
  return r.Run(*body_);
}

}  // namespace tandem::jinja

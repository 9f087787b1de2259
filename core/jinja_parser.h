// The Jinja parser's shared part: a cursor over the tokens with the state both halves use. Internal to
// jinja_parser.cc (statements) and jinja_parse_expr.cc (expressions, as jinja2's parser.py, lowest precedence
// first).
#pragma once

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/jinja_ast.h"
#include "core/status.h"

namespace tandem::jinja {

using ExprPtr = std::unique_ptr<Expr>;

// A token as messages name it: "'%}'", "a string", "the end of the template".
std::string Describe(const Token& t);

class ParserBase {
 protected:
  explicit ParserBase(const std::vector<Token>& tokens) : t_(tokens) {}

  // Counts nesting on the way down; parsing fails past kMaxParseDepth.
  struct Nest {
    explicit Nest(int& d) : depth(d) { ++depth; }
    ~Nest() { --depth; }
    int& depth;
  };

  absl::Status CheckDepth() const {
    if (depth_ > kMaxParseDepth) return Error(Cur(), Cat("the template nests more than ", kMaxParseDepth, " deep"));
    return absl::OkStatus();
  }

  const Token& Cur() const { return t_[i_]; }
  const Token& Look(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void Advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }

  bool IsOp(std::string_view op) const { return Cur().kind == TokenKind::kOp && Cur().text == op; }
  bool IsName(std::string_view name) const { return Cur().kind == TokenKind::kName && Cur().text == name; }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Advance();
    return true;
  }

  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Advance();
    return true;
  }

  absl::Status Error(const Token& at, std::string_view msg) const {
    return InvalidArgument(at.pos.line, ":", at.pos.col, ": ", msg);
  }

  absl::Status ExpectOp(std::string_view op) {
    if (!SkipOp(op)) return Error(Cur(), Cat("expected '", op, "', got ", Describe(Cur())));
    return absl::OkStatus();
  }

  absl::Status ExpectName(std::string_view name) {
    if (!SkipName(name)) return Error(Cur(), Cat("expected '", name, "', got ", Describe(Cur())));
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ExpectAnyName() {
    if (Cur().kind != TokenKind::kName) return Error(Cur(), Cat("expected a name, got ", Describe(Cur())));
    std::string name = Cur().text;
    Advance();
    return name;
  }

  absl::Status ExpectBlockEnd() {
    if (Cur().kind != TokenKind::kBlockEnd) return Error(Cur(), Cat("expected '%}', got ", Describe(Cur())));
    Advance();
    return absl::OkStatus();
  }

  ExprPtr Node(ExprKind kind, Pos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // jinja2 refuses an unknown filter or test when it compiles the template, unless it sits in an if statement or
  // an inline if (a "soft" frame, not inside a loop or macro there), where it fails only when evaluated.
  void CheckKnown(bool known, const Token& at, std::string_view what, const std::string& name) {
    if (!known && !soft_) unknown_.push_back(Error(at, Cat("no ", what, " named '", name, "'")));
  }

  // Parses with soft_ set to `soft`, restoring it after.
  template <typename F>
  std::invoke_result_t<F> WithSoft(bool soft, F&& f) {
    const bool saved = soft_;
    soft_ = soft;
    auto r = f();
    soft_ = saved;
    return r;
  }

  // Marks the macro being parsed as reading varargs, kwargs or caller.
  void NoteName(const std::string& name) {
    if (macros_.empty()) return;
    if (name == "varargs") macros_.back()->uses_varargs = true;
    if (name == "kwargs") macros_.back()->uses_kwargs = true;
    if (name == "caller") macros_.back()->uses_caller = true;
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<Stmt*> macros_;
  bool soft_ = false;
  std::vector<absl::Status> unknown_;  // unknown filters and tests outside soft frames, reported at the end
};

// The expression grammar; the statement parser derives from it.
class ExprParser : public ParserBase {
 protected:
  using ParserBase::ParserBase;

  bool IsTupleEnd(std::initializer_list<std::string_view> extra_ends) const;

  // Comma-separated expressions: one is itself, more (or a trailing comma) a tuple.
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr, std::initializer_list<std::string_view> extra_ends,
                                     bool explicit_parens);
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr);
  absl::StatusOr<ExprPtr> ParseCondExpr();
  absl::StatusOr<ExprPtr> Binary(std::string op, Pos pos, ExprPtr left, ExprPtr right);
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> ParseMath1();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMath2();
  absl::StatusOr<ExprPtr> ParsePow();

  // A unary minus binds tighter than filters: "-x|abs" is abs(-x).
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParseList();
  absl::StatusOr<ExprPtr> ParseDict();
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node);

  // An index or a slice [start:stop:step], any part omitted.
  absl::StatusOr<ExprPtr> ParseSubscribed();

  // "(args, name=value)" into node's children (after what it already holds) and kwargs.
  absl::Status ParseCallArgs(Expr& node);
  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee);

  // Dotted names, for filters and tests.
  absl::StatusOr<std::string> ParseDottedName();

  // "| f(args) | g ..." applied to node (null in {% filter %} and block sets); `inline_start` when the first
  // filter has no pipe before it.
  absl::StatusOr<ExprPtr> ParseFilterChain(ExprPtr node, bool inline_start);
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node);
};

}  // namespace tandem::jinja

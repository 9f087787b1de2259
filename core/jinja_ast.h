// The parsed form of a Jinja template: expression and statement nodes, each with its source position.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/jinja_lexer.h"
#include "core/jinja_value.h"

namespace tandem::jinja {

enum class ExprKind : uint8_t {
  kLiteral,   // value
  kName,      // name
  kList,      // children
  kTuple,     // children
  kDict,      // children: key, value, key, value, ...
  kGetAttr,   // children[0].name
  kGetItem,   // children[0][children[1]]
  kSlice,     // children: start, stop, step (each may be null); only as a GetItem's index
  kCall,      // children[0](children[1:], kwargs)
  kFilter,    // children[0] | name(children[1:], kwargs); children[0] null inside {% filter %}
  kTest,      // children[0] is [not] name(children[1:], kwargs)
  kUnary,     // op children[0]: "-", "+", "not"
  kBinary,    // children[0] op children[1]: + - * / // % ** ~ and or
  kCompare,   // children[0] ops[0] children[1] ops[1] ...: == != < <= > >= in notin (chained as Python)
  kCondExpr,  // children[1] if children[0] else children[2] (else may be null)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  Pos pos;
  Value value;
  std::string name;  // kName, kGetAttr, kFilter, kTest; the operator of kUnary and kBinary
  bool negated = false;  // kTest
  std::vector<std::string> ops;  // kCompare
  std::vector<std::unique_ptr<Expr>> children;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
};

enum class StmtKind : uint8_t {
  kText,         // text
  kPrint,        // {{ expr }}
  kIf,           // branches (cond, body) then else_body
  kFor,          // for targets in expr [if cond] body [else else_body]
  kSet,          // set targets = expr, or set targets[0].attr = expr
  kSetBlock,     // set targets[0] [| filters] body endset
  kMacro,        // macro name(params) body
  kCallBlock,    // call[(params)] expr body endcall
  kFilterBlock,  // filter chain body endfilter (expr is the chain, its innermost input null)
  kWith,         // with assignments body
  kBreak,
  kContinue,
  kGeneration,   // Hugging Face's {% generation %} body {% endgeneration %}: the body, rendered as is
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Param {
  std::string name;
  std::unique_ptr<Expr> default_value;  // null when required
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  Pos pos;
  std::string text;               // kText; kMacro's name
  std::unique_ptr<Expr> expr;     // kPrint, kFor's iterable, kSet's value, kCallBlock's call, kFilterBlock, kSetBlock's filters
  std::unique_ptr<Expr> cond;     // kFor's filter
  std::vector<std::string> targets;  // kFor, kSet, kSetBlock: names; more than one unpacks a sequence
  std::string attr;               // kSet of a namespace attribute: targets[0].attr
  bool unpack = false;            // the target was written as a tuple (a, b) even with one name
  std::vector<std::pair<std::unique_ptr<Expr>, Body>> branches;  // kIf
  Body body;
  Body else_body;
  std::vector<Param> params;  // kMacro, kCallBlock (caller's)
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> assigns;  // kWith
  // kMacro: whether the body reads these names, which lets calls pass extra or keyword arguments (as jinja2).
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
};

// Fails on templates nested deeper than this (tags and expressions together), so parsing and rendering
// stay within a small stack.
inline constexpr int kMaxParseDepth = 128;

// Parses the tokens of core/jinja_lexer.h. Errors name the line and column.
absl::StatusOr<Body> Parse(const std::vector<Token>& tokens);

// Whether a filter or test of that name exists; the parser refuses unknown ones, as jinja2 does when it compiles.
bool HasFilter(std::string_view name);
bool HasTest(std::string_view name);

}  // namespace tandem::jinja

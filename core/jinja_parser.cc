// The Jinja parser (core/jinja_ast.h): jinja2 3.1's grammar and operator precedence, function for function as
// its parser.py, for the statements chat templates use.
#include <initializer_list>
#include <type_traits>
#include <string_view>

#include "core/jinja_ast.h"
#include "core/status.h"

namespace tandem::jinja {
namespace {

using ExprPtr = std::unique_ptr<Expr>;

std::string Describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kText: return "template text";
    case TokenKind::kPrintBegin: return "'{{'";
    case TokenKind::kPrintEnd: return "'}}'";
    case TokenKind::kBlockBegin: return "'{%'";
    case TokenKind::kBlockEnd: return "'%}'";
    case TokenKind::kName:
    case TokenKind::kOp: return Cat("'", t.text, "'");
    case TokenKind::kString: return "a string";
    case TokenKind::kInt:
    case TokenKind::kFloat: return "a number";
    case TokenKind::kEnd: return "the end of the template";
  }
  return "a token";
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  absl::StatusOr<Body> ParseTemplate() {
    std::string end_tag;
    TANDEM_ASSIGN_OR_RETURN(Body body, ParseBody({}, end_tag, nullptr));
    if (!unknown_.empty()) return unknown_.front();
    return body;
  }

 private:
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

  // ---- statements ----

  // Statements up to a {% tag %} named in `ends` (consumed, its name put in end_tag), or the template's end
  // when `ends` is empty. `opener` is the tag that needs the end, for the message when it never comes.
  absl::StatusOr<Body> ParseBody(std::initializer_list<std::string_view> ends, std::string& end_tag,
                                 const Token* opener) {
    Nest nest(depth_);
    TANDEM_RETURN_IF_ERROR(CheckDepth());
    Body body;
    while (true) {
      const Token& tok = Cur();
      if (tok.kind == TokenKind::kEnd) {
        if (ends.size() == 0) return body;
        return Error(*opener, Cat("the '", opener->text, "' tag is never closed (expected '", *ends.begin(), "')"));
      }
      if (tok.kind == TokenKind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->pos = tok.pos;
        s->text = tok.text;
        body.push_back(std::move(s));
        Advance();
      } else if (tok.kind == TokenKind::kPrintBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kPrint;
        s->pos = tok.pos;
        Advance();
        TANDEM_ASSIGN_OR_RETURN(s->expr, ParseTuple(true, {}, false));
        if (Cur().kind != TokenKind::kPrintEnd) return Error(Cur(), Cat("expected '}}', got ", Describe(Cur())));
        Advance();
        body.push_back(std::move(s));
      } else if (tok.kind == TokenKind::kBlockBegin) {
        Advance();
        const Token& name = Cur();
        if (name.kind != TokenKind::kName) return Error(name, Cat("expected a tag name, got ", Describe(name)));
        for (std::string_view end : ends) {
          if (name.text == end) {
            end_tag = name.text;
            Advance();
            return body;
          }
        }
        TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Stmt> s, ParseStatement());
        body.push_back(std::move(s));
      } else {
        return Error(tok, Cat("unexpected ", Describe(tok)));
      }
    }
  }

  // The body of a loop, macro or other block that jinja2 compiles as an inner frame, which is never soft.
  absl::StatusOr<Body> ParseInnerBody(std::initializer_list<std::string_view> ends, std::string& end_tag,
                                      const Token* opener) {
    return WithSoft(false, [&] { return ParseBody(ends, end_tag, opener); });
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseStatement() {
    const Token& tag = Cur();
    auto s = std::make_unique<Stmt>();
    s->pos = tag.pos;
    const std::string& name = tag.text;
    if (name == "if") return ParseIf(std::move(s));
    if (name == "for") return ParseFor(std::move(s));
    if (name == "set") return ParseSet(std::move(s));
    if (name == "macro") return ParseMacro(std::move(s));
    if (name == "call") return ParseCallBlock(std::move(s));
    if (name == "filter") return ParseFilterBlock(std::move(s));
    if (name == "with") return ParseWith(std::move(s));
    if (name == "generation") return ParseSimpleBlock(std::move(s), StmtKind::kGeneration, "endgeneration");
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return Error(tag, Cat("'", name, "' outside of a loop"));
      s->kind = name == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      Advance();
      TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    for (std::string_view unsupported : {"block", "extends", "include", "import", "from", "autoescape", "do"}) {
      if (name == unsupported) return Error(tag, Cat("the '", name, "' tag is not supported in chat templates"));
    }
    return Error(tag, Cat("unknown tag '", name, "'"));
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseIf(std::unique_ptr<Stmt> s) {
    const Token& opener = Cur();
    s->kind = StmtKind::kIf;
    Advance();
    const bool outer_soft = soft_;
    soft_ = true;
    absl::StatusOr<std::unique_ptr<Stmt>> r = ParseIfBranches(std::move(s), opener);
    soft_ = outer_soft;
    return r;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseIfBranches(std::unique_ptr<Stmt> s, const Token& opener) {
    while (true) {
      TANDEM_ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false, {}, false));
      TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
      std::string end;
      TANDEM_ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, end, &opener));
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") continue;
      TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
      if (end == "else") {
        TANDEM_ASSIGN_OR_RETURN(s->else_body, ParseBody({"endif"}, end, &opener));
        TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
      }
      return s;
    }
  }

  // Assignment targets: a name, names with commas, or names in parentheses.
  absl::Status ParseTargets(Stmt& s) {
    const bool paren = SkipOp("(");
    while (true) {
      TANDEM_ASSIGN_OR_RETURN(std::string name, ExpectAnyName());
      if (name == "true" || name == "false" || name == "none" || name == "True" || name == "False" ||
          name == "None") {
        return Error(t_[i_ - 1], Cat("cannot assign to '", name, "'"));
      }
      s.targets.push_back(std::move(name));
      if (!SkipOp(",")) break;
      s.unpack = true;
      if (paren ? IsOp(")") : (IsName("in") || IsOp("="))) break;
    }
    if (paren) {
      s.unpack = true;
      TANDEM_RETURN_IF_ERROR(ExpectOp(")"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseFor(std::unique_ptr<Stmt> s) {
    const Token& opener = Cur();
    s->kind = StmtKind::kFor;
    Advance();
    TANDEM_RETURN_IF_ERROR(ParseTargets(*s));
    TANDEM_RETURN_IF_ERROR(ExpectName("in"));
    TANDEM_ASSIGN_OR_RETURN(s->expr, ParseTuple(false, {"recursive"}, false));
    if (SkipName("if")) {
      TANDEM_ASSIGN_OR_RETURN(s->cond, ParseExpression(true));
    }
    if (IsName("recursive")) return Error(Cur(), "recursive loops are not supported");
    TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    ++loop_depth_;
    absl::StatusOr<Body> body = ParseInnerBody({"endfor", "else"}, end, &opener);
    --loop_depth_;
    if (!body.ok()) return body.status();
    s->body = *std::move(body);
    TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
    if (end == "else") {
      TANDEM_ASSIGN_OR_RETURN(s->else_body, ParseInnerBody({"endfor"}, end, &opener));
      TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
    }
    return s;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseSet(std::unique_ptr<Stmt> s) {
    const Token& opener = Cur();
    Advance();
    if (Cur().kind == TokenKind::kName && Look().kind == TokenKind::kOp && Look().text == ".") {
      s->targets.push_back(Cur().text);
      Advance();
      Advance();
      TANDEM_ASSIGN_OR_RETURN(s->attr, ExpectAnyName());
    } else {
      TANDEM_RETURN_IF_ERROR(ParseTargets(*s));
    }
    if (SkipOp("=")) {
      s->kind = StmtKind::kSet;
      TANDEM_ASSIGN_OR_RETURN(s->expr, ParseTuple(true, {}, false));
      TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    s->kind = StmtKind::kSetBlock;
    if (!s->attr.empty() || s->targets.size() != 1) return Error(opener, "a block set takes a single name");
    if (IsOp("|")) {
      TANDEM_ASSIGN_OR_RETURN(s->expr, ParseFilterChain(nullptr, false));
    }
    TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    TANDEM_ASSIGN_OR_RETURN(s->body, ParseInnerBody({"endset"}, end, &opener));
    TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  absl::Status ParseSignature(Stmt& s) {
    TANDEM_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!s.params.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
      Param p;
      TANDEM_ASSIGN_OR_RETURN(p.name, ExpectAnyName());
      if (SkipOp("=")) {
        TANDEM_ASSIGN_OR_RETURN(p.default_value, ParseExpression(true));
      } else if (!s.params.empty() && s.params.back().default_value != nullptr) {
        return Error(Cur(), "non-default argument follows default argument");
      }
      s.params.push_back(std::move(p));
    }
    Advance();
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseMacro(std::unique_ptr<Stmt> s) {
    const Token& opener = Cur();
    s->kind = StmtKind::kMacro;
    Advance();
    TANDEM_ASSIGN_OR_RETURN(s->text, ExpectAnyName());
    TANDEM_RETURN_IF_ERROR(ParseSignature(*s));
    TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
    // A macro body is a function: a loop around the macro does not make break legal inside it.
    const int outer_loops = loop_depth_;
    loop_depth_ = 0;
    macros_.push_back(s.get());
    std::string end;
    absl::StatusOr<Body> body = ParseInnerBody({"endmacro"}, end, &opener);
    macros_.pop_back();
    loop_depth_ = outer_loops;
    if (!body.ok()) return body.status();
    s->body = *std::move(body);
    TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseCallBlock(std::unique_ptr<Stmt> s) {
    const Token& opener = Cur();
    s->kind = StmtKind::kCallBlock;
    Advance();
    if (IsOp("(")) TANDEM_RETURN_IF_ERROR(ParseSignature(*s));
    TANDEM_ASSIGN_OR_RETURN(s->expr, ParseExpression(true));
    if (s->expr->kind != ExprKind::kCall) return Error(opener, "expected a call after 'call'");
    TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    TANDEM_ASSIGN_OR_RETURN(s->body, ParseInnerBody({"endcall"}, end, &opener));
    TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseFilterBlock(std::unique_ptr<Stmt> s) {
    const Token& opener = Cur();
    s->kind = StmtKind::kFilterBlock;
    Advance();
    TANDEM_ASSIGN_OR_RETURN(s->expr, ParseFilterChain(nullptr, true));
    TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    TANDEM_ASSIGN_OR_RETURN(s->body, ParseInnerBody({"endfilter"}, end, &opener));
    TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseWith(std::unique_ptr<Stmt> s) {
    const Token& opener = Cur();
    s->kind = StmtKind::kWith;
    Advance();
    while (Cur().kind != TokenKind::kBlockEnd) {
      if (!s->assigns.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
      TANDEM_ASSIGN_OR_RETURN(std::string name, ExpectAnyName());
      TANDEM_RETURN_IF_ERROR(ExpectOp("="));
      TANDEM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      s->assigns.emplace_back(std::move(name), std::move(value));
    }
    Advance();
    std::string end;
    TANDEM_ASSIGN_OR_RETURN(s->body, ParseInnerBody({"endwith"}, end, &opener));
    TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseSimpleBlock(std::unique_ptr<Stmt> s, StmtKind kind,
                                                         std::string_view end_name) {
    const Token& opener = Cur();
    s->kind = kind;
    Advance();
    TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    TANDEM_ASSIGN_OR_RETURN(s->body, ParseInnerBody({end_name}, end, &opener));
    TANDEM_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  // ---- expressions, lowest precedence first ----

  bool IsTupleEnd(std::initializer_list<std::string_view> extra_ends) const {
    const TokenKind k = Cur().kind;
    if (k == TokenKind::kPrintEnd || k == TokenKind::kBlockEnd || IsOp(")")) return true;
    for (std::string_view e : extra_ends) {
      if (IsName(e)) return true;
    }
    return false;
  }

  // Comma-separated expressions: one is itself, more (or a trailing comma) a tuple.
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr, std::initializer_list<std::string_view> extra_ends,
                                     bool explicit_parens) {
    const Pos pos = Cur().pos;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
      if (IsTupleEnd(extra_ends)) break;
      TANDEM_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condexpr));
      items.push_back(std::move(item));
      if (IsOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) return Error(Cur(), Cat("expected an expression, got ", Describe(Cur())));
    }
    ExprPtr t = Node(ExprKind::kTuple, pos);
    t->children = std::move(items);
    return t;
  }

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    Nest nest(depth_);
    TANDEM_RETURN_IF_ERROR(CheckDepth());
    return with_condexpr ? ParseCondExpr() : ParseOr();
  }

  absl::StatusOr<ExprPtr> ParseCondExpr() {
    const size_t unknown_before = unknown_.size();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (IsName("if")) {
      unknown_.resize(std::min(unknown_.size(), unknown_before));  // the whole inline if is soft
      const Pos pos = Cur().pos;
      Advance();
      ExprPtr node = Node(ExprKind::kCondExpr, pos);
      TANDEM_ASSIGN_OR_RETURN(ExprPtr cond, WithSoft(true, [&] { return ParseOr(); }));
      ExprPtr otherwise;
      if (SkipName("else")) {
        Nest nest(depth_);
        TANDEM_RETURN_IF_ERROR(CheckDepth());
        TANDEM_ASSIGN_OR_RETURN(otherwise, WithSoft(true, [&] { return ParseCondExpr(); }));
      }
      node->children.push_back(std::move(cond));
      node->children.push_back(std::move(expr));
      node->children.push_back(std::move(otherwise));
      expr = std::move(node);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> Binary(std::string op, Pos pos, ExprPtr left, ExprPtr right) {
    ExprPtr node = Node(ExprKind::kBinary, pos);
    node->name = std::move(op);
    node->children.push_back(std::move(left));
    node->children.push_back(std::move(right));
    return node;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      const Pos pos = Cur().pos;
      Advance();
      TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      TANDEM_ASSIGN_OR_RETURN(left, Binary("or", pos, std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      const Pos pos = Cur().pos;
      Advance();
      TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      TANDEM_ASSIGN_OR_RETURN(left, Binary("and", pos, std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      Nest nest(depth_);
      TANDEM_RETURN_IF_ERROR(CheckDepth());
      ExprPtr node = Node(ExprKind::kUnary, Cur().pos);
      node->name = "not";
      Advance();
      TANDEM_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      node->children.push_back(std::move(operand));
      return node;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const Pos pos = Cur().pos;
    TANDEM_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr node;
    while (true) {
      std::string op;
      if (Cur().kind == TokenKind::kOp &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
           Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        Advance();
      } else if (IsName("in")) {
        op = "in";
        Advance();
      } else if (IsName("not") && Look().kind == TokenKind::kName && Look().text == "in") {
        op = "notin";
        Advance();
        Advance();
      } else {
        break;
      }
      if (node == nullptr) {
        node = Node(ExprKind::kCompare, pos);
        node->children.push_back(std::move(first));
      }
      TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParseMath1());
      node->ops.push_back(std::move(op));
      node->children.push_back(std::move(right));
    }
    return node != nullptr ? std::move(node) : std::move(first);
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const Token op = Cur();
      Advance();
      TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      TANDEM_ASSIGN_OR_RETURN(left, Binary(op.text, op.pos, std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
    while (IsOp("~")) {
      const Pos pos = Cur().pos;
      Advance();
      TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
      TANDEM_ASSIGN_OR_RETURN(left, Binary("~", pos, std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token op = Cur();
      Advance();
      TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      TANDEM_ASSIGN_OR_RETURN(left, Binary(op.text, op.pos, std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      const Pos pos = Cur().pos;
      Advance();
      TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      TANDEM_ASSIGN_OR_RETURN(left, Binary("**", pos, std::move(left), std::move(right)));
    }
    return left;
  }

  // A unary minus binds tighter than filters: "-x|abs" is abs(-x).
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    Nest nest(depth_);
    TANDEM_RETURN_IF_ERROR(CheckDepth());
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = Node(ExprKind::kUnary, Cur().pos);
      node->name = Cur().text;
      Advance();
      TANDEM_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node->children.push_back(std::move(operand));
    } else {
      TANDEM_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    TANDEM_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      TANDEM_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& tok = Cur();
    switch (tok.kind) {
      case TokenKind::kName: {
        ExprPtr node;
        if (tok.text == "true" || tok.text == "True" || tok.text == "false" || tok.text == "False") {
          node = Node(ExprKind::kLiteral, tok.pos);
          node->value = Value::Bool(tok.text == "true" || tok.text == "True");
        } else if (tok.text == "none" || tok.text == "None") {
          node = Node(ExprKind::kLiteral, tok.pos);
          node->value = Value::None();
        } else {
          node = Node(ExprKind::kName, tok.pos);
          node->name = tok.text;
          NoteName(tok.text);
        }
        Advance();
        return node;
      }
      case TokenKind::kString: {
        ExprPtr node = Node(ExprKind::kLiteral, tok.pos);
        std::string s;
        while (Cur().kind == TokenKind::kString) {  // adjacent literals join, as in Python
          s += Cur().text;
          Advance();
        }
        node->value = Value::String(std::move(s));
        return node;
      }
      case TokenKind::kInt:
      case TokenKind::kFloat: {
        ExprPtr node = Node(ExprKind::kLiteral, tok.pos);
        node->value = tok.kind == TokenKind::kInt ? Value::Int(tok.int_value) : Value::Float(tok.float_value);
        Advance();
        return node;
      }
      case TokenKind::kOp:
        if (tok.text == "(") {
          Advance();
          TANDEM_ASSIGN_OR_RETURN(ExprPtr node, ParseTuple(true, {}, true));
          TANDEM_RETURN_IF_ERROR(ExpectOp(")"));
          return node;
        }
        if (tok.text == "[") return ParseList();
        if (tok.text == "{") return ParseDict();
        break;
      default: break;
    }
    return Error(tok, Cat("unexpected ", Describe(tok)));
  }

  absl::StatusOr<ExprPtr> ParseList() {
    ExprPtr node = Node(ExprKind::kList, Cur().pos);
    Advance();
    while (!IsOp("]")) {
      if (!node->children.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp("]")) break;
      TANDEM_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
      node->children.push_back(std::move(item));
    }
    Advance();
    return node;
  }

  absl::StatusOr<ExprPtr> ParseDict() {
    ExprPtr node = Node(ExprKind::kDict, Cur().pos);
    Advance();
    while (!IsOp("}")) {
      if (!node->children.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp("}")) break;
      TANDEM_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
      TANDEM_RETURN_IF_ERROR(ExpectOp(":"));
      TANDEM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      node->children.push_back(std::move(key));
      node->children.push_back(std::move(value));
    }
    Advance();
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".") || IsOp("[")) {
        TANDEM_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        TANDEM_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        TANDEM_ASSIGN_OR_RETURN(node, ParseFilterChain(std::move(node), false));
      } else if (IsName("is")) {
        TANDEM_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        TANDEM_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node) {
    const Token op = Cur();
    Advance();
    if (op.text == ".") {
      const Token& attr = Cur();
      if (attr.kind == TokenKind::kName) {
        ExprPtr get = Node(ExprKind::kGetAttr, op.pos);
        get->name = attr.text;
        get->children.push_back(std::move(node));
        Advance();
        return get;
      }
      if (attr.kind != TokenKind::kInt) return Error(attr, Cat("expected a name or number, got ", Describe(attr)));
      ExprPtr index = Node(ExprKind::kLiteral, attr.pos);
      index->value = Value::Int(attr.int_value);
      Advance();
      ExprPtr get = Node(ExprKind::kGetItem, op.pos);
      get->children.push_back(std::move(node));
      get->children.push_back(std::move(index));
      return get;
    }
    std::vector<ExprPtr> args;
    while (!IsOp("]")) {
      if (!args.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
      TANDEM_ASSIGN_OR_RETURN(ExprPtr arg, ParseSubscribed());
      args.push_back(std::move(arg));
    }
    Advance();
    ExprPtr get = Node(ExprKind::kGetItem, op.pos);
    get->children.push_back(std::move(node));
    if (args.size() == 1) {
      get->children.push_back(std::move(args[0]));
    } else {
      ExprPtr t = Node(ExprKind::kTuple, op.pos);
      t->children = std::move(args);
      get->children.push_back(std::move(t));
    }
    return get;
  }

  // An index or a slice [start:stop:step], any part omitted.
  absl::StatusOr<ExprPtr> ParseSubscribed() {
    const Pos pos = Cur().pos;
    ExprPtr start;
    if (!IsOp(":")) {
      TANDEM_ASSIGN_OR_RETURN(start, ParseExpression(true));
      if (!IsOp(":")) return start;
    }
    Advance();
    ExprPtr slice = Node(ExprKind::kSlice, pos);
    slice->children.push_back(std::move(start));
    ExprPtr stop;
    if (!IsOp(":") && !IsOp("]") && !IsOp(",")) {
      TANDEM_ASSIGN_OR_RETURN(stop, ParseExpression(true));
    }
    slice->children.push_back(std::move(stop));
    ExprPtr step;
    if (SkipOp(":")) {
      if (!IsOp("]") && !IsOp(",")) {
        TANDEM_ASSIGN_OR_RETURN(step, ParseExpression(true));
      }
    }
    slice->children.push_back(std::move(step));
    return slice;
  }

  // "(args, name=value)" into node's children (after what it already holds) and kwargs.
  absl::Status ParseCallArgs(Expr& node) {
    TANDEM_RETURN_IF_ERROR(ExpectOp("("));
    bool need_comma = false;
    while (!IsOp(")")) {
      if (need_comma) {
        TANDEM_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(")")) break;
      }
      if (IsOp("*") || IsOp("**")) return Error(Cur(), "*args and **kwargs in calls are not supported");
      if (Cur().kind == TokenKind::kName && Look().kind == TokenKind::kOp && Look().text == "=") {
        std::string key = Cur().text;
        Advance();
        Advance();
        TANDEM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        node.kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!node.kwargs.empty()) return Error(Cur(), "positional argument follows keyword argument");
        TANDEM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        node.children.push_back(std::move(value));
      }
      need_comma = true;
    }
    Advance();
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    ExprPtr call = Node(ExprKind::kCall, Cur().pos);
    call->children.push_back(std::move(callee));
    TANDEM_RETURN_IF_ERROR(ParseCallArgs(*call));
    return call;
  }

  // Dotted names, for filters and tests.
  absl::StatusOr<std::string> ParseDottedName() {
    TANDEM_ASSIGN_OR_RETURN(std::string name, ExpectAnyName());
    while (SkipOp(".")) {
      TANDEM_ASSIGN_OR_RETURN(std::string part, ExpectAnyName());
      name += "." + part;
    }
    return name;
  }

  // "| f(args) | g ..." applied to node (null in {% filter %} and block sets); `inline_start` when the first
  // filter has no pipe before it.
  absl::StatusOr<ExprPtr> ParseFilterChain(ExprPtr node, bool inline_start) {
    while (IsOp("|") || inline_start) {
      if (!inline_start) Advance();
      inline_start = false;
      const Token& name_tok = Cur();
      TANDEM_ASSIGN_OR_RETURN(std::string name, ParseDottedName());
      CheckKnown(HasFilter(name), name_tok, "filter", name);
      ExprPtr f = Node(ExprKind::kFilter, name_tok.pos);
      f->name = std::move(name);
      f->children.push_back(std::move(node));
      if (IsOp("(")) TANDEM_RETURN_IF_ERROR(ParseCallArgs(*f));
      node = std::move(f);
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node) {
    Advance();  // "is"
    ExprPtr t = Node(ExprKind::kTest, Cur().pos);
    t->negated = SkipName("not");
    const Token& name_tok = Cur();
    TANDEM_ASSIGN_OR_RETURN(t->name, ParseDottedName());
    CheckKnown(HasTest(t->name), name_tok, "test", t->name);
    t->children.push_back(std::move(node));
    if (IsOp("(")) {
      TANDEM_RETURN_IF_ERROR(ParseCallArgs(*t));
    } else {
      const Token& c = Cur();
      // One argument without parentheses, as "x is divisibleby 3" (what jinja2 takes for one).
      const bool starts_arg =
          c.kind == TokenKind::kName || c.kind == TokenKind::kString || c.kind == TokenKind::kInt ||
          c.kind == TokenKind::kFloat || (c.kind == TokenKind::kOp && (c.text == "[" || c.text == "{"));
      if (starts_arg && !IsName("else") && !IsName("or") && !IsName("and")) {
        if (IsName("is")) return Error(c, "cannot chain tests with 'is'");
        TANDEM_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
        TANDEM_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
        t->children.push_back(std::move(arg));
      }
    }
    return t;
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

}  // namespace

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens) { return Parser(tokens).ParseTemplate(); }

}  // namespace tandem::jinja

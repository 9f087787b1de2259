// The Jinja parser (core/jinja_ast.h): the statements, function for function as jinja2 3.1's parser.py, for the
// tags chat templates use. Expressions are in jinja_parse_expr.cc.
#include <initializer_list>
#include <string_view>

#include "core/jinja_parser.h"

namespace tandem::jinja {

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

namespace {

// The statement grammar over the expressions.
class Parser : public ExprParser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : ExprParser(tokens) {}

  absl::StatusOr<Body> ParseTemplate() {
    std::string end_tag;
    TANDEM_ASSIGN_OR_RETURN(Body body, ParseBody({}, end_tag, nullptr));
    if (!unknown_.empty()) return unknown_.front();
    return body;
  }

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
};

}  // namespace

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens) { return Parser(tokens).ParseTemplate(); }

}  // namespace tandem::jinja

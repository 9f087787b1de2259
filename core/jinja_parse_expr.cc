// The Jinja expression grammar (core/jinja_parser.h): jinja2 3.1's precedence, function for function as its
// parser.py, lowest first: tuple, inline if, or, and, not, comparisons, + -, ~, * / // %, **, unary, then
// primaries with their postfixes, filters and tests.
#include "core/jinja_parser.h"

namespace tandem::jinja {

bool ExprParser::IsTupleEnd(std::initializer_list<std::string_view> extra_ends) const {
  const TokenKind k = Cur().kind;
  if (k == TokenKind::kPrintEnd || k == TokenKind::kBlockEnd || IsOp(")")) return true;
  for (std::string_view e : extra_ends) {
    if (IsName(e)) return true;
  }
  return false;
}

// Comma-separated expressions: one is itself, more (or a trailing comma) a tuple.
absl::StatusOr<ExprPtr> ExprParser::ParseTuple(bool with_condexpr, std::initializer_list<std::string_view> extra_ends,
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

absl::StatusOr<ExprPtr> ExprParser::ParseExpression(bool with_condexpr) {
  Nest nest(depth_);
  TANDEM_RETURN_IF_ERROR(CheckDepth());
  return with_condexpr ? ParseCondExpr() : ParseOr();
}

absl::StatusOr<ExprPtr> ExprParser::ParseCondExpr() {
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

absl::StatusOr<ExprPtr> ExprParser::Binary(std::string op, Pos pos, ExprPtr left, ExprPtr right) {
  ExprPtr node = Node(ExprKind::kBinary, pos);
  node->name = std::move(op);
  node->children.push_back(std::move(left));
  node->children.push_back(std::move(right));
  return node;
}

absl::StatusOr<ExprPtr> ExprParser::ParseOr() {
  TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    const Pos pos = Cur().pos;
    Advance();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    TANDEM_ASSIGN_OR_RETURN(left, Binary("or", pos, std::move(left), std::move(right)));
  }
  return left;
}

absl::StatusOr<ExprPtr> ExprParser::ParseAnd() {
  TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    const Pos pos = Cur().pos;
    Advance();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    TANDEM_ASSIGN_OR_RETURN(left, Binary("and", pos, std::move(left), std::move(right)));
  }
  return left;
}

absl::StatusOr<ExprPtr> ExprParser::ParseNot() {
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

absl::StatusOr<ExprPtr> ExprParser::ParseCompare() {
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

absl::StatusOr<ExprPtr> ExprParser::ParseMath1() {
  TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  while (IsOp("+") || IsOp("-")) {
    const Token op = Cur();
    Advance();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    TANDEM_ASSIGN_OR_RETURN(left, Binary(op.text, op.pos, std::move(left), std::move(right)));
  }
  return left;
}

absl::StatusOr<ExprPtr> ExprParser::ParseConcat() {
  TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
  while (IsOp("~")) {
    const Pos pos = Cur().pos;
    Advance();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
    TANDEM_ASSIGN_OR_RETURN(left, Binary("~", pos, std::move(left), std::move(right)));
  }
  return left;
}

absl::StatusOr<ExprPtr> ExprParser::ParseMath2() {
  TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    const Token op = Cur();
    Advance();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    TANDEM_ASSIGN_OR_RETURN(left, Binary(op.text, op.pos, std::move(left), std::move(right)));
  }
  return left;
}

absl::StatusOr<ExprPtr> ExprParser::ParsePow() {
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
absl::StatusOr<ExprPtr> ExprParser::ParseUnary(bool with_filter) {
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

absl::StatusOr<ExprPtr> ExprParser::ParsePrimary() {
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

absl::StatusOr<ExprPtr> ExprParser::ParseList() {
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

absl::StatusOr<ExprPtr> ExprParser::ParseDict() {
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

absl::StatusOr<ExprPtr> ExprParser::ParsePostfix(ExprPtr node) {
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

absl::StatusOr<ExprPtr> ExprParser::ParseFilterExpr(ExprPtr node) {
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

absl::StatusOr<ExprPtr> ExprParser::ParseSubscript(ExprPtr node) {
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
absl::StatusOr<ExprPtr> ExprParser::ParseSubscribed() {
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
absl::Status ExprParser::ParseCallArgs(Expr& node) {
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

absl::StatusOr<ExprPtr> ExprParser::ParseCall(ExprPtr callee) {
  ExprPtr call = Node(ExprKind::kCall, Cur().pos);
  call->children.push_back(std::move(callee));
  TANDEM_RETURN_IF_ERROR(ParseCallArgs(*call));
  return call;
}

// Dotted names, for filters and tests.
absl::StatusOr<std::string> ExprParser::ParseDottedName() {
  TANDEM_ASSIGN_OR_RETURN(std::string name, ExpectAnyName());
  while (SkipOp(".")) {
    TANDEM_ASSIGN_OR_RETURN(std::string part, ExpectAnyName());
    name += "." + part;
  }
  return name;
}

// "| f(args) | g ..." applied to node (null in {% filter %} and block sets); `inline_start` when the first
// filter has no pipe before it.
absl::StatusOr<ExprPtr> ExprParser::ParseFilterChain(ExprPtr node, bool inline_start) {
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

absl::StatusOr<ExprPtr> ExprParser::ParseTest(ExprPtr node) {
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

}  // namespace tandem::jinja

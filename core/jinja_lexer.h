// The Jinja lexer: template source to a flat token stream, as jinja2's lexer cuts it with trim_blocks and
// lstrip_blocks on (how Hugging Face renders chat templates): text runs, {{ }} and {% %} tags with their
// expression tokens, comments dropped, {% raw %} bodies as text, and the whitespace control of - and +.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::jinja {

struct Pos {
  int line = 1;
  int col = 1;  // in code points
};

enum class TokenKind : uint8_t {
  kText,        // template text between tags, whitespace control applied
  kPrintBegin,  // {{
  kPrintEnd,    // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the literal's value, escapes decoded
  kInt,
  kFloat,
  kOp,  // text holds the operator: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
  kEnd,
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  Pos pos;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Errors name the line and column: "3:14: unexpected character '$'".
absl::StatusOr<std::vector<Token>> Lex(std::string_view source, const LexOptions& opts = {});

}  // namespace tandem::jinja

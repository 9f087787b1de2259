// The Jinja lexer (core/jinja_lexer.h), rule for rule as jinja2 3.1's lexer.py.
#include "core/jinja_lexer.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "core/jinja_text.h"
#include "core/status.h"

namespace tandem::jinja {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80; }
bool IsNameChar(unsigned char c) { return IsNameStart(c) || IsDigit(static_cast<char>(c)); }
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// jinja2 reads newlines as "\n" whatever they were, and drops one newline that ends the template.
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view src, const LexOptions& opts) : src_(src), opts_(opts) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    while (pos < src_.size()) {
      const size_t open = FindOpener(pos);
      if (open == std::string_view::npos) {
        AddText(pos, src_.substr(pos));
        break;
      }
      const char kind = src_[open + 1];
      size_t after = open + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      size_t raw_body = 0;
      const bool raw = kind == '%' && MatchRawBegin(after, raw_body);
      AddText(pos, StripBefore(src_.substr(pos, open - pos), sign, kind != '{'));
      line_starting_ = false;
      if (raw) {
        TANDEM_ASSIGN_OR_RETURN(pos, LexRaw(open, raw_body));
      } else if (kind == '#') {
        TANDEM_ASSIGN_OR_RETURN(pos, SkipComment(open, after));
      } else {
        TANDEM_ASSIGN_OR_RETURN(pos, LexTag(open, after, kind == '{'));
      }
    }
    Token end;
    end.kind = TokenKind::kEnd;
    end.pos = PosAt(src_.size());
    tokens_.push_back(std::move(end));
    return std::move(tokens_);
  }

 private:
  // Tokens come in order, so the column is counted on from the last one (a long line stays linear).
  Pos PosAt(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    const size_t start = line_starts_[line - 1];
    if (cache_line_ != line || cache_offset_ > offset) {
      cache_line_ = line;
      cache_offset_ = start;
      cache_col_ = 1;
    }
    cache_col_ += text::Length(src_.substr(cache_offset_, offset - cache_offset_));
    cache_offset_ = offset;
    return Pos{static_cast<int>(line), static_cast<int>(cache_col_)};
  }

  absl::Status Error(size_t offset, std::string_view msg) const {
    const Pos p = PosAt(offset);
    return InvalidArgument(p.line, ":", p.col, ": ", msg);
  }

  size_t FindOpener(size_t pos) const {
    while (true) {
      const size_t at = src_.find('{', pos);
      if (at == std::string_view::npos || at + 1 >= src_.size()) return std::string_view::npos;
      const char next = src_[at + 1];
      if (next == '{' || next == '%' || next == '#') return at;
      pos = at + 1;
    }
  }

  // Whitespace (Python's \s) at `pos`; returns its length in bytes.
  size_t SpaceAt(size_t pos) const {
    if (pos >= src_.size()) return 0;
    const auto c = static_cast<unsigned char>(src_[pos]);
    if (c < 0x80) return text::IsSpace(c) ? 1 : 0;
    size_t len = 1;
    while (pos + len < src_.size() && len < 4 && (static_cast<unsigned char>(src_[pos + len]) & 0xC0) == 0x80) ++len;
    const std::u32string cp = text::Decode(src_.substr(pos, len));
    if (cp.size() != 1 || !text::IsSpace(cp[0])) return 0;
    return len;
  }
  size_t SkipSpaces(size_t pos) const {
    while (size_t n = SpaceAt(pos)) pos += n;
    return pos;
  }

  // Text before a tag, after the tag's whitespace control: "-" strips all whitespace before it; otherwise,
  // with lstrip_blocks, a block or comment tag that starts a line takes the spaces before it on that line.
  std::string_view StripBefore(std::string_view text, char sign, bool block_or_comment) const {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        const std::u32string cp = text::Decode(text.substr(start, end - start));
        if (cp.size() != 1 || !text::IsSpace(cp[0])) break;
        end = start;
      }
      return text.substr(0, end);
    }
    if (sign == '+' || !opts_.lstrip_blocks || !block_or_comment) return text;
    const size_t nl = text.rfind('\n');
    const size_t line_start = nl == std::string_view::npos ? 0 : nl + 1;
    if (line_start == 0 && !line_starting_) return text;
    const std::string_view tail = text.substr(line_start);
    if (tail.empty()) return text;
    const std::u32string cps = text::Decode(tail);
    if (!std::all_of(cps.begin(), cps.end(), [](char32_t c) { return text::IsSpace(c); })) return text;
    return text.substr(0, line_start);
  }

  void AddText(size_t offset, std::string_view text) {
    if (text.empty()) return;
    Token t;
    t.kind = TokenKind::kText;
    t.text = std::string(text);
    t.pos = PosAt(offset);
    tokens_.push_back(std::move(t));
  }

  void AddToken(TokenKind kind, size_t offset, std::string text = {}) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.pos = PosAt(offset);
    tokens_.push_back(std::move(t));
  }

  // "{% raw %}" or "{%- raw -%}" from just after the "{%" and its sign; sets where the body starts.
  bool MatchRawBegin(size_t pos, size_t& body) const {
    pos = SkipSpaces(pos);
    if (src_.compare(pos, 3, "raw") != 0) return false;
    pos = SkipSpaces(pos + 3);
    if (src_.compare(pos, 3, "-%}") == 0) {
      body = SkipSpaces(pos + 3);
      return true;
    }
    if (src_.compare(pos, 2, "%}") == 0) {
      body = pos + 2;  // no trim_blocks after raw: jinja2 keeps the newline
      return true;
    }
    return false;
  }

  absl::StatusOr<size_t> LexRaw(size_t open, size_t body) {
    line_starting_ = body > 0 && src_[body - 1] == '\n';
    for (size_t at = src_.find("{%", body); at != std::string_view::npos; at = src_.find("{%", at + 1)) {
      size_t p = at + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = SkipSpaces(p);
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p = SkipSpaces(p + 6);
      size_t end = 0;
      if (src_.compare(p, 3, "+%}") == 0) {
        end = p + 3;
      } else if (src_.compare(p, 3, "-%}") == 0) {
        end = SkipSpaces(p + 3);
      } else if (src_.compare(p, 2, "%}") == 0) {
        end = p + 2;
        if (opts_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      AddText(body, StripBefore(src_.substr(body, at - body), sign, true));
      line_starting_ = src_[end - 1] == '\n';
      return end;
    }
    return Error(open, "missing end of raw directive");
  }

  absl::StatusOr<size_t> SkipComment(size_t open, size_t content) {
    for (size_t at = src_.find("#}", content); at != std::string_view::npos; at = src_.find("#}", at + 1)) {
      size_t end = at + 2;
      const char before = at > content ? src_[at - 1] : 0;
      if (before == '-') {
        end = SkipSpaces(end);
      } else if (before != '+' && opts_.trim_blocks && end < src_.size() && src_[end] == '\n') {
        ++end;
      }
      line_starting_ = src_[end - 1] == '\n';
      return end;
    }
    return Error(open, "missing end of comment tag");
  }

  // The end of a tag at `pos` when there is one: its length consumed, whitespace control applied.
  size_t MatchTagEnd(size_t pos, bool print) const {
    const char* close = print ? "}}" : "%}";
    if (!print && src_.compare(pos, 3, "+%}") == 0) return pos + 3;
    if (pos < src_.size() && src_[pos] == '-' && src_.compare(pos + 1, 2, close) == 0) return SkipSpaces(pos + 3);
    if (src_.compare(pos, 2, close) == 0) {
      size_t end = pos + 2;
      if (!print && opts_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
      return end;
    }
    return 0;
  }

  absl::StatusOr<size_t> LexTag(size_t open, size_t pos, bool print) {
    AddToken(print ? TokenKind::kPrintBegin : TokenKind::kBlockBegin, open);
    std::vector<char> balance;
    while (true) {
      pos = SkipSpaces(pos);
      if (pos >= src_.size()) {
        return Error(open, print ? "unexpected end of template, expected '}}'"
                                 : "unexpected end of template, expected '%}'");
      }
      if (balance.empty()) {
        if (const size_t end = MatchTagEnd(pos, print)) {
          AddToken(print ? TokenKind::kPrintEnd : TokenKind::kBlockEnd, pos);
          line_starting_ = src_[end - 1] == '\n';
          return end;
        }
      }
      const char c = src_[pos];
      if (IsDigit(c)) {
        TANDEM_ASSIGN_OR_RETURN(pos, LexNumber(pos));
      } else if (IsNameStart(static_cast<unsigned char>(c))) {
        size_t end = pos;
        while (end < src_.size() && IsNameChar(static_cast<unsigned char>(src_[end])) && SpaceAt(end) == 0) ++end;
        AddToken(TokenKind::kName, pos, std::string(src_.substr(pos, end - pos)));
        pos = end;
      } else if (c == '\'' || c == '"') {
        TANDEM_ASSIGN_OR_RETURN(pos, LexString(pos));
      } else {
        TANDEM_ASSIGN_OR_RETURN(pos, LexOperator(pos, balance));
      }
    }
  }

  absl::StatusOr<size_t> LexNumber(size_t start) {
    auto digits = [&](size_t p, auto is_digit) {
      // (_?d)* after a first digit: underscores only between digits.
      while (p < src_.size()) {
        if (is_digit(src_[p])) {
          ++p;
        } else if (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1])) {
          p += 2;
        } else {
          break;
        }
      }
      return p;
    };
    auto clean = [&](size_t a, size_t b) {
      std::string s;
      for (size_t i = a; i < b; ++i) {
        if (src_[i] != '_') s.push_back(src_[i]);
      }
      return s;
    };
    const auto dec = [](char ch) { return IsDigit(ch); };
    // 0x / 0o / 0b integers.
    if (src_[start] == '0' && start + 2 < src_.size()) {
      const char p = static_cast<char>(src_[start + 1] | 0x20);
      int base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (base != 0) {
        auto in_base = [base](char ch) {
          const int v = HexValue(ch);
          return v >= 0 && v < base;
        };
        size_t q = start + 2;
        if (q < src_.size() && src_[q] == '_') ++q;
        if (q < src_.size() && in_base(src_[q])) {
          const size_t end = digits(q, in_base);
          const std::string body = clean(start + 2, end);
          int64_t v = 0;
          const auto r = std::from_chars(body.data(), body.data() + body.size(), v, base);
          if (r.ec != std::errc()) return Error(start, "integer literal too large");
          Token t;
          t.kind = TokenKind::kInt;
          t.int_value = v;
          t.pos = PosAt(start);
          tokens_.push_back(std::move(t));
          return end;
        }
      }
    }
    size_t end = digits(start, dec);
    bool is_float = false;
    const bool after_dot = start > 0 && src_[start - 1] == '.';  // jinja2: (?<!\.) so "x.0.1" is items
    if (!after_dot) {
      size_t p = end;
      if (p + 1 < src_.size() && src_[p] == '.' && IsDigit(src_[p + 1])) {
        p = digits(p + 1, dec);
        is_float = true;
      }
      if (p < src_.size() && (src_[p] | 0x20) == 'e') {
        size_t q = p + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        if (q < src_.size() && IsDigit(src_[q])) {
          p = digits(q, dec);
          is_float = true;
        }
      }
      if (is_float) end = p;
    }
    // A decimal integer is 0 (0_0...) or starts with 1-9; "01" lexes as 0 then 1, which the parser refuses.
    if (!is_float && src_[start] == '0') {
      end = start + 1;
      while (end + 1 < src_.size() && ((src_[end] == '_' && src_[end + 1] == '0') || src_[end] == '0')) {
        end += src_[end] == '_' ? 2 : 1;
      }
    }
    const std::string body = clean(start, end);
    Token t;
    t.pos = PosAt(start);
    if (is_float) {
      t.kind = TokenKind::kFloat;
      t.float_value = std::strtod(body.c_str(), nullptr);
    } else {
      t.kind = TokenKind::kInt;
      const auto r = std::from_chars(body.data(), body.data() + body.size(), t.int_value);
      if (r.ec != std::errc()) return Error(start, "integer literal too large");
    }
    tokens_.push_back(std::move(t));
    return end;
  }

  // A quoted literal, decoded as Python's unicode-escape codec reads it (which is what jinja2 does).
  absl::StatusOr<size_t> LexString(size_t start) {
    const char quote = src_[start];
    size_t p = start + 1;
    while (p < src_.size() && src_[p] != quote) p += src_[p] == '\\' ? 2 : 1;
    if (p >= src_.size()) return Error(start, Cat("unexpected character '", std::string(1, quote), "'"));
    const std::string_view body = src_.substr(start + 1, p - start - 1);
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] != '\\') {
        out.push_back(body[i]);
        continue;
      }
      if (i + 1 >= body.size()) break;
      const char e = body[++i];
      auto hex = [&](int n) -> absl::StatusOr<char32_t> {
        char32_t v = 0;
        for (int k = 0; k < n; ++k) {
          const int h = i + 1 + k < body.size() ? HexValue(body[i + 1 + k]) : -1;
          if (h < 0) return Error(start, "truncated escape in string literal");
          v = v * 16 + h;
        }
        i += n;
        return v;
      };
      switch (e) {
        case '\n': break;  // a backslash at a line end continues the line
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x':
        case 'u':
        case 'U': {
          TANDEM_ASSIGN_OR_RETURN(char32_t v, hex(e == 'x' ? 2 : e == 'u' ? 4 : 8));
          if (v > 0x10FFFF) return Error(start, "illegal Unicode character in string literal");
          text::AppendUtf8(out, v);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            int v = e - '0';
            for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
              v = v * 8 + (body[++i] - '0');
            }
            text::AppendUtf8(out, static_cast<char32_t>(v));
          } else if (static_cast<unsigned char>(e) >= 0x80) {
            // jinja2 first writes non-ASCII as \xNN / \uNNNN / \UNNNNNNNN, so a backslash before one leaves
            // that escape's text behind.
            size_t len = 1;
            while (i + len < body.size() && len < 4 && (static_cast<unsigned char>(body[i + len]) & 0xC0) == 0x80) {
              ++len;
            }
            const std::u32string cp = text::Decode(body.substr(i, len));
            char buf[16];
            const auto c = static_cast<unsigned>(cp.empty() ? 0 : cp[0]);
            std::snprintf(buf, sizeof(buf), c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", c);
            out += buf;
            i += len - 1;
          } else {
            out.push_back('\\');  // an unknown escape stays as written
            out.push_back(e);
          }
      }
    }
    AddToken(TokenKind::kString, start, std::move(out));
    return p + 1;
  }

  absl::StatusOr<size_t> LexOperator(size_t pos, std::vector<char>& balance) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (src_.compare(pos, 2, op) == 0) {
        AddToken(TokenKind::kOp, pos, std::string(op));
        return pos + 2;
      }
    }
    const char c = src_[pos];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      std::string shown;
      text::AppendUtf8(shown, text::Decode(src_.substr(pos, std::min<size_t>(4, src_.size() - pos)))[0]);
      return Error(pos, Cat("unexpected character '", shown, "'"));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) return Error(pos, Cat("unexpected '", std::string(1, c), "'"));
      if (balance.back() != c) {
        return Error(pos, Cat("unexpected '", std::string(1, c), "', expected '", std::string(1, balance.back()), "'"));
      }
      balance.pop_back();
    }
    AddToken(TokenKind::kOp, pos, std::string(1, c));
    return pos + 1;
  }

  std::string_view src_;
  LexOptions opts_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  bool line_starting_ = true;  // the last thing matched ended a line (jinja2's lstrip_blocks needs it)
  mutable size_t cache_line_ = 0;
  mutable size_t cache_offset_ = 0;
  mutable size_t cache_col_ = 1;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source, const LexOptions& opts) {
  const std::string normalized = NormalizeNewlines(source);
  return Lexer(normalized, opts).Run();
}

}  // namespace tandem::jinja

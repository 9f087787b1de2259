// Python's str operations over UTF-8 (core/jinja_text.h).
#include "core/jinja_text.h"

#include <algorithm>
#include <cstdint>

namespace tandem::jinja::text {
namespace {

constexpr char32_t kEscapeBase = 0xDC00;  // Python's surrogateescape: U+DC00 + byte for a byte that is not UTF-8

// One code point from s at i; advances i. Overlong forms, surrogates and values past U+10FFFF are invalid.
char32_t Next(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int len = 0;
  char32_t c = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    c = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    c = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    c = b0 & 0x07;
  }
  if (len == 0 || i + len > s.size()) {
    ++i;
    return kEscapeBase + b0;
  }
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return kEscapeBase + b0;
    }
    c = (c << 6) | (b & 0x3F);
  }
  static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kMin[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
    ++i;
    return kEscapeBase + b0;
  }
  i += len;
  return c;
}

bool InChars(char32_t c, const std::u32string& chars) { return chars.find(c) != std::u32string::npos; }

// Simple case pairs: ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic.
char32_t ToUpperChar(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 0x20;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
    if (c == 0x130 || c == 0x138 || c == 0x149 || c == 0x178) return c;
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 0x20;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 0x25;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 0x3F;
  if (c >= 0x430 && c <= 0x44F) return c - 0x20;
  if (c >= 0x450 && c <= 0x45F) return c - 0x50;
  return c;
}

char32_t ToLowerChar(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130) return 'i';
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
    if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 0x25;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 0x3F;
  if (c >= 0x410 && c <= 0x42F) return c + 0x20;
  if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  return c;
}

void AppendUpper(std::string& out, char32_t c) {
  if (c == 0xDF) {  // ß has no one-letter capital in Python's full mapping
    out += "SS";
    return;
  }
  AppendUtf8(out, ToUpperChar(c));
}

bool IsWordBreak(char32_t c) {
  return IsSpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
}

}  // namespace

bool IsAscii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; });
}

std::u32string Decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(Next(s, i));
  return out;
}

void AppendUtf8(std::string& out, char32_t c) {
  if (c >= kEscapeBase + 0x80 && c <= kEscapeBase + 0xFF) {
    out.push_back(static_cast<char>(c - kEscapeBase));
  } else if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string Encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(out, c);
  return out;
}

size_t Length(std::string_view s) {
  if (IsAscii(s)) return s.size();
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) Next(s, i);
  return n;
}

bool IsSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

std::string Strip(std::string_view s, Side side, const std::optional<std::string>& chars) {
  const std::u32string cs = Decode(s);
  const std::u32string set = chars ? Decode(*chars) : std::u32string();
  auto strip = [&](char32_t c) { return chars ? InChars(c, set) : IsSpace(c); };
  size_t begin = 0;
  size_t end = cs.size();
  if (side != Side::kRight) {
    while (begin < end && strip(cs[begin])) ++begin;
  }
  if (side != Side::kLeft) {
    while (end > begin && strip(cs[end - 1])) --end;
  }
  return Encode(std::u32string_view(cs).substr(begin, end - begin));
}

std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t at = s.find(*sep, pos);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, at - pos));
      pos = at + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  const std::u32string cs = Decode(s);
  size_t i = 0;
  while (true) {
    while (i < cs.size() && IsSpace(cs[i])) ++i;
    if (i == cs.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      // Python keeps the rest as it is, trailing whitespace included.
      out.push_back(Encode(std::u32string_view(cs).substr(i)));
      break;
    }
    const size_t start = i;
    while (i < cs.size() && !IsSpace(cs[i])) ++i;
    out.push_back(Encode(std::u32string_view(cs).substr(start, i - start)));
  }
  return out;
}

std::vector<std::string> RSplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  const std::u32string cs = Decode(s);
  size_t i = cs.size();
  while (true) {
    while (i > 0 && IsSpace(cs[i - 1])) --i;
    if (i == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(Encode(std::u32string_view(cs).substr(0, i)));
      break;
    }
    const size_t end = i;
    while (i > 0 && !IsSpace(cs[i - 1])) --i;
    out.push_back(Encode(std::u32string_view(cs).substr(i, end - i)));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> SplitLines(std::string_view s) {
  std::vector<std::string> out;
  const std::u32string cs = Decode(s);
  size_t start = 0;
  for (size_t i = 0; i < cs.size(); ++i) {
    const char32_t c = cs[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                     c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    out.push_back(Encode(std::u32string_view(cs).substr(start, i - start)));
    if (c == '\r' && i + 1 < cs.size() && cs[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < cs.size()) out.push_back(Encode(std::u32string_view(cs).substr(start)));
  return out;
}

std::string Replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    const std::u32string cs = Decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cs.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i < cs.size()) AppendUtf8(out, cs[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, pos);
    if (at == std::string_view::npos) break;
    out += s.substr(pos, at - pos);
    out += repl;
    pos = at + old.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

std::string Upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) AppendUpper(out, Next(s, i));
  return out;
}

std::string Lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) AppendUtf8(out, ToLowerChar(Next(s, i)));
  return out;
}

bool IsUpperChar(char32_t c) { return ToLowerChar(c) != c; }
bool IsLowerChar(char32_t c) { return ToUpperChar(c) != c || c == 0xDF; }
bool IsCased(char32_t c) { return IsUpperChar(c) || IsLowerChar(c) || c == 0x138 || c == 0x149; }

std::string Capitalize(std::string_view s) {
  std::string out;
  size_t i = 0;
  if (i < s.size()) AppendUpper(out, Next(s, i));
  for (; i < s.size();) AppendUtf8(out, ToLowerChar(Next(s, i)));
  return out;
}

std::string TitleMethod(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = Next(s, i);
    if (prev_cased) {
      AppendUtf8(out, ToLowerChar(c));
    } else {
      AppendUpper(out, c);
    }
    prev_cased = IsCased(c);
  }
  return out;
}

std::string TitleFilter(std::string_view s) {
  // re.split(r"([-\s({\[<]+)") then item[0].upper() + item[1:].lower() for each piece, separators included: a
  // character is upper-cased when it starts the text or follows a separator (upper-casing one is a no-op).
  std::string out;
  bool word_start = true;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = Next(s, i);
    if (word_start) {
      AppendUpper(out, c);
    } else {
      AppendUtf8(out, ToLowerChar(c));
    }
    word_start = IsWordBreak(c);
  }
  return out;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace tandem::jinja::text

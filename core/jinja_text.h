// Python's str operations over UTF-8 text, for the Jinja interpreter: Python counts, indexes and slices code
// points, and its whitespace and letter cases are Unicode's. Bytes that are not UTF-8 are kept as they are, each
// standing for one code point (as Python's surrogateescape), so any input comes back out unchanged.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::jinja::text {

bool IsAscii(std::string_view s);
// Code points; an invalid byte decodes to U+DC00 + byte and encodes back to that byte.
std::u32string Decode(std::string_view s);
void AppendUtf8(std::string& out, char32_t c);
std::string Encode(std::u32string_view s);
size_t Length(std::string_view s);  // in code points

// Python's str.isspace() for one code point (what split() and strip() without arguments remove).
bool IsSpace(char32_t c);

enum class Side { kBoth, kLeft, kRight };
// str.strip/lstrip/rstrip: `chars` absent strips whitespace, else any of its code points.
std::string Strip(std::string_view s, Side side, const std::optional<std::string>& chars);
// str.split(sep, maxsplit) and rsplit; no `sep` splits at whitespace runs and drops empty words.
std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> RSplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
// str.splitlines(): at \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, U+2028 and U+2029; no line ends kept.
std::vector<std::string> SplitLines(std::string_view s);
// str.replace(old, new, count); count < 0 replaces all. An empty `old` inserts between code points, as Python.
std::string Replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);

// Letter case: ASCII, Latin-1, Latin Extended-A, basic Greek and Cyrillic (simple mappings, and ß upper-cases to
// SS); other letters are left as they are.
std::string Upper(std::string_view s);
std::string Lower(std::string_view s);
bool IsCased(char32_t c);
bool IsUpperChar(char32_t c);
bool IsLowerChar(char32_t c);
std::string Capitalize(std::string_view s);  // str.capitalize(): first upper, the rest lower
std::string TitleMethod(std::string_view s);  // str.title(): each run of letters starts upper
std::string TitleFilter(std::string_view s);  // jinja2's |title: words start after spaces and -({[<

// HTML escaping as markupsafe: & < > " ' become entities.
std::string HtmlEscape(std::string_view s);

}  // namespace tandem::jinja::text

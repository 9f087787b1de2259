// The text of one completion as it is generated: token pieces appended, cut at the first stop string, and handed
// out for streaming only where it is final: no stop string could still begin in what is handed out, and no UTF-8
// character is split. Pure; sized once per request, so appending a token does not allocate.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::serve {

class CompletionText {
 public:
  // Empty stop strings are ignored. `reserve_bytes`: the text's expected size, allocated up front.
  explicit CompletionText(std::vector<std::string> stops, size_t reserve_bytes = 0);

  // Appends a token's piece. Returns true when the text now holds a stop string: it is cut where the first one
  // begins (the stop string is not part of the completion), and nothing more may be appended.
  bool Append(std::string_view piece);
  // The bytes that became final since the last call. With `all` (the completion ended), everything not yet taken.
  // The view stays valid until the next Append.
  std::string_view TakeReady(bool all = false);

  const std::string& text() const { return text_; }
  bool stopped() const { return stopped_; }

 private:
  // Length of the longest suffix of the text that is a proper prefix of a stop string.
  size_t PendingStopPrefix() const;

  std::vector<std::string> stops_;
  std::string text_;
  size_t taken_ = 0;
  bool stopped_ = false;
};

// The length of the longest prefix of `s` that does not end inside a UTF-8 character (an incomplete sequence at
// the end is left out; invalid bytes count as whole characters).
size_t CompleteUtf8Prefix(std::string_view s);

}  // namespace tandem::serve

#include "tools/serve_text.h"

#include <algorithm>

namespace tandem::serve {

size_t CompleteUtf8Prefix(std::string_view s) {
  // Look back at most 3 bytes for the lead byte of the last character.
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(n, 4); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: the lead is further back
    const size_t need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    return back < need ? n - back : n;
  }
  return n;  // only continuation bytes (invalid): nothing to wait for
}

CompletionText::CompletionText(std::vector<std::string> stops, size_t reserve_bytes) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
  text_.reserve(reserve_bytes);
}

bool CompletionText::Append(std::string_view piece) {
  if (stopped_) return true;
  const size_t old_size = text_.size();
  text_.append(piece.data(), piece.size());
  // A new match ends in the new bytes, so it starts at most (stop length - 1) bytes before them.
  size_t cut = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t from = old_size >= stop.size() - 1 ? old_size - (stop.size() - 1) : 0;
    cut = std::min(cut, text_.find(stop, from));
  }
  if (cut == std::string::npos) return false;
  // What was handed out held no stop prefix at its end, so a match cannot begin inside it.
  text_.resize(std::max(cut, taken_));
  stopped_ = true;
  return true;
}

size_t CompletionText::PendingStopPrefix() const {
  size_t longest = 0;
  const std::string_view text(text_);
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(stop.size() - 1, text.size() - taken_);
    for (size_t len = max_len; len > longest; --len) {
      // Compare the last byte first: most candidates fail there.
      if (text.back() == stop[len - 1] && text.substr(text.size() - len) == std::string_view(stop).substr(0, len)) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

std::string_view CompletionText::TakeReady(bool all) {
  size_t end = text_.size();
  if (!all && !stopped_) {
    end -= PendingStopPrefix();
    end = taken_ + CompleteUtf8Prefix(std::string_view(text_).substr(taken_, end - taken_));
  }
  const std::string_view ready = std::string_view(text_).substr(taken_, end - taken_);
  taken_ = end;
  return ready;
}

}  // namespace tandem::serve

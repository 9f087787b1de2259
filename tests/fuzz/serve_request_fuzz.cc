// libFuzzer target over `tandem serve`'s request parser and its stop-string text: any body either parses into a
// request within the limits or is one 400 with a message (whose JSON can always be written), and the text a
// completion streams always joins to its final text, cut before the first stop string.
//   input[0] bit 0: chat (1) or completions (0); bits 1-3: how many bytes each token piece has; the rest: the body.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tools/serve_request.h"
#include "tools/serve_response.h"
#include "tools/serve_text.h"

namespace {

using namespace tandem::serve;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "serve_request_fuzz: %s\n", what);
    std::abort();
  }
}

// The body cut into pieces as tokens would be, through CompletionText with the request's stops (or some of the
// body's own bytes as a stop when it has none).
void CheckText(std::string_view body, size_t piece, const std::vector<std::string>& stops) {
  CompletionText text(stops);
  std::string streamed;
  bool stopped = false;
  for (size_t i = 0; i < body.size() && !stopped; i += piece) {
    stopped = text.Append(body.substr(i, piece));
    streamed += text.TakeReady();
  }
  streamed += text.TakeReady(/*all=*/true);
  Check(streamed == text.text(), "what was streamed is not the final text");
  Check(body.substr(0, text.text().size()) == text.text(), "the text is not a prefix of what was appended");
  size_t first = std::string_view::npos;
  for (const std::string& s : stops) {
    if (!s.empty()) first = std::min(first, body.find(s));
  }
  if (first == std::string_view::npos) {
    Check(!stopped && text.text().size() == body.size(), "stopped without a stop string");
  } else {
    Check(stopped && text.text().size() == first, "not cut where the first stop string begins");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const ApiEndpoint endpoint = (data[0] & 1) != 0 ? ApiEndpoint::kChatCompletions : ApiEndpoint::kCompletions;
  const size_t piece = 1 + ((data[0] >> 1) & 7);
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);

  const RequestLimits limits;
  CompletionRequest r;
  if (std::optional<ApiError> e = ParseCompletionRequest(body, endpoint, &r, limits)) {
    Check(e->status == 400, "an error that is not a 400");
    Check(!e->message.empty(), "an error without a message");
    Check(!Dump(ErrorBody(*e)).empty(), "the error's JSON is empty");
    std::vector<std::string> stops;
    if (body.size() > 4) stops.emplace_back(body.substr(body.size() / 2, 3));
    CheckText(body, piece, stops);
    return 0;
  }
  Check(r.endpoint == endpoint, "the endpoint changed");
  Check(r.stop.size() <= limits.max_stops, "too many stop strings");
  for (const std::string& s : r.stop) Check(!s.empty() && s.size() <= limits.max_stop_bytes, "a stop string out of bounds");
  for (int32_t id : r.prompt_tokens) Check(id >= 0, "a negative token id");
  Check(!r.max_tokens || *r.max_tokens >= 0, "negative max_tokens");
  Check(r.sampling.temp >= 0 && r.sampling.top_p >= 0 && r.sampling.top_p <= 1 && r.sampling.min_p >= 0 &&
            r.sampling.min_p <= 1 && r.sampling.top_k >= 0,
        "sampling settings out of range");
  if (endpoint == ApiEndpoint::kChatCompletions) {
    Check(r.messages.is_array() && !r.messages.empty(), "chat without messages");
  } else {
    Check(r.prompt_is_tokens || r.prompt_tokens.empty(), "token ids for a text prompt");
  }
  CheckText(r.prompt_is_tokens ? body : std::string_view(r.prompt), piece, r.stop);
  return 0;
}

// The bodies the server answers with, in OpenAI's shapes: errors, whole completions, streamed chunks and their
// server-sent-event framing. Pure JSON building; text that is not valid UTF-8 (a generation cut inside a
// character) is written with U+FFFD rather than failing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"
#include "tools/serve_types.h"

namespace tandem::serve {

// Keys in the order OpenAI writes them (id, object, created, model, choices...), which is easier to read.
using ResponseJson = nlohmann::ordered_json;

// What every response of one request carries: "cmpl-…" or "chatcmpl-…", the Unix time it was made, the model.
struct ResponseMeta {
  ApiEndpoint endpoint = ApiEndpoint::kCompletions;
  std::string id;
  int64_t created = 0;
  std::string model;
};
ResponseMeta NewResponseMeta(ApiEndpoint endpoint, std::string model);

ResponseJson ErrorBody(const ApiError& e);
ResponseJson UsageBody(const Usage& u);

// The whole answer when not streaming: "text_completion" with choices[].text, or "chat.completion" with
// choices[].message {role: "assistant", content}.
ResponseJson CompletionBody(const ResponseMeta& meta, std::string_view text, FinishReason finish, const Usage& u);

// One streamed chunk ("text_completion", or "chat.completion.chunk" with a delta). The chat stream opens with a
// chunk whose delta holds the role (`role`); text chunks have `text`; the last has `finish`. With include_usage,
// every chunk carries "usage": null, as OpenAI's do, and UsageChunk follows the last one.
struct ChunkContent {
  bool role = false;
  std::string_view text;
  std::optional<FinishReason> finish;
};
ResponseJson StreamChunk(const ResponseMeta& meta, const ChunkContent& c, bool include_usage);
ResponseJson UsageChunk(const ResponseMeta& meta, const Usage& u);

// JSON text, invalid UTF-8 replaced.
std::string Dump(const ResponseJson& j);
// "data: <json>\n\n", and the event that ends a stream.
std::string SseEvent(const ResponseJson& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace tandem::serve

#include "tools/serve_response.h"

#include <chrono>
#include <random>

#include "absl/strings/str_format.h"
#include "core/status.h"

namespace tandem::serve {

using json = ResponseJson;

ResponseMeta NewResponseMeta(ApiEndpoint endpoint, std::string model) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return ResponseMeta{
      .endpoint = endpoint,
      .id = Cat(endpoint == ApiEndpoint::kChatCompletions ? "chatcmpl-" : "cmpl-", absl::StrFormat("%016x", rng())),
      .created = std::chrono::duration_cast<std::chrono::seconds>(now).count(),
      .model = std::move(model)};
}

json ErrorBody(const ApiError& e) {
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"error", {{"message", e.message}, {"type", e.type}, {"param", or_null(e.param)}, {"code", or_null(e.code)}}}};
}

json UsageBody(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

namespace {

json Envelope(const ResponseMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

}  // namespace

json CompletionBody(const ResponseMeta& meta, std::string_view text, FinishReason finish, const Usage& u) {
  const bool chat = meta.endpoint == ApiEndpoint::kChatCompletions;
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", FinishReasonName(finish)}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  json body = Envelope(meta, chat ? "chat.completion" : "text_completion");
  body["choices"] = json::array({std::move(choice)});
  body["usage"] = UsageBody(u);
  return body;
}

json StreamChunk(const ResponseMeta& meta, const ChunkContent& c, bool include_usage) {
  const bool chat = meta.endpoint == ApiEndpoint::kChatCompletions;
  json choice = {{"index", 0}, {"logprobs", nullptr}};
  if (chat) {
    json delta = json::object();
    if (c.role) delta["role"] = "assistant";
    if (c.role || !c.text.empty()) delta["content"] = c.text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = c.text;
  }
  choice["finish_reason"] = c.finish ? json(FinishReasonName(*c.finish)) : json(nullptr);
  json body = Envelope(meta, chat ? "chat.completion.chunk" : "text_completion");
  body["choices"] = json::array({std::move(choice)});
  if (include_usage) body["usage"] = nullptr;
  return body;
}

json UsageChunk(const ResponseMeta& meta, const Usage& u) {
  json body = Envelope(meta, meta.endpoint == ApiEndpoint::kChatCompletions ? "chat.completion.chunk"
                                                                            : "text_completion");
  body["choices"] = json::array();
  body["usage"] = UsageBody(u);
  return body;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string SseEvent(const json& j) { return Cat("data: ", Dump(j), "\n\n"); }

}  // namespace tandem::serve

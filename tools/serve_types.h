// Small types the server's parts share: which OpenAI endpoint a request is for, an error in OpenAI's shape, and
// how a completion ended. Nothing here knows HTTP or the engine.
#pragma once

#include <string>
#include <utility>

namespace tandem::serve {

enum class ApiEndpoint { kCompletions, kChatCompletions };

// {"error": {"message", "type", "param", "code"}} with the HTTP status it goes out with. An empty param or code
// is written as null, as OpenAI does.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
};
// The server's own failure (5xx), as OpenAI types it.
inline ApiError ServerError(int status, std::string message, std::string code = "") {
  return ApiError{.status = status, .message = std::move(message), .type = "server_error", .code = std::move(code)};
}

// OpenAI's finish_reason: "stop" (an end-of-generation token or a stop string), "length" (max_tokens or the
// context).
enum class FinishReason { kStop, kLength };
inline const char* FinishReasonName(FinishReason r) { return r == FinishReason::kStop ? "stop" : "length"; }

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
};

}  // namespace tandem::serve

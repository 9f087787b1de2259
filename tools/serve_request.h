// The body of an OpenAI /v1/completions or /v1/chat/completions request, parsed and validated into a
// CompletionRequest. Pure: no HTTP, no model; what needs the model (token ids in range, the context) is checked
// where the model is known. Every error names the field, in OpenAI's error shape.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/sampler.h"
#include "nlohmann/json.hpp"
#include "tools/serve_types.h"

namespace tandem::serve {

struct CompletionRequest {
  ApiEndpoint endpoint = ApiEndpoint::kCompletions;
  std::string model;  // as the client named it; one model is served, so it is not checked
  // /v1/completions: the prompt as text, or as token ids (no BOS added to those) when prompt_is_tokens.
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
  // /v1/chat/completions, as the client sent them (ordered_json keeps its key order, which a template that
  // prints a tool schema shows): [{role, content: string | null | text parts, ...}]; other keys go to the template.
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;            // null when none
  nlohmann::ordered_json template_kwargs;  // chat_template_kwargs (llama-server's field): more template variables
  std::optional<int> max_tokens;    // max_completion_tokens, else max_tokens; unset: to the end of the context
  SamplerOptions sampling;          // the fields the request did not set keep run's defaults (llama.cpp's)
  std::optional<uint64_t> seed;     // unset or -1: a random seed
  std::vector<std::string> stop;    // empty strings dropped
  bool ignore_eos = false;          // llama-server's field: never sample an end-of-generation token
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
};

// Bounds on what one request may ask for, so that a hostile body cannot make the server do unbounded work.
struct RequestLimits {
  size_t max_stops = 16;
  size_t max_stop_bytes = 512;
  int max_json_depth = 64;
  size_t max_prompt_tokens = size_t{1} << 22;
};

// Fills *out and returns nullopt, or returns the error to answer with (status 400).
std::optional<ApiError> ParseCompletionRequest(std::string_view body, ApiEndpoint endpoint, CompletionRequest* out,
                                               const RequestLimits& limits = {});

}  // namespace tandem::serve

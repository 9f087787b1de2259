#include "tools/serve_params.h"

#include <cstdint>
#include <random>
#include <string>

#include "core/status.h"

namespace tandem::serve {

std::optional<ApiError> ResolveRequest(const CompletionRequest& cr, const ServedModel& model, GenerationParams* p) {
  const Tokenizer& tok = model.tokenizer;
  const char* prompt_param = cr.endpoint == ApiEndpoint::kChatCompletions ? "messages" : "prompt";
  if (cr.endpoint == ApiEndpoint::kChatCompletions) {
    const ChatTemplate* tmpl = model.chat_template;
    if (tmpl == nullptr) {
      return ServerError(500, Cat("this server has no chat template: ", Message(model.no_chat_template)),
                         "no_chat_template");
    }
    absl::StatusOr<std::string> text = tmpl->Render(ChatRenderInput{
        .messages = cr.messages,
        .add_generation_prompt = true,
        .tools = cr.tools,
        .extra = cr.template_kwargs.is_null() ? nlohmann::ordered_json::object() : cr.template_kwargs});
    if (!text.ok()) {
      // The template refusing the conversation (raise_exception) is the request's fault; anything else ours.
      if (absl::IsInvalidArgument(text.status())) {
        return ApiError{.message = Message(text.status()), .param = prompt_param};
      }
      return ServerError(500, Message(text.status()));
    }
    p->prompt = EncodeRenderedChat(tok, *text);
  } else if (cr.prompt_is_tokens) {
    for (int32_t id : cr.prompt_tokens) {
      if (id >= tok.n_vocab()) {
        return ApiError{.message = Cat("token id ", id, " is out of the vocabulary (", tok.n_vocab(), " tokens)"),
                        .param = prompt_param};
      }
    }
    p->prompt = cr.prompt_tokens;
  } else {
    // Special-token text ("<|im_start|>") is the token, as llama-server reads a raw prompt.
    p->prompt = tok.Encode(cr.prompt, TokenizeOptions{.add_bos = true, .parse_special = true});
  }
  if (p->prompt.empty()) {
    return ApiError{.message = "the prompt is empty and the model's vocabulary adds no BOS token to start from",
                    .param = prompt_param};
  }
  const int64_t n_ctx = model.n_ctx;
  const int64_t n_prompt = static_cast<int64_t>(p->prompt.size());
  const int64_t wanted = cr.max_tokens.value_or(1);  // without max_tokens, at least one token must fit
  if (n_prompt + wanted > n_ctx) {
    std::string message =
        cr.max_tokens
            ? Cat("This model's maximum context length is ", n_ctx, " tokens. However, you requested ",
                  n_prompt + wanted, " tokens (", n_prompt, " in the prompt, ", wanted,
                  " for the completion). Please reduce the prompt or max_tokens.")
            : Cat("This model's maximum context length is ", n_ctx, " tokens. However, the prompt has ", n_prompt,
                  " tokens, which leaves no room for the completion. Please reduce the prompt.");
    return ApiError{.message = std::move(message), .param = prompt_param, .code = "context_length_exceeded"};
  }
  p->max_tokens = static_cast<int>(cr.max_tokens ? *cr.max_tokens : n_ctx - n_prompt);
  p->sampling = cr.sampling;
  p->sampling.seed = cr.seed ? *cr.seed : std::random_device{}();
  p->stops = cr.stop;
  p->ignore_eos = cr.ignore_eos;
  return std::nullopt;
}

}  // namespace tandem::serve

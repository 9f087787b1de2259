// A parsed request held against the model it is for: the prompt's tokens (for chat, the chat template's rendering
// of the conversation), a token budget that fits the context, a seed. What a client can get wrong here (ids out
// of the vocabulary, too long a prompt, a conversation the template refuses) is a 400 that says so.
#pragma once

#include <optional>

#include "absl/status/status.h"
#include "core/chat_template.h"
#include "core/tokenizer.h"
#include "tools/serve_job.h"
#include "tools/serve_request.h"
#include "tools/serve_types.h"

namespace tandem::serve {

struct ServedModel {
  const Tokenizer& tokenizer;
  int n_ctx = 0;
  const ChatTemplate* chat_template = nullptr;  // null: chat is refused, with `no_chat_template` as the reason
  absl::Status no_chat_template;
};

// Fills *p and returns nullopt, or returns the error to answer with.
std::optional<ApiError> ResolveRequest(const CompletionRequest& cr, const ServedModel& model, GenerationParams* p);

}  // namespace tandem::serve

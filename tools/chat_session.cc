#include "tools/chat_session.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "core/status.h"

namespace tandem::cli {
namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

ChatSession::ChatSession(Engine& engine, ChatTemplate tmpl, ChatSessionOptions opts)
    : engine_(engine),
      template_(std::move(tmpl)),
      opts_(std::move(opts)),
      sampler_(opts_.sampling, engine.config().n_vocab) {
  logits_.resize(static_cast<size_t>(engine.config().n_vocab));
  kv_.reserve(static_cast<size_t>(engine.n_ctx()));
  history_.reserve(static_cast<size_t>(engine.n_ctx()) + 1);
  if (opts_.ignore_eos) {
    for (int32_t id = 0; id < engine.config().n_vocab; ++id) {
      if (engine.tokenizer().IsEog(id)) eog_ids_.push_back(id);
    }
  }
  Clear();
}

void ChatSession::Clear() {
  messages_ = nlohmann::ordered_json::array();
  if (!opts_.system_prompt.empty()) messages_.push_back({{"role", "system"}, {"content", opts_.system_prompt}});
  // The cache keeps its contents: the next turn reuses whatever prefix the new conversation shares with it.
}

absl::StatusOr<ChatTurn> ChatSession::Reply(std::string_view user,
                                            const std::function<void(std::string_view)>& on_text,
                                            const volatile std::sig_atomic_t* interrupt) {
  const Tokenizer& tok = engine_.tokenizer();
  const int64_t n_ctx = engine_.n_ctx();
  const auto t0 = Clock::now();
  nlohmann::ordered_json messages = messages_;
  messages.push_back({{"role", "user"}, {"content", std::string(user)}});
  TANDEM_ASSIGN_OR_RETURN(std::string text, template_.Render(ChatRenderInput{.messages = messages}));
  const std::vector<int32_t> prompt = EncodeRenderedChat(tok, text);
  if (prompt.empty()) return InvalidArgument("the chat template rendered an empty prompt");
  if (static_cast<int64_t>(prompt.size()) >= n_ctx) {  // one position must be left for the answer
    return InvalidArgument("the conversation is ", prompt.size(), " tokens with this message; the context holds ",
                           n_ctx, " (raise -c, or /clear)");
  }

  // The longest prefix the cache holds, leaving at least one token to feed for the logits. A windowed layer's
  // cache is a ring that may have overwritten the positions before the prefix's end: those models start over.
  size_t common = 0;
  const size_t limit = std::min(kv_.size(), prompt.size() - 1);
  while (common < limit && kv_[common] == prompt[common]) ++common;
  if (common < kv_.size() && engine_.config().n_swa > 0) common = 0;

  ChatTurn turn;
  turn.reused = static_cast<int64_t>(common);
  turn.prompt_fed = static_cast<int64_t>(prompt.size() - common);
  const std::span<const int32_t> fresh = std::span<const int32_t>(prompt).subspan(common);
  TANDEM_RETURN_IF_ERROR(engine_.Prefill(fresh, static_cast<int64_t>(common), false, logits_.data()));
  kv_.assign(prompt.begin(), prompt.end());
  history_.assign(prompt.begin(), prompt.end());
  const auto t_prefill = Clock::now();
  turn.prompt_ms = Ms(t_prefill - t0);
  messages_ = std::move(messages);

  // Decode, as `run` does: sample from the last row, feed the token back.
  const int max_tokens = opts_.max_tokens < 0 ? std::numeric_limits<int>::max() : opts_.max_tokens;
  turn.text.reserve(static_cast<size_t>(n_ctx - static_cast<int64_t>(prompt.size())) * 8);
  Clock::time_point t_first = t_prefill;
  turn.stop = StopReason::kLimit;
  for (int i = 0; i < max_tokens; ++i) {
    if (*interrupt != 0) {
      turn.stop = StopReason::kInterrupt;
      break;
    }
    for (int32_t e : eog_ids_) logits_[e] = -std::numeric_limits<float>::infinity();
    const int32_t id = sampler_.Sample(logits_, history_);
    if (i == 0) t_first = Clock::now();
    ++turn.generated;
    history_.push_back(id);
    if (tok.IsEog(id)) {
      turn.stop = StopReason::kEog;
      break;
    }
    const std::string piece = tok.Piece(id);
    turn.text += piece;
    on_text(piece);
    if (i + 1 == max_tokens) break;
    const int64_t pos = static_cast<int64_t>(history_.size()) - 1;
    if (pos >= n_ctx) {
      turn.stop = StopReason::kContextFull;
      break;
    }
    TANDEM_RETURN_IF_ERROR(engine_.executor().Forward(std::span<const int32_t>(&id, 1), pos, 1, logits_.data()));
    kv_.push_back(id);
  }
  const auto t_end = Clock::now();
  turn.ttft_ms = Ms(t_first - t0);
  turn.decode_ms = turn.generated > 0 ? Ms(t_end - t_first) : 0;
  turn.n_decoded = std::max(0, turn.generated - 1);
  messages_.push_back({{"role", "assistant"}, {"content", turn.text}});
  return turn;
}

}  // namespace tandem::cli

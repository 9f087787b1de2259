#include "tools/serve_slot.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/status.h"

namespace tandem::serve {
namespace {

double Ms(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

Slot::Slot(const Engine& engine, int seq) : engine_(engine), seq_(seq) {
  logits_.resize(static_cast<size_t>(engine.config().n_vocab));
  history_.reserve(static_cast<size_t>(engine.n_ctx()) + 1);
  for (int32_t id = 0; id < engine.config().n_vocab; ++id) {
    if (engine.tokenizer().IsEog(id)) eog_ids_.push_back(id);
  }
}

void Slot::Start(std::shared_ptr<GenerationJob> job) {
  job_ = std::move(job);
  const GenerationParams& p = job_->params();
  const Tokenizer& tok = engine_.tokenizer();
  t_start_ = Clock::now();
  timings_ = SlotTimings{.prompt_tokens = static_cast<int>(p.prompt.size())};
  fed_ = 0;
  generated_ = 0;
  finish_ = FinishReason::kLength;
  history_.assign(p.prompt.begin(), p.prompt.end());  // within the capacity reserved when it fits the context
  sampler_.emplace(p.sampling, static_cast<int>(logits_.size()));
  text_.emplace(p.stops, static_cast<size_t>(p.max_tokens) * 8);
  // Generating from BOS alone: SentencePiece's first piece carries the space the encoder would have prefixed.
  strip_leading_space_ = p.prompt.size() == 1 && p.prompt[0] == tok.bos_id() && tok.add_space_prefix();
  if (p.prompt.empty() || static_cast<int64_t>(p.prompt.size()) > engine_.n_ctx()) {  // checked before queueing
    Finish(InvalidArgument("the prompt has ", p.prompt.size(), " tokens; the context holds ", engine_.n_ctx()));
  }
}

std::span<const int32_t> Slot::NextInput(int64_t max_tokens, int64_t* pos0, bool* wants_logits) const {
  if (job_ == nullptr || max_tokens < 1) return {};
  const size_t prompt = job_->params().prompt.size();
  *pos0 = static_cast<int64_t>(fed_);
  if (fed_ < prompt) {
    const size_t len = std::min<size_t>(static_cast<size_t>(max_tokens), prompt - fed_);
    *wants_logits = fed_ + len == prompt;
    return std::span<const int32_t>(history_).subspan(fed_, len);
  }
  *wants_logits = true;  // decoding: the token sampled last
  return std::span<const int32_t>(history_).subspan(fed_, 1);
}

void Slot::Consumed(int64_t n) {
  fed_ += static_cast<size_t>(n);
  kv_used_ = static_cast<int64_t>(fed_);
}

bool Slot::OnLogits(std::span<const float> logits) {
  const GenerationParams& p = job_->params();
  const Tokenizer& tok = engine_.tokenizer();
  if (generated_ >= p.max_tokens) {  // max_tokens 0: the prompt pass only
    Finish(absl::OkStatus());
    return true;
  }
  std::copy(logits.begin(), logits.end(), logits_.begin());
  if (p.ignore_eos) {
    for (int32_t e : eog_ids_) logits_[e] = -std::numeric_limits<float>::infinity();
  }
  const int32_t id = sampler_->Sample(logits_, history_);
  if (generated_ == 0) {
    t_first_ = Clock::now();
    timings_.prefill_ms = Ms(t_first_ - t_start_);
  }
  ++generated_;
  history_.push_back(id);
  if (tok.IsEog(id)) {
    finish_ = FinishReason::kStop;
    Finish(absl::OkStatus());
    return true;
  }
  std::string piece = tok.Piece(id);
  if (generated_ == 1 && strip_leading_space_ && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  const bool stopped = text_->Append(piece);
  job_->Emit(text_->TakeReady());
  if (stopped) finish_ = FinishReason::kStop;
  // Ends at a stop string, at max_tokens, or when the context is full ("length"): the sampled token would need
  // position history_.size() - 1, past the last one.
  if (stopped || generated_ >= p.max_tokens || static_cast<int64_t>(history_.size()) - 1 >= engine_.n_ctx()) {
    Finish(absl::OkStatus());
    return true;
  }
  return false;
}

void Slot::Abort(absl::Status status) {
  if (job_ != nullptr) Finish(std::move(status));
}

void Slot::Finish(absl::Status status) {
  job_->Emit(text_->TakeReady(/*all=*/true));
  timings_.generated_tokens = generated_;
  timings_.n_decoded = std::max(0, generated_ - 1);
  timings_.decode_ms = generated_ > 0 ? Ms(Clock::now() - t_first_) : 0;
  ended_ = SlotEnd{.job = std::move(job_),
                   .outcome = {.status = std::move(status), .finish = finish_,
                               .usage = {.prompt_tokens = timings_.prompt_tokens, .completion_tokens = generated_}},
                   .timings = timings_};
  job_ = nullptr;
  kv_used_ = 0;
}

std::optional<SlotEnd> Slot::TakeEnd() {
  std::optional<SlotEnd> end = std::move(ended_);
  ended_.reset();
  return end;
}

}  // namespace tandem::serve

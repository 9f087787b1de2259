#include "tools/serve_slot.h"

#include <chrono>
#include <limits>
#include <string>

#include "core/status.h"
#include "tools/serve_text.h"

namespace tandem::serve {
namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

Slot::Slot(Engine& engine) : engine_(engine) {
  logits_.resize(static_cast<size_t>(engine.config().n_vocab));
  history_.reserve(static_cast<size_t>(engine.n_ctx()) + 1);
  for (int32_t id = 0; id < engine.config().n_vocab; ++id) {
    if (engine.tokenizer().IsEog(id)) eog_ids_.push_back(id);
  }
}

GenerationOutcome Slot::Run(GenerationJob& job, const std::atomic<bool>& stopping, SlotTimings* timings) {
  const GenerationParams& p = job.params();
  const Tokenizer& tok = engine_.tokenizer();
  GenerationOutcome out;
  out.usage.prompt_tokens = static_cast<int>(p.prompt.size());
  *timings = SlotTimings{.prompt_tokens = out.usage.prompt_tokens};
  if (p.prompt.empty() || static_cast<int64_t>(p.prompt.size()) > engine_.n_ctx()) {  // checked before queueing
    out.status = InvalidArgument("the prompt has ", p.prompt.size(), " tokens; the context holds ", engine_.n_ctx());
    return out;
  }

  const auto t0 = Clock::now();
  kv_used_ = static_cast<int64_t>(p.prompt.size());
  if (absl::Status st = engine_.Prefill(p.prompt, 0, false, logits_.data()); !st.ok()) {
    kv_used_ = 0;
    out.status = st;
    return out;
  }
  const auto t_prefill = Clock::now();
  timings->prefill_ms = Ms(t_prefill - t0);

  history_.assign(p.prompt.begin(), p.prompt.end());  // within the capacity reserved: no allocation
  Sampler sampler(p.sampling, static_cast<int>(logits_.size()));
  CompletionText text(p.stops, static_cast<size_t>(p.max_tokens) * 8);
  // Generating from BOS alone: SentencePiece's first piece carries the space the encoder would have prefixed.
  const bool strip_leading_space = p.prompt.size() == 1 && p.prompt[0] == tok.bos_id() && tok.add_space_prefix();
  Clock::time_point t_first = t_prefill;
  out.finish = FinishReason::kLength;
  int generated = 0;
  for (int i = 0; i < p.max_tokens; ++i) {
    if (job.cancelled() || stopping.load(std::memory_order_relaxed)) {
      out.status = absl::CancelledError("the request was cancelled");
      break;
    }
    if (p.ignore_eos) {
      for (int32_t e : eog_ids_) logits_[e] = -std::numeric_limits<float>::infinity();
    }
    const int32_t id = sampler.Sample(logits_, history_);
    if (i == 0) t_first = Clock::now();
    ++generated;
    history_.push_back(id);
    if (tok.IsEog(id)) {
      out.finish = FinishReason::kStop;
      break;
    }
    std::string piece = tok.Piece(id);
    if (i == 0 && strip_leading_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    const bool stopped = text.Append(piece);
    job.Emit(text.TakeReady());
    if (stopped) {
      out.finish = FinishReason::kStop;
      break;
    }
    if (i + 1 == p.max_tokens) break;
    const int64_t pos = static_cast<int64_t>(history_.size()) - 1;
    if (pos >= engine_.n_ctx()) break;  // the context is full: "length"
    if (absl::Status st = engine_.executor().Forward(std::span<const int32_t>(&history_.back(), 1), pos, 1,
                                                     logits_.data());
        !st.ok()) {
      out.status = st;
      break;
    }
    kv_used_ = pos + 1;
  }
  job.Emit(text.TakeReady(/*all=*/true));
  const auto t_end = Clock::now();
  kv_used_ = 0;
  out.usage.completion_tokens = generated;
  timings->generated_tokens = generated;
  timings->n_decoded = std::max(0, generated - 1);
  timings->decode_ms = generated > 0 ? Ms(t_end - t_first) : 0;
  return out;
}

}  // namespace tandem::serve

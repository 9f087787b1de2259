// One KV sequence of the engine and the request generating into it, stepped by the worker (serve_worker.h): each
// engine step, a slot feeds either a chunk of its prompt or its last sampled token, and when the step gives it a
// logits row, samples from it. A slot samples and stops exactly as `tandem run` does, so that greedy output
// matches it token for token whatever else shares the step.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/sampler.h"
#include "graph/engine.h"
#include "tools/serve_job.h"
#include "tools/serve_text.h"

namespace tandem::serve {

// How a finished request went, for the metrics.
struct SlotTimings {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  double prefill_ms = 0;  // from the request's start to its first logits
  double decode_ms = 0;   // from the first generated token to the last
  int64_t n_decoded = 0;  // tokens decoded after the first (which came from the prompt pass)
};

// A request that ended and whose client has not been told yet: the worker counts it in the metrics first, so that
// a client reading /metrics after its reply finds its request there.
struct SlotEnd {
  std::shared_ptr<GenerationJob> job;
  GenerationOutcome outcome;
  SlotTimings timings;
};

class Slot {
 public:
  // Sizes the buffers for the engine's vocabulary and context once; `seq` is its KV sequence.
  Slot(const Engine& engine, int seq);

  int seq() const { return seq_; }
  bool idle() const { return job_ == nullptr; }
  // Its prompt is in the KV cache: it feeds one sampled token per step.
  bool decoding() const { return job_ != nullptr && fed_ >= job_->params().prompt.size(); }
  // Takes a job (its prompt already checked against the context); it starts at position 0 of the sequence.
  void Start(std::shared_ptr<GenerationJob> job);

  // What the slot feeds the next step: the next chunk of its prompt, at most `max_tokens` of it, or its last
  // token; empty when it feeds nothing (idle). `*pos0` is the first position; `*wants_logits` says whether the
  // step must return the logits of the chunk's last row.
  std::span<const int32_t> NextInput(int64_t max_tokens, int64_t* pos0, bool* wants_logits) const;
  // The step ran the `n` tokens NextInput offered (n may be fewer when the worker shortened the chunk).
  void Consumed(int64_t n);
  // The logits of the last row fed: samples the next token and emits the text it completes. Returns true when the
  // request ended (the slot is idle again and TakeEnd holds it).
  bool OnLogits(std::span<const float> logits);
  // Ends the running request with `status` (the client went away, the server stops, the step failed).
  void Abort(absl::Status status);
  // Whether the running request's client went away.
  bool cancelled() const { return job_ != nullptr && job_->cancelled(); }

  // Positions of the KV cache the running request holds (0 when idle); read from other threads.
  int64_t kv_cells_used() const { return kv_used_.load(std::memory_order_relaxed); }
  // The request that ended last, taken once; its client hears of it when the taker calls job->Finish(outcome).
  std::optional<SlotEnd> TakeEnd();

 private:
  using Clock = std::chrono::steady_clock;
  void Finish(absl::Status status);

  const Engine& engine_;
  const int seq_;
  std::vector<float> logits_;     // [n_vocab]: the row being sampled (masked, penalised in place)
  std::vector<int32_t> history_;  // prompt + generated; capacity n_ctx + 1
  std::vector<int32_t> eog_ids_;  // masked before every sample of a job with ignore_eos

  std::shared_ptr<GenerationJob> job_;
  std::optional<Sampler> sampler_;
  std::optional<CompletionText> text_;
  size_t fed_ = 0;           // tokens of history_ in the KV cache
  int generated_ = 0;
  bool strip_leading_space_ = false;
  FinishReason finish_ = FinishReason::kLength;
  Clock::time_point t_start_, t_first_;
  SlotTimings timings_;
  std::optional<SlotEnd> ended_;
  std::atomic<int64_t> kv_used_{0};
};

}  // namespace tandem::serve

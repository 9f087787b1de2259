// One sequence of the engine's KV cache and what generating into it needs: the logits row, the token history,
// the sampler. The worker hands a slot one job at a time. Today the engine has one KV sequence, so there is one
// slot, and it starts every job at position 0; with several sequences, each slot would own one and the worker
// would step them together.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "graph/engine.h"
#include "tools/serve_job.h"

namespace tandem::serve {

// How the last job went, for the metrics.
struct SlotTimings {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  double prefill_ms = 0;
  double decode_ms = 0;   // from the first generated token to the last
  int64_t n_decoded = 0;  // tokens decoded after the first (which came from the prompt pass)
};

class Slot {
 public:
  // Sizes the buffers for the engine's vocabulary and context once.
  explicit Slot(Engine& engine);

  // Prefills the job's prompt from position 0 and generates until an end-of-generation token, a stop string,
  // max_tokens, the end of the context, a cancelled job or `stopping`; emits the text as it becomes final. Exactly
  // as `tandem run` does, so that greedy output matches it token for token.
  GenerationOutcome Run(GenerationJob& job, const std::atomic<bool>& stopping, SlotTimings* timings);

  // Positions of the KV cache the running job holds (0 when idle).
  int64_t kv_cells_used() const { return kv_used_.load(std::memory_order_relaxed); }

 private:
  Engine& engine_;
  std::vector<float> logits_;     // [n_vocab]
  std::vector<int32_t> history_;  // prompt + generated; capacity n_ctx + 1
  std::vector<int32_t> eog_ids_;  // masked before every sample of a job with ignore_eos
  std::atomic<int64_t> kv_used_{0};
};

}  // namespace tandem::serve

// One generation request on its way through the server: what to generate, and the channel its text comes back
// on. The HTTP thread that answers the client waits on it; the worker that runs the engine fills it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core/sampler.h"
#include "tools/serve_types.h"

namespace tandem::serve {

// Resolved against the model before the job is queued: tokens, a token budget that fits the context, a seed.
struct GenerationParams {
  std::vector<int32_t> prompt;
  int max_tokens = 0;
  SamplerOptions sampling;
  std::vector<std::string> stops;
  bool ignore_eos = false;  // end-of-generation tokens are never sampled
};

struct GenerationOutcome {
  absl::Status status;  // not OK: the engine failed, or the server stopped first (kCancelled / kUnavailable)
  FinishReason finish = FinishReason::kLength;
  Usage usage;
};

class GenerationJob {
 public:
  explicit GenerationJob(GenerationParams params);
  const GenerationParams& params() const { return params_; }

  // HTTP side. Blocks until there is new text or the job finished, and appends the new text to *text. Returns
  // false once the job has finished and all of its text has been taken; outcome() is final then.
  bool Next(std::string* text);
  const GenerationOutcome& outcome() const { return outcome_; }
  // The client went away: the worker stops at its next token, or skips the job if it has not started it.
  void Cancel() { cancelled_ = true; }

  // Worker side.
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  void Emit(std::string_view text);
  void Finish(GenerationOutcome outcome);

 private:
  const GenerationParams params_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_;  // text emitted and not yet taken; keeps its capacity, so Emit seldom allocates
  bool finished_ = false;
  GenerationOutcome outcome_;
};

}  // namespace tandem::serve

// The generation worker: one thread that opens the engine (after the server is listening, so /health can say
// "loading"), owns it, and runs queued jobs on its slots, one KV sequence each, with continuous batching: every
// engine step carries one decode token of each generating slot and chunks of the prompts still being read, so
// that the MoE layers route them together. The queue is bounded; a full queue refuses at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "core/chat_template.h"
#include "graph/engine.h"
#include "tools/serve_job.h"
#include "tools/serve_metrics.h"
#include "tools/serve_slot.h"

namespace tandem::serve {

struct WorkerOptions {
  EngineOptions engine;
  int n_slots = 1;    // sequences generated at once, each with its own KV cache of the engine's context
  int max_queue = 8;  // jobs waiting for a slot before Submit refuses
  std::string chat_template;  // --chat-template: NAME or FILE; empty: the model's own, if it has one
};

class GenerationWorker {
 public:
  enum class State { kLoading, kReady, kFailed };

  explicit GenerationWorker(WorkerOptions opts);
  // Starts the thread, which opens the engine. `on_load_done` runs on that thread once loading finished, either
  // way (state() says which). Until then the state is kLoading.
  void Start(std::function<void()> on_load_done);
  ~GenerationWorker();

  State state() const { return state_.load(std::memory_order_acquire); }
  absl::Status load_status() const;  // why loading failed
  // Valid once state() is kReady; the engine's tokenizer, file and config do not change after loading, so other
  // threads may read them (the executor is the worker's alone).
  const Engine& engine() const { return *engine_; }
  // The chat template, also fixed once loaded (rendering is const); null when the model has none and none was
  // named, and then chat_template_status() says why.
  const ChatTemplate* chat_template() const { return chat_template_ ? &*chat_template_ : nullptr; }
  const absl::Status& chat_template_status() const { return chat_template_status_; }

  // Queues a job. Unavailable while loading or stopping; ResourceExhausted when the queue is full.
  absl::Status Submit(std::shared_ptr<GenerationJob> job);
  // Stops at the running jobs' next step; every job not finished ends with status kUnavailable. Joins.
  void Stop();
  // Refuses new jobs (kUnavailable), finishes the running and queued ones, then stops. Joins.
  void Drain();

  WorkerMetrics Metrics() const;

 private:
  void Main(std::function<void()> on_load_done);
  // One engine step over the active slots; false when every slot is idle.
  bool Step();
  // A slot's request ended: its timings into the metrics, its place in the count of running jobs freed, and only
  // then its client told. `counted` is false for a request refused before it ran.
  void Ended(Slot& slot, bool counted = true);
  void FinishLeftovers();

  const WorkerOptions opts_;
  std::atomic<State> state_{State::kLoading};
  absl::Status load_status_;  // written before state_ leaves kLoading
  std::unique_ptr<Engine> engine_;
  std::optional<ChatTemplate> chat_template_;
  absl::Status chat_template_status_;
  std::vector<std::unique_ptr<Slot>> slots_;  // [n_slots], slot i owns KV sequence i
  // One step's batch, sized at load: tokens (n_batch), segments and their slots (n_slots), logits (n_slots rows:
  // one final prompt chunk per step at most, then the decode tokens).
  std::vector<int32_t> step_tokens_;
  std::vector<BatchSegment> step_segments_;
  std::vector<Slot*> step_slots_;
  std::vector<uint8_t> step_wants_logits_;
  std::vector<float> step_logits_;

  mutable std::mutex mu_;  // guards the queue, stopping_ and metrics_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<GenerationJob>> queue_;
  std::atomic<bool> stopping_{false};
  bool draining_ = false;
  int running_ = 0;
  WorkerMetrics metrics_;
  std::thread thread_;
};

}  // namespace tandem::serve

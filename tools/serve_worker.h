// The generation worker: one thread that opens the engine (after the server is listening, so /health can say
// "loading"), owns it, and runs queued jobs on its slots. The queue is bounded; a full queue refuses at once.
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
  int n_slots = 1;    // sequences generated at once; only 1 until the engine has several KV sequences
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
  // Stops at the running job's next token; every job not finished ends with status kUnavailable. Joins.
  void Stop();

  WorkerMetrics Metrics() const;

 private:
  void Main(std::function<void()> on_load_done);
  void Record(const SlotTimings& t);

  const WorkerOptions opts_;
  std::atomic<State> state_{State::kLoading};
  absl::Status load_status_;  // written before state_ leaves kLoading
  std::unique_ptr<Engine> engine_;
  std::optional<ChatTemplate> chat_template_;
  absl::Status chat_template_status_;
  std::unique_ptr<Slot> slot_;  // one today: see serve_slot.h

  mutable std::mutex mu_;  // guards the queue, stopping_ and metrics_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<GenerationJob>> queue_;
  std::atomic<bool> stopping_{false};
  int running_ = 0;
  WorkerMetrics metrics_;
  std::thread thread_;
};

}  // namespace tandem::serve

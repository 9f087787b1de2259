#include "tools/serve_worker.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tandem::serve {

GenerationWorker::GenerationWorker(WorkerOptions opts) : opts_(std::move(opts)) {
  TANDEM_CHECK(opts_.n_slots == 1);  // the flag parser refuses more until the engine has several sequences
}

void GenerationWorker::Start(std::function<void()> on_load_done) {
  TANDEM_CHECK(!thread_.joinable());
  thread_ = std::thread([this, done = std::move(on_load_done)]() mutable { Main(std::move(done)); });
}

GenerationWorker::~GenerationWorker() { Stop(); }

absl::Status GenerationWorker::load_status() const {
  if (state() == State::kLoading) return absl::UnavailableError("the model is loading");
  return load_status_;
}

absl::Status GenerationWorker::Submit(std::shared_ptr<GenerationJob> job) {
  if (state() != State::kReady) return absl::UnavailableError("the model is not loaded");
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("the server is stopping");
    // Jobs beyond the free slots wait, up to max_queue of them.
    if (queue_.size() + static_cast<size_t>(running_) >= static_cast<size_t>(opts_.max_queue + opts_.n_slots)) {
      return ResourceExhausted("the server is busy: ", running_, " requests are running and ", queue_.size(),
                               " waiting (--max-queue ", opts_.max_queue, ")");
    }
    queue_.push_back(std::move(job));
    metrics_.queue_depth = static_cast<int>(queue_.size());
  }
  cv_.notify_one();
  return absl::OkStatus();
}

void GenerationWorker::Stop() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::deque<std::shared_ptr<GenerationJob>> left;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    left.swap(queue_);
    metrics_.queue_depth = 0;
  }
  for (const std::shared_ptr<GenerationJob>& job : left) {
    job->Finish(GenerationOutcome{.status = absl::UnavailableError("the server is stopping")});
  }
}

WorkerMetrics GenerationWorker::Metrics() const {
  const std::lock_guard<std::mutex> lock(mu_);
  WorkerMetrics m = metrics_;
  m.running = running_;
  if (slot_ != nullptr) m.kv_cells_used = slot_->kv_cells_used();
  return m;
}

void GenerationWorker::Record(const SlotTimings& t) {
  const std::lock_guard<std::mutex> lock(mu_);
  metrics_.prompt_tokens_total += static_cast<uint64_t>(t.prompt_tokens);
  metrics_.generated_tokens_total += static_cast<uint64_t>(t.generated_tokens);
  if (t.prompt_tokens > 0 && t.prefill_ms > 0) metrics_.last_prefill_tps = t.prompt_tokens / (t.prefill_ms / 1e3);
  if (t.n_decoded > 0 && t.decode_ms > 0) metrics_.last_decode_tps = t.n_decoded / (t.decode_ms / 1e3);
  // The executor's counters are read here, on the thread that runs it, never from an HTTP thread.
  if (metrics_.vram_bytes) {
    const ExecutorStats& s = engine_->executor().stats();
    metrics_.vram_bytes = s.peak_vram_bytes;
    metrics_.pcie_bytes_prefill = s.pcie_bytes_prefill;
    metrics_.pcie_bytes_decode = s.pcie_bytes_decode;
  }
}

void GenerationWorker::Main(std::function<void()> on_load_done) {
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(opts_.engine);
  if (!engine.ok()) {
    load_status_ = engine.status();
    state_.store(State::kFailed, std::memory_order_release);
    if (on_load_done) on_load_done();
    return;
  }
  engine_ = *std::move(engine);
  // A template the flag names must load; without the flag, a model with none still serves completions.
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::ForModel(engine_->file(), engine_->tokenizer(), opts_.chat_template);
  if (tmpl.ok()) {
    chat_template_ = *std::move(tmpl);
  } else if (!opts_.chat_template.empty()) {
    load_status_ = tmpl.status();
    state_.store(State::kFailed, std::memory_order_release);
    if (on_load_done) on_load_done();
    return;
  } else {
    chat_template_status_ = tmpl.status();
  }
  {
    const std::lock_guard<std::mutex> lock(mu_);
    slot_ = std::make_unique<Slot>(*engine_);
    metrics_.loaded = true;
    metrics_.kv_cells_total = static_cast<int64_t>(engine_->n_ctx()) * opts_.n_slots;
    const std::vector<MemoryAccount>& accounts = engine_->plan().device_accounts;
    const bool accelerated =  // device 0 is the host CPU; an accelerator the plan leaves empty is closed
        std::any_of(accounts.begin() + std::min<size_t>(1, accounts.size()), accounts.end(),
                    [](const MemoryAccount& a) { return a.total() > 0; });
    if (accelerated) {
      const ExecutorStats& s = engine_->executor().stats();
      metrics_.vram_bytes = s.peak_vram_bytes;
      metrics_.pcie_bytes_prefill = s.pcie_bytes_prefill;
      metrics_.pcie_bytes_decode = s.pcie_bytes_decode;
    }
  }
  state_.store(State::kReady, std::memory_order_release);
  if (on_load_done) on_load_done();

  for (;;) {
    std::shared_ptr<GenerationJob> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) break;
      job = std::move(queue_.front());
      queue_.pop_front();
      metrics_.queue_depth = static_cast<int>(queue_.size());
      ++running_;
    }
    GenerationOutcome outcome;
    SlotTimings timings;
    if (job->cancelled()) {
      outcome.status = absl::CancelledError("the client went away before the request started");
    } else {
      outcome = slot_->Run(*job, stopping_, &timings);
      Record(timings);
    }
    {
      const std::lock_guard<std::mutex> lock(mu_);
      --running_;
    }
    if (stopping_ && absl::IsCancelled(outcome.status)) outcome.status = absl::UnavailableError("the server is stopping");
    job->Finish(std::move(outcome));
  }
}

}  // namespace tandem::serve

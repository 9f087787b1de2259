#include "tools/serve_worker.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tandem::serve {

GenerationWorker::GenerationWorker(WorkerOptions opts) : opts_(std::move(opts)) {
  TANDEM_CHECK(opts_.n_slots >= 1);
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
    if (stopping_ || draining_) return absl::UnavailableError("the server is stopping");
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
  FinishLeftovers();
}

void GenerationWorker::Drain() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  FinishLeftovers();  // none, unless loading failed
}

void GenerationWorker::FinishLeftovers() {
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
  for (const std::unique_ptr<Slot>& slot : slots_) m.kv_cells_used += slot->kv_cells_used();
  return m;
}

void GenerationWorker::Ended(Slot& slot, bool counted) {
  std::optional<SlotEnd> end = slot.TakeEnd();
  if (!end) return;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    --running_;
    if (counted) {
      const SlotTimings& t = end->timings;
      metrics_.prompt_tokens_total += static_cast<uint64_t>(t.prompt_tokens);
      metrics_.generated_tokens_total += static_cast<uint64_t>(t.generated_tokens);
      if (t.prompt_tokens > 0 && t.prefill_ms > 0) metrics_.last_prefill_tps = t.prompt_tokens / (t.prefill_ms / 1e3);
      if (t.n_decoded > 0 && t.decode_ms > 0) metrics_.last_decode_tps = t.n_decoded / (t.decode_ms / 1e3);
    }
    // The executor's counters are read here, on the thread that runs it, never from an HTTP thread.
    if (metrics_.vram_bytes) {
      const ExecutorStats& s = engine_->executor().stats();
      metrics_.vram_bytes = s.peak_vram_bytes;
      metrics_.pcie_bytes_prefill = s.pcie_bytes_prefill;
      metrics_.pcie_bytes_decode = s.pcie_bytes_decode;
    }
  }
  end->job->Finish(std::move(end->outcome));
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
    for (int q = 0; q < opts_.n_slots; ++q) slots_.push_back(std::make_unique<Slot>(*engine_, q));
    step_tokens_.resize(static_cast<size_t>(engine_->n_batch()));
    step_segments_.resize(static_cast<size_t>(opts_.n_slots));
    step_slots_.resize(static_cast<size_t>(opts_.n_slots));
    step_wants_logits_.resize(static_cast<size_t>(opts_.n_slots));
    step_logits_.resize(static_cast<size_t>(opts_.n_slots) * engine_->config().n_vocab);
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
    std::vector<std::shared_ptr<GenerationJob>> gone;  // cancelled before they started
    std::vector<Slot*> refused;                        // refused at the start (a prompt the context cannot hold)
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || draining_ || !queue_.empty() || running_ > 0; });
      if (stopping_ || (draining_ && queue_.empty() && running_ == 0)) break;
      for (const std::unique_ptr<Slot>& slot : slots_) {  // free slots take the oldest waiting jobs
        while (slot->idle() && !queue_.empty()) {
          std::shared_ptr<GenerationJob> job = std::move(queue_.front());
          queue_.pop_front();
          if (job->cancelled()) {
            gone.push_back(std::move(job));
            continue;
          }
          ++running_;
          slot->Start(std::move(job));
          if (slot->idle()) {
            refused.push_back(slot.get());
            break;  // told below, outside the lock; the slot takes a job again next round
          }
        }
      }
      metrics_.queue_depth = static_cast<int>(queue_.size());
    }
    for (Slot* slot : refused) Ended(*slot, /*counted=*/false);
    for (const std::shared_ptr<GenerationJob>& job : gone) {
      job->Finish(GenerationOutcome{.status = absl::CancelledError("the client went away before the request started")});
    }
    Step();
  }
  // Stopped: the running requests end now.
  for (const std::unique_ptr<Slot>& slot : slots_) {
    if (slot->idle()) continue;
    slot->Abort(absl::UnavailableError("the server is stopping"));
    Ended(*slot);
  }
}

bool GenerationWorker::Step() {
  // A client that went away frees its slot before the step.
  for (const std::unique_ptr<Slot>& slot : slots_) {
    if (!slot->idle() && slot->cancelled()) {
      slot->Abort(absl::CancelledError("the request was cancelled"));
      Ended(*slot);
    }
  }
  // The batch: chunks of prompts that do not end in this step, then at most one that does, then one token of
  // every generating slot, so that the rows whose logits are needed come last and together.
  const int64_t n_batch = engine_->n_batch();
  int64_t n_decoding = 0;
  for (const std::unique_ptr<Slot>& slot : slots_) n_decoding += slot->decoding();
  int64_t budget = n_batch - n_decoding;  // prompt tokens this step can take
  size_t n_seg = 0;
  int64_t n_tok = 0;
  auto add = [&](Slot& slot, std::span<const int32_t> in, int64_t pos0, bool wants) {
    std::copy(in.begin(), in.end(), step_tokens_.begin() + n_tok);
    step_segments_[n_seg] = BatchSegment{.row0 = n_tok, .n_tok = static_cast<int64_t>(in.size()), .pos0 = pos0,
                                         .seq = slot.seq()};
    step_slots_[n_seg] = &slot;
    step_wants_logits_[n_seg] = wants;
    ++n_seg;
    n_tok += static_cast<int64_t>(in.size());
  };
  Slot* final_chunk = nullptr;
  int64_t final_len = 0;
  for (int pass = 0; pass < 3; ++pass) {  // 0: prompt chunks that do not end, 1: the one that does, 2: decodes
    for (const std::unique_ptr<Slot>& slot : slots_) {
      if (slot->idle()) continue;
      int64_t pos0 = 0;
      bool wants = false;
      const std::span<const int32_t> whole = slot->NextInput(n_batch, &pos0, &wants);
      if (pass == 2) {
        if (slot->decoding()) add(*slot, whole, pos0, true);
        continue;
      }
      if (slot->decoding()) continue;
      if (pass == 1) {
        if (slot.get() == final_chunk) add(*slot, whole.first(final_len), pos0, true);
        continue;
      }
      if (budget <= 0) continue;
      int64_t len = std::min<int64_t>(budget, static_cast<int64_t>(whole.size()));
      if (len == static_cast<int64_t>(whole.size()) && wants) {  // this chunk would end its prompt
        if (final_chunk == nullptr) {
          final_chunk = slot.get();
          final_len = len;
          budget -= len;
          continue;
        }
        if (--len == 0) continue;  // another prompt ends in this step: this one feeds all but its last token
      }
      add(*slot, whole.first(len), pos0, false);
      budget -= len;
    }
  }
  if (n_seg == 0) return false;
  int64_t first_logit_row = n_tok;
  for (size_t i = 0; i < n_seg; ++i) {
    if (step_wants_logits_[i]) {
      first_logit_row = step_segments_[i].row0 + step_segments_[i].n_tok - 1;
      break;
    }
  }
  const int64_t n_logit_rows = n_tok - first_logit_row;
  const absl::Status st =
      engine_->executor().Forward(std::span<const int32_t>(step_tokens_.data(), n_tok),
                                  std::span<const BatchSegment>(step_segments_.data(), n_seg), n_logit_rows,
                                  step_logits_.data());
  {
    const std::lock_guard<std::mutex> lock(mu_);
    ++metrics_.steps_total;
    metrics_.step_sequences_total += n_seg;
    metrics_.step_sequences_max = std::max(metrics_.step_sequences_max, static_cast<int>(n_seg));
  }
  const int n_vocab = engine_->config().n_vocab;
  for (size_t i = 0; i < n_seg; ++i) {
    Slot& slot = *step_slots_[i];
    if (!st.ok()) {
      slot.Abort(st);
      Ended(slot);
      continue;
    }
    slot.Consumed(step_segments_[i].n_tok);
    if (!step_wants_logits_[i]) continue;
    const int64_t row = step_segments_[i].row0 + step_segments_[i].n_tok - 1 - first_logit_row;
    if (slot.OnLogits(std::span<const float>(step_logits_.data() + row * n_vocab, n_vocab))) Ended(slot);
  }
  return true;
}

}  // namespace tandem::serve

#include "tools/serve_job.h"

#include <utility>

namespace tandem::serve {

GenerationJob::GenerationJob(GenerationParams params) : params_(std::move(params)) { pending_.reserve(256); }

bool GenerationJob::Next(std::string* text) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !pending_.empty() || finished_; });
  if (pending_.empty()) return false;
  text->append(pending_);
  pending_.clear();
  return true;
}

void GenerationJob::Emit(std::string_view text) {
  if (text.empty()) return;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    pending_.append(text.data(), text.size());
  }
  cv_.notify_all();
}

void GenerationJob::Finish(GenerationOutcome outcome) {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    outcome_ = std::move(outcome);
    finished_ = true;
  }
  cv_.notify_all();
}

}  // namespace tandem::serve

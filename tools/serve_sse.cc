#include "tools/serve_sse.h"

#include <utility>

#include "core/status.h"

namespace tandem::serve {

SseStream::SseStream(std::shared_ptr<GenerationJob> job, ResponseMeta meta, bool include_usage)
    : job_(std::move(job)), meta_(std::move(meta)), include_usage_(include_usage) {
  text_.reserve(256);
}

bool SseStream::Write(const Writer& write, const std::string& bytes) {
  if (write(bytes)) return true;
  job_->Cancel();
  return false;
}

bool SseStream::Pump(const Writer& write, bool* done) {
  *done = false;
  if (!opened_) {
    opened_ = true;
    if (meta_.endpoint == ApiEndpoint::kChatCompletions) {
      return Write(write, SseEvent(StreamChunk(meta_, ChunkContent{.role = true}, include_usage_)));
    }
  }
  text_.clear();
  if (job_->Next(&text_)) {
    return Write(write, SseEvent(StreamChunk(meta_, ChunkContent{.text = text_}, include_usage_)));
  }
  const GenerationOutcome& out = job_->outcome();
  std::string tail;
  if (out.status.ok()) {
    tail = SseEvent(StreamChunk(meta_, ChunkContent{.finish = out.finish}, include_usage_));
    if (include_usage_) tail += SseEvent(UsageChunk(meta_, out.usage));
  } else {
    tail = SseEvent(ErrorBody(ServerError(absl::IsUnavailable(out.status) ? 503 : 500, Message(out.status))));
  }
  tail += kSseDone;
  if (!Write(write, tail)) return false;
  *done = true;
  return true;
}

}  // namespace tandem::serve

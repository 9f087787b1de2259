// One streamed response as server-sent events: the chat stream's role chunk, a chunk per piece of final text as
// the worker produces it, the finish chunk, the usage chunk when asked, and [DONE]. An error after the stream
// has begun (the status line went out as 200) is an event of its own, as llama-server sends it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "tools/serve_job.h"
#include "tools/serve_response.h"

namespace tandem::serve {

class SseStream {
 public:
  // Writes bytes to the client; false when the client is gone.
  using Writer = std::function<bool(std::string_view)>;

  SseStream(std::shared_ptr<GenerationJob> job, ResponseMeta meta, bool include_usage);

  // Waits for the next text (or the end) and writes its events. Returns false when a write failed, and cancels
  // the job then; sets *done once the last event has been written.
  bool Pump(const Writer& write, bool* done);
  // The client went away: the worker drops the job.
  void Cancel() { job_->Cancel(); }

 private:
  bool Write(const Writer& write, const std::string& bytes);

  std::shared_ptr<GenerationJob> job_;
  ResponseMeta meta_;
  bool include_usage_;
  bool opened_ = false;
  std::string text_;  // the text taken from the job in one step; keeps its capacity
};

}  // namespace tandem::serve

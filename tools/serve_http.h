// The HTTP side of `tandem serve`: routes, the API key, body limits, OpenAI-shaped errors, streaming. Requests are
// parsed and tokenized on the HTTP threads; generation is the worker's.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tools/serve_worker.h"

namespace tandem::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;            // 0: any free port
  std::string api_key;        // empty: none asked for
  size_t max_body_bytes = size_t{4} << 20;
  std::string model_id;       // the id /v1/models lists and responses carry
  int n_threads = 16;         // HTTP threads; each waiting or streaming client holds one
};

class ApiServer {
 public:
  ApiServer(HttpOptions opts, GenerationWorker& worker);
  ~ApiServer();
  // Binds the listening socket and returns its port (the one picked when the option is 0).
  absl::StatusOr<int> Bind();
  // Answers requests until Stop(); call after Bind, on a thread of its own.
  void Serve();
  // Stops listening, after the responses still streaming have written their last events (stop the worker first,
  // so that they have them).
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::serve

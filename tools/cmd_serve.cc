// tandem serve: the OpenAI-compatible HTTP server. Flags per spec/cli.md; the parts are tools/serve_*.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "core/status.h"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/placement_request.h"
#include "tools/serve_flags.h"
#include "tools/serve_http.h"
#include "tools/serve_worker.h"

namespace tandem::cli {
namespace {

// A second Ctrl-C (or SIGTERM) while stopping: exit at once.
void ExitNow(int) { _exit(130); }

std::string UrlHost(const std::string& host) {
  return host.find(':') != std::string::npos ? Cat("[", host, "]") : host;  // an IPv6 address
}

}  // namespace

int CmdServe(std::span<const std::string> argv) {
  bool help = false;
  absl::StatusOr<ServeFlags> parsed = ParseServeFlags(argv, &help);
  if (!parsed.ok()) return Fail(parsed.status());
  if (help) {
    std::printf("%s%s", kServeUsage, PlacementFlagsHelp());
    return 0;
  }
  const ServeFlags& f = *parsed;
  WarnIfOverHardwareThreads(f.n_threads);
  absl::StatusOr<PlacementRequest> placement = ToPlacementRequest(f.placement);
  if (!placement.ok()) return Fail(placement.status());
  EngineOptions eo{.model_path = f.model, .device = f.placement.device, .placement = *placement, .n_ctx = f.n_ctx,
                   .n_batch = f.n_batch, .n_seq = f.parallel, .n_threads = f.n_threads, .numa = f.placement.numa, .kv_type = f.kv_type};
  if (!f.placement.routing.empty()) {
    absl::StatusOr<std::shared_ptr<const RoutingStats>> routing = LoadRoutingFlag(f.placement, f.model);
    if (!routing.ok()) return Fail(routing.status());
    eo.routing = *routing;
  }
  if (isatty(STDERR_FILENO)) eo.progress = ProgressBar("loading");

  // SIGINT and SIGTERM are taken by sigwait below, on this thread; every thread started from here on inherits
  // the mask, so none of them is interrupted by one. SIGUSR1 is the worker saying that loading finished.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up mid-stream is a failed write, not the end of the server

  const std::string model_id =
      f.alias.empty() ? std::filesystem::path(f.model).filename().string() : f.alias;
  serve::GenerationWorker worker(serve::WorkerOptions{
      .engine = eo, .n_slots = f.parallel, .max_queue = f.max_queue, .chat_template = f.chat_template});
  // Each client waiting in the queue or streaming holds an HTTP thread; the rest answer /health and /metrics.
  serve::ApiServer server(serve::HttpOptions{.host = f.host,
                                             .port = f.port,
                                             .api_key = f.api_key,
                                             .max_body_bytes = static_cast<size_t>(f.max_body_bytes),
                                             .model_id = model_id,
                                             .n_threads = std::max(16, 2 * (f.max_queue + f.parallel) + 4)},
                          worker);
  absl::StatusOr<int> port = server.Bind();
  if (!port.ok()) return Fail(port.status());
  std::printf("listening on http://%s:%d\n", UrlHost(f.host).c_str(), *port);
  std::fflush(stdout);
  std::thread http_thread([&server] { server.Serve(); });
  const pthread_t main_thread = pthread_self();
  worker.Start([main_thread] { pthread_kill(main_thread, SIGUSR1); });

  for (;;) {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig != SIGUSR1) break;
    if (worker.state() == serve::GenerationWorker::State::kFailed) {
      server.Stop();
      http_thread.join();
      worker.Stop();
      return Fail(worker.load_status());
    }
    std::fprintf(stderr, "loaded %s: context %d, chat template %s; serving\n", model_id.c_str(),
                 worker.engine().n_ctx(),
                 worker.chat_template() != nullptr ? worker.chat_template()->name().c_str() : "none");
    if (worker.chat_template() == nullptr) {
      std::fprintf(stderr, "warning: /v1/chat/completions is refused: %s\n",
                   Message(worker.chat_template_status()).c_str());
    }
  }

  struct sigaction now {};
  now.sa_handler = ExitNow;
  sigemptyset(&now.sa_mask);
  sigaction(SIGINT, &now, nullptr);
  sigaction(SIGTERM, &now, nullptr);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
  std::fprintf(stderr, "stopping\n");
  if (worker.state() == serve::GenerationWorker::State::kLoading) {
    // Opening a model cannot be interrupted, and nothing has been served: leave without waiting for it.
    server.Stop();
    http_thread.join();
    std::fflush(stderr);
    _exit(0);
  }
  // The worker first: it refuses new requests and finishes the running and queued ones, so every client gets its
  // whole answer (a second signal exits at once); then the HTTP threads, which no longer wait on anything.
  worker.Drain();
  server.Stop();
  http_thread.join();
  return 0;
}

}  // namespace tandem::cli

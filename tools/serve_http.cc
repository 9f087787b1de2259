#include "tools/serve_http.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>

#include "core/status.h"
#include "tools/serve_params.h"
#include "tools/serve_request.h"
#include "tools/serve_response.h"
#include "tools/serve_sse.h"

namespace tandem::serve {
namespace {

using json = ResponseJson;

// The routes, with llama-server's aliases without /v1 (clients configured with a bare base URL use them). `label`
// is the endpoint the metrics count them under.
struct Route {
  std::string_view path;
  std::string_view method;
  std::string_view label;
};
constexpr Route kRoutes[] = {
    {"/health", "GET", "/health"},
    {"/metrics", "GET", "/metrics"},
    {"/v1/models", "GET", "/v1/models"},
    {"/models", "GET", "/v1/models"},
    {"/v1/completions", "POST", "/v1/completions"},
    {"/completions", "POST", "/v1/completions"},
    {"/v1/chat/completions", "POST", "/v1/chat/completions"},
    {"/chat/completions", "POST", "/v1/chat/completions"},
};

const Route* FindRoute(std::string_view path) {
  for (const Route& r : kRoutes) {
    if (r.path == path) return &r;
  }
  return nullptr;
}

std::string_view EndpointLabel(std::string_view path) {
  const Route* r = FindRoute(path);
  return r != nullptr ? r->label : "other";
}

void SendJson(httplib::Response& res, int status, const ResponseJson& body) {
  res.status = status;
  res.set_content(Dump(body), "application/json");
}

void SendError(httplib::Response& res, const ApiError& e) { SendJson(res, e.status, ErrorBody(e)); }

// Compares in time that depends only on the lengths, so that the key cannot be guessed byte by byte by timing.
bool SameKey(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// A stream the server counts while it is open, so that stopping can let it write its last events first.
struct OpenStream {
  OpenStream(std::shared_ptr<GenerationJob> job, ResponseMeta meta, bool include_usage, std::atomic<int>& open)
      : sse(std::move(job), std::move(meta), include_usage), open(open) {
    ++open;
  }
  ~OpenStream() { --open; }
  OpenStream(const OpenStream&) = delete;
  OpenStream& operator=(const OpenStream&) = delete;
  SseStream sse;
  std::atomic<int>& open;
};

}  // namespace

struct ApiServer::Impl {
  HttpOptions opts;
  GenerationWorker& worker;
  RequestCounters counters;
  httplib::Server http;
  int64_t started = 0;  // Unix seconds, /v1/models' "created"
  // httplib's stop() does nothing before listen_after_bind has started: Stop() waits for that, or keeps Serve()
  // from starting.
  std::mutex serve_mu;
  bool stop_requested = false;
  bool serving = false;
  std::atomic<bool> serve_returned{false};
  std::atomic<int> open_streams{0};

  Impl(HttpOptions o, GenerationWorker& w) : opts(std::move(o)), worker(w) {
    started = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  }

  void Install();
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;
  bool Ready(httplib::Response& res) const;
  void Health(httplib::Response& res) const;
  void Models(httplib::Response& res) const;
  void Metrics(httplib::Response& res) const;
  void Completion(ApiEndpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void Fallback(const httplib::Request& req, httplib::Response& res) const;
};

bool ApiServer::Impl::Authorized(const httplib::Request& req, httplib::Response& res) const {
  if (opts.api_key.empty()) return true;
  const std::string header = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "bearer ";  // the scheme's case does not matter (RFC 9110)
  const bool bearer = header.size() > kBearer.size() &&
                      std::equal(kBearer.begin(), kBearer.end(), header.begin(),
                                 [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); });
  if (bearer && SameKey(std::string_view(header).substr(kBearer.size()), opts.api_key)) return true;
  SendError(res, ApiError{.status = 401,
                          .message = header.empty() ? "You didn't provide an API key: send it as 'Authorization: "
                                                      "Bearer KEY' (the server runs with --api-key)."
                                                    : "Incorrect API key provided.",
                          .code = "invalid_api_key"});
  res.set_header("WWW-Authenticate", "Bearer");
  return false;
}

bool ApiServer::Impl::Ready(httplib::Response& res) const {
  switch (worker.state()) {
    case GenerationWorker::State::kReady: return true;
    case GenerationWorker::State::kLoading:
      SendError(res, ServerError(503, "the model is loading", "model_loading"));
      res.set_header("Retry-After", "1");
      return false;
    case GenerationWorker::State::kFailed: break;
  }
  SendError(res, ServerError(503, Cat("the model failed to load: ", Message(worker.load_status()))));
  return false;
}

void ApiServer::Impl::Completion(ApiEndpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  if (!Ready(res)) return;
  CompletionRequest cr;
  if (std::optional<ApiError> e = ParseCompletionRequest(req.body, endpoint, &cr)) return SendError(res, *e);
  GenerationParams params;
  const ServedModel model{.tokenizer = worker.engine().tokenizer(),
                          .n_ctx = worker.engine().n_ctx(),
                          .chat_template = worker.chat_template(),
                          .no_chat_template = worker.chat_template_status()};
  if (std::optional<ApiError> e = ResolveRequest(cr, model, &params)) return SendError(res, *e);
  auto job = std::make_shared<GenerationJob>(std::move(params));
  if (absl::Status st = worker.Submit(job); !st.ok()) {
    res.set_header("Retry-After", "1");
    return SendError(res, ServerError(503, Message(st), absl::IsResourceExhausted(st) ? "queue_full" : ""));
  }
  ResponseMeta meta = NewResponseMeta(endpoint, opts.model_id);
  if (cr.stream) {
    auto stream = std::make_shared<OpenStream>(job, std::move(meta), cr.include_usage, open_streams);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [stream](size_t, httplib::DataSink& sink) {
          bool done = false;
          const bool ok = stream->sse.Pump([&sink](std::string_view s) { return sink.write(s.data(), s.size()); },
                                           &done);
          if (ok && done) sink.done();
          return ok;
        },
        [stream](bool) { stream->sse.Cancel(); });  // a finished job ignores it; a running one stops
    return;
  }
  std::string text;
  while (job->Next(&text)) {
  }
  const GenerationOutcome& out = job->outcome();
  if (!out.status.ok()) {
    return SendError(res, ServerError(absl::IsUnavailable(out.status) ? 503 : 500, Message(out.status)));
  }
  SendJson(res, 200, CompletionBody(meta, text, out.finish, out.usage));
}

void ApiServer::Impl::Health(httplib::Response& res) const {
  switch (worker.state()) {
    case GenerationWorker::State::kLoading: return SendJson(res, 503, {{"status", "loading"}});
    case GenerationWorker::State::kFailed: return SendJson(res, 503, {{"status", "error"}});
    case GenerationWorker::State::kReady: break;
  }
  const WorkerMetrics m = worker.Metrics();
  SendJson(res, 200, {{"status", m.running > 0 || m.queue_depth > 0 ? "busy" : "ok"}});
}

void ApiServer::Impl::Models(httplib::Response& res) const {
  if (!Ready(res)) return;
  const Engine& e = worker.engine();
  json model = {{"id", opts.model_id},
                {"object", "model"},
                {"created", started},
                {"owned_by", "tandem"},
                {"meta",
                 {{"arch", e.config().arch},
                  {"name", e.config().name},
                  {"n_vocab", e.config().n_vocab},
                  {"n_ctx", e.n_ctx()},
                  {"n_ctx_train", e.config().n_ctx_train}}}};
  SendJson(res, 200, {{"object", "list"}, {"data", json::array({std::move(model)})}});
}

void ApiServer::Impl::Metrics(httplib::Response& res) const {
  res.status = 200;
  res.set_content(RenderPrometheus(counters.Snapshot(), worker.Metrics(), ResidentBytes()),
                  "text/plain; version=0.0.4; charset=utf-8");
}

// A path no route has (404), or a route asked with the wrong method (405, with the one it takes).
void ApiServer::Impl::Fallback(const httplib::Request& req, httplib::Response& res) const {
  if (const Route* r = FindRoute(req.path)) {
    res.set_header("Allow", std::string(r->method));
    return SendError(res, ApiError{.status = 405,
                                   .message = Cat(req.method, " is not allowed on ", req.path, "; use ", r->method),
                                   .code = "method_not_allowed"});
  }
  SendError(res, ApiError{.status = 404, .message = Cat("Invalid URL (", req.method, " ", req.path, ")"),
                          .code = "unknown_url"});
}

void ApiServer::Impl::Install() {
  using httplib::Request;
  using httplib::Response;
  // Every route but /health asks for the key (as llama-server does, so that health checks need no secret).
  auto keyed = [this](auto handler) {
    return [this, handler](const Request& req, Response& res) {
      if (Authorized(req, res)) handler(req, res);
    };
  };
  http.Get("/health", [this](const Request&, Response& res) { Health(res); });
  for (const Route& r : kRoutes) {
    const std::string path(r.path);
    if (r.label == "/metrics") {
      http.Get(path, keyed([this](const Request&, Response& res) { Metrics(res); }));
    } else if (r.label == "/v1/models") {
      http.Get(path, keyed([this](const Request&, Response& res) { Models(res); }));
    } else if (r.label == "/v1/completions") {
      http.Post(path, keyed([this](const Request& req, Response& res) {
        Completion(ApiEndpoint::kCompletions, req, res);
      }));
    } else if (r.label == "/v1/chat/completions") {
      http.Post(path, keyed([this](const Request& req, Response& res) {
        Completion(ApiEndpoint::kChatCompletions, req, res);
      }));
    }
  }
  // Fallbacks as routes (not a pre-routing check) so that the body is read first and the connection stays in step.
  const auto fallback = [this](const Request& req, Response& res) { Fallback(req, res); };
  http.Get(".*", fallback);
  http.Post(".*", fallback);
  http.Put(".*", fallback);
  http.Patch(".*", fallback);
  http.Delete(".*", fallback);
  http.Options(".*", fallback);

  // What httplib answers by itself (a malformed request 400, a body over the limit 413, a URI too long 414) gets
  // OpenAI's error shape too; handlers' own errors have their bodies already.
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const Request& req, Response& res) {
    if (!res.body.empty() || res.content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    std::string message;
    switch (res.status) {
      case 400: message = "malformed HTTP request"; break;
      case 413: message = Cat("the request body is over the limit of ", opts.max_body_bytes, " bytes (--max-body)"); break;
      case 414: message = "the request URI is too long"; break;
      default: message = Cat("HTTP status ", res.status);
    }
    SendError(res, res.status >= 500 ? ServerError(res.status, message)
                                     : ApiError{.status = res.status, .message = message});
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const Request&, Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    SendError(res, ServerError(500, Cat("internal error: ", what)));
  });
  // Counted just before the response goes out, so that a client that has its answer sees it counted.
  http.set_post_routing_handler([this](const Request& req, Response& res) {
    counters.Count(EndpointLabel(req.path), res.status);
  });
  http.set_logger([](const Request& req, const Response& res) {
    std::fprintf(stderr, "%s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
  });
  http.set_payload_max_length(opts.max_body_bytes);
  const int n_threads = opts.n_threads;
  http.new_task_queue = [n_threads] { return new httplib::ThreadPool(static_cast<size_t>(n_threads)); };
}

ApiServer::ApiServer(HttpOptions opts, GenerationWorker& worker)
    : impl_(std::make_unique<Impl>(std::move(opts), worker)) {
  impl_->Install();
}

ApiServer::~ApiServer() = default;

absl::StatusOr<int> ApiServer::Bind() {
  const HttpOptions& o = impl_->opts;
  if (o.port == 0) {
    const int port = impl_->http.bind_to_any_port(o.host);
    if (port < 0) return absl::UnavailableError(Cat("cannot listen on ", o.host, " (any port)"));
    return port;
  }
  if (!impl_->http.bind_to_port(o.host, o.port)) {
    return absl::UnavailableError(Cat("cannot listen on ", o.host, ":", o.port, " (in use, or not an address here)"));
  }
  return o.port;
}

void ApiServer::Serve() {
  {
    const std::lock_guard<std::mutex> lock(impl_->serve_mu);
    if (impl_->stop_requested) return;
    impl_->serving = true;
  }
  impl_->http.listen_after_bind();
  impl_->serve_returned = true;
}

void ApiServer::Stop() {
  {
    const std::lock_guard<std::mutex> lock(impl_->serve_mu);
    impl_->stop_requested = true;
    if (!impl_->serving) return;
  }
  while (!impl_->http.is_running() && !impl_->serve_returned) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Streams stop being pumped once the server stops: let those still open write their last events. Their jobs
  // have ended (the worker stops first), so only a client that does not read holds one, up to the write timeout.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (impl_->open_streams > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->http.stop();
}

}  // namespace tandem::serve

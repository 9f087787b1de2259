// `tandem serve` under conditions a well-behaved client never makes: no or wrong API key, a full queue, garbage
// on the socket, huge headers, signals mid-stream; and its flags' errors. serve_test.cc has the API itself.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/tools/serve_process.h"

namespace tandem {
namespace {

using nlohmann::json;
using test::JsonReply;
using test::PostJson;
using test::ServeProcess;

std::string Model() { return test::ModelPath("stories260K.gguf"); }

TEST(ServeKey, MissingOrWrongKeyIs401) {
  ServeProcess server({"-m", Model(), "-t", "1", "-c", "128", "--api-key", "sesame"});
  ASSERT_TRUE(server.ok());
  auto c = server.Client();
  const json body = {{"prompt", "Once"}, {"max_tokens", 2}};
  const JsonReply none = PostJson(*c, "/v1/completions", body);
  EXPECT_EQ(none.status, 401);
  test::ExpectErrorShape(none);
  EXPECT_EQ(none.body["error"]["code"], "invalid_api_key");
  EXPECT_EQ(PostJson(*c, "/v1/completions", body, {{"Authorization", "Bearer open"}}).status, 401);
  EXPECT_EQ(PostJson(*c, "/v1/completions", body, {{"Authorization", "sesame"}}).status, 401);
  EXPECT_EQ(PostJson(*c, "/v1/completions", body, {{"Authorization", "Bearer sesame2"}}).status, 401);
  const JsonReply right = PostJson(*c, "/v1/completions", body, {{"Authorization", "Bearer sesame"}});
  EXPECT_EQ(right.status, 200) << right.raw;
  EXPECT_EQ(PostJson(*c, "/v1/completions", body, {{"Authorization", "bearer sesame"}}).status, 200);
  EXPECT_EQ(PostJson(*c, "/v1/completions", body, {{"Authorization", "Bearer Sesame"}}).status, 401);
  // /models and /metrics are keyed too; /health stays open for health checks.
  httplib::Result models = c->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  httplib::Result keyed = c->Get("/v1/models", {{"Authorization", "Bearer sesame"}});
  ASSERT_TRUE(keyed);
  EXPECT_EQ(keyed->status, 200);
  httplib::Result metrics = c->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 401);
  httplib::Result health = c->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

// Streams a long completion and calls `while_running` once the first event has arrived (the request is
// generating); then reads the rest, or with `hang_up` closes the connection. Returns what was read.
std::string StreamWhile(ServeProcess& server, const std::function<void()>& while_running, bool hang_up = false) {
  auto c = server.Client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = json({{"prompt", "Once upon a time"}, {"ignore_eos", true}, {"temperature", 0}, {"stream", true}}).dump();
  std::string got;
  bool called = false;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    got.append(data, n);
    if (!called) {
      called = true;
      while_running();
      return !hang_up;
    }
    return true;
  };
  httplib::Result r = c->send(req);
  if (!hang_up) {
    EXPECT_TRUE(r) << (r ? "" : httplib::to_string(r.error()));
  }
  return got;
}

// With --max-queue 0 a request that arrives while another is generating is refused at once with 503. The first
// is still running when its first event has arrived, unless it already finished all of its tokens: then the
// check is tried again (a slower machine only makes the window wider).
TEST(ServeQueue, FullQueueIs503) {
  ServeProcess server({"-m", Model(), "-t", "1", "-c", "2048", "--max-queue", "0"});
  ASSERT_TRUE(server.ok());
  bool saw_503 = false;
  for (int attempt = 0; attempt < 8 && !saw_503; ++attempt) {
    JsonReply second;
    StreamWhile(server, [&] {
      auto c = server.Client();
      second = PostJson(*c, "/v1/completions", json({{"prompt", "Once"}, {"max_tokens", 1}}));
    }, /*hang_up=*/true);  // the server drops the first request when its next write fails
    ASSERT_TRUE(second.status == 503 || second.status == 200) << second.raw;
    if (second.status == 503) {
      saw_503 = true;
      test::ExpectErrorShape(second);
      EXPECT_EQ(second.body["error"]["code"], "queue_full");
    }
  }
  EXPECT_TRUE(saw_503);
  // Once the first request is gone, the next one is served (it may arrive before the hang-up is noticed).
  auto c = server.Client();
  int status = 0;
  for (int attempt = 0; attempt < 100 && status != 200; ++attempt) {
    status = PostJson(*c, "/v1/completions", json({{"prompt", "Once"}, {"max_tokens", 1}})).status;
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(status, 200);
}

// Raw bytes to the server's port; returns the reply's status line and headers (or what came before the server
// closed). Without `read_reply` the client hangs up right after sending. (The client never half-closes: httplib
// takes a peer that did as gone and does not answer it.)
std::string RawExchange(int port, const std::string& bytes, bool read_reply = true) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    ADD_FAILURE() << "cannot connect";
    return "";
  }
  timeval tv{.tv_sec = 60, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server closed early: fine
    sent += static_cast<size_t>(n);
  }
  std::string got;
  while (read_reply && got.find("\r\n\r\n") == std::string::npos) {
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return got;
}

TEST(ServeHttp, MalformedRequestsLeaveTheServerUp) {
  ServeProcess server({"-m", Model(), "-t", "1", "-c", "128", "--max-body", "4KiB"});
  ASSERT_TRUE(server.ok());
  const int port = server.port();
  auto status_of = [](const std::string& reply) { return reply.substr(0, 12); };

  EXPECT_EQ(status_of(RawExchange(port, "GARBAGE\r\n\r\n")), "HTTP/1.1 400");
  EXPECT_EQ(status_of(RawExchange(port, "GET / HTTP/9.9 extra words\r\n\r\n")), "HTTP/1.1 400");
  // A header line over httplib's 8 KiB limit, and a request line over its URI limit.
  EXPECT_EQ(status_of(RawExchange(port, "GET /health HTTP/1.1\r\nX-Big: " + std::string(64 << 10, 'a') + "\r\n\r\n")),
            "HTTP/1.1 400");
  EXPECT_EQ(status_of(RawExchange(port, "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n")), "HTTP/1.1 414");
  // Many headers (allowed), then a normal request on the same connection.
  std::string many = "GET /health HTTP/1.1\r\nConnection: close\r\n";
  for (int i = 0; i < 2000; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(status_of(RawExchange(port, many + "\r\n")), "HTTP/1.1 200");
  // Binary junk without a newline, a bare connect, a body cut short, lying lengths, a broken chunked body.
  std::string junk(8192, '\0');
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>((i * 131 + 7) & 0xFF);
  for (char& ch : junk) {
    if (ch == '\n') ch = 'x';
  }
  RawExchange(port, junk, false);
  RawExchange(port, "", false);
  RawExchange(port, "POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"prompt\":", false);
  RawExchange(port, "POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n{}", false);
  RawExchange(port, "POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n{}", false);
  const std::string over = RawExchange(
      port, "POST /v1/completions HTTP/1.1\r\nContent-Length: 100000\r\nConnection: close\r\n\r\n" +
                std::string(100000, ' '));
  EXPECT_EQ(status_of(over), "HTTP/1.1 413");
  EXPECT_EQ(status_of(RawExchange(port, "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                        "ZZZ\r\nabc\r\n")),
            "HTTP/1.1 400");
  RawExchange(port, "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" +
                        std::string("FFFFFFFFFFFFFFFF\r\n") + "abc\r\n0\r\n\r\n", false);
  // A client that hangs up without reading its stream: the request is dropped when a write fails, nothing else.
  const std::string stream_body = R"({"prompt": "Once", "stream": true, "max_tokens": 50})";
  RawExchange(port,
              "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(stream_body.size()) +
                  "\r\n\r\n" + stream_body,
              /*read_reply=*/false);

  // Still up and still right.
  auto c = server.Client();
  httplib::Result health = c->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const test::RunReference ref = test::RunGreedy(Model(), "Once upon a time", 16);
  const JsonReply r = PostJson(*c, "/v1/completions", json({{"prompt", "Once upon a time"}, {"max_tokens", 16},
                                                            {"temperature", 0}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["text"], ref.text);
}

// The model loads after the socket is bound, so /health can say so: 503 {"status": "loading"}, and the API
// answers 503 in OpenAI's error shape until it is ready. A fresh calibration cache makes loading take a while
// (the CPU's kernels are measured first); should it still finish before the first request, there is nothing to see.
TEST(ServeHealth, LoadingIs503UntilReady) {
  const std::filesystem::path cache =
      std::filesystem::temp_directory_path() / ("tandem-serve-cache-" + std::to_string(getpid()));
  std::filesystem::remove_all(cache);
  std::filesystem::create_directories(cache);
  {
    ServeProcess server({"-m", Model(), "-t", "1", "-c", "128"}, /*wait_ready=*/false,
                        {"XDG_CACHE_HOME=" + cache.string()});
    ASSERT_TRUE(server.ok());
    auto c = server.Client();
    httplib::Result health = c->Get("/health");
    ASSERT_TRUE(health);
    if (health->status == 200) {
      GTEST_SKIP() << "the model loaded before the first request";
    }
    EXPECT_EQ(health->status, 503);
    EXPECT_EQ(json::parse(health->body), json({{"status", "loading"}}));
    const JsonReply completion = PostJson(*c, "/v1/completions", json({{"prompt", "Once"}, {"max_tokens", 1}}));
    if (completion.status != 200) {  // unless loading finished meanwhile
      EXPECT_EQ(completion.status, 503) << completion.raw;
      test::ExpectErrorShape(completion);
    }
    ASSERT_TRUE(server.WaitReady());
    EXPECT_EQ(PostJson(*c, "/v1/completions", json({{"prompt", "Once"}, {"max_tokens", 1}})).status, 200);
  }
  std::filesystem::remove_all(cache);
}

TEST(ServeSignals, SigtermExitsZero) {
  ServeProcess server({"-m", Model(), "-t", "1", "-c", "128"});
  ASSERT_TRUE(server.ok());
  const int status = server.StopWith(SIGTERM);
  ASSERT_NE(status, -1) << "the server did not exit";
  EXPECT_TRUE(WIFEXITED(status)) << server.Stderr();
  EXPECT_EQ(WEXITSTATUS(status), 0) << server.Stderr();
}

TEST(ServeSignals, SigintExitsZero) {
  ServeProcess server({"-m", Model(), "-t", "1", "-c", "128"});
  ASSERT_TRUE(server.ok());
  const int status = server.StopWith(SIGINT);
  ASSERT_NE(status, -1) << "the server did not exit";
  EXPECT_TRUE(WIFEXITED(status)) << server.Stderr();
  EXPECT_EQ(WEXITSTATUS(status), 0) << server.Stderr();
}

// SIGTERM while a request streams: the stream still ends properly (the request is drained to its finish chunk,
// then [DONE]), and the server exits 0. serve_batching_test.cc checks the drained text.
TEST(ServeSignals, SigtermDuringAStreamEndsItAndExitsZero) {
  ServeProcess server({"-m", Model(), "-t", "1", "-c", "512"});
  ASSERT_TRUE(server.ok());
  const std::string stream = StreamWhile(server, [&] { kill(server.pid(), SIGTERM); });
  const std::vector<std::string> events = test::SseData(stream);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  const int status = server.WaitExit();  // no second signal: the first one stops it
  ASSERT_NE(status, -1) << "the server did not exit";
  EXPECT_TRUE(WIFEXITED(status)) << server.Stderr();
  EXPECT_EQ(WEXITSTATUS(status), 0) << server.Stderr();
}

// Each step carries a token of every sequence, so there cannot be more sequences than a batch holds.
TEST(ServeFlags, ParallelOverTheBatchIsAOneLineError) {
  for (const std::string args : {" --parallel 8 -b 4", " --parallel 0"}) {
    const test::CmdResult r = test::RunCommand(test::TandemBin() + " serve -m " + test::ShellQuote(Model()) + args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_NE(r.err.find("--parallel"), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

TEST(ServeFlags, HelpListsTheFlagsWithDefaults) {
  const test::CmdResult r = test::RunCommand(test::TandemBin() + " serve --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--host", "127.0.0.1", "--port", "8080", "--parallel", "--api-key", "--chat-template",
                           "--max-body", "4MiB", "--max-queue", "-c, --ctx-size", "-t, --threads", "--gpu-layers"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST(ServeFlags, ErrorsAreOneLine) {
  for (const std::string args : {"", "-m x.gguf --port 70000", "-m x.gguf --bogus", "-m x.gguf --max-body 0"}) {
    const test::CmdResult r = test::RunCommand(test::TandemBin() + " serve " + args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << args << ": " << r.err;
  }
}

// A model that cannot be opened: the server has listened already, then says why and exits non-zero.
TEST(ServeFlags, AModelThatFailsToLoadExitsNonZero) {
  const test::CmdResult r = test::RunCommand(test::TandemBin() + " serve -m /nonexistent.gguf --port 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("listening on"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("error: "), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tandem

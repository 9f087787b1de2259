// `tandem serve --parallel N`: continuous batching through a real HTTP client. Eight clients at once, greedy and
// seeded, streaming and not, of different lengths, each get exactly what `tandem run` gives them alone, on a dense
// and on an MoE model; the KV account covers every slot; SIGTERM drains the requests in flight.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "tests/tools/serve_process.h"

namespace tandem {
namespace {

using nlohmann::json;
using test::JsonReply;
using test::PostJson;
using test::RunGreedy;
using test::ServeProcess;

constexpr int kCtx = 256;
constexpr int kClients = 8;

struct Request {
  std::string prompt;
  int max_tokens;
  bool stream;
  std::string run_flags;  // the same sampling for `tandem run`
  json sampling;
};

std::vector<Request> Requests() {
  const char* prompts[kClients] = {"Once upon a time", "The little dog was sad because", "Lily wanted",
                                   "One day, a big bear", "Tom and Sue went to the park. They",
                                   "The sun", "A girl named Mia had a red ball. She", "Max"};
  std::vector<Request> r;
  for (int i = 0; i < kClients; ++i) {
    Request q{.prompt = prompts[i], .max_tokens = 12 + 9 * i, .stream = i % 3 == 1, .run_flags = "--temp 0",
              .sampling = {{"temperature", 0}}};
    if (i % 4 == 3) {  // sampled with a seed of its own: the same draws as a run with that seed
      q.run_flags = "--temp 0.9 --top-k 40 --seed " + std::to_string(100 + i);
      q.sampling = {{"temperature", 0.9}, {"top_k", 40}, {"seed", 100 + i}};
    }
    r.push_back(q);
  }
  return r;
}

std::string Text(const ServeProcess& server, const Request& q, int* status, std::string* raw) {
  auto c = server.Client();
  json body = {{"prompt", q.prompt}, {"max_tokens", q.max_tokens}};
  body.update(q.sampling);
  if (!q.stream) {
    const JsonReply r = PostJson(*c, "/v1/completions", body);
    *status = r.status;
    *raw = r.raw;
    return r.status == 200 ? r.body["choices"][0]["text"].get<std::string>() : "";
  }
  body["stream"] = true;
  httplib::Result r = c->Post("/v1/completions", body.dump(), "application/json");
  if (!r) {
    *status = -1;
    return "";
  }
  *status = r->status;
  *raw = r->body;
  std::string text;
  for (const std::string& e : test::SseData(r->body)) {
    if (e != "[DONE]") text += json::parse(e)["choices"][0]["text"].get<std::string>();
  }
  return text;
}

class ContinuousBatching : public ::testing::TestWithParam<const char*> {};

TEST_P(ContinuousBatching, EightClientsAtOnceGetWhatTheyGetAlone) {
  const std::string model = test::ModelPath(GetParam());
  const std::vector<Request> requests = Requests();
  std::vector<std::string> want;
  for (const Request& q : requests) want.push_back(RunGreedy(model, q.prompt, q.max_tokens, q.run_flags).text);

  ServeProcess server({"-m", model, "-t", "1", "-c", std::to_string(kCtx), "--parallel", std::to_string(kClients)});
  ASSERT_TRUE(server.ok());
  for (int round = 0; round < 2; ++round) {  // the second round reuses every slot's KV sequence
    std::vector<std::string> got(kClients), raw(kClients);
    std::vector<int> status(kClients, 0);
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i) {
      clients.emplace_back([&, i] { got[i] = Text(server, requests[i], &status[i], &raw[i]); });
    }
    for (std::thread& t : clients) t.join();
    for (int i = 0; i < kClients; ++i) {
      ASSERT_EQ(status[i], 200) << raw[i];
      EXPECT_EQ(got[i], want[i]) << "client " << i << ", round " << round;
    }
  }
  // One KV sequence per slot, and none held once every request is answered.
  auto c = server.Client();
  httplib::Result metrics = c->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("tandem_kv_cells_total " + std::to_string(kCtx * kClients)), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("tandem_kv_cells_used 0"), std::string::npos) << metrics->body;
  // And the requests did share steps (each takes tens of steps; the clients start together).
  const size_t at = metrics->body.find("\ntandem_step_sequences_max ");
  ASSERT_NE(at, std::string::npos) << metrics->body;
  EXPECT_GE(std::stoi(metrics->body.substr(at + 27)), 2) << metrics->body;
}

INSTANTIATE_TEST_SUITE_P(Models, ContinuousBatching, ::testing::Values("stories260K.gguf", "stories260K-moe4.gguf"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string s = info.param;
                           s = s.substr(0, s.find('.'));
                           for (char& ch : s) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return s;
                         });

// More clients than slots: the rest wait in the queue and still get their own answers.
TEST(ContinuousBatchingQueue, ClientsBeyondTheSlotsWaitAndGetTheirAnswers) {
  const std::string model = test::ModelPath("stories260K.gguf");
  const std::vector<Request> requests = Requests();
  ServeProcess server({"-m", model, "-t", "1", "-c", std::to_string(kCtx), "--parallel", "3", "--max-queue", "8"});
  ASSERT_TRUE(server.ok());
  std::vector<std::string> got(kClients), raw(kClients);
  std::vector<int> status(kClients, 0);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] { got[i] = Text(server, requests[i], &status[i], &raw[i]); });
  }
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kClients; ++i) {
    ASSERT_EQ(status[i], 200) << raw[i];
    EXPECT_EQ(got[i], RunGreedy(model, requests[i].prompt, requests[i].max_tokens, requests[i].run_flags).text)
        << "client " << i;
  }
}

// SIGTERM while requests stream: each one still runs to its end (finish_reason "length", the whole text), then the
// server exits 0.
TEST(ContinuousBatchingSignals, SigtermDrainsTheRequestsInFlight) {
  const std::string model = test::ModelPath("stories260K.gguf");
  ServeProcess server({"-m", model, "-t", "1", "-c", std::to_string(kCtx), "--parallel", "2"});
  ASSERT_TRUE(server.ok());
  const std::vector<std::string> prompts = {"Once upon a time", "The sun"};
  constexpr int kTokens = 120;
  std::vector<std::string> streams(prompts.size());
  std::vector<std::thread> clients;
  std::atomic<int> started{0};
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      auto c = server.Client();
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.set_header("Content-Type", "application/json");
      req.body = json({{"prompt", prompts[i]}, {"max_tokens", kTokens}, {"ignore_eos", true}, {"temperature", 0},
                       {"stream", true}}).dump();
      bool first = true;
      req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        streams[i].append(data, n);
        if (first) ++started;
        first = false;
        return true;
      };
      EXPECT_TRUE(c->send(req));
    });
  }
  while (started < static_cast<int>(prompts.size())) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  kill(server.pid(), SIGTERM);
  for (std::thread& t : clients) t.join();
  const int exit_status = server.WaitExit();
  ASSERT_NE(exit_status, -1) << "the server did not exit";
  EXPECT_TRUE(WIFEXITED(exit_status) && WEXITSTATUS(exit_status) == 0) << server.Stderr();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<std::string> events = test::SseData(streams[i]);
    ASSERT_GE(events.size(), 2u) << streams[i];
    EXPECT_EQ(events.back(), "[DONE]");
    std::string text;
    std::string finish;
    for (const std::string& e : events) {
      if (e == "[DONE]") continue;
      const json j = json::parse(e);
      ASSERT_FALSE(j.contains("error")) << e;
      text += j["choices"][0]["text"].get<std::string>();
      if (!j["choices"][0]["finish_reason"].is_null()) finish = j["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(finish, "length") << "stream " << i;
    EXPECT_EQ(text, RunGreedy(model, prompts[i], kTokens, "--temp 0 --ignore-eos").text) << "stream " << i;
  }
}

}  // namespace
}  // namespace tandem

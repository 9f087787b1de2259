// `tandem serve` soaked: 500 requests of random lengths from several clients at once, some streamed, some hung up
// mid-stream, against a server with fewer slots than clients. Every answered request is a prefix of the greedy
// reference, the server keeps serving, it holds no KV cells at the end, and its RSS ends within 5 % of where it
// stood after warm-up. Under AddressSanitizer a short version runs (the sanitizer reports what leaks or
// overflows; its quarantine makes RSS meaningless, so that check is skipped).
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/tools/serve_process.h"

#if defined(__SANITIZE_ADDRESS__)
#define TANDEM_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TANDEM_TEST_ASAN 1
#endif
#endif

namespace tandem {
namespace {

using nlohmann::json;
using test::ServeProcess;

#ifdef TANDEM_TEST_ASAN
constexpr int kRequests = 60;
constexpr int kWarmup = 20;
#else
constexpr int kRequests = 500;
constexpr int kWarmup = 100;
#endif
constexpr int kClients = 6;
constexpr int kMaxTokens = 48;

// VmRSS of a process, in bytes (0 when unreadable).
uint64_t RssOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      uint64_t kib = 0;
      in >> kib;
      return kib * 1024;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

TEST(ServeSoak, ManyRandomRequestsAndHangUpsLeaveItServingAndFlat) {
  const std::string model = test::ModelPath("stories260K.gguf");
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Lily wanted to", "One day, a bear",
                                            "Tom had a red"};
  std::vector<std::string> want;
  for (const std::string& p : prompts) want.push_back(test::RunGreedy(model, p, kMaxTokens).text);

  ServeProcess server({"-m", model, "-t", "1", "-c", "256", "--parallel", "4", "--max-queue", "16"});
  ASSERT_TRUE(server.ok());
  std::atomic<int> next{0}, answered{0}, hung_up{0}, wrong{0};
  std::atomic<uint64_t> rss_after_warmup{0};
  auto client = [&](int id) {
    std::mt19937 rng(1234 + id);
    auto c = server.Client();
    for (int i = next++; i < kRequests; i = next++) {
      if (i == kWarmup) rss_after_warmup = RssOf(server.pid());
      const size_t p = rng() % prompts.size();
      const int max_tokens = 1 + static_cast<int>(rng() % kMaxTokens);
      const int kind = static_cast<int>(rng() % 10);  // 0-1: hang up mid-stream, 2-3: stream, else not
      json body = {{"prompt", prompts[p]}, {"max_tokens", max_tokens}, {"temperature", 0}};
      if (kind < 4) body["stream"] = true;
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.set_header("Content-Type", "application/json");
      req.body = body.dump();
      std::string got;
      if (kind < 4) {
        req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
          got.append(data, n);
          return kind >= 2;  // false: hang up after the first chunk
        };
      }
      httplib::Result r = c->send(req);
      if (kind < 2) {
        ++hung_up;
        c = server.Client();  // the connection was dropped
        continue;
      }
      if (!r || r->status != 200) {
        ADD_FAILURE() << "request " << i << ": " << (r ? r->body : httplib::to_string(r.error()));
        ++wrong;
        continue;
      }
      std::string text;
      if (kind < 4) {
        for (const std::string& e : test::SseData(got)) {
          if (e != "[DONE]") text += json::parse(e)["choices"][0]["text"].get<std::string>();
        }
      } else {
        text = json::parse(r->body)["choices"][0]["text"].get<std::string>();
      }
      if (want[p].compare(0, text.size(), text) != 0) {
        ADD_FAILURE() << "request " << i << " (" << max_tokens << " tokens of '" << prompts[p] << "'): '" << text
                      << "' is not a prefix of '" << want[p] << "'";
        ++wrong;
      }
      ++answered;
    }
  };
  std::vector<std::thread> clients;
  for (int id = 0; id < kClients; ++id) clients.emplace_back(client, id);
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(answered + hung_up, kRequests);
  EXPECT_GT(hung_up, 0);

  // Still serving, nothing held: the hung-up requests freed their slots.
  auto c = server.Client();
  httplib::Result health = c->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const json last = json::parse(c->Post("/v1/completions", json({{"prompt", prompts[0]}, {"max_tokens", kMaxTokens},
                                                                  {"temperature", 0}}).dump(),
                                        "application/json")->body);
  EXPECT_EQ(last["choices"][0]["text"], want[0]);
  httplib::Result metrics = c->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("tandem_kv_cells_used 0"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("tandem_requests_running 0"), std::string::npos) << metrics->body;
#ifndef TANDEM_TEST_ASAN
  const uint64_t start = rss_after_warmup, end = RssOf(server.pid());
  ASSERT_GT(start, 0u);
  EXPECT_LE(static_cast<double>(end), 1.05 * static_cast<double>(start))
      << "RSS " << start << " bytes after " << kWarmup << " requests, " << end << " after " << kRequests;
  std::printf("RSS after warm-up %.1f MiB, at the end %.1f MiB\n", start / 1048576.0, end / 1048576.0);
#endif
  const int status = server.StopWith(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << server.Stderr();
}

}  // namespace
}  // namespace tandem

// `tandem serve` through a real HTTP client: the OpenAI shapes clients depend on, greedy (and seeded) output equal
// to `tandem run`'s, streaming that concatenates to the whole answer, stop strings, limits, errors with the right
// status, Prometheus metrics, and two clients at once. serve_chat_test.cc has chat through the chat template;
// serve_robustness_test.cc has keys, signals, a full queue and malformed HTTP.
#include <gtest/gtest.h>

#include <map>
#include <regex>
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

std::string Model() { return test::ModelPath("stories260K.gguf"); }
constexpr int kCtx = 256;

class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServeProcess({"-m", Model(), "-t", "1", "-c", std::to_string(kCtx), "--max-body", "64KiB"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(server_->ok());
    client_ = server_->Client();
  }
  JsonReply Complete(const json& body) { return PostJson(*client_, "/v1/completions", body); }

  static ServeProcess* server_;
  std::unique_ptr<httplib::Client> client_;
};
ServeProcess* Serve::server_ = nullptr;

TEST_F(Serve, HealthIsOkWhenReady) {
  httplib::Result r = client_->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body), json({{"status", "ok"}}));
}

TEST_F(Serve, ModelsListsTheModel) {
  httplib::Result r = client_->Get("/v1/models");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "stories260K.gguf");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_TRUE(j["data"][0]["created"].is_number_integer());
  EXPECT_TRUE(j["data"][0]["owned_by"].is_string());
  EXPECT_EQ(j["data"][0]["meta"]["n_ctx"], kCtx);
  // The alias without /v1 that llama-server also answers.
  httplib::Result bare = client_->Get("/models");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->status, 200);
}

// The contract: greedy completions are `tandem run --temp 0` token for token (the text, and as many tokens).
TEST_F(Serve, GreedyCompletionEqualsRun) {
  for (const std::string prompt : {"Once upon a time", "", "The little dog was sad because"}) {
    const test::RunReference ref = RunGreedy(Model(), prompt, 40);
    const JsonReply r = Complete({{"model", "stories260K"}, {"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}});
    ASSERT_EQ(r.status, 200) << r.raw;
    const json& j = r.body;
    EXPECT_TRUE(j["id"].get<std::string>().rfind("cmpl-", 0) == 0) << j["id"];
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_TRUE(j["created"].is_number_integer());
    EXPECT_EQ(j["model"], "stories260K.gguf");
    ASSERT_EQ(j["choices"].size(), 1u);
    EXPECT_EQ(j["choices"][0]["index"], 0);
    EXPECT_EQ(j["choices"][0]["text"], ref.text) << "prompt '" << prompt << "'";
    const bool hit_eog = ref.tokens.size() < 40u;
    EXPECT_EQ(j["choices"][0]["finish_reason"], hit_eog ? "stop" : "length");
    EXPECT_EQ(j["usage"]["prompt_tokens"], ref.prompt_tokens.size());
    EXPECT_EQ(j["usage"]["completion_tokens"], ref.tokens.size());
    EXPECT_EQ(j["usage"]["total_tokens"], ref.prompt_tokens.size() + ref.tokens.size());
  }
}

// The prompt's ids (as `run` tokenized it) give the same completion as its text; no BOS is added to ids.
TEST_F(Serve, PromptAsTokenIdsEqualsText) {
  const test::RunReference ref = RunGreedy(Model(), "Once upon a time", 24);
  const JsonReply r = Complete({{"prompt", ref.prompt_tokens}, {"max_tokens", 24}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["text"], ref.text);
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], ref.prompt_tokens.size());
  const JsonReply nested = Complete({{"prompt", json::array({ref.prompt_tokens})}, {"max_tokens", 24},
                                     {"temperature", 0}});
  EXPECT_EQ(nested.body["choices"][0]["text"], ref.text);
}

// The same seed and sampling settings draw what `run` draws: the server's defaults are run's (llama.cpp's).
TEST_F(Serve, SeededSamplingEqualsRun) {
  const test::RunReference ref = RunGreedy(Model(), "Once upon a time", 48, "--temp 0.9 --seed 7");
  const JsonReply r = Complete({{"prompt", "Once upon a time"}, {"max_tokens", 48}, {"temperature", 0.9}, {"seed", 7}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["text"], ref.text);
  EXPECT_EQ(r.body["usage"]["completion_tokens"], ref.tokens.size());
}

TEST_F(Serve, PenaltiesEqualRun) {
  const test::RunReference ref = RunGreedy(
      Model(), "Once upon a time", 64,
      "--temp 0 --repeat-penalty 1.3 --presence-penalty 0.4 --frequency-penalty 0.6 --repeat-last-n 32");
  const JsonReply r = Complete({{"prompt", "Once upon a time"}, {"max_tokens", 64}, {"temperature", 0},
                                {"repeat_penalty", 1.3}, {"presence_penalty", 0.4}, {"frequency_penalty", 0.6},
                                {"repeat_last_n", 32}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["text"], ref.text);
  // And they change the answer: without them the greedy text differs.
  EXPECT_NE(ref.text, RunGreedy(Model(), "Once upon a time", 64).text);
}

// Streaming: "text_completion" chunks whose texts concatenate to the non-streamed text, the last with the
// finish_reason, a usage chunk with include_usage, and [DONE] at the end.
TEST_F(Serve, StreamConcatenatesToTheWholeText) {
  const json request = {{"prompt", "Once upon a time"}, {"max_tokens", 30}, {"temperature", 0}};
  const JsonReply whole = Complete(request);
  ASSERT_EQ(whole.status, 200) << whole.raw;
  json streamed = request;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  httplib::Result r = client_->Post("/v1/completions", streamed.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<std::string> events = test::SseData(r->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  std::string id;
  for (size_t i = 0; i + 2 < events.size(); ++i) {  // the text chunks, then the finish chunk
    const json c = json::parse(events[i]);
    EXPECT_EQ(c["object"], "text_completion");
    if (id.empty()) id = c["id"];
    EXPECT_EQ(c["id"], id);  // one id for the whole stream
    EXPECT_TRUE(c.contains("usage") && c["usage"].is_null());
    ASSERT_EQ(c["choices"].size(), 1u);
    text += c["choices"][0]["text"].get<std::string>();
    const bool last = i + 3 == events.size();
    EXPECT_EQ(c["choices"][0]["finish_reason"], last ? json(whole.body["choices"][0]["finish_reason"]) : json(nullptr));
  }
  EXPECT_EQ(text, whole.body["choices"][0]["text"]);
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], whole.body["usage"]);
}

TEST_F(Serve, StreamWithoutIncludeUsageHasNoUsage) {
  httplib::Result r = client_->Post(
      "/v1/completions", json({{"prompt", "Once"}, {"max_tokens", 5}, {"temperature", 0}, {"stream", true}}).dump(),
      "application/json");
  ASSERT_TRUE(r);
  const std::vector<std::string> events = test::SseData(r->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json c = json::parse(events[i]);
    EXPECT_FALSE(c.contains("usage")) << events[i];
    EXPECT_EQ(c["choices"].size(), 1u);
  }
}

// Stop strings: the text ends before the first one, which is not returned; one that begins inside a token and
// spans several is found, and none of it leaks into the stream (the held-back prefix is never sent).
TEST_F(Serve, StopStrings) {
  const test::RunReference ref = RunGreedy(Model(), "Once upon a time", 40);
  ASSERT_NE(ref.text.find("little girl"), std::string::npos) << ref.text;  // what the stops below rely on
  struct Case {
    json stop;
    std::string want_before;  // the text is ref.text up to this
  };
  const std::vector<Case> cases = {
      {"Lily", "Lily"},
      {"ittle gi", "ittle gi"},                        // begins inside " little", ends inside " girl"
      {json::array({"girl", "little", "zzz"}), "little"},  // the earliest match wins
  };
  for (const Case& c : cases) {
    const std::string want = ref.text.substr(0, ref.text.find(c.want_before));
    json request = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}, {"stop", c.stop}};
    const JsonReply r = Complete(request);
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["choices"][0]["text"], want) << c.stop;
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop") << c.stop;
    EXPECT_LT(r.body["usage"]["completion_tokens"].get<int>(), 40);

    request["stream"] = true;
    httplib::Result s = client_->Post("/v1/completions", request.dump(), "application/json");
    ASSERT_TRUE(s);
    std::string streamed;
    json last;
    for (const std::string& e : test::SseData(s->body)) {
      if (e == "[DONE]") continue;
      last = json::parse(e);
      streamed += last["choices"][0]["text"].get<std::string>();
    }
    EXPECT_EQ(streamed, want) << c.stop;
    EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  }
}

TEST_F(Serve, MaxTokensEndsWithLength) {
  const JsonReply r = Complete({{"prompt", "Once upon a time"}, {"max_tokens", 3}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 3);
  const JsonReply newer = Complete({{"prompt", "Once upon a time"}, {"max_completion_tokens", 2}, {"temperature", 0}});
  EXPECT_EQ(newer.body["usage"]["completion_tokens"], 2);
  const JsonReply none = Complete({{"prompt", "Once upon a time"}, {"max_tokens", 0}});
  ASSERT_EQ(none.status, 200) << none.raw;
  EXPECT_EQ(none.body["choices"][0]["text"], "");
  EXPECT_EQ(none.body["usage"]["completion_tokens"], 0);
  EXPECT_EQ(none.body["choices"][0]["finish_reason"], "length");
}

// ignore_eos (llama-server's field) generates every token asked for; without max_tokens, generation runs to the
// end of the context and says "length".
TEST_F(Serve, IgnoreEosRunsToTheEndOfTheContext) {
  const JsonReply r = Complete({{"prompt", "Once upon a time"}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r.body["usage"]["total_tokens"], kCtx);
}

TEST_F(Serve, MalformedJsonIs400) {
  for (const std::string body : {"{", "not json", "[1, 2]", "{\"prompt\": \"x\",}", ""}) {
    const JsonReply r = PostJson(*client_, "/v1/completions", std::string(body));
    EXPECT_EQ(r.status, 400) << body;
    test::ExpectErrorShape(r);
    EXPECT_EQ(r.body["error"]["type"], "invalid_request_error");
  }
}

TEST_F(Serve, WrongTypesAre400NamingTheField) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"prompt", 5}}, "prompt"},
      {{{"prompt", "x"}, {"max_tokens", "10"}}, "max_tokens"},
      {{{"prompt", "x"}, {"temperature", "hot"}}, "temperature"},
      {{{"prompt", "x"}, {"stop", 3}}, "stop"},
      {{{"prompt", "x"}, {"stream", "yes"}}, "stream"},
      {{{"prompt", "x"}, {"n", 2}}, "n"},
      {{{"prompt", "x"}, {"top_p", 2}}, "top_p"},
  };
  for (const auto& [body, param] : cases) {
    const JsonReply r = Complete(body);
    EXPECT_EQ(r.status, 400) << body;
    test::ExpectErrorShape(r);
    EXPECT_EQ(r.body["error"]["param"], param) << r.raw;
  }
}

TEST_F(Serve, TokenIdOutsideTheVocabularyIs400) {
  const JsonReply r = Complete({{"prompt", {1, 512}}, {"max_tokens", 1}});  // stories260K has 512 tokens
  EXPECT_EQ(r.status, 400) << r.raw;
  test::ExpectErrorShape(r);
}

TEST_F(Serve, OverTheContextIs400WithTheNumbers) {
  const JsonReply r = Complete({{"prompt", "Once upon a time"}, {"max_tokens", 300}});
  EXPECT_EQ(r.status, 400) << r.raw;
  test::ExpectErrorShape(r);
  EXPECT_EQ(r.body["error"]["code"], "context_length_exceeded");
  const std::string message = r.body["error"]["message"];
  EXPECT_NE(message.find(std::to_string(kCtx)), std::string::npos) << message;
  EXPECT_NE(message.find("305"), std::string::npos) << message;  // 5 prompt tokens + 300
  // A prompt that fills the context by itself, with no max_tokens.
  const JsonReply full = Complete({{"prompt", std::vector<int>(kCtx, 300)}});
  EXPECT_EQ(full.status, 400) << full.raw;
  // Exactly the context is fine.
  const JsonReply exact = Complete({{"prompt", std::vector<int>(kCtx - 4, 300)}, {"max_tokens", 4}, {"ignore_eos", true}});
  EXPECT_EQ(exact.status, 200) << exact.raw;
  EXPECT_EQ(exact.body["usage"]["total_tokens"], kCtx);
}

TEST_F(Serve, OversizeBodyIs413) {
  const std::string big = json({{"prompt", std::string(100 << 10, 'a')}}).dump();  // over --max-body 64KiB
  const JsonReply r = PostJson(*client_, "/v1/completions", big);
  EXPECT_EQ(r.status, 413);
  test::ExpectErrorShape(r);
  // The connection and the server are still fine.
  EXPECT_EQ(Complete({{"prompt", "Once"}, {"max_tokens", 1}}).status, 200);
}

TEST_F(Serve, UnknownRouteIs404AndWrongMethodIs405) {
  httplib::Result r = client_->Get("/v1/nothing");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  test::ExpectErrorShape(JsonReply{r->status, json::parse(r->body, nullptr, false), r->body});
  const JsonReply post = PostJson(*client_, "/v2/completions", json({{"prompt", "x"}}));
  EXPECT_EQ(post.status, 404);
  test::ExpectErrorShape(post);

  httplib::Result get = client_->Get("/v1/completions");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST");
  test::ExpectErrorShape(JsonReply{get->status, json::parse(get->body, nullptr, false), get->body});
  const JsonReply health = PostJson(*client_, "/health", std::string("{}"));
  EXPECT_EQ(health.status, 405);
  httplib::Result del = client_->Delete("/v1/models");
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 405);
}

// The chat route validates its messages before anything else (serve_chat_test.cc has chat itself).
TEST_F(Serve, ChatCompletionsValidatesMessages) {
  const JsonReply bad = PostJson(*client_, "/v1/chat/completions", json({{"messages", "hi"}}));
  EXPECT_EQ(bad.status, 400);
  test::ExpectErrorShape(bad);
  EXPECT_EQ(bad.body["error"]["param"], "messages");
}

// Prometheus text format, line by line; the counters move by what a request did.
std::map<std::string, double> ParseMetrics(const std::string& text) {
  static const std::regex kComment(R"(# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*))");
  static const std::regex kSample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*")(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*")*\})? ([-+]?[0-9.]+([eE][-+]?[0-9]+)?|NaN|[-+]Inf))");
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    EXPECT_NE(end, std::string::npos) << "the last line has no newline";
    const std::string line = text.substr(pos, end - pos);
    pos = end == std::string::npos ? text.size() : end + 1;
    std::smatch m;
    if (std::regex_match(line, m, kComment)) {
      if (m[1] == "TYPE") {
        EXPECT_TRUE(m[3] == "counter" || m[3] == "gauge") << line;
        EXPECT_FALSE(types.count(m[2])) << "two TYPE lines for " << m[2];
        types[m[2]] = m[3];
      }
      continue;
    }
    if (!std::regex_match(line, m, kSample)) {
      ADD_FAILURE() << "not a Prometheus sample: '" << line << "'";
      continue;
    }
    EXPECT_TRUE(types.count(m[1])) << "a sample before its TYPE line: " << line;
    const std::string key = line.substr(0, line.rfind(' '));
    EXPECT_FALSE(samples.count(key)) << "two samples of " << key;
    samples[key] = std::stod(line.substr(line.rfind(' ') + 1));
  }
  return samples;
}

TEST_F(Serve, MetricsAreValidPrometheusAndCountersMove) {
  auto metrics = [&] {
    httplib::Result r = client_->Get("/metrics");
    EXPECT_TRUE(r);
    if (!r) return std::map<std::string, double>{};
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/plain", 0), 0u);
    return ParseMetrics(r->body);
  };
  const std::string ok_key = "tandem_requests_total{endpoint=\"/v1/completions\",status=\"200\"}";
  const std::string bad_key = "tandem_requests_total{endpoint=\"/v1/completions\",status=\"400\"}";
  std::map<std::string, double> before = metrics();
  const JsonReply r = Complete({{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(Complete({{"prompt", 1}}).status, 400);
  const std::map<std::string, double> after = metrics();

  EXPECT_EQ(after.at(ok_key), before[ok_key] + 1);
  EXPECT_EQ(after.at(bad_key), before[bad_key] + 1);
  EXPECT_EQ(after.at("tandem_prompt_tokens_total"),
            before.at("tandem_prompt_tokens_total") + r.body["usage"]["prompt_tokens"].get<double>());
  EXPECT_EQ(after.at("tandem_generated_tokens_total"),
            before.at("tandem_generated_tokens_total") + r.body["usage"]["completion_tokens"].get<double>());
  EXPECT_GT(after.at("tandem_last_prefill_tokens_per_second"), 0);
  EXPECT_GT(after.at("tandem_last_decode_tokens_per_second"), 0);
  EXPECT_EQ(after.at("tandem_kv_cells_total"), kCtx);
  EXPECT_EQ(after.at("tandem_kv_cells_used"), 0);  // idle
  EXPECT_EQ(after.at("tandem_queue_depth"), 0);
  EXPECT_EQ(after.at("tandem_requests_running"), 0);
  EXPECT_EQ(after.at("tandem_model_loaded"), 1);
  EXPECT_GT(after.at("tandem_ram_rss_bytes"), 0);
  // A CPU-only plan has no VRAM and moves nothing over PCIe: those are left out, not reported as 0.
  EXPECT_FALSE(after.count("tandem_vram_bytes"));
  EXPECT_FALSE(after.count("tandem_pcie_bytes_total{phase=\"decode\"}"));
  // The metrics request itself was counted.
  EXPECT_GE(after.at("tandem_requests_total{endpoint=\"/metrics\",status=\"200\"}"), 1);
}

// On a (simulated) GPU with streamed layers: the same greedy text as `run` with the same placement, and /metrics
// now reports the VRAM the executor holds and the bytes it moved over PCIe, as run's --json does.
TEST(ServeOnAccelerator, MetricsReportVramAndPcie) {
  const std::vector<std::string> placement = {"--device", "sim:64MiB", "--stream-layers", "5"};
  std::vector<std::string> args = {"-m", Model(), "-t", "1", "-c", std::to_string(kCtx)};
  args.insert(args.end(), placement.begin(), placement.end());
  ServeProcess server(args);
  ASSERT_TRUE(server.ok());
  auto c = server.Client();
  const test::CmdResult run = test::RunCommand(test::TandemBin() + " run -m " + test::ShellQuote(Model()) +
                                               " -p 'Once upon a time' -n 16 --temp 0 -t 1 -c 256 --json --device sim:64MiB "
                                               "--stream-layers 5");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json ref = json::parse(run.out);
  const JsonReply r = PostJson(*c, "/v1/completions",
                               json({{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"temperature", 0}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["text"], ref["text"]);
  httplib::Result m = c->Get("/metrics");
  ASSERT_TRUE(m);
  const std::map<std::string, double> metrics = ParseMetrics(m->body);
  ASSERT_TRUE(metrics.count("tandem_vram_bytes")) << m->body;
  EXPECT_EQ(metrics.at("tandem_vram_bytes"), ref["memory"]["peak_vram_bytes"].get<double>());
  const double prefill = metrics.at("tandem_pcie_bytes_total{phase=\"prefill\"}");
  const double decode = metrics.at("tandem_pcie_bytes_total{phase=\"decode\"}");
  EXPECT_GT(prefill, 0);
  EXPECT_GT(decode, 0);
  EXPECT_EQ(prefill + decode, ref["pcie_bytes"].get<double>());  // one request, the same work as the run
}

// Two clients at once: the second waits in the queue, and both get exactly their own greedy answer.
TEST_F(Serve, TwoClientsAtOnceBothGetTheirAnswers) {
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog was sad because"};
  std::vector<test::RunReference> refs;
  for (const std::string& p : prompts) refs.push_back(RunGreedy(Model(), p, 48));
  for (int round = 0; round < 3; ++round) {
    std::vector<JsonReply> replies(prompts.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < prompts.size(); ++i) {
      clients.emplace_back([&, i] {
        auto c = server_->Client();
        json body = {{"prompt", prompts[i]}, {"max_tokens", 48}, {"temperature", 0}};
        if (i == 1) body["stream"] = true;  // one streams, one does not
        if (i == 1) {
          httplib::Result r = c->Post("/v1/completions", body.dump(), "application/json");
          if (!r) return;
          std::string text;
          for (const std::string& e : test::SseData(r->body)) {
            if (e != "[DONE]") text += json::parse(e)["choices"][0]["text"].get<std::string>();
          }
          replies[i] = JsonReply{r->status, json{{"choices", {{{"text", text}}}}}, r->body};
        } else {
          replies[i] = PostJson(*c, "/v1/completions", body);
        }
      });
    }
    for (std::thread& t : clients) t.join();
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(replies[i].status, 200) << replies[i].raw;
      EXPECT_EQ(replies[i].body["choices"][0]["text"], refs[i].text) << "client " << i << ", round " << round;
    }
  }
}

}  // namespace
}  // namespace tandem

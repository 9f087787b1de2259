// The OpenAI request parser: every field lands in its option, the shapes clients send (nulls, token-id prompts,
// content parts) are read, and hostile bodies (deep nesting, huge numbers, wrong types, bad UTF-8, batches) come
// back as one 400 naming the field, never a crash.
#include "tools/serve_request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tandem::serve {
namespace {

CompletionRequest Parse(const std::string& body, ApiEndpoint ep = ApiEndpoint::kCompletions) {
  CompletionRequest r;
  const std::optional<ApiError> e = ParseCompletionRequest(body, ep, &r);
  EXPECT_FALSE(e.has_value()) << body << " -> " << (e ? e->message : "");
  return r;
}

ApiError Refuse(const std::string& body, ApiEndpoint ep = ApiEndpoint::kCompletions) {
  CompletionRequest r;
  const std::optional<ApiError> e = ParseCompletionRequest(body, ep, &r);
  EXPECT_TRUE(e.has_value()) << body;
  if (!e) return ApiError{.status = 0};
  EXPECT_EQ(e->status, 400) << body;
  EXPECT_FALSE(e->message.empty()) << body;
  EXPECT_EQ(e->type, "invalid_request_error") << body;
  return *e;
}

TEST(ServeRequest, EveryFieldLandsInItsOption) {
  const CompletionRequest r = Parse(R"({"model": "m", "prompt": "Once", "max_tokens": 7, "temperature": 0,
      "top_p": 0.5, "top_k": 3, "min_p": 0.1, "seed": 42, "stop": ["a", "", "b"], "repeat_penalty": 1.1,
      "repeat_last_n": 16, "presence_penalty": 0.5, "frequency_penalty": -0.25, "n": 1, "stream": true,
      "stream_options": {"include_usage": true}, "ignore_eos": true, "user": "ignored"})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "Once");
  EXPECT_FALSE(r.prompt_is_tokens);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temp, 0.0f);
  EXPECT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));  // the empty one dropped
  EXPECT_EQ(r.sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(r.sampling.repeat_last_n, 16);
  EXPECT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_EQ(r.sampling.frequency_penalty, -0.25f);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.ignore_eos);
}

TEST(ServeRequest, DefaultsAndNullsLeaveRunsDefaults) {
  const CompletionRequest r = Parse(R"({"prompt": "x", "max_tokens": null, "temperature": null, "stop": null,
      "seed": -1, "stream": null, "stream_options": null, "logprobs": null, "logit_bias": {}, "echo": false})");
  const SamplerOptions defaults;
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.sampling.temp, defaults.temp);
  EXPECT_EQ(r.sampling.top_k, defaults.top_k);
  EXPECT_EQ(r.sampling.top_p, defaults.top_p);
  EXPECT_EQ(r.sampling.min_p, defaults.min_p);
  EXPECT_FALSE(r.seed.has_value());  // -1: random, as llama.cpp
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.stream);
}

TEST(ServeRequest, MaxCompletionTokensWinsOverMaxTokens) {
  EXPECT_EQ(Parse(R"({"prompt": "x", "max_tokens": 5, "max_completion_tokens": 9})").max_tokens, 9);
  EXPECT_EQ(Parse(R"({"prompt": "x", "max_completion_tokens": 0})").max_tokens, 0);
  EXPECT_EQ(Parse(R"({"prompt": "x", "top_k": -1})").sampling.top_k, 0);  // vLLM's "off"
}

TEST(ServeRequest, PromptShapes) {
  EXPECT_EQ(Parse(R"({"prompt": ["one string"]})").prompt, "one string");
  const CompletionRequest ids = Parse(R"({"prompt": [1, 403, 9]})");
  EXPECT_TRUE(ids.prompt_is_tokens);
  EXPECT_EQ(ids.prompt_tokens, (std::vector<int32_t>{1, 403, 9}));
  EXPECT_EQ(Parse(R"({"prompt": [[1, 2]]})").prompt_tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(Parse(R"({"prompt": ""})").prompt, "");

  EXPECT_EQ(Refuse(R"({})").param, "prompt");
  EXPECT_EQ(Refuse(R"({"prompt": null})").param, "prompt");
  EXPECT_EQ(Refuse(R"({"prompt": 5})").param, "prompt");
  EXPECT_EQ(Refuse(R"({"prompt": []})").param, "prompt");
  EXPECT_EQ(Refuse(R"({"prompt": ["a", "b"]})").param, "prompt");  // a batch: one prompt per request
  EXPECT_EQ(Refuse(R"({"prompt": [1, "a"]})").param, "prompt");
  EXPECT_EQ(Refuse(R"({"prompt": [1, -2]})").param, "prompt");
  EXPECT_EQ(Refuse(R"({"prompt": [1, 4294967296]})").param, "prompt");
  EXPECT_EQ(Refuse(R"({"prompt": [1, 2.5]})").param, "prompt");
  EXPECT_EQ(Refuse(R"({"prompt": [{"a": 1}]})").param, "prompt");
}

TEST(ServeRequest, ChatMessages) {
  const CompletionRequest r = Parse(R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "1"}]}],
      "tools": [{"type": "function"}], "chat_template_kwargs": {"enable_thinking": false}})",
                                    ApiEndpoint::kChatCompletions);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1]["content"].size(), 2u);  // text parts kept: the template joins them or reads them
  EXPECT_TRUE(r.messages[2]["content"].is_null());
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["id"], "1");  // kept for the template
  EXPECT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);

  constexpr ApiEndpoint kChat = ApiEndpoint::kChatCompletions;
  EXPECT_EQ(Refuse(R"({"prompt": "x"})", kChat).param, "messages");
  EXPECT_EQ(Refuse(R"({"messages": []})", kChat).param, "messages");
  EXPECT_EQ(Refuse(R"({"messages": {"role": "user"}})", kChat).param, "messages");
  EXPECT_EQ(Refuse(R"({"messages": ["hi"]})", kChat).param, "messages[0]");
  EXPECT_EQ(Refuse(R"({"messages": [{"content": "hi"}]})", kChat).param, "messages[0].role");
  EXPECT_EQ(Refuse(R"({"messages": [{"role": "wizard", "content": "hi"}]})", kChat).param, "messages[0].role");
  EXPECT_EQ(Refuse(R"({"messages": [{"role": "user", "content": 7}]})", kChat).param, "messages[0].content");
  EXPECT_EQ(Refuse(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", kChat).param,
            "messages[0].content[0].type");
  EXPECT_EQ(Refuse(R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", kChat).param, "tools");
}

TEST(ServeRequest, WrongTypesNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"prompt": "x", "max_tokens": "5"})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 5.0})", "max_tokens"},  // a decimal, even when whole
      {R"({"prompt": "x", "max_tokens": -1})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1e30})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 99999999999999999999999})", "max_tokens"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "temperature": -0.1})", "temperature"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "x", "top_k": true})", "top_k"},
      {R"({"prompt": "x", "min_p": [0.1]})", "min_p"},
      {R"({"prompt": "x", "seed": -2})", "seed"},
      {R"({"prompt": "x", "seed": "7"})", "seed"},
      {R"({"prompt": "x", "stop": 5})", "stop"},
      {R"({"prompt": "x", "stop": ["a", 5]})", "stop"},
      {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
      {R"({"prompt": "x", "frequency_penalty": "0"})", "frequency_penalty"},
      {R"({"prompt": "x", "n": 2})", "n"},
      {R"({"prompt": "x", "n": "1"})", "n"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "stream_options": true})", "stream_options"},
      {R"({"prompt": "x", "stream_options": {"include_usage": 1}})", "stream_options.include_usage"},
      {R"({"prompt": "x", "model": 3})", "model"},
      {R"({"prompt": "x", "logprobs": 2})", "logprobs"},
      {R"({"prompt": "x", "logit_bias": {"5": 100}})", "logit_bias"},
      {R"({"prompt": "x", "echo": true})", "echo"},
      {R"({"prompt": "x", "suffix": "end"})", "suffix"},
      {R"({"prompt": "x", "best_of": 3})", "best_of"},
      {R"({"prompt": "x", "response_format": {"type": "json_object"}})", "response_format"},
      {R"({"prompt": "x", "ignore_eos": 1})", "ignore_eos"},
  };
  for (const Case& c : cases) {
    const ApiError e = Refuse(c.body);
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
  }
}

TEST(ServeRequest, StopLimits) {
  std::string many = R"({"prompt": "x", "stop": [)";
  for (int i = 0; i < 17; ++i) many += (i ? ", " : "") + std::string("\"s") + std::to_string(i) + "\"";
  EXPECT_EQ(Refuse(many + "]}").param, "stop");
  EXPECT_EQ(Refuse(R"({"prompt": "x", "stop": ")" + std::string(513, 'a') + "\"}").param, "stop");
  EXPECT_EQ(Parse(R"({"prompt": "x", "stop": "\n"})").stop, (std::vector<std::string>{"\n"}));
}

TEST(ServeRequest, HostileBodiesAreOne400) {
  const std::string deep_array(100000, '[');
  const std::string deep_object = [] {
    std::string s;
    for (int i = 0; i < 5000; ++i) s += "{\"a\":";
    return s;
  }();
  const std::vector<std::string> bodies = {
      "",
      " ",
      "null",
      "[]",
      "\"prompt\"",
      "42",
      "{",
      "{\"prompt\": \"x\",}",
      "{\"prompt\": \"x\"} trailing",
      "{\"prompt\": NaN}",
      "{\"prompt\": \"x\", \"temperature\": 1e400}",  // a number overflow: the parser refuses it
      "{\"prompt\": \"x\", \"temperature\": Infinity}",
      "{\"prompt\": \"\xFF\xFE\"}",     // invalid UTF-8
      "{\"prompt\": \"\\ud800\"}",      // a lone surrogate
      std::string("{\"prompt\": \"a\0b\"}", 17),
      deep_array,
      "{\"prompt\": " + deep_array,
      "{\"prompt\": \"x\", \"x\": " + std::string(100, '[') + std::string(100, ']') + "}",
      deep_object,
      "{\"prompt\": \"x\", \"stop\": [" + std::string(70, '[') + "]}",
  };
  for (const std::string& body : bodies) {
    CompletionRequest r;
    const std::optional<ApiError> e = ParseCompletionRequest(body, ApiEndpoint::kCompletions, &r);
    ASSERT_TRUE(e.has_value()) << body.substr(0, 60);
    EXPECT_EQ(e->status, 400);
    EXPECT_FALSE(e->message.empty());
  }
}

TEST(ServeRequest, DeepButAllowedNestingIsFine) {
  // Unknown fields are ignored however they look, as long as they are within the depth limit.
  std::string body = R"({"prompt": "x", "metadata": )" + std::string(60, '[') + std::string(60, ']') + "}";
  EXPECT_EQ(Parse(body).prompt, "x");
}

TEST(ServeRequest, DuplicateKeysTakeTheLast) {
  // nlohmann keeps the last value of a repeated key, as most JSON readers (and Python's) do.
  EXPECT_EQ(Parse(R"({"prompt": "a", "prompt": "b"})").prompt, "b");
}

}  // namespace
}  // namespace tandem::serve

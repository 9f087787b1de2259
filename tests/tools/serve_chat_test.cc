// /v1/chat/completions through the chat template (core/chat_template.h): the rendered conversation is what the
// model continues (greedy: as `tandem run` continues the same text), with one BOS whether or not the template
// writes bos_token; OpenAI's chat shapes, streamed and not; a template's raise_exception is a 400; a model without
// a template refuses chat but still serves completions.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/chat_template.h"
#include "tests/tools/serve_process.h"

namespace tandem {
namespace {

using nlohmann::json;
using test::JsonReply;
using test::PostJson;
using test::RunGreedy;
using test::ServeProcess;

std::string Model() { return test::ModelPath("stories260K.gguf"); }

// A template file in a folder of this process's own, removed when the process ends.
std::string TemplateFile(const std::string& name, const std::string& source) {
  struct Folder {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("tandem-serve-chat-" + std::to_string(getpid()));
    ~Folder() { std::filesystem::remove_all(path); }
  };
  static const Folder folder;
  const std::filesystem::path& dir = folder.path;
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << source;
  return path;
}

// The messages' contents one after the other: the rendered prompt is plain text that `run` can be given.
constexpr const char* kConcat = "{%- for m in messages %}{{ m.content }}{%- endfor %}";
// The same after bos_token, as Llama and Mistral templates start: the server must not add a second BOS.
constexpr const char* kConcatWithBos = "{{ bos_token }}{%- for m in messages %}{{ m.content }}{%- endfor %}";

const json kStoryMessages = json::array({{{"role", "system"}, {"content", "Once upon"}},
                                         {{"role", "user"}, {"content", {{{"type", "text"}, {"text", " a time"}}}}}});

class ServeChat : public ::testing::TestWithParam<const char*> {};

TEST_P(ServeChat, GreedyChatEqualsRunOnTheRenderedText) {
  const std::string name = GetParam() == kConcat ? "plain.jinja" : "bos.jinja";
  ServeProcess server({"-m", Model(), "-t", "1", "-c", "256", "--chat-template", TemplateFile(name, GetParam())});
  ASSERT_TRUE(server.ok());
  auto c = server.Client();
  const test::RunReference ref = RunGreedy(Model(), "Once upon a time", 32);
  const JsonReply r = PostJson(*c, "/v1/chat/completions",
                               json({{"model", "x"}, {"messages", kStoryMessages}, {"max_tokens", 32},
                                     {"temperature", 0}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& j = r.body;
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "stories260K.gguf");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], ref.text);
  EXPECT_EQ(j["usage"]["prompt_tokens"], ref.prompt_tokens.size());  // one BOS, either way
  EXPECT_EQ(j["usage"]["completion_tokens"], ref.tokens.size());
  EXPECT_EQ(j["choices"][0]["finish_reason"], ref.tokens.size() < 32u ? "stop" : "length");

  // Streamed: a role delta first, content deltas that join to the same text, the finish in the last chunk,
  // then the usage chunk and [DONE].
  httplib::Result s = c->Post("/v1/chat/completions",
                              json({{"messages", kStoryMessages}, {"max_tokens", 32}, {"temperature", 0},
                                    {"stream", true}, {"stream_options", {{"include_usage", true}}}})
                                  .dump(),
                              "application/json");
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200);
  const std::vector<std::string> events = test::SseData(s->body);
  ASSERT_GE(events.size(), 5u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  std::string text;
  for (size_t i = 1; i + 3 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["id"], first["id"]);
    EXPECT_FALSE(chunk["choices"][0]["delta"].contains("role"));
    EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
    text += chunk["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, ref.text);
  const json last = json::parse(events[events.size() - 3]);
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], j["choices"][0]["finish_reason"]);
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], j["usage"]);
}

INSTANTIATE_TEST_SUITE_P(Templates, ServeChat, ::testing::Values(kConcat, kConcatWithBos),
                         [](const auto& info) { return info.index == 0 ? "Plain" : "WritesBos"; });

// A built-in template: the chat answer is the completion of the text the template renders (computed here with
// the same ChatTemplate), and stop strings apply to chat as to completions.
TEST(ServeChatBuiltin, ChatmlEqualsTheCompletionOfItsRendering) {
  ServeProcess server({"-m", Model(), "-t", "1", "-c", "256", "--chat-template", "chatml"});
  ASSERT_TRUE(server.ok());
  auto c = server.Client();
  const json messages = json::array({{{"role", "user"}, {"content", "Tell me a story."}}});
  absl::StatusOr<ChatTemplate> chatml = ChatTemplate::Builtin("chatml");
  ASSERT_TRUE(chatml.ok()) << chatml.status();
  absl::StatusOr<std::string> rendered = chatml->Render(ChatRenderInput{.messages = messages});
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  const JsonReply completion = PostJson(*c, "/v1/completions",
                                        json({{"prompt", *rendered}, {"max_tokens", 24}, {"temperature", 0}}));
  const JsonReply chat = PostJson(*c, "/v1/chat/completions",
                                  json({{"messages", messages}, {"max_tokens", 24}, {"temperature", 0}}));
  ASSERT_EQ(completion.status, 200) << completion.raw;
  ASSERT_EQ(chat.status, 200) << chat.raw;
  const std::string text = completion.body["choices"][0]["text"];
  EXPECT_EQ(chat.body["choices"][0]["message"]["content"], text);
  EXPECT_EQ(chat.body["usage"], completion.body["usage"]);

  ASSERT_GT(text.size(), 6u);
  const std::string stop = text.substr(3, 3);
  const JsonReply stopped = PostJson(*c, "/v1/chat/completions",
                                     json({{"messages", messages}, {"max_tokens", 24}, {"temperature", 0},
                                           {"stop", stop}}));
  ASSERT_EQ(stopped.status, 200) << stopped.raw;
  EXPECT_EQ(stopped.body["choices"][0]["message"]["content"], text.substr(0, text.find(stop)));
  EXPECT_EQ(stopped.body["choices"][0]["finish_reason"], "stop");
}

// raise_exception in the template is the template refusing the conversation: 400, with its message.
TEST(ServeChatBuiltin, TemplateRaiseExceptionIs400) {
  const std::string path = TemplateFile(
      "raises.jinja",
      "{%- for m in messages %}{%- if m.role == 'system' %}{{ raise_exception('no system messages here') }}"
      "{%- endif %}{{ m.content }}{%- endfor %}");
  ServeProcess server({"-m", Model(), "-t", "1", "-c", "128", "--chat-template", path});
  ASSERT_TRUE(server.ok());
  auto c = server.Client();
  const JsonReply r = PostJson(*c, "/v1/chat/completions", json({{"messages", kStoryMessages}, {"max_tokens", 4}}));
  EXPECT_EQ(r.status, 400) << r.raw;
  test::ExpectErrorShape(r);
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("no system messages here"), std::string::npos)
      << r.raw;
  const JsonReply ok = PostJson(*c, "/v1/chat/completions",
                                json({{"messages", {{{"role", "user"}, {"content", "Once"}}}}, {"max_tokens", 4}}));
  EXPECT_EQ(ok.status, 200) << ok.raw;
  // chat_template_kwargs may not replace the request's own variables.
  const JsonReply kw = PostJson(*c, "/v1/chat/completions",
                                json({{"messages", {{{"role", "user"}, {"content", "Once"}}}},
                                      {"chat_template_kwargs", {{"messages", 1}}}}));
  EXPECT_EQ(kw.status, 400) << kw.raw;
}

// stories260K has no template: chat is refused with the reason, completions still work.
TEST(ServeChatBuiltin, NoTemplateRefusesChatOnly) {
  ServeProcess server({"-m", Model(), "-t", "1", "-c", "128"});
  ASSERT_TRUE(server.ok());
  auto c = server.Client();
  const JsonReply chat = PostJson(*c, "/v1/chat/completions", json({{"messages", kStoryMessages}}));
  EXPECT_EQ(chat.status, 500) << chat.raw;
  test::ExpectErrorShape(chat);
  EXPECT_EQ(chat.body["error"]["code"], "no_chat_template");
  EXPECT_NE(chat.body["error"]["message"].get<std::string>().find("--chat-template"), std::string::npos);
  EXPECT_EQ(PostJson(*c, "/v1/completions", json({{"prompt", "Once"}, {"max_tokens", 2}})).status, 200);
}

// A --chat-template that names nothing loadable fails the start, after listening, with one error line.
TEST(ServeChatBuiltin, UnloadableTemplateFlagFailsTheStart) {
  const test::CmdResult r = test::RunCommand(test::TandemBin() + " serve -m " + test::ShellQuote(Model()) +
                                             " --port 0 --chat-template /nonexistent/template.jinja");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("error: --chat-template"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tandem

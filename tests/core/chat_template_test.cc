// Chat templates: real templates of Llama 3.x, Qwen 2.5 and 3, Mistral, gpt-oss, DeepSeek R1, Phi, Granite,
// SmolLM and Hermes, and our built-ins, over conversations with tools, tool calls, reasoning and non-ASCII
// text, must render byte for byte as Python's jinja2 renders them under Hugging Face's settings
// (tests/data/chat_templates/refs.json, made by make_refs.py); then choosing a model's template.
#include <gtest/gtest.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>

#include "core/chat_template.h"
#include "core/gguf.h"
#include "core/status.h"
#include "core/tokenizer.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using Json = nlohmann::ordered_json;

std::tm PinnedNow() {  // 2024-07-26 10:30:00, as make_refs.py
  std::tm tm{};
  tm.tm_year = 124;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 10;
  tm.tm_min = 30;
  const std::time_t t = timegm(&tm);
  gmtime_r(&t, &tm);
  return tm;
}

const Json& Refs() {
  static const Json* refs =
      new Json(Json::parse(test::ReadFile(test::DataPath("chat_templates/refs.json"))));
  return *refs;
}

std::vector<std::string> TemplateNames() {
  std::vector<std::string> names;
  for (const Json& t : Refs()["templates"]) names.push_back(t["name"].get<std::string>());
  return names;
}

absl::StatusOr<ChatTemplate> LoadTemplate(const Json& t) {
  ChatTokens tokens{t["bos_token"].get<std::string>(), t["eos_token"].get<std::string>()};
  if (t.contains("builtin")) return ChatTemplate::Builtin(t["builtin"].get<std::string>(), tokens);
  const std::string file = t["file"].get<std::string>();
  return ChatTemplate::Parse(test::ReadFile(test::DataPath("chat_templates/" + file)), file, tokens);
}

class ChatTemplateRefs : public testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateRefs, RendersAsJinja2) {
  const Json* entry = nullptr;
  for (const Json& t : Refs()["templates"]) {
    if (t["name"] == GetParam()) entry = &t;
  }
  ASSERT_NE(entry, nullptr);
  absl::StatusOr<ChatTemplate> tmpl = LoadTemplate(*entry);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  // The probes find what Python's probes found.
  EXPECT_EQ(tmpl->caps().typed_content, (*entry)["caps"]["typed_content"].get<bool>());
  EXPECT_EQ(tmpl->caps().object_arguments, (*entry)["caps"]["object_arguments"].get<bool>());
  EXPECT_EQ(tmpl->caps().null_content, (*entry)["caps"]["null_content"].get<bool>());

  int checked = 0;
  for (const Json& c : Refs()["cases"]) {
    if (c["template"] != GetParam()) continue;
    SCOPED_TRACE(c["case"].get<std::string>());
    ChatRenderInput in;
    in.messages = c["messages"];
    in.tools = c["tools"];
    in.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    in.extra = c["extra"];
    in.now = PinnedNow;
    absl::StatusOr<std::string> out = tmpl->Render(in);
    ++checked;
    if (c.contains("expected")) {
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(*out, c["expected"].get<std::string>());
    } else if (c.contains("error")) {
      // raise_exception: the template's own words, after our name and position.
      ASSERT_FALSE(out.ok()) << *out;
      EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(out.status().message().find(c["error"].get<std::string>()), std::string_view::npos)
          << out.status();
      EXPECT_EQ(out.status().message().find("chat template " + tmpl->name() + ": "), 0u) << out.status();
    } else {
      EXPECT_FALSE(out.ok()) << "jinja2 failed with " << c["error_kind"].get<std::string>() << "; we rendered "
                             << *out;
    }
  }
  EXPECT_GE(checked, 15);
}

INSTANTIATE_TEST_SUITE_P(AllTemplates, ChatTemplateRefs, testing::ValuesIn(TemplateNames()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string name;
                           for (char ch : info.param) name.push_back(std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_');
                           return name;
                         });

TEST(ChatTemplateRefsFile, CoversTheTemplatesAndFeaturesAskedFor) {
  const std::vector<std::string> names = TemplateNames();
  for (const char* want :
       {"meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct", "meta-llama-Llama-3.3-70B-Instruct",
        "Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "mistralai-Mistral-Nemo-Instruct-2407",
        "Mistral-Small-3.2-24B-Instruct-2506", "openai-gpt-oss-120b", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
        "chatml", "llama3", "mistral"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  // Qwen3 with thinking on and off renders differently, and so does gpt-oss's reasoning effort.
  auto expected = [](const std::string& tmpl, const std::string& c) {
    for (const Json& r : Refs()["cases"]) {
      if (r["template"] == tmpl && r["case"] == c) return r.value("expected", std::string("<error>"));
    }
    return std::string("<missing>");
  };
  EXPECT_NE(expected("Qwen-Qwen3-0.6B", "enable_thinking_false"), expected("Qwen-Qwen3-0.6B", "enable_thinking_true"));
  EXPECT_NE(expected("Qwen-Qwen3-0.6B", "enable_thinking_false").find("<think>\n\n</think>"), std::string::npos);
  EXPECT_NE(expected("openai-gpt-oss-120b", "reasoning_effort_high").find("Reasoning: high"), std::string::npos);
  EXPECT_NE(expected("openai-gpt-oss-120b", "system_user").find("Current date: 2024-07-26"), std::string::npos);
}

// ---- Render's reshaping of OpenAI messages ----

absl::StatusOr<ChatTemplate> Inline(std::string_view source) { return ChatTemplate::Parse(source, "inline"); }

TEST(ChatTemplateRender, JoinsTextPartsForStringTemplates) {
  absl::StatusOr<ChatTemplate> t = Inline("{% for m in messages %}[{{ m.content }}]{% endfor %}");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->caps().typed_content);
  ChatRenderInput in;
  in.messages = Json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                                {"role": "user", "content": []}])");
  EXPECT_EQ(*t->Render(in), "[a\nb][]");
  in.messages = Json::parse(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])");
  absl::StatusOr<std::string> r = t->Render(in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "message 0: content part of type 'image_url' is not supported (text only)");
}

TEST(ChatTemplateRender, KeepsPartsForTemplatesThatLoopOverThem) {
  absl::StatusOr<ChatTemplate> t = Inline(
      "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}"
      "{% for p in m.content %}<{{ p.text }}>{% endfor %}{% endif %}{% endfor %}");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->caps().typed_content);
  ChatRenderInput in;
  in.messages = Json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])");
  EXPECT_EQ(*t->Render(in), "<a><b>");
}

TEST(ChatTemplateRender, ToolCallArgumentsBecomeObjectsWhereTemplatesPrintThemAsJson) {
  const char* kMessages = R"([{"role": "assistant", "content": null, "tool_calls": [
      {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": [1, 2], \"y\": \"é\"}"}}]}])";
  absl::StatusOr<ChatTemplate> json_style =
      Inline("{% for m in messages %}{% for c in m.tool_calls %}{{ c.function.arguments|tojson }}{% endfor %}{% endfor %}");
  ASSERT_TRUE(json_style.ok());
  EXPECT_TRUE(json_style->caps().object_arguments);
  ChatRenderInput in;
  in.messages = Json::parse(kMessages);
  EXPECT_EQ(*json_style->Render(in), R"({"x": [1, 2], "y": "é"})");

  // A template that concatenates the arguments as text gets the string as it came.
  absl::StatusOr<ChatTemplate> text_style = Inline(
      "{% for m in messages %}{% for c in m.tool_calls %}{{ 'args: ' + c.function.arguments }}{% endfor %}{% endfor %}");
  ASSERT_TRUE(text_style.ok());
  EXPECT_FALSE(text_style->caps().object_arguments);
  EXPECT_EQ(*text_style->Render(in), R"(args: {"x": [1, 2], "y": "é"})");
  // ... and arguments given as an object are written as json.dumps would.
  in.messages[0]["tool_calls"][0]["function"]["arguments"] = Json::parse(R"({"b": 1, "a": "é"})");
  EXPECT_EQ(*text_style->Render(in), R"(args: {"b": 1, "a": "é"})");
}

TEST(ChatTemplateRender, NullContentBecomesEmptyUnlessTheTemplateNeedsIt) {
  ChatRenderInput in;
  in.messages = Json::parse(R"([{"role": "assistant", "content": null}])");
  absl::StatusOr<ChatTemplate> concat = Inline("{% for m in messages %}{{ m.role + ': ' + m.content }}{% endfor %}");
  ASSERT_TRUE(concat.ok());
  EXPECT_FALSE(concat->caps().null_content);
  EXPECT_EQ(*concat->Render(in), "assistant: ");
}

TEST(ChatTemplateRender, VariablesAndTheirLimits) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(
      "{{ bos_token }}|{{ eos_token }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|{{ enable_thinking }}",
      "vars", ChatTokens{"<s>", ""});
  ASSERT_TRUE(t.ok());
  ChatRenderInput in;
  in.extra = {{"enable_thinking", false}};
  EXPECT_EQ(*t->Render(in), "<s>||None|None|True|False");  // no EOS: eos_token is undefined
  in.extra = {{"bos_token", "[B]"}};
  EXPECT_EQ(*t->Render(in), "[B]||None|None|True|");
  in.extra = {{"messages", Json::array()}};
  EXPECT_EQ(std::string(t->Render(in).status().message()),
            "extra template variable 'messages' would replace one of the request's");
  in.extra = Json::object();
  in.messages = Json::object();
  EXPECT_EQ(std::string(t->Render(in).status().message()), "messages must be an array");
}

TEST(ChatTemplateRender, ErrorsNameTheTemplate) {
  absl::StatusOr<ChatTemplate> broken = ChatTemplate::Parse("ok\n{% if %}", "my.jinja");
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(std::string(broken.status().message()), "chat template my.jinja: 2:7: expected an expression, got '%}'");
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse("{{ messages[0].content.upper() }}", "my.jinja");
  ASSERT_TRUE(t.ok());
  ChatRenderInput in;
  in.messages = Json::parse(R"([{"role": "user", "content": 5}])");
  EXPECT_EQ(std::string(t->Render(in).status().message()),
            "chat template my.jinja: 1:29: 'int object' has no attribute 'upper'");
}

TEST(ChatTemplateBuiltin, NamesAndErrors) {
  EXPECT_EQ(ChatTemplate::BuiltinNames(), (std::vector<std::string>{"chatml", "llama3", "mistral"}));
  for (const std::string& name : ChatTemplate::BuiltinNames()) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Builtin(name);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    EXPECT_EQ(t->name(), name);
  }
  EXPECT_EQ(ChatTemplate::Builtin("vicuna").status().message(),
            "no built-in chat template 'vicuna' (there are chatml, llama3, mistral)");
}

// ---- ForModel: which template a model gets ----

// A SentencePiece vocabulary of the given pieces (0 <unk>, 1 <s>, 2 </s>, then `extra`), with metadata added.
struct Model {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};
Model MakeModel(const std::vector<std::string>& extra, std::vector<GgufKV> more = {}) {
  std::vector<GgufValue> tokens, scores, types;
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
  pieces.insert(pieces.end(), extra.begin(), extra.end());
  pieces.push_back("a");
  for (size_t i = 0; i < pieces.size(); ++i) {
    tokens.push_back(GgufStr(pieces[i]));
    scores.push_back(GgufF32(0));
    types.push_back(GgufI32(i == 0 ? 2 : (i + 1 < pieces.size() ? 3 : 1)));
  }
  std::vector<GgufKV> kvs = {
      {"tokenizer.ggml.model", GgufStr("llama")},
      {"tokenizer.ggml.tokens", GgufArr(GgufType::kString, tokens)},
      {"tokenizer.ggml.scores", GgufArr(GgufType::kFloat32, scores)},
      {"tokenizer.ggml.token_type", GgufArr(GgufType::kInt32, types)},
      {"tokenizer.ggml.bos_token_id", GgufU32(1)},
      {"tokenizer.ggml.eos_token_id", GgufU32(2)},
  };
  kvs.insert(kvs.end(), more.begin(), more.end());
  Model m;
  absl::StatusOr<std::vector<uint8_t>> bytes = SerializeGguf(kvs, {});
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(*bytes);
  EXPECT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**file);
  EXPECT_TRUE(tok.ok()) << tok.status();
  m.file = *std::move(file);
  m.tok = *std::move(tok);
  return m;
}

std::string RenderOne(const ChatTemplate& t) {
  ChatRenderInput in;
  in.messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
  absl::StatusOr<std::string> out = t.Render(in);
  return out.ok() ? *out : "error: " + std::string(out.status().message());
}

TEST(ChatTemplateForModel, TheModelsOwnTemplateWithItsTokens) {
  Model m = MakeModel({}, {{"tokenizer.chat_template", GgufStr("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}")},
                           {"tokenizer.chat_template.tool_use", GgufStr("tools!")}});
  absl::StatusOr<ChatTemplate> t = ChatTemplate::ForModel(*m.file, *m.tok, "");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name(), "tokenizer.chat_template");
  EXPECT_EQ(RenderOne(*t), "<s>hi</s>");
  // A named template of the file.
  t = ChatTemplate::ForModel(*m.file, *m.tok, "tool_use");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name(), "tokenizer.chat_template.tool_use");
  EXPECT_EQ(RenderOne(*t), "tools!");
  // --chat-template NAME wins over the file's.
  t = ChatTemplate::ForModel(*m.file, *m.tok, "llama3");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name(), "llama3");
  EXPECT_EQ(RenderOne(*t), "<s><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateForModel, ATemplateFile) {
  const std::string path = testing::TempDir() + "/chat_template_test.jinja";
  {
    std::ofstream out(path);
    out << "[{{ messages|length }}]\n";
  }
  Model m = MakeModel({});
  absl::StatusOr<ChatTemplate> t = ChatTemplate::ForModel(*m.file, *m.tok, path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name(), path);
  EXPECT_EQ(RenderOne(*t), "[1]");  // jinja2 drops the one newline that ends a template
  std::remove(path.c_str());
  absl::StatusOr<ChatTemplate> missing = ChatTemplate::ForModel(*m.file, *m.tok, path);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "--chat-template " + path + ": not a built-in template (chatml, llama3, mistral), not a template of the "
            "model (tokenizer.chat_template." + path + "), and not a readable file");
}

TEST(ChatTemplateForModel, ABuiltinChosenByTheVocabulary) {
  struct Case {
    std::vector<std::string> specials;
    std::string want;
  };
  for (const Case& c : {Case{{"<|im_start|>", "<|im_end|>"}, "chatml"},
                        Case{{"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, "llama3"},
                        Case{{"[INST]", "[/INST]"}, "mistral"}}) {
    Model m = MakeModel(c.specials);
    absl::StatusOr<ChatTemplate> t = ChatTemplate::ForModel(*m.file, *m.tok, "");
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->name(), c.want);
  }
  Model plain = MakeModel({"<extra>"});
  absl::StatusOr<ChatTemplate> none = ChatTemplate::ForModel(*plain.file, *plain.tok, "");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(),
            "the model has no chat template (tokenizer.chat_template) and its vocabulary holds none of the built-in "
            "formats' tokens: pass --chat-template chatml|llama3|mistral|FILE");
  // The Mistral built-in over a real conversation, with the vocabulary's BOS and EOS.
  Model mistral = MakeModel({"[INST]", "[/INST]"});
  absl::StatusOr<ChatTemplate> t = ChatTemplate::ForModel(*mistral.file, *mistral.tok, "");
  ASSERT_TRUE(t.ok());
  ChatRenderInput in;
  in.messages = Json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U1"},
                                {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"}])");
  EXPECT_EQ(*t->Render(in), "<s>[INST] S\n\nU1 [/INST]A1</s>[INST] U2 [/INST]");
}

}  // namespace
}  // namespace tandem

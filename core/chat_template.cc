// Chat templates (core/chat_template.h).
#include "core/chat_template.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "core/status.h"

namespace tandem {
namespace {

using Json = nlohmann::ordered_json;

// Our own templates for the three common formats. A null content prints as nothing; tool calls print as JSON,
// in ChatML inside <tool_call> tags (as Hermes and Qwen write them) and in Llama 3 as its JSON call; Mistral's
// [INST] format has no tool turns, so they are left out there. Llama 3 names the "tool" role "ipython".
constexpr std::string_view kChatml = R"({%- for message in messages %}
    {{- '<|im_start|>' + message.role + '\n' }}
    {%- if message.content is string %}{{- message.content }}{% endif %}
    {%- for call in message.tool_calls or [] %}
        {%- if message.content or not loop.first %}{{- '\n' }}{% endif %}
        {{- '<tool_call>\n' + {'name': call.function.name, 'arguments': call.function.arguments} | tojson }}
        {{- '\n</tool_call>' }}
    {%- endfor %}
    {{- '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{% endif %}
)";

constexpr std::string_view kLlama3 = R"({{- bos_token }}
{%- for message in messages %}
    {%- set role = 'ipython' if message.role == 'tool' else message.role %}
    {{- '<|start_header_id|>' + role + '<|end_header_id|>\n\n' }}
    {%- if message.content is string %}{{- message.content | trim }}{% endif %}
    {%- for call in message.tool_calls or [] %}
        {{- {'name': call.function.name, 'parameters': call.function.arguments} | tojson }}
    {%- endfor %}
    {{- '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}
)";

// Mistral's [INST] format (v1 spacing): a system message goes before the next user turn's text.
constexpr std::string_view kMistral = R"({{- bos_token }}
{%- set ns = namespace(system='') %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == 'system' %}
        {%- set ns.system = content %}
    {%- elif message.role == 'user' %}
        {{- '[INST] ' + (ns.system + '\n\n' if ns.system else '') + content + ' [/INST]' }}
        {%- set ns.system = '' %}
    {%- elif message.role == 'assistant' and not message.tool_calls %}
        {{- content + eos_token }}
    {%- endif %}
{%- endfor %}
)";

struct BuiltinEntry {
  std::string_view name;
  std::string_view source;
  std::string_view marker;  // a special token that tells a vocabulary of this format
};
constexpr BuiltinEntry kBuiltins[] = {
    {"chatml", kChatml, "<|im_start|>"},
    {"llama3", kLlama3, "<|start_header_id|>"},
    {"mistral", kMistral, "[INST]"},
};

constexpr std::string_view kProbe = "tandem-probe-7f3a";

absl::StatusOr<jinja::Value> ToValue(const Json& j) { return jinja::Value::FromJson(j); }

// Joins a message's text parts into one string ("\n" between parts); any other kind of part is refused.
absl::StatusOr<std::string> JoinTextParts(const Json& parts, size_t index) {
  std::string out;
  bool first = true;
  for (const Json& part : parts) {
    const std::string type = part.is_object() && part.contains("type") && part["type"].is_string()
                                 ? part["type"].get<std::string>()
                                 : "";
    if (type != "text" || !part.contains("text") || !part["text"].is_string()) {
      return InvalidArgument("message ", index, ": content part of type '", type.empty() ? "?" : type,
                             "' is not supported (text only)");
    }
    if (!first) out += "\n";
    first = false;
    out += part["text"].get<std::string>();
  }
  return out;
}

absl::StatusOr<std::string> ReadTemplateFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument("cannot read ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  constexpr size_t kMaxTemplate = 4u << 20;
  if (ss.str().size() > kMaxTemplate) return InvalidArgument(path, " is larger than 4 MiB");
  return ss.str();
}

}  // namespace

const std::vector<std::string>& ChatTemplate::BuiltinNames() {
  static const auto* names = [] {
    auto* v = new std::vector<std::string>;
    for (const BuiltinEntry& b : kBuiltins) v->emplace_back(b.name);
    return v;
  }();
  return *names;
}

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source, std::string name, ChatTokens tokens) {
  absl::StatusOr<jinja::Template> t = jinja::Template::Parse(source);
  if (!t.ok()) return absl::Status(t.status().code(), Cat("chat template ", name, ": ", t.status().message()));
  ChatTemplate out(*std::move(t), std::move(name), std::move(tokens));
  out.ProbeCaps();
  return out;
}

absl::StatusOr<ChatTemplate> ChatTemplate::Builtin(std::string_view name, ChatTokens tokens) {
  for (const BuiltinEntry& b : kBuiltins) {
    if (b.name == name) return Parse(b.source, std::string(name), std::move(tokens));
  }
  return InvalidArgument("no built-in chat template '", name, "' (there are chatml, llama3, mistral)");
}

absl::StatusOr<ChatTemplate> ChatTemplate::ForModel(const GgufFile& file, const Tokenizer& tok,
                                                    std::string_view flag) {
  ChatTokens tokens;
  if (tok.bos_id() >= 0) tokens.bos = tok.Piece(tok.bos_id(), /*render_special=*/true);
  if (tok.eos_id() >= 0) tokens.eos = tok.Piece(tok.eos_id(), /*render_special=*/true);
  auto gguf_template = [&](const std::string& key) -> const std::string* {
    const GgufValue* v = file.Find(key);
    return v != nullptr ? v->AsString() : nullptr;
  };
  if (!flag.empty()) {
    for (const BuiltinEntry& b : kBuiltins) {
      if (b.name == flag) return Builtin(flag, std::move(tokens));
    }
    const std::string key = Cat("tokenizer.chat_template.", flag);
    if (const std::string* src = gguf_template(key)) return Parse(*src, key, std::move(tokens));
    absl::StatusOr<std::string> src = ReadTemplateFile(std::string(flag));
    if (!src.ok()) {
      return InvalidArgument("--chat-template ", flag, ": not a built-in template (chatml, llama3, mistral), not ",
                             "a template of the model (", key, "), and not a readable file");
    }
    return Parse(*src, std::string(flag), std::move(tokens));
  }
  if (const std::string* src = gguf_template("tokenizer.chat_template")) {
    return Parse(*src, "tokenizer.chat_template", std::move(tokens));
  }
  for (const BuiltinEntry& b : kBuiltins) {
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
      if (tok.RawPiece(id) == b.marker) return Builtin(b.name, std::move(tokens));
    }
  }
  return InvalidArgument("the model has no chat template (tokenizer.chat_template) and its vocabulary holds none ",
                         "of the built-in formats' tokens: pass --chat-template chatml|llama3|mistral|FILE");
}

absl::StatusOr<std::string> ChatTemplate::RenderRaw(const Json& messages, const ChatRenderInput& in,
                                                    const jinja::Limits& limits) const {
  jinja::Context ctx;
  auto add = [&](std::string name, const Json& j) -> absl::Status {
    TANDEM_ASSIGN_OR_RETURN(jinja::Value v, ToValue(j));
    ctx.emplace_back(std::move(name), std::move(v));
    return absl::OkStatus();
  };
  // The variables apply_chat_template passes: messages, tools, documents, add_generation_prompt, the special
  // tokens, then the extra ones.
  TANDEM_RETURN_IF_ERROR(add("messages", messages));
  TANDEM_RETURN_IF_ERROR(add("tools", in.tools));
  ctx.emplace_back("documents", jinja::Value::None());
  ctx.emplace_back("add_generation_prompt", jinja::Value::Bool(in.add_generation_prompt));
  auto extra_has = [&](std::string_view key) { return in.extra.is_object() && in.extra.contains(std::string(key)); };
  if (!tokens_.bos.empty() && !extra_has("bos_token")) {
    ctx.emplace_back("bos_token", jinja::Value::String(tokens_.bos));
  }
  if (!tokens_.eos.empty() && !extra_has("eos_token")) {
    ctx.emplace_back("eos_token", jinja::Value::String(tokens_.eos));
  }
  if (in.extra.is_object()) {
    for (const auto& [key, value] : in.extra.items()) TANDEM_RETURN_IF_ERROR(add(key, value));
  }
  jinja::RenderOptions opts;
  opts.limits = limits;
  opts.now = in.now;
  return template_.Render(ctx, opts);
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatRenderInput& in) const {
  // Mistakes in the request, named as such; the template's own errors below carry its name.
  if (!in.messages.is_array()) return InvalidArgument("messages must be an array");
  if (!in.extra.is_null() && !in.extra.is_object()) {
    return InvalidArgument("extra template variables must be an object");
  }
  if (in.extra.is_object()) {
    for (const char* key : {"messages", "tools", "documents", "add_generation_prompt"}) {
      if (in.extra.contains(key)) {
        return InvalidArgument("extra template variable '", key, "' would replace one of the request's");
      }
    }
  }
  Json messages = Json::array();
  for (size_t i = 0; i < in.messages.size(); ++i) {
    Json m = in.messages[i];
    if (!m.is_object()) return InvalidArgument("message ", i, " is not an object");
    if (m.contains("content") && m["content"].is_null() && !caps_.null_content) m["content"] = "";
    if (m.contains("content") && m["content"].is_array() && !caps_.typed_content) {
      TANDEM_ASSIGN_OR_RETURN(std::string text, JoinTextParts(m["content"], i));
      m["content"] = std::move(text);
    } else if (m.contains("content") && m["content"].is_array()) {
      TANDEM_RETURN_IF_ERROR(JoinTextParts(m["content"], i).status());  // text parts only, even kept as a list
    }
    if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
      for (Json& call : m["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        Json& fn = call["function"];
        if (!fn.contains("arguments")) continue;
        Json& args = fn["arguments"];
        if (caps_.object_arguments && args.is_string()) {
          // OpenAI sends the arguments as JSON text; Hugging Face templates want the object.
          Json parsed = Json::parse(args.get<std::string>(), nullptr, /*allow_exceptions=*/false);
          if (!parsed.is_discarded()) args = std::move(parsed);
        } else if (!caps_.object_arguments && !args.is_string()) {
          // As json.dumps writes it, which is what a Python client's string would hold.
          TANDEM_ASSIGN_OR_RETURN(jinja::Value v, ToValue(args));
          jinja::Budget budget;
          TANDEM_ASSIGN_OR_RETURN(std::string text, jinja::ToJson(v, jinja::JsonOptions{}, budget));
          args = std::move(text);
        }
      }
    }
    messages.push_back(std::move(m));
  }
  absl::StatusOr<std::string> out = RenderRaw(messages, in, jinja::Limits{});
  if (!out.ok()) {
    return absl::Status(out.status().code(), Cat("chat template ", name_, ": ", out.status().message()));
  }
  return out;
}

void ChatTemplate::ProbeCaps() {
  ChatRenderInput in;
  in.add_generation_prompt = false;
  in.now = [] { return std::tm{}; };
  // A probe needs little; a template that runs long on two messages is cut short and keeps the defaults.
  jinja::Limits limits;
  limits.max_steps = 1'000'000;
  auto shows_probe = [&](const Json& messages) {
    absl::StatusOr<std::string> out = RenderRaw(messages, in, limits);
    return out.ok() && out->find(kProbe) != std::string::npos;
  };
  const Json as_parts =
      Json::array({{{"role", "user"}, {"content", Json::array({{{"type", "text"}, {"text", kProbe}}})}}});
  // Parts are kept when the template looks inside them: the text shows, and not as the list's repr or JSON.
  absl::StatusOr<std::string> parts = RenderRaw(as_parts, in, limits);
  caps_.typed_content = parts.ok() && parts->find(kProbe) != std::string::npos &&
                        parts->find("'type': 'text'") == std::string::npos &&
                        parts->find("\"type\": \"text\"") == std::string::npos;

  // Tool-call arguments: the first of object or string that renders and shows, with the content empty
  // (which most templates need) or else null (which a few need to print tool calls at all).
  const Json object_args = {{"probe_arg", kProbe}};
  const std::string string_args = object_args.dump();
  for (const Json& content : {Json(""), Json(nullptr)}) {
    for (bool object : {true, false}) {
      const Json args = object ? object_args : Json(string_args);
      const Json call = {{"id", "call12345"},
                         {"type", "function"},
                         {"function", {{"name", "probe_tool"}, {"arguments", args}}}};
      const Json messages = Json::array({{{"role", "user"}, {"content", "hi"}},
                                         {{"role", "assistant"}, {"content", content}, {"tool_calls", {call}}}});
      if (shows_probe(messages)) {
        caps_.object_arguments = object;
        caps_.null_content = content.is_null();
        return;
      }
    }
  }
}

std::vector<int32_t> EncodeRenderedChat(const Tokenizer& tok, std::string_view text) {
  std::vector<int32_t> ids = tok.Encode(text, TokenizeOptions{.add_bos = true, .parse_special = true});
  if (ids.size() >= 2 && ids[0] == tok.bos_id() && ids[1] == tok.bos_id()) ids.erase(ids.begin());
  return ids;
}

}  // namespace tandem

// Chat templates: an OpenAI-style conversation to the prompt text a model was trained on, rendered as Hugging
// Face's apply_chat_template renders it (core/jinja.h). The template is the model's own (GGUF
// tokenizer.chat_template), one given with --chat-template, or one of ours for ChatML, Llama 3 and Mistral.
#pragma once

#include <ctime>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/gguf.h"
#include "core/jinja.h"
#include "core/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tandem {

// One render's input. JSON objects keep their key order (ordered_json): a template that prints a tool schema
// with tojson prints the keys as the client sent them, as Hugging Face does, so parse requests into
// nlohmann::ordered_json.
struct ChatRenderInput {
  // The OpenAI messages array: role, content (a string, null, or a list of {"type": "text", "text": ...}
  // parts), tool_calls, tool_call_id, reasoning_content, ... Other keys pass to the template as they are.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  bool add_generation_prompt = true;
  nlohmann::ordered_json tools;  // the tools array; null when the request has none
  // More template variables: enable_thinking, reasoning_effort, builtin_tools, ... They may replace bos_token
  // and eos_token, not messages, tools, documents or add_generation_prompt.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // The time strftime_now() formats; unset, the local time now.
  std::function<std::tm()> now;
};

// The model's BOS and EOS text, which templates read as bos_token and eos_token. Empty when the model has
// none: the variable is then undefined, as in Hugging Face.
struct ChatTokens {
  std::string bos;
  std::string eos;
};

// Immutable once made: copies are cheap (the parsed template is shared) and Render may run on several threads at
// once.
class ChatTemplate {
 public:
  // What the template accepts, found at Parse by rendering a probe conversation both ways.
  struct Caps {
    // Message content as a list of text parts, for templates that loop over them (Mistral Small 3.2).
    // Otherwise Render joins the text parts with "\n" into one string first, as llama.cpp and vLLM do.
    bool typed_content = false;
    // Tool-call arguments as a JSON object (Hugging Face's convention; templates print them with tojson).
    // Otherwise Render passes the OpenAI JSON string as it is.
    bool object_arguments = true;
    // A null content (OpenAI's, in a tool-call turn) kept as null. Otherwise it becomes "", as llama.cpp
    // does, since most templates concatenate content with strings; a few print tool calls only when it is
    // null.
    bool null_content = false;
  };

  // `name` is for messages: a built-in's name, a file's path, or the GGUF key.
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source, std::string name, ChatTokens tokens = {});
  // "chatml", "llama3" or "mistral".
  static absl::StatusOr<ChatTemplate> Builtin(std::string_view name, ChatTokens tokens = {});
  static const std::vector<std::string>& BuiltinNames();
  // `flag` (--chat-template) names a built-in, a named template of the file (tokenizer.chat_template.NAME)
  // or a template file; when empty, the file's tokenizer.chat_template, else the built-in whose special
  // tokens the vocabulary holds, else an error saying to pass --chat-template. bos_token and eos_token come
  // from the tokenizer.
  static absl::StatusOr<ChatTemplate> ForModel(const GgufFile& file, const Tokenizer& tok, std::string_view flag);

  // The prompt text. A request of the wrong shape (messages not an array, a content part that is not text)
  // is InvalidArgument saying so; the template's own errors read "chat template NAME: L:C: ...", and a
  // conversation it refuses (raise_exception) is InvalidArgument with its own message there. Running past the
  // render limits is ResourceExhausted.
  absl::StatusOr<std::string> Render(const ChatRenderInput& in) const;

  const std::string& name() const { return name_; }
  const Caps& caps() const { return caps_; }

 private:
  ChatTemplate(jinja::Template tmpl, std::string name, ChatTokens tokens)
      : template_(std::move(tmpl)), name_(std::move(name)), tokens_(std::move(tokens)) {}
  // The template over messages already in its shape.
  absl::StatusOr<std::string> RenderRaw(const nlohmann::ordered_json& messages, const ChatRenderInput& in,
                                        const jinja::Limits& limits) const;
  void ProbeCaps();

  jinja::Template template_;
  std::string name_;
  ChatTokens tokens_;
  Caps caps_;
};

// A rendered prompt's tokens: special-token text ("<|im_start|>") is the token, and the tokenizer's BOS comes
// first only when the template did not write bos_token itself (it would be a second one).
std::vector<int32_t> EncodeRenderedChat(const Tokenizer& tok, std::string_view text);

}  // namespace tandem

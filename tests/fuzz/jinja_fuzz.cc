// libFuzzer target over the Jinja interpreter (core/jinja.h), whose input, a chat template, comes from model
// files: any bytes as a template are refused with an error that names a line and column, or render within the
// limits, to the same text each time, against a fixed conversation (messages with tool calls, tools, tokens).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <string_view>

#include "core/jinja.h"

namespace {

using tandem::jinja::Context;
using tandem::jinja::RenderOptions;
using tandem::jinja::Template;
using tandem::jinja::Value;

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "jinja_fuzz: %s\n", what);
  std::abort();
}

const Context& FixedContext() {
  static const Context* ctx = [] {
    auto* c = new Context;
    const auto messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Weather in Paris? naïve ☃"},
      {"role": "assistant", "content": "", "reasoning_content": "Call the tool.", "tool_calls": [
        {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "call12345", "content": "{\"temp\": 21}"},
      {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}])");
    const auto tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
      "required": ["city"]}}}])");
    c->emplace_back("messages", *Value::FromJson(messages));
    c->emplace_back("tools", *Value::FromJson(tools));
    c->emplace_back("documents", Value::None());
    c->emplace_back("add_generation_prompt", Value::Bool(true));
    c->emplace_back("bos_token", Value::String("<s>"));
    c->emplace_back("eos_token", Value::String("</s>"));
    c->emplace_back("enable_thinking", Value::Bool(false));
    return c;
  }();
  return *ctx;
}

// "L:C: ..." with L and C positive.
bool NamesAPosition(std::string_view msg) {
  size_t i = 0;
  auto number = [&] {
    const size_t start = i;
    while (i < msg.size() && msg[i] >= '0' && msg[i] <= '9') ++i;
    return i > start && msg[start] != '0';
  };
  if (!number() || i >= msg.size() || msg[i++] != ':') return false;
  if (!number() || i + 1 >= msg.size() || msg[i] != ':' || msg[i + 1] != ' ') return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Template> t = Template::Parse(source);
  if (!t.ok()) {
    Check(NamesAPosition(std::string(t.status().message())), "a syntax error without line:column");
    return 0;
  }
  RenderOptions opts;
  opts.limits.max_steps = 200'000;
  opts.limits.max_loop_iterations = 20'000;
  opts.limits.max_output_bytes = 1 << 20;
  opts.now = [] {
    std::tm tm{};
    tm.tm_year = 124;
    tm.tm_mon = 6;
    tm.tm_mday = 26;
    return tm;
  };
  const absl::StatusOr<std::string> first = t->Render(FixedContext(), opts);
  if (first.ok()) {
    Check(first->size() <= opts.limits.max_output_bytes, "output past the limit");
  } else {
    Check(NamesAPosition(std::string(first.status().message())), "a render error without line:column");
  }
  const absl::StatusOr<std::string> second = t->Render(FixedContext(), opts);
  Check(first.ok() == second.ok(), "a second render succeeded or failed differently");
  if (first.ok()) Check(*first == *second, "a second render gave other text");
  return 0;
}

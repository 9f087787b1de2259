#include "tools/serve_request.h"

#include <cstdint>
#include <limits>
#include <stdexcept>

#include "core/status.h"

namespace tandem::serve {
namespace {

using json = nlohmann::ordered_json;

ApiError BadField(std::string_view param, std::string message) {
  return ApiError{.status = 400, .message = std::move(message), .param = std::string(param)};
}

const char* TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a decimal";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "something else";
  }
}

ApiError WrongType(std::string_view name, std::string_view expected, const json& got) {
  return BadField(name, Cat("Invalid type for '", name, "': expected ", expected, ", but got ", TypeName(got),
                            " instead."));
}

// The field's value, or null when absent: OpenAI clients send null for "not set".
const json& Field(const json& obj, const char* name) {
  static const json kNull;
  const auto it = obj.find(name);
  return it == obj.end() ? kNull : *it;
}

std::optional<ApiError> ReadNumber(const json& obj, const char* name, double lo, double hi, float* out) {
  const json& v = Field(obj, name);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number()) return WrongType(name, "a number", v);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) {  // also refuses the infinity an overlong literal parses to
    return BadField(name, Cat("'", name, "' must be between ", lo, " and ", hi, ", got ", v.dump()));
  }
  *out = static_cast<float>(x);
  return std::nullopt;
}

// An integer in [lo, hi]; decimals are refused even when whole, as OpenAI does.
std::optional<ApiError> ReadInt(const json& obj, const char* name, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  const json& v = Field(obj, name);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number_integer()) return WrongType(name, "an integer", v);
  const bool too_big = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi);
  if (too_big || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    return BadField(name, Cat("'", name, "' must be between ", lo, " and ", hi, ", got ", v.dump()));
  }
  *out = v.get<int64_t>();
  return std::nullopt;
}

std::optional<ApiError> ReadBool(const json& obj, const char* name, bool* out) {
  const json& v = Field(obj, name);
  if (v.is_null()) return std::nullopt;
  if (!v.is_boolean()) return WrongType(name, "a boolean", v);
  *out = v.get<bool>();
  return std::nullopt;
}

// A feature this server does not have yet: refused rather than ignored, so a client never gets a silent
// approximation of what it asked for.
ApiError NotSupported(std::string_view name, std::string_view what) {
  return BadField(name, Cat("'", name, "': ", what, " is not supported by this server yet"));
}

// "stop": a string or a list of strings, or null.
std::optional<ApiError> ReadStop(const json& obj, const RequestLimits& limits, std::vector<std::string>* out) {
  const json& v = Field(obj, "stop");
  if (v.is_null()) return std::nullopt;
  auto add = [&](const json& s) -> std::optional<ApiError> {
    if (!s.is_string()) return WrongType("stop", "a string or an array of strings", s);
    const std::string& text = s.get_ref<const std::string&>();
    if (text.size() > limits.max_stop_bytes) {
      return BadField("stop", Cat("a stop sequence may be at most ", limits.max_stop_bytes, " bytes, got ",
                                  text.size()));
    }
    if (!text.empty()) out->push_back(text);
    return std::nullopt;
  };
  if (v.is_string()) return add(v);
  if (!v.is_array()) return WrongType("stop", "a string or an array of strings", v);
  if (v.size() > limits.max_stops) {
    return BadField("stop", Cat("at most ", limits.max_stops, " stop sequences, got ", v.size()));
  }
  for (const json& s : v) {
    if (std::optional<ApiError> e = add(s)) return e;
  }
  return std::nullopt;
}

// An array of token ids, each a non-negative int32 (checked against the vocabulary later).
std::optional<ApiError> ReadTokenIds(const json& arr, const RequestLimits& limits, std::vector<int32_t>* out) {
  if (arr.size() > limits.max_prompt_tokens) {
    return BadField("prompt", Cat("the prompt may hold at most ", limits.max_prompt_tokens, " tokens"));
  }
  out->reserve(arr.size());
  for (const json& t : arr) {
    if (!t.is_number_integer()) return WrongType("prompt", "an array of token ids (integers)", t);
    constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();
    const bool in_range = t.is_number_unsigned() ? t.get<uint64_t>() <= static_cast<uint64_t>(kMaxId)
                                                 : t.get<int64_t>() >= 0 && t.get<int64_t>() <= kMaxId;
    if (!in_range) return BadField("prompt", Cat("token id ", t.dump(), " is out of range"));
    out->push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return std::nullopt;
}

// "prompt": a string, an array of one string, an array of token ids, or an array of one array of token ids.
// More than one prompt is a batch, which n=1 rules out.
std::optional<ApiError> ReadPrompt(const json& obj, const RequestLimits& limits, CompletionRequest* out) {
  const json& v = Field(obj, "prompt");
  constexpr std::string_view kShapes = "a string, an array of one string, or an array of token ids";
  if (v.is_null()) return BadField("prompt", "'prompt' is required");
  if (v.is_string()) {
    out->prompt = v.get<std::string>();
    return std::nullopt;
  }
  if (!v.is_array()) return WrongType("prompt", kShapes, v);
  if (v.empty()) return BadField("prompt", "'prompt' is an empty array");
  if (v[0].is_number_integer()) {
    out->prompt_is_tokens = true;
    return ReadTokenIds(v, limits, &out->prompt_tokens);
  }
  if (v.size() > 1) {
    return BadField("prompt", Cat("'prompt' holds ", v.size(), " prompts; this server takes one per request"));
  }
  if (v[0].is_string()) {
    out->prompt = v[0].get<std::string>();
    return std::nullopt;
  }
  if (v[0].is_array()) {
    out->prompt_is_tokens = true;
    return ReadTokenIds(v[0], limits, &out->prompt_tokens);
  }
  return WrongType("prompt", kShapes, v[0]);
}

// "messages": each an object with a string role and content that is a string, null, or text parts (the chat
// template joins them or hands them over, as the template wants). Other keys (name, tool_calls, tool_call_id)
// go to the template.
std::optional<ApiError> ReadMessages(const json& obj, CompletionRequest* out) {
  const json& v = Field(obj, "messages");
  if (v.is_null()) return BadField("messages", "'messages' is required");
  if (!v.is_array()) return WrongType("messages", "an array", v);
  if (v.empty()) return BadField("messages", "'messages' must hold at least one message");
  out->messages = json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = Cat("messages[", i, "]");
    const json& m = v[i];
    if (!m.is_object()) return WrongType(at, "an object", m);
    const json& role = Field(m, "role");
    if (!role.is_string()) return WrongType(Cat(at, ".role"), "a string", role);
    const std::string& r = role.get_ref<const std::string&>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      return BadField(Cat(at, ".role"), Cat("Invalid value for '", at, ".role': '", r,
                                            "' (expected system, developer, user, assistant or tool)"));
    }
    const json& content = Field(m, "content");
    if (content.is_array()) {
      for (size_t j = 0; j < content.size(); ++j) {
        const json& part = content[j];
        const std::string pat = Cat(at, ".content[", j, "]");
        if (!part.is_object()) return WrongType(pat, "an object", part);
        const json& type = Field(part, "type");
        if (!type.is_string()) return WrongType(Cat(pat, ".type"), "a string", type);
        if (type.get_ref<const std::string&>() != "text") {
          return NotSupported(Cat(pat, ".type"), Cat("content of type '", type.get_ref<const std::string&>(), "'"));
        }
        const json& text = Field(part, "text");
        if (!text.is_string()) return WrongType(Cat(pat, ".text"), "a string", text);
      }
    } else if (!content.is_string() && !content.is_null()) {
      return WrongType(Cat(at, ".content"), "a string or an array of content parts", content);
    }
    out->messages.push_back(m);
  }
  return std::nullopt;
}

// The fields that turn on what this server lacks: absent, null, false, 0 or the default are fine.
std::optional<ApiError> RefuseUnsupported(const json& obj, ApiEndpoint endpoint) {
  const json& logprobs = Field(obj, "logprobs");
  if (!logprobs.is_null() && !(logprobs.is_boolean() && !logprobs.get<bool>()) &&
      !(logprobs.is_number_integer() && logprobs.get<int64_t>() == 0)) {
    return NotSupported("logprobs", "returning log probabilities");
  }
  const json& top_logprobs = Field(obj, "top_logprobs");
  if (!top_logprobs.is_null() && !(top_logprobs.is_number_integer() && top_logprobs.get<int64_t>() == 0)) {
    return NotSupported("top_logprobs", "returning log probabilities");
  }
  const json& logit_bias = Field(obj, "logit_bias");
  if (!logit_bias.is_null() && !(logit_bias.is_object() && logit_bias.empty())) {
    return NotSupported("logit_bias", "biasing logits");
  }
  const json& format = Field(obj, "response_format");
  if (!format.is_null()) {
    if (!format.is_object()) return WrongType("response_format", "an object", format);
    const json& type = Field(format, "type");
    if (!(type.is_string() && type.get_ref<const std::string&>() == "text")) {
      return NotSupported("response_format", "a response format other than text");
    }
  }
  if (endpoint == ApiEndpoint::kCompletions) {
    const json& echo = Field(obj, "echo");
    if (!echo.is_null() && !echo.is_boolean()) return WrongType("echo", "a boolean", echo);
    if (echo.is_boolean() && echo.get<bool>()) return NotSupported("echo", "echoing the prompt");
    const json& suffix = Field(obj, "suffix");
    if (!suffix.is_null() && !suffix.is_string()) return WrongType("suffix", "a string", suffix);
    if (suffix.is_string() && !suffix.get_ref<const std::string&>().empty()) {
      return NotSupported("suffix", "a suffix (fill in the middle)");
    }
    std::optional<int64_t> best_of;
    if (std::optional<ApiError> e = ReadInt(obj, "best_of", 1, 1, &best_of)) {
      e->message += " (this server makes one completion per request)";
      return e;
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ParseObject(const json& obj, ApiEndpoint endpoint, const RequestLimits& limits,
                                    CompletionRequest* out) {
  out->endpoint = endpoint;
  const json& model = Field(obj, "model");
  if (!model.is_null() && !model.is_string()) return WrongType("model", "a string", model);
  if (model.is_string()) out->model = model.get<std::string>();

  if (endpoint == ApiEndpoint::kCompletions) {
    if (std::optional<ApiError> e = ReadPrompt(obj, limits, out)) return e;
  } else {
    if (std::optional<ApiError> e = ReadMessages(obj, out)) return e;
    const json& tools = Field(obj, "tools");
    if (!tools.is_null() && !tools.is_array()) return WrongType("tools", "an array", tools);
    out->tools = tools;
    const json& kwargs = Field(obj, "chat_template_kwargs");
    if (!kwargs.is_null() && !kwargs.is_object()) return WrongType("chat_template_kwargs", "an object", kwargs);
    out->template_kwargs = kwargs;
  }

  constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
  std::optional<int64_t> max_tokens, max_completion_tokens;
  if (std::optional<ApiError> e = ReadInt(obj, "max_tokens", 0, kMaxTokens, &max_tokens)) return e;
  if (std::optional<ApiError> e = ReadInt(obj, "max_completion_tokens", 0, kMaxTokens, &max_completion_tokens)) {
    return e;
  }
  if (max_completion_tokens) max_tokens = max_completion_tokens;  // the newer name wins, as in OpenAI's API
  if (max_tokens) out->max_tokens = static_cast<int>(*max_tokens);

  SamplerOptions& s = out->sampling;
  if (std::optional<ApiError> e = ReadNumber(obj, "temperature", 0, 100, &s.temp)) return e;
  if (std::optional<ApiError> e = ReadNumber(obj, "top_p", 0, 1, &s.top_p)) return e;
  if (std::optional<ApiError> e = ReadNumber(obj, "min_p", 0, 1, &s.min_p)) return e;
  if (std::optional<ApiError> e = ReadNumber(obj, "repeat_penalty", 0, 100, &s.repeat_penalty)) return e;
  if (std::optional<ApiError> e = ReadNumber(obj, "presence_penalty", -2, 2, &s.presence_penalty)) return e;
  if (std::optional<ApiError> e = ReadNumber(obj, "frequency_penalty", -2, 2, &s.frequency_penalty)) return e;
  std::optional<int64_t> top_k, repeat_last_n, seed, n;
  if (std::optional<ApiError> e = ReadInt(obj, "top_k", -1, 1 << 24, &top_k)) return e;  // -1: off (vLLM's)
  if (top_k) s.top_k = static_cast<int>(std::max<int64_t>(*top_k, 0));
  if (std::optional<ApiError> e = ReadInt(obj, "repeat_last_n", -1, 1 << 24, &repeat_last_n)) return e;
  if (repeat_last_n) s.repeat_last_n = static_cast<int>(*repeat_last_n);
  {
    const json& v = Field(obj, "seed");
    if (v.is_number_unsigned()) {
      out->seed = v.get<uint64_t>();
    } else if (std::optional<ApiError> e = ReadInt(obj, "seed", -1, std::numeric_limits<int64_t>::max(), &seed)) {
      return e;
    } else if (seed && *seed >= 0) {
      out->seed = static_cast<uint64_t>(*seed);
    }
  }
  if (std::optional<ApiError> e = ReadInt(obj, "n", 1, 1, &n)) {
    e->message += " (this server makes one choice per request)";
    return e;
  }
  if (std::optional<ApiError> e = ReadStop(obj, limits, &out->stop)) return e;
  if (std::optional<ApiError> e = ReadBool(obj, "stream", &out->stream)) return e;
  if (std::optional<ApiError> e = ReadBool(obj, "ignore_eos", &out->ignore_eos)) return e;
  const json& stream_options = Field(obj, "stream_options");
  if (!stream_options.is_null()) {
    if (!stream_options.is_object()) return WrongType("stream_options", "an object", stream_options);
    const json& include = Field(stream_options, "include_usage");
    if (!include.is_null() && !include.is_boolean()) {
      return WrongType("stream_options.include_usage", "a boolean", include);
    }
    out->include_usage = include.is_boolean() && include.get<bool>();
  }
  return RefuseUnsupported(obj, endpoint);
}

// Thrown from the parser's callback to stop at the first value nested too deeply.
struct TooDeep : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace

std::optional<ApiError> ParseCompletionRequest(std::string_view body, ApiEndpoint endpoint, CompletionRequest* out,
                                               const RequestLimits& limits) {
  json doc;
  try {
    const int max_depth = limits.max_json_depth;
    doc = json::parse(body.begin(), body.end(), [max_depth](int depth, json::parse_event_t, json&) {
      if (depth > max_depth) throw TooDeep("too deep");
      return true;
    });
  } catch (const TooDeep&) {
    return ApiError{.message = Cat("the request body is nested more than ", limits.max_json_depth, " levels deep")};
  } catch (const json::exception& e) {
    return ApiError{.message = Cat("We could not parse the JSON body of your request: ", e.what())};
  }
  if (!doc.is_object()) {
    return ApiError{.message = Cat("the request body must be a JSON object, got ", TypeName(doc))};
  }
  try {
    return ParseObject(doc, endpoint, limits, out);
  } catch (const json::exception& e) {  // a check above missed a shape: still the client's error, not a crash
    return ApiError{.message = Cat("invalid request: ", e.what())};
  }
}

}  // namespace tandem::serve

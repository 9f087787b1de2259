#include "arch/decoder.h"

#include <cmath>
#include <optional>
#include <string>

#include "core/status.h"

namespace tandem {
namespace {

constexpr int64_t kMaxCount = int64_t{1} << 20;  // layers, widths, heads, experts
constexpr int64_t kMaxContext = int64_t{1} << 24;

const HParam kHParams[] = {
    {.key = "block_count", .int_field = &ModelConfig::n_layer, .required = true, .lo = 1, .hi = 4096},
    {.key = "embedding_length", .int_field = &ModelConfig::n_embd, .required = true, .lo = 1, .hi = kMaxCount},
    {.key = "feed_forward_length", .int_field = &ModelConfig::n_ff, .required = true, .lo = 1, .hi = kMaxCount},
    {.key = "expert_feed_forward_length", .int_field = &ModelConfig::n_ff_expert, .lo = 1, .hi = kMaxCount},
    {.key = "expert_shared_feed_forward_length", .int_field = &ModelConfig::n_ff_shexp, .lo = 1, .hi = kMaxCount},
    {.key = "attention.head_count", .int_field = &ModelConfig::n_head, .required = true, .lo = 1, .hi = kMaxCount},
    {.key = "attention.head_count_kv", .int_field = &ModelConfig::n_head_kv, .lo = 1, .hi = kMaxCount},
    {.key = "attention.key_length", .int_field = &ModelConfig::head_dim, .lo = 1, .hi = kMaxCount},
    {.key = "context_length", .int_field = &ModelConfig::n_ctx_train, .required = true, .lo = 1, .hi = kMaxContext},
    {.key = "rope.dimension_count", .int_field = &ModelConfig::n_rot, .lo = 1, .hi = kMaxCount},
    {.key = "attention.layer_norm_rms_epsilon", .float_field = &ModelConfig::rms_eps, .required = true, .lo = 0,
     .hi = 1},
    {.key = "rope.freq_base", .float_field = &ModelConfig::rope_freq_base, .lo = 0, .hi = 1e12, .def = 10000},
    {.key = "rope.scale_linear", .float_field = &ModelConfig::rope_freq_scale, .lo = 0, .hi = 1e6, .def = 1,
     .reciprocal = true},
    {.key = "expert_count", .int_field = &ModelConfig::n_expert, .lo = 0, .hi = 1 << 16},
    {.key = "expert_used_count", .int_field = &ModelConfig::n_expert_used, .lo = 0, .hi = 1 << 16},
};

// rope.scaling.type: "linear" (the default when a factor is given without a type, as llama.cpp reads it) divides
// positions by rope.scaling.factor; "yarn" mixes interpolation and extrapolation per frequency; "none" ignores the
// factor. Other kinds change RoPE in ways no golden checks yet, so they are refused rather than ignored.
absl::Status ReadRopeScaling(const GgufFile& file, ModelConfig& c) {
  auto key = [&](std::string_view k) { return Cat(c.arch, ".", k); };
  TANDEM_ASSIGN_OR_RETURN(const std::string* type, StringKey(file, key("rope.scaling.type")));
  const std::string kind = type != nullptr ? *type : "linear";
  if (kind == "none") {
    c.rope_freq_scale = 1.0f;
    return absl::OkStatus();
  }
  if (kind != "linear" && kind != "yarn") {
    return Unimplemented("key '", key("rope.scaling.type"), "': RoPE scaling '", kind, "' is not supported");
  }
  TANDEM_ASSIGN_OR_RETURN(std::optional<double> factor, FloatKey(file, key("rope.scaling.factor"), 0.0, 1e6));
  if (factor) c.rope_freq_scale = static_cast<float>(1.0 / *factor);
  if (kind == "linear") return absl::OkStatus();

  const GgufValue* orig = file.Find(key("rope.scaling.original_context_length"));
  c.rope_n_ctx_orig = c.n_ctx_train;
  if (orig != nullptr) {
    const std::optional<int64_t> n = orig->AsInt();
    if (!n || *n < 1 || *n > kMaxContext) {
      return InvalidArgument("key '", key("rope.scaling.original_context_length"), "' must be an integer in [1, ",
                             kMaxContext, "]");
    }
    c.rope_n_ctx_orig = static_cast<int>(*n);
  }
  TANDEM_ASSIGN_OR_RETURN(std::optional<double> attn, FloatKey(file, key("rope.scaling.attn_factor"), 0.0, 1e6));
  // The kernels scale by attn_factor * (1 + 0.1 ln f); llama.cpp's magnitude is (1 + 0.1 ln f) for f > 1 (and 1
  // below), so it passes the ratio, times the file's attention factor.
  const float f = 1.0f / c.rope_freq_scale;
  const float mscale = f <= 1.0f ? 1.0f : 0.1f * std::log(f) + 1.0f;
  c.rope_ext_factor = 1.0f;
  c.rope_attn_factor = mscale / (1.0f + 0.1f * std::log(f)) * static_cast<float>(attn.value_or(1.0));
  return absl::OkStatus();
}

}  // namespace

std::span<const HParam> DecoderHParams() { return kHParams; }

absl::Status FinishDecoderHParams(const GgufFile& file, ModelConfig& c) {
  auto key = [&](std::string_view k) { return Cat(c.arch, ".", k); };
  if (c.n_head_kv == 0) c.n_head_kv = c.n_head;
  if (c.head_dim == 0) {
    if (c.n_embd % c.n_head != 0) {
      return InvalidArgument("key '", key("attention.head_count"), "': ", c.n_head,
                             " heads do not divide embedding_length ", c.n_embd);
    }
    c.head_dim = c.n_embd / c.n_head;
  }
  if (const GgufValue* v = file.Find(key("attention.value_length")); v && v->AsInt() != c.head_dim) {
    return Unimplemented("key '", key("attention.value_length"), "': values of another width than the keys' (",
                         c.head_dim, ") are not supported");
  }
  if (c.n_head % c.n_head_kv != 0) {
    return InvalidArgument("key '", key("attention.head_count_kv"), "': ", c.n_head_kv,
                           " KV heads do not divide head_count ", c.n_head);
  }
  if (c.n_rot == 0) c.n_rot = c.head_dim;
  if (c.n_rot % 2 != 0 || c.n_rot > c.head_dim) {
    return InvalidArgument("key '", key("rope.dimension_count"), "': ", c.n_rot, " must be even and at most head_dim ",
                           c.head_dim);
  }
  if (c.n_ff_expert == 0) c.n_ff_expert = c.n_ff;
  TANDEM_RETURN_IF_ERROR(ReadRopeScaling(file, c));
  if (c.n_expert > 0 && (c.n_expert_used < 1 || c.n_expert_used > c.n_expert)) {
    return InvalidArgument("key '", key("expert_used_count"), "': ", c.n_expert_used, " must be in [1, expert_count ",
                           c.n_expert, "]");
  }
  if (c.n_expert == 0 && c.n_expert_used != 0) {
    return InvalidArgument("key '", key("expert_used_count"), "': ", c.n_expert_used, " without an expert_count");
  }
  return absl::OkStatus();
}

}  // namespace tandem

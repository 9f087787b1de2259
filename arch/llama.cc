// The llama family: Llama 1/2, Mistral, and Mixtral as Llama plus MoE (the same general.architecture). Pre-norm
// RMSNorm blocks, RoPE in NORM mode (with Llama 3.1's frequency factors when the file has them), grouped-query
// attention, a SwiGLU FFN, or a softmax top-k router over SwiGLU experts.
#include <cmath>

#include "arch/arch.h"
#include "arch/blocks.h"
#include "arch/tensor_names.h"
#include "core/status.h"

namespace tandem {
namespace {

namespace tn = tensor_names;

constexpr int64_t kMaxCount = int64_t{1} << 20;  // layers, widths, heads, experts
constexpr int64_t kMaxContext = int64_t{1} << 24;

// Where each unit's tensors sit in its UnitWeights.
enum EmbdSlot { kTokenEmbdSlot };
enum AttnSlot { kAttnNormSlot, kWqSlot, kWkSlot, kWvSlot, kWoSlot, kRopeFreqsSlot };
enum FfnSlot { kFfnNormSlot, kGateSlot, kUpSlot, kDownSlot, kRouterSlot };
enum ExpertSlot { kExpGateSlot, kExpUpSlot, kExpDownSlot };
enum OutputSlot { kOutputNormSlot, kOutputSlot };

const HParam kHParams[] = {
    {.key = "block_count", .int_field = &ModelConfig::n_layer, .required = true, .lo = 1, .hi = 4096},
    {.key = "embedding_length", .int_field = &ModelConfig::n_embd, .required = true, .lo = 1, .hi = kMaxCount},
    {.key = "feed_forward_length", .int_field = &ModelConfig::n_ff, .required = true, .lo = 1, .hi = kMaxCount},
    {.key = "expert_feed_forward_length", .int_field = &ModelConfig::n_ff_expert, .lo = 1, .hi = kMaxCount},
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

const TensorEntry kSchema[] = {
    {.name = tn::kTokenEmbd, .unit = UnitKind::kEmbd, .slot = kTokenEmbdSlot, .shape = {Dim::kEmbd, Dim::kVocab},
     .n_dims = 2},
    {.name = tn::kRopeFreqs, .unit = UnitKind::kAttn, .slot = kRopeFreqsSlot, .role = TensorRole::kRopeFactors,
     .shape = {Dim::kRotHalf}, .presence = Presence::kOptional},
    {.name = tn::kAttnNorm, .unit = UnitKind::kAttn, .slot = kAttnNormSlot, .role = TensorRole::kNorm,
     .shape = {Dim::kEmbd}},
    {.name = tn::kAttnQ, .unit = UnitKind::kAttn, .slot = kWqSlot, .shape = {Dim::kEmbd, Dim::kQ}, .n_dims = 2},
    {.name = tn::kAttnK, .unit = UnitKind::kAttn, .slot = kWkSlot, .shape = {Dim::kEmbd, Dim::kKv}, .n_dims = 2},
    {.name = tn::kAttnV, .unit = UnitKind::kAttn, .slot = kWvSlot, .shape = {Dim::kEmbd, Dim::kKv}, .n_dims = 2},
    {.name = tn::kAttnOutput, .unit = UnitKind::kAttn, .slot = kWoSlot, .shape = {Dim::kQ, Dim::kEmbd}, .n_dims = 2},
    {.name = tn::kFfnNorm, .unit = UnitKind::kFfn, .slot = kFfnNormSlot, .role = TensorRole::kNorm,
     .shape = {Dim::kEmbd}},
    {.name = tn::kFfnGate, .unit = UnitKind::kFfn, .slot = kGateSlot, .shape = {Dim::kEmbd, Dim::kFf}, .n_dims = 2,
     .presence = Presence::kDenseOnly},
    {.name = tn::kFfnUp, .unit = UnitKind::kFfn, .slot = kUpSlot, .shape = {Dim::kEmbd, Dim::kFf}, .n_dims = 2,
     .presence = Presence::kDenseOnly},
    {.name = tn::kFfnDown, .unit = UnitKind::kFfn, .slot = kDownSlot, .shape = {Dim::kFf, Dim::kEmbd}, .n_dims = 2,
     .presence = Presence::kDenseOnly},
    {.name = tn::kFfnGateInp, .unit = UnitKind::kFfn, .slot = kRouterSlot, .role = TensorRole::kRouter,
     .shape = {Dim::kEmbd, Dim::kExpert}, .n_dims = 2, .presence = Presence::kMoeOnly},
    {.name = tn::kFfnGateExps, .per_expert_name = tn::kFfnGateExpert, .unit = UnitKind::kFfn, .slot = kExpGateSlot,
     .shape = {Dim::kEmbd, Dim::kFfExpert, Dim::kExpert}, .n_dims = 3, .presence = Presence::kMoeOnly,
     .stack = true},
    {.name = tn::kFfnUpExps, .per_expert_name = tn::kFfnUpExpert, .unit = UnitKind::kFfn, .slot = kExpUpSlot,
     .shape = {Dim::kEmbd, Dim::kFfExpert, Dim::kExpert}, .n_dims = 3, .presence = Presence::kMoeOnly,
     .stack = true},
    {.name = tn::kFfnDownExps, .per_expert_name = tn::kFfnDownExpert, .unit = UnitKind::kFfn, .slot = kExpDownSlot,
     .shape = {Dim::kFfExpert, Dim::kEmbd, Dim::kExpert}, .n_dims = 3, .presence = Presence::kMoeOnly,
     .stack = true},
    {.name = tn::kOutputNorm, .unit = UnitKind::kOutput, .slot = kOutputNormSlot, .role = TensorRole::kNorm,
     .shape = {Dim::kEmbd}},
    {.name = tn::kOutput, .unit = UnitKind::kOutput, .slot = kOutputSlot, .shape = {Dim::kEmbd, Dim::kVocab},
     .n_dims = 2, .presence = Presence::kOptional, .fallback = tn::kTokenEmbd},
};

class Llama final : public Architecture {
 public:
  std::string_view name() const override { return "llama"; }
  std::span<const HParam> hparams() const override { return kHParams; }
  Schema schema() const override { return kSchema; }

  absl::Status FinishHParams(const GgufFile& file, ModelConfig& c) const override {
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
    // Newer files spell linear scaling rope.scaling.type = "linear" + rope.scaling.factor. Other kinds change RoPE
    // in ways no llama-family golden checks yet, so they are refused rather than ignored.
    TANDEM_ASSIGN_OR_RETURN(const std::string* type, StringKey(file, key("rope.scaling.type")));
    if (type != nullptr) {
      if (*type == "linear") {
        TANDEM_ASSIGN_OR_RETURN(std::optional<double> factor, FloatKey(file, key("rope.scaling.factor"), 0.0, 1e6));
        if (factor) c.rope_freq_scale = static_cast<float>(1.0 / *factor);
      } else if (*type != "none") {
        return Unimplemented("key '", key("rope.scaling.type"), "': RoPE scaling '", *type, "' is not supported");
      }
    }
    if (c.n_expert > 0 && (c.n_expert_used < 1 || c.n_expert_used > c.n_expert)) {
      return InvalidArgument("key '", key("expert_used_count"), "': ", c.n_expert_used, " must be in [1, expert_count ",
                             c.n_expert, "]");
    }
    if (c.n_expert == 0 && c.n_expert_used != 0) {
      return InvalidArgument("key '", key("expert_used_count"), "': ", c.n_expert_used, " without an expert_count");
    }
    return absl::OkStatus();
  }

  void Embed(Backend& be, const StepContext& s, const UnitWeights& w, Activations& act) const override {
    EmbedBlock(be, s, w[kTokenEmbdSlot], act);
  }

  void Attention(Backend& be, const StepContext& s, const UnitWeights& w, const KvLayer& kv,
                 Activations& act) const override {
    const ModelConfig& c = *s.cfg;
    const AttentionOptions o{
        .norm_eps = c.rms_eps,
        .rope = {.n_head = c.n_head, .head_dim = c.head_dim, .n_rot = c.n_rot, .mode = RopeMode::kNorm,
                 .freq_base = c.rope_freq_base, .freq_scale = c.rope_freq_scale,
                 .freq_factors = w.vec(kRopeFreqsSlot)},
        .attn = {.n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim,
                 .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim))}};
    AttentionBlock(be, s, w.layer,
                   {.norm = &w[kAttnNormSlot], .wq = &w[kWqSlot], .wk = &w[kWkSlot], .wv = &w[kWvSlot],
                    .wo = &w[kWoSlot]},
                   o, kv, act);
  }

  void Ffn(Backend& be, const StepContext& s, const UnitWeights& w, Activations& act) const override {
    const ModelConfig& c = *s.cfg;
    const int64_t n = s.n_live;
    if (n == 0) return;
    float* x = FfnNormBlock(be, s, w.layer, w[kFfnNormSlot], c.rms_eps, act);
    if (c.is_moe()) {
      MoeFfnBlock(be, s, w.layer,
                  {.router = &w[kRouterSlot], .unit = &w, .gate_slot = kExpGateSlot, .up_slot = kExpUpSlot,
                   .down_slot = kExpDownSlot},
                  {.route = {.n_expert = c.n_expert, .k = c.n_expert_used, .gating = MoeGating::kSoftmax,
                             .normalize = true}},
                  n, x, act);
    } else {
      GatedFfnBlock(be, s, w.layer, {.gate = &w[kGateSlot], .up = &w[kUpSlot], .down = &w[kDownSlot]}, GluParams{}, n,
                    x, act);
    }
    LayerOutBlock(be, s, w.layer, x);
  }

  void Output(Backend& be, const StepContext& s, const UnitWeights& w, int64_t first_row,
              Activations& act) const override {
    OutputBlock(be, s, w[kOutputNormSlot], s.cfg->rms_eps, w[kOutputSlot], first_row, act);
  }
};

}  // namespace

const Architecture& LlamaArchitecture() {
  static const Llama kLlama;
  return kLlama;
}

}  // namespace tandem

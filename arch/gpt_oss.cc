// gpt-oss (general.architecture "gpt-oss"; gpt-oss-20b and -120b): a Llama-like MoE decoder with biases on q, k, v
// and o, a learned sink logit per head in every softmax, a 128-key sliding window on every other layer (the even
// ones) and full attention on the rest, NEOX RoPE with YaRN scaling, and a router that picks the top k by logit
// (plus its bias) and weighs them by a softmax over those k, over experts with biases and gpt-oss's clamped SwiGLU.
// The attention's output norm is the FFN's input norm ("post_attention_norm").
#include <vector>

#include "arch/arch.h"
#include "arch/blocks.h"
#include "arch/decoder.h"
#include "arch/tensor_names.h"
#include "core/status.h"

namespace tandem {
namespace {

namespace tn = tensor_names;

enum EmbdSlot { kTokenEmbdSlot };
enum AttnSlot { kAttnNormSlot, kWqSlot, kWkSlot, kWvSlot, kWoSlot, kBqSlot, kBkSlot, kBvSlot, kBoSlot, kSinksSlot };
enum FfnSlot { kFfnNormSlot, kRouterSlot, kRouterBiasSlot };
enum ExpertSlot { kExpGateSlot, kExpUpSlot, kExpDownSlot, kExpGateBiasSlot, kExpUpBiasSlot, kExpDownBiasSlot };
enum OutputSlot { kOutputNormSlot, kOutputSlot };

TensorEntry Bias(std::string_view name, UnitKind unit, int slot, Dim d) {
  return {.name = name, .unit = unit, .slot = slot, .role = TensorRole::kBias, .shape = {d}};
}
TensorEntry ExpertBias(std::string_view name, int slot, Dim d) {
  return {.name = name, .unit = UnitKind::kFfn, .slot = slot, .role = TensorRole::kBias, .shape = {d, Dim::kExpert},
          .n_dims = 2, .stack = true};
}

const TensorEntry kSchema[] = {
    {.name = tn::kTokenEmbd, .unit = UnitKind::kEmbd, .slot = kTokenEmbdSlot, .shape = {Dim::kEmbd, Dim::kVocab},
     .n_dims = 2},
    {.name = tn::kAttnNorm, .unit = UnitKind::kAttn, .slot = kAttnNormSlot, .role = TensorRole::kNorm,
     .shape = {Dim::kEmbd}},
    {.name = tn::kAttnQ, .unit = UnitKind::kAttn, .slot = kWqSlot, .shape = {Dim::kEmbd, Dim::kQ}, .n_dims = 2},
    Bias(tn::kAttnQBias, UnitKind::kAttn, kBqSlot, Dim::kQ),
    {.name = tn::kAttnK, .unit = UnitKind::kAttn, .slot = kWkSlot, .shape = {Dim::kEmbd, Dim::kKv}, .n_dims = 2},
    Bias(tn::kAttnKBias, UnitKind::kAttn, kBkSlot, Dim::kKv),
    {.name = tn::kAttnV, .unit = UnitKind::kAttn, .slot = kWvSlot, .shape = {Dim::kEmbd, Dim::kKv}, .n_dims = 2},
    Bias(tn::kAttnVBias, UnitKind::kAttn, kBvSlot, Dim::kKv),
    {.name = tn::kAttnOutput, .unit = UnitKind::kAttn, .slot = kWoSlot, .shape = {Dim::kQ, Dim::kEmbd}, .n_dims = 2},
    Bias(tn::kAttnOutputBias, UnitKind::kAttn, kBoSlot, Dim::kEmbd),
    Bias(tn::kAttnSinks, UnitKind::kAttn, kSinksSlot, Dim::kHead),
    {.name = tn::kAttnPostNorm, .unit = UnitKind::kFfn, .slot = kFfnNormSlot, .role = TensorRole::kNorm,
     .shape = {Dim::kEmbd}},
    {.name = tn::kFfnGateInp, .unit = UnitKind::kFfn, .slot = kRouterSlot, .role = TensorRole::kRouter,
     .shape = {Dim::kEmbd, Dim::kExpert}, .n_dims = 2},
    Bias(tn::kFfnGateInpBias, UnitKind::kFfn, kRouterBiasSlot, Dim::kExpert),
    {.name = tn::kFfnGateExps, .unit = UnitKind::kFfn, .slot = kExpGateSlot,
     .shape = {Dim::kEmbd, Dim::kFfExpert, Dim::kExpert}, .n_dims = 3, .stack = true},
    ExpertBias(tn::kFfnGateExpsBias, kExpGateBiasSlot, Dim::kFfExpert),
    {.name = tn::kFfnUpExps, .unit = UnitKind::kFfn, .slot = kExpUpSlot,
     .shape = {Dim::kEmbd, Dim::kFfExpert, Dim::kExpert}, .n_dims = 3, .stack = true},
    ExpertBias(tn::kFfnUpExpsBias, kExpUpBiasSlot, Dim::kFfExpert),
    {.name = tn::kFfnDownExps, .unit = UnitKind::kFfn, .slot = kExpDownSlot,
     .shape = {Dim::kFfExpert, Dim::kEmbd, Dim::kExpert}, .n_dims = 3, .stack = true},
    ExpertBias(tn::kFfnDownExpsBias, kExpDownBiasSlot, Dim::kEmbd),
    {.name = tn::kOutputNorm, .unit = UnitKind::kOutput, .slot = kOutputNormSlot, .role = TensorRole::kNorm,
     .shape = {Dim::kEmbd}},
    {.name = tn::kOutput, .unit = UnitKind::kOutput, .slot = kOutputSlot, .shape = {Dim::kEmbd, Dim::kVocab},
     .n_dims = 2},
};

constexpr int64_t kMaxCount = int64_t{1} << 20;

// The decoder's keys and the sliding window's.
std::vector<HParam> HParamsOf() {
  std::vector<HParam> p(DecoderHParams().begin(), DecoderHParams().end());
  p.push_back({.key = "attention.sliding_window", .int_field = &ModelConfig::n_swa, .required = true, .lo = 1,
               .hi = kMaxCount});
  p.push_back({.key = "attention.sliding_window_pattern", .int_field = &ModelConfig::swa_period, .lo = 1,
               .hi = kMaxCount});
  return p;
}

class GptOss final : public Architecture {
 public:
  GptOss() : hparams_(HParamsOf()) {}

  std::string_view name() const override { return "gpt-oss"; }
  std::string_view family() const override { return "gpt-oss"; }
  std::span<const HParam> hparams() const override { return hparams_; }
  Schema schema() const override { return kSchema; }

  absl::Status FinishHParams(const GgufFile& file, ModelConfig& c) const override {
    TANDEM_RETURN_IF_ERROR(FinishDecoderHParams(file, c));
    if (c.n_expert == 0) return InvalidArgument("key 'gpt-oss.expert_count': a 'gpt-oss' model needs experts");
    if (c.swa_period == 0) c.swa_period = 2;  // llama.cpp's default for the family
    return absl::OkStatus();
  }

  void Embed(Backend& be, const StepContext& s, const UnitWeights& w, Activations& act) const override {
    EmbedBlock(be, s, w[kTokenEmbdSlot], act);
  }

  void Attention(Backend& be, const StepContext& s, const UnitWeights& w, std::span<const KvLayer> kv,
                 Activations& act) const override {
    const ModelConfig& c = *s.cfg;
    AttentionOptions o = DecoderAttentionOptions(c, RopeMode::kNeox);
    o.attn.window = c.is_swa(w.layer) ? c.n_swa : 0;
    o.attn.sinks = w.vec(kSinksSlot);
    AttentionBlock(be, s, w.layer,
                   {.norm = &w[kAttnNormSlot], .wq = &w[kWqSlot], .wk = &w[kWkSlot], .wv = &w[kWvSlot],
                    .wo = &w[kWoSlot], .bq = w.vec(kBqSlot), .bk = w.vec(kBkSlot), .bv = w.vec(kBvSlot),
                    .bo = w.vec(kBoSlot)},
                   o, kv, act);
  }

  void Ffn(Backend& be, const StepContext& s, const UnitWeights& w, Activations& act) const override {
    const ModelConfig& c = *s.cfg;
    const int64_t n = s.n_live;
    if (n == 0) return;
    float* x = FfnNormBlock(be, s, w.layer, w[kFfnNormSlot], c.rms_eps, act);
    MoeFfnBlock(be, s, w.layer,
                {.router = &w[kRouterSlot], .router_bias = w.vec(kRouterBiasSlot), .unit = &w,
                 .gate_slot = kExpGateSlot, .up_slot = kExpUpSlot, .down_slot = kExpDownSlot,
                 .gate_bias_slot = kExpGateBiasSlot, .up_bias_slot = kExpUpBiasSlot,
                 .down_bias_slot = kExpDownBiasSlot},
                {.route = {.n_expert = c.n_expert, .k = c.n_expert_used, .gating = MoeGating::kSoftmaxTopK,
                           .normalize = false},
                 .act = {.act = Activation::kSwigluOai}},
                n, x, act);
    LayerOutBlock(be, s, w.layer, x);
  }

  void Output(Backend& be, const StepContext& s, const UnitWeights& w, int64_t first_row,
              Activations& act) const override {
    OutputBlock(be, s, w[kOutputNormSlot], s.cfg->rms_eps, w[kOutputSlot], first_row, act);
  }

 private:
  std::vector<HParam> hparams_;
};

}  // namespace

const Architecture& GptOssArchitecture() {
  static const GptOss kGptOss;
  return kGptOss;
}

}  // namespace tandem

// The llama family: Llama 1/2, Mistral, and Mixtral as Llama plus MoE (the same general.architecture). Pre-norm
// RMSNorm blocks, RoPE in NORM mode (with Llama 3.1's frequency factors when the file has them), grouped-query
// attention, a SwiGLU FFN, or a softmax top-k router over SwiGLU experts.
#include "arch/arch.h"
#include "arch/blocks.h"
#include "arch/decoder.h"
#include "arch/tensor_names.h"

namespace tandem {
namespace {

namespace tn = tensor_names;

// Where each unit's tensors sit in its UnitWeights.
enum EmbdSlot { kTokenEmbdSlot };
enum AttnSlot { kAttnNormSlot, kWqSlot, kWkSlot, kWvSlot, kWoSlot, kRopeFreqsSlot };
enum FfnSlot { kFfnNormSlot, kGateSlot, kUpSlot, kDownSlot, kRouterSlot };
enum ExpertSlot { kExpGateSlot, kExpUpSlot, kExpDownSlot };
enum OutputSlot { kOutputNormSlot, kOutputSlot };
constexpr SwigluFfnSlots kFfnSlots{.norm = kFfnNormSlot, .gate = kGateSlot, .up = kUpSlot, .down = kDownSlot,
                                   .router = kRouterSlot, .exp_gate = kExpGateSlot, .exp_up = kExpUpSlot,
                                   .exp_down = kExpDownSlot};

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
  std::string_view family() const override { return "Llama 1-3, Mistral, Mixtral"; }
  std::span<const HParam> hparams() const override { return DecoderHParams(); }
  Schema schema() const override { return kSchema; }

  absl::Status FinishHParams(const GgufFile& file, ModelConfig& c) const override {
    return FinishDecoderHParams(file, c);
  }

  void Embed(Backend& be, const StepContext& s, const UnitWeights& w, Activations& act) const override {
    EmbedBlock(be, s, w[kTokenEmbdSlot], act);
  }

  void Attention(Backend& be, const StepContext& s, const UnitWeights& w, std::span<const KvLayer> kv,
                 Activations& act) const override {
    AttentionBlock(be, s, w.layer,
                   {.norm = &w[kAttnNormSlot], .wq = &w[kWqSlot], .wk = &w[kWkSlot], .wv = &w[kWvSlot],
                    .wo = &w[kWoSlot]},
                   DecoderAttentionOptions(*s.cfg, RopeMode::kNorm, w.vec(kRopeFreqsSlot)), kv, act);
  }

  // Mixtral's router (softmax, renormalised over the top k) as Qwen3-MoE's.
  void Ffn(Backend& be, const StepContext& s, const UnitWeights& w, Activations& act) const override {
    const ModelConfig& c = *s.cfg;
    SwigluFfnUnit(be, s, w, kFfnSlots,
                  {.n_expert = c.n_expert, .k = c.n_expert_used, .gating = MoeGating::kSoftmax, .normalize = true},
                  act);
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

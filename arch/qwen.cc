// The Qwen family: Qwen2/2.5 ("qwen2": biases on q, k and v), Qwen3 ("qwen3": an RMSNorm on each query and key
// head instead), Qwen3-MoE ("qwen3moe": Qwen3's attention, a softmax top-k router over SwiGLU experts whose
// weights are renormalised over the chosen k, and no shared expert) and Qwen1.5/Qwen2-MoE ("qwen2moe": Qwen2's
// attention, softmax top-k weights as they are, and a shared expert whose output a per-token sigmoid gate scales).
// All rotate in NEOX mode (pairs i and i + n_rot/2) where Llama pairs neighbours, and may tie the output head to
// the token embeddings.
#include <string>
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
enum AttnSlot { kAttnNormSlot, kWqSlot, kWkSlot, kWvSlot, kWoSlot, kBqSlot, kBkSlot, kBvSlot, kQNormSlot, kKNormSlot };
enum FfnSlot {
  kFfnNormSlot, kGateSlot, kUpSlot, kDownSlot, kRouterSlot,
  kShexpGateInpSlot, kShexpGateSlot, kShexpUpSlot, kShexpDownSlot
};
enum ExpertSlot { kExpGateSlot, kExpUpSlot, kExpDownSlot };
enum OutputSlot { kOutputNormSlot, kOutputSlot };
constexpr SwigluFfnSlots kFfnSlots{.norm = kFfnNormSlot, .gate = kGateSlot, .up = kUpSlot, .down = kDownSlot,
                                   .router = kRouterSlot, .exp_gate = kExpGateSlot, .exp_up = kExpUpSlot,
                                   .exp_down = kExpDownSlot};
constexpr SwigluFfnSlots kSharedExpertFfnSlots{
    .norm = kFfnNormSlot, .router = kRouterSlot, .exp_gate = kExpGateSlot, .exp_up = kExpUpSlot,
    .exp_down = kExpDownSlot, .shexp_gate = kShexpGateSlot, .shexp_up = kShexpUpSlot, .shexp_down = kShexpDownSlot,
    .shexp_gate_inp = kShexpGateInpSlot};

struct Variant {
  std::string_view name;    // general.architecture
  std::string_view family;  // for people
  bool qkv_bias = false;  // Qwen2: q, k and v add a bias
  bool qk_norm = false;   // Qwen3: q and k heads are RMS-normed before RoPE
  bool moe = false;       // the FFN is a router over experts
  bool shared_expert = false;  // Qwen2-MoE: beside them, a shared expert behind a sigmoid gate
  bool normalize_topk = false;  // the chosen k weights are renormalised to sum to 1 (Qwen3-MoE)
};

std::vector<TensorEntry> SchemaOf(const Variant& v) {
  std::vector<TensorEntry> s = {
      {.name = tn::kTokenEmbd, .unit = UnitKind::kEmbd, .slot = kTokenEmbdSlot, .shape = {Dim::kEmbd, Dim::kVocab},
       .n_dims = 2},
      {.name = tn::kAttnNorm, .unit = UnitKind::kAttn, .slot = kAttnNormSlot, .role = TensorRole::kNorm,
       .shape = {Dim::kEmbd}},
      {.name = tn::kAttnQ, .unit = UnitKind::kAttn, .slot = kWqSlot, .shape = {Dim::kEmbd, Dim::kQ}, .n_dims = 2},
      {.name = tn::kAttnK, .unit = UnitKind::kAttn, .slot = kWkSlot, .shape = {Dim::kEmbd, Dim::kKv}, .n_dims = 2},
      {.name = tn::kAttnV, .unit = UnitKind::kAttn, .slot = kWvSlot, .shape = {Dim::kEmbd, Dim::kKv}, .n_dims = 2},
  };
  if (v.qkv_bias) {
    s.push_back({.name = tn::kAttnQBias, .unit = UnitKind::kAttn, .slot = kBqSlot, .role = TensorRole::kBias,
                 .shape = {Dim::kQ}});
    s.push_back({.name = tn::kAttnKBias, .unit = UnitKind::kAttn, .slot = kBkSlot, .role = TensorRole::kBias,
                 .shape = {Dim::kKv}});
    s.push_back({.name = tn::kAttnVBias, .unit = UnitKind::kAttn, .slot = kBvSlot, .role = TensorRole::kBias,
                 .shape = {Dim::kKv}});
  }
  if (v.qk_norm) {
    s.push_back({.name = tn::kAttnQNorm, .unit = UnitKind::kAttn, .slot = kQNormSlot, .role = TensorRole::kNorm,
                 .shape = {Dim::kHeadDim}});
    s.push_back({.name = tn::kAttnKNorm, .unit = UnitKind::kAttn, .slot = kKNormSlot, .role = TensorRole::kNorm,
                 .shape = {Dim::kHeadDim}});
  }
  s.push_back({.name = tn::kAttnOutput, .unit = UnitKind::kAttn, .slot = kWoSlot, .shape = {Dim::kQ, Dim::kEmbd},
               .n_dims = 2});
  s.push_back({.name = tn::kFfnNorm, .unit = UnitKind::kFfn, .slot = kFfnNormSlot, .role = TensorRole::kNorm,
               .shape = {Dim::kEmbd}});
  if (v.moe) {
    s.push_back({.name = tn::kFfnGateInp, .unit = UnitKind::kFfn, .slot = kRouterSlot, .role = TensorRole::kRouter,
                 .shape = {Dim::kEmbd, Dim::kExpert}, .n_dims = 2});
    s.push_back({.name = tn::kFfnGateExps, .unit = UnitKind::kFfn, .slot = kExpGateSlot,
                 .shape = {Dim::kEmbd, Dim::kFfExpert, Dim::kExpert}, .n_dims = 3, .stack = true});
    s.push_back({.name = tn::kFfnUpExps, .unit = UnitKind::kFfn, .slot = kExpUpSlot,
                 .shape = {Dim::kEmbd, Dim::kFfExpert, Dim::kExpert}, .n_dims = 3, .stack = true});
    s.push_back({.name = tn::kFfnDownExps, .unit = UnitKind::kFfn, .slot = kExpDownSlot,
                 .shape = {Dim::kFfExpert, Dim::kEmbd, Dim::kExpert}, .n_dims = 3, .stack = true});
  }
  if (v.shared_expert) {
    // The converter writes the gate as [n_embd, 1] and keeps it F32; a one-dimensional [n_embd] matches too.
    s.push_back({.name = tn::kFfnGateInpShexp, .unit = UnitKind::kFfn, .slot = kShexpGateInpSlot,
                 .role = TensorRole::kRouter, .shape = {Dim::kEmbd, Dim::kOne}, .n_dims = 2});
    s.push_back({.name = tn::kFfnGateShexp, .unit = UnitKind::kFfn, .slot = kShexpGateSlot,
                 .shape = {Dim::kEmbd, Dim::kFfShexp}, .n_dims = 2});
    s.push_back({.name = tn::kFfnUpShexp, .unit = UnitKind::kFfn, .slot = kShexpUpSlot,
                 .shape = {Dim::kEmbd, Dim::kFfShexp}, .n_dims = 2});
    s.push_back({.name = tn::kFfnDownShexp, .unit = UnitKind::kFfn, .slot = kShexpDownSlot,
                 .shape = {Dim::kFfShexp, Dim::kEmbd}, .n_dims = 2});
  }
  if (!v.moe) {
    s.push_back({.name = tn::kFfnGate, .unit = UnitKind::kFfn, .slot = kGateSlot, .shape = {Dim::kEmbd, Dim::kFf},
                 .n_dims = 2});
    s.push_back({.name = tn::kFfnUp, .unit = UnitKind::kFfn, .slot = kUpSlot, .shape = {Dim::kEmbd, Dim::kFf},
                 .n_dims = 2});
    s.push_back({.name = tn::kFfnDown, .unit = UnitKind::kFfn, .slot = kDownSlot, .shape = {Dim::kFf, Dim::kEmbd},
                 .n_dims = 2});
  }
  s.push_back({.name = tn::kOutputNorm, .unit = UnitKind::kOutput, .slot = kOutputNormSlot, .role = TensorRole::kNorm,
               .shape = {Dim::kEmbd}});
  s.push_back({.name = tn::kOutput, .unit = UnitKind::kOutput, .slot = kOutputSlot, .shape = {Dim::kEmbd, Dim::kVocab},
               .n_dims = 2, .presence = Presence::kOptional, .fallback = tn::kTokenEmbd});
  return s;
}

class Qwen final : public Architecture {
 public:
  explicit Qwen(Variant v) : v_(v), schema_(SchemaOf(v)) {}

  std::string_view name() const override { return v_.name; }
  std::string_view family() const override { return v_.family; }
  std::span<const HParam> hparams() const override { return DecoderHParams(); }
  Schema schema() const override { return schema_; }

  absl::Status FinishHParams(const GgufFile& file, ModelConfig& c) const override {
    TANDEM_RETURN_IF_ERROR(FinishDecoderHParams(file, c));
    if (v_.moe != (c.n_expert > 0)) {
      return InvalidArgument("key '", c.arch, ".expert_count': ", c.n_expert, v_.moe ? ": a '" : " in a dense '",
                             v_.name, v_.moe ? "' model needs experts" : "' model");
    }
    // As llama.cpp: a shared expert as wide as the dense FFN unless the file says otherwise.
    if (v_.shared_expert && c.n_ff_shexp == 0) c.n_ff_shexp = c.n_ff;
    if (!v_.shared_expert) c.n_ff_shexp = 0;
    return absl::OkStatus();
  }

  void Embed(Backend& be, const StepContext& s, const UnitWeights& w, Activations& act) const override {
    EmbedBlock(be, s, w[kTokenEmbdSlot], act);
  }

  void Attention(Backend& be, const StepContext& s, const UnitWeights& w, std::span<const KvLayer> kv,
                 Activations& act) const override {
    AttentionBlock(be, s, w.layer,
                   {.norm = &w[kAttnNormSlot], .wq = &w[kWqSlot], .wk = &w[kWkSlot], .wv = &w[kWvSlot],
                    .wo = &w[kWoSlot], .bq = w.vec(kBqSlot), .bk = w.vec(kBkSlot), .bv = w.vec(kBvSlot),
                    .q_norm = w.vec(kQNormSlot), .k_norm = w.vec(kKNormSlot)},
                   DecoderAttentionOptions(*s.cfg, RopeMode::kNeox), kv, act);
  }

  // The routers are softmax; Qwen3-MoE renormalises the top k (norm_topk_prob), as Mixtral does, Qwen2-MoE not.
  void Ffn(Backend& be, const StepContext& s, const UnitWeights& w, Activations& act) const override {
    const ModelConfig& c = *s.cfg;
    SwigluFfnUnit(be, s, w, v_.shared_expert ? kSharedExpertFfnSlots : kFfnSlots,
                  {.n_expert = c.n_expert, .k = c.n_expert_used, .gating = MoeGating::kSoftmax,
                   .normalize = v_.normalize_topk},
                  act);
  }

  void Output(Backend& be, const StepContext& s, const UnitWeights& w, int64_t first_row,
              Activations& act) const override {
    OutputBlock(be, s, w[kOutputNormSlot], s.cfg->rms_eps, w[kOutputSlot], first_row, act);
  }

 private:
  Variant v_;
  std::vector<TensorEntry> schema_;
};

}  // namespace

const Architecture& Qwen2Architecture() {
  static const Qwen kQwen2({.name = "qwen2", .family = "Qwen2, Qwen2.5", .qkv_bias = true});
  return kQwen2;
}
const Architecture& Qwen3Architecture() {
  static const Qwen kQwen3({.name = "qwen3", .family = "Qwen3", .qk_norm = true});
  return kQwen3;
}
const Architecture& Qwen3MoeArchitecture() {
  static const Qwen kQwen3Moe(
      {.name = "qwen3moe", .family = "Qwen3-MoE", .qk_norm = true, .moe = true, .normalize_topk = true});
  return kQwen3Moe;
}
const Architecture& Qwen2MoeArchitecture() {
  static const Qwen kQwen2Moe({.name = "qwen2moe", .family = "Qwen1.5-MoE, Qwen2-MoE", .qkv_bias = true,
                               .moe = true, .shared_expert = true});
  return kQwen2Moe;
}

}  // namespace tandem

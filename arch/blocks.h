// The building blocks of decoder-only transformers, one named step per line, for the families' unit functions
// (arch/llama.cc and those after it) to assemble: token embedding, attention with RoPE and a KV cache, a gated FFN,
// an MoE FFN, the output head. Each reads and writes the residual stream act.x, and names its intermediates as
// llama.cpp does, so a dump of one run can be diffed against another run (another device, or llama.cpp) tensor by
// tensor.
#pragma once

#include <cstdint>

#include "arch/arch.h"

namespace tandem {

void EmbedBlock(Backend& be, const StepContext& s, const WeightMatrix& token_embd, Activations& act);

struct AttentionWeights {
  const WeightMatrix* norm = nullptr;  // [n_embd], F32
  const WeightMatrix* wq = nullptr;    // [n_embd -> n_head * head_dim], rows = outputs
  const WeightMatrix* wk = nullptr;    // [n_embd -> n_head_kv * head_dim]
  const WeightMatrix* wv = nullptr;    // [n_embd -> n_head_kv * head_dim]
  const WeightMatrix* wo = nullptr;    // [n_head * head_dim -> n_embd]
  const float* bq = nullptr;           // [n_head * head_dim], or null; likewise bk, bv, bo
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* bo = nullptr;
  const float* q_norm = nullptr;       // [head_dim]: RMSNorm of each query head before RoPE (Qwen3), or null
  const float* k_norm = nullptr;       // [head_dim]: likewise for each key head
};
struct AttentionOptions {
  float norm_eps = 1e-5f;
  RopeParams rope;           // for the queries; the keys' differs only in n_head = n_head_kv
  AttentionParams attn;
};
// The usual options of a decoder family's attention: RMSNorm with the model's epsilon, RoPE in `mode` over n_rot
// dims (with per-pair frequency factors, or null), scaled dot products over grouped KV heads.
AttentionOptions DecoderAttentionOptions(const ModelConfig& c, RopeMode mode, const float* freq_factors = nullptr);

// x += wo(attention(rope(wq norm(x)), cache + rope(wk norm(x)), wv norm(x))), the cache taking every token. With
// biases, each projection adds its own; with q_norm/k_norm, each head of q and k is RMS-normed before RoPE.
void AttentionBlock(Backend& be, const StepContext& s, int il, const AttentionWeights& w, const AttentionOptions& o,
                    std::span<const KvLayer> kv, Activations& act);

// The FFN's input: the norm of the live residual rows into act.cur. Returns those rows of act.x.
float* FfnNormBlock(Backend& be, const StepContext& s, int il, const WeightMatrix& norm, float eps, Activations& act);
// After the FFN: names the layer's output.
void LayerOutBlock(Backend& be, const StepContext& s, int il, const float* x);

// x += down(act(gate norm(x)) * up norm(x)), with norm(x) already in act.cur; x null: the output stays in act.cur.
struct FfnWeights {
  const WeightMatrix* gate = nullptr;  // [n_embd -> n_ff]
  const WeightMatrix* up = nullptr;    // [n_embd -> n_ff]
  const WeightMatrix* down = nullptr;  // [n_ff -> n_embd]
  const float* b_gate = nullptr;       // [n_ff], or null; likewise b_up, and b_down [n_embd]
  const float* b_up = nullptr;
  const float* b_down = nullptr;
};
void GatedFfnBlock(Backend& be, const StepContext& s, int il, const FfnWeights& w, const GluParams& act_params,
                   int64_t n, float* x, Activations& act);

// The shared expert: a gated FFN of its own width whose output joins the routed experts' sum, scaled per token by
// sigmoid(gate_inp . norm(x)) when gate_inp is given (Qwen2-MoE), unscaled when it is null (DeepSeek).
struct SharedExpertWeights {
  FfnWeights ffn;
  const WeightMatrix* gate_inp = nullptr;  // [n_embd -> 1], F32
};

// x += sum over the token's top-k experts of weight * FFN_e(norm(x)), with norm(x) already in act.cur. The routing
// stays on the backend; the weighted outputs land in the token's top-k slots, summed in slot order (descending
// weight), the order llama.cpp sums them in: quantized models amplify even last-bit differences at activation
// rounding boundaries.
struct MoeWeights {
  const WeightMatrix* router = nullptr;  // [n_embd -> n_expert], F32
  const float* router_bias = nullptr;    // [n_expert], or null
  const UnitWeights* unit = nullptr;     // the experts: expert(gate_slot, e), ...
  int gate_slot = 0, up_slot = 0, down_slot = 0;
  // Per-expert biases: expert(slot, e) as a [1 x width] F32 row; -1 when the family has none.
  int gate_bias_slot = -1, up_bias_slot = -1, down_bias_slot = -1;
  // A shared expert every token runs beside its routed ones, or null.
  const SharedExpertWeights* shared = nullptr;
};
// Expert e's matrices in `unit`, as `w` numbers the slots.
ExpertMatrices ExpertViews(const UnitWeights& unit, const MoeWeights& w, int e);

// Where an MoE layer's experts run when they are placed one by one (graph/executor.cc). Given the call the unit's
// backend would make (ids, weights, x, buffers and out on that backend; a.experts the unit's own views), it
// leaves in a.out what be.MoeExperts(a) would, within the dtype tolerance: each expert on its own device, the
// partial slots merged by addition (runtime/ops.h: a slot no call computes is zero).
class ExpertDispatch {
 public:
  virtual ~ExpertDispatch() = default;
  virtual void Run(Backend& be, int il, const MoeWeights& w, const MoeExpertsArgs& a) = 0;
};

struct MoeOptions {
  MoeRouteParams route;
  GluParams act;
  bool weight_input = false;
};
void MoeFfnBlock(Backend& be, const StepContext& s, int il, const MoeWeights& w, const MoeOptions& o, int64_t n,
                 float* x, Activations& act);

// The whole FFN unit of the Llama-like families: the norm, a SwiGLU FFN (router null) or a router over SwiGLU
// experts routed as `route` says, then the layer's output. Slots are the unit's, as the family's schema numbers them.
struct SwigluFfnSlots {
  int norm = 0, gate = 0, up = 0, down = 0;      // dense
  int router = 0, exp_gate = 0, exp_up = 0, exp_down = 0;  // MoE
  int shexp_gate = -1, shexp_up = -1, shexp_down = -1;  // MoE with a shared expert; -1: none
  int shexp_gate_inp = -1;                              // its sigmoid gate; -1: none
};
void SwigluFfnUnit(Backend& be, const StepContext& s, const UnitWeights& w, const SwigluFfnSlots& slots,
                   const MoeRouteParams& route, Activations& act);

// Logits of rows [first_row, n_tok): output(norm(x)) + bias (bias may be null).
void OutputBlock(Backend& be, const StepContext& s, const WeightMatrix& norm, float eps, const WeightMatrix& output,
                 int64_t first_row, Activations& act, const float* bias = nullptr);

}  // namespace tandem

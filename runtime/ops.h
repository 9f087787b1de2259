// The parameters of the Backend's ops (runtime/backend.h): what a model family can ask of every device. Each is
// plain data, compiled by nvcc (C++17) as well, and documented with the math every backend must compute; each
// backend's kernels are tested against a naive reference of that math (cpu_backend/kernels.h, the *Ref
// functions). Pointers inside parameters are the executing backend's memory.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace tandem {

// ---- Rotary position embedding ----
// kNorm rotates the adjacent pairs (2i, 2i+1) of each head's first n_rot dims (Llama); kNeox rotates (i, i + n_rot/2)
// (GPT-NeoX, Qwen, gpt-oss). The numbers are llama.cpp's mode numbers.
enum class RopeMode : int { kNorm = 0, kNeox = 2 };

// Pair i (0 <= i < n_rot/2) of a token at position p turns by theta_i:
//   extrap_i = p * freq_base^(-2i/n_rot) / freq_factors[i]          (freq_factors null: 1)
//   interp_i = freq_scale * extrap_i
//   theta_i  = interp_i                                             when ext_factor == 0
//            = interp_i * (1 - r_i) + extrap_i * r_i                 (YaRN) with
//              r_i = ext_factor * (1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1)),
//              lo = max(0, floor(d(beta_fast))), hi = min(n_rot - 1, ceil(d(beta_slow))),
//              d(b) = n_rot * ln(n_ctx_orig / (2 pi b)) / (2 ln freq_base)
// and the rotated pair is scaled by m = attn_factor, times (1 + 0.1 ln(1 / freq_scale)) when ext_factor != 0.
// This is llama.cpp's rope_yarn. Llama 3.x's "llama3" scaling is frequency factors (Llama3RopeFreqFactors).
struct RopeParams {
  int n_head = 0;
  int head_dim = 0;
  int n_rot = 0;                        // even, <= head_dim; dims n_rot.. of each head stay as they are
  RopeMode mode = RopeMode::kNorm;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;              // 1 / the linear (or YaRN) scaling factor
  const float* freq_factors = nullptr;  // [n_rot / 2], or null
  float ext_factor = 0.0f;              // YaRN's mix of extrapolation; 0: no YaRN
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int n_ctx_orig = 0;                   // the context the model was trained at (YaRN)
};

// ---- Attention ----
// Causal softmax attention of a batch's queries over one layer's cache, grouped-query heads (query head h reads
// KV head h / (n_head / n_head_kv)). For query t at position p = pos0 + t and each visible key j:
//   s_j = q . k_j;  s_j = softcap * tanh(s_j * (1 / softcap)) when softcap > 0;  s_j *= scale
//   visible: j <= p, and p - j < window when window > 0 (a sliding window of `window` keys, itself included)
//   out = sum_j p_j v_j,  p_j = e^(s_j - m) / (sum_j e^(s_j - m) + e^(sink_h - m)),  m = max(s, sink_h)
// where the sink term is there only with sinks (a learned logit per head that takes probability and gives no
// value). The orders are llama.cpp's: the cap before the scale, the sink unscaled.
struct AttentionParams {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  float scale = 0.0f;             // 1/sqrt(head_dim) for most families
  int window = 0;                 // > 0: sliding window of this many keys
  const float* sinks = nullptr;   // [n_head], or null
  float softcap = 0.0f;           // > 0: logit soft-capping
};

// ---- Gated activations: y = act(g) * u, elementwise; with u null, y = act(g) ----
//   kSilu:      act(g) = g / (1 + e^-g)                                   (SwiGLU: Llama, Qwen)
//   kGelu:      act(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))  (GeGLU: the tanh form)
//   kSwigluOai: g' = min(g, limit), u' = clamp(u, -limit, limit), y = g' / (1 + e^(-alpha g')) * (u' + 1)
//               (gpt-oss; u must be given)
enum class Activation : int { kSilu = 0, kGelu = 1, kSwigluOai = 2 };
struct GluParams {
  Activation act = Activation::kSilu;
  float alpha = 1.702f;  // kSwigluOai
  float limit = 7.0f;    // kSwigluOai
};

// ---- ScaleRows: one factor per row, f(s[t]) ----
//   kLinear:  f(s) = s
//   kSigmoid: f(s) = 1 / (1 + e^-s)   (Qwen2-MoE's shared-expert gate)
enum class RowScale : int { kLinear = 0, kSigmoid = 1 };

// ---- MoE routing: the k experts of each token and their weights ----
//   kSoftmax:     probs = softmax(logits), weights = probs of the chosen (Mixtral, Qwen-MoE)
//   kSigmoid:     probs = sigmoid(logits), weights = probs of the chosen (DeepSeek V3, GLM-4.5)
//   kSoftmaxTopK: probs = logits, weights = softmax over the chosen logits (gpt-oss)
// The chosen are the k largest of probs + selection_bias (ties to the lower id), in that order; the bias only ranks.
// Then, with normalize, weights /= max(sum of the k weights, 2^-14); then weights *= scale. As llama.cpp's
// build_moe_ffn does it.
enum class MoeGating : int { kSoftmax = 0, kSigmoid = 1, kSoftmaxTopK = 2 };
struct MoeRouteParams {
  int n_expert = 0;
  int k = 0;                               // experts per token, 1 <= k <= n_expert
  MoeGating gating = MoeGating::kSoftmax;
  bool normalize = true;
  float scale = 1.0f;
  const float* selection_bias = nullptr;   // [n_expert], or null
};

// ---- MoE experts: every token's k routed experts, each an FFN ----
// For token t, slot j, e = ids[t][j], w = weights[t][j]:
//   h = act(gate_e x_t + gate_bias_e) * (up_e x_t + up_bias_e)                      (GluParams)
//   out[j][t] = w * (down_e h + down_bias_e)                   (weight_input: h from w * x_t, out unweighted)
// Absent biases are zero. The slots are summed by the model afterwards, in slot order.
//
// Masking, so that one layer's experts can be split between devices: an expert whose gate is null is not computed
// by this call. The slots of the (token, slot) pairs routed to it are written as zeros (+0.0f), and its other
// fields are ignored (null, or anything: another device's memory). Every other slot is computed exactly as by an
// unmasked call, bit for bit, so two calls with complementary masks add up, element by element, to the unmasked
// out. Every expert may be skipped (out all zeros). n_embd and n_ff come from the first expert computed, or n_embd
// from MoeExpertsArgs::n_embd when none is.
struct ExpertMatrices {
  const WeightMatrix* gate = nullptr;  // [n_embd -> n_ff]; null: skipped by this call (see above)
  const WeightMatrix* up = nullptr;    // [n_embd -> n_ff]
  const WeightMatrix* down = nullptr;  // [n_ff -> n_embd]
  const float* gate_bias = nullptr;    // [n_ff], or null
  const float* up_bias = nullptr;      // [n_ff], or null
  const float* down_bias = nullptr;    // [n_embd], or null
};
// Rows the experts' intermediates use, in the backend's memory (graph sizes them with the activations).
struct ExpertBuffers {
  float* xe = nullptr;    // [rows][n_embd]
  float* gate = nullptr;  // [rows][n_ff]
  float* up = nullptr;    // [rows][n_ff]
  int64_t rows = 0;       // >= n_tok; a backend runs larger batches in passes
};
struct MoeExpertsArgs {
  const ExpertMatrices* experts = nullptr;  // [n_expert], a host array of views in this backend's memory
  int n_expert = 0;
  const float* x = nullptr;        // [n_tok][n_embd]
  int64_t n_tok = 0;
  const int32_t* ids = nullptr;    // [n_tok][k], written by MoeRoute on this backend
  const float* weights = nullptr;  // [n_tok][k]
  int k = 0;
  GluParams act;
  bool weight_input = false;       // scale the input by the routing weight instead of the output (Llama 4)
  ExpertBuffers buf;
  float* out = nullptr;            // [k][n_tok][n_embd]: slot j of token t at out + (j * n_tok + t) * n_embd
  // The width of x's and out's rows. The computed experts give it, so 0 will do, except when every expert is
  // skipped: then nothing else says how much of out to zero. When given, it must agree with the experts.
  int64_t n_embd = 0;
};

// Names for messages and test parameters: "norm", "neox"; "silu", "gelu", "swiglu_oai"; "softmax", "sigmoid",
// "softmax_topk".
const char* RopeModeName(RopeMode m);
const char* ActivationName(Activation a);
const char* MoeGatingName(MoeGating g);

}  // namespace tandem

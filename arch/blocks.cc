#include "arch/blocks.h"

#include <algorithm>
#include <cmath>
#include <span>

namespace tandem {

void EmbedBlock(Backend& be, const StepContext& s, const WeightMatrix& token_embd, Activations& act) {
  be.GetRows(token_embd, act.ids, s.n_tok, act.x);      s.Named(be, act.x, s.n_tok * s.cfg->n_embd, "inp_embd", -1);
}

AttentionOptions DecoderAttentionOptions(const ModelConfig& c, RopeMode mode, const float* freq_factors) {
  return AttentionOptions{
      .norm_eps = c.rms_eps,
      .rope = {.n_head = c.n_head, .head_dim = c.head_dim, .n_rot = c.n_rot, .mode = mode,
               .freq_base = c.rope_freq_base, .freq_scale = c.rope_freq_scale, .freq_factors = freq_factors,
               .ext_factor = c.rope_ext_factor, .attn_factor = c.rope_attn_factor, .n_ctx_orig = c.rope_n_ctx_orig},
      .attn = {.n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim,
               .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim))}};
}

void AttentionBlock(Backend& be, const StepContext& s, int il, const AttentionWeights& w, const AttentionOptions& o,
                    std::span<const KvLayer> kv, Activations& act) {
  const ModelConfig& c = *s.cfg;
  const int64_t n = s.n_tok;
  const int64_t q_dim = c.q_dim(), kv_dim = c.n_embd_kv();
  RopeParams rope_k = o.rope;
  rope_k.n_head = c.n_head_kv;
  const int64_t m = s.n_live;  // trailing tokens whose outputs go on; all n enter the KV cache
  const int64_t r0 = n - m;
  float* x = act.x + r0 * c.n_embd;

  be.RmsNorm(act.x, static_cast<const float*>(w.norm->data), n, c.n_embd, o.norm_eps, act.cur);
  s.Named(be, act.cur, n * c.n_embd, "attn_norm", il);
  // q, k and v share their input, so they go as one call, unless only the last m rows' queries go on.
  const MatMulOutput qkv[] = {{.w = w.wq, .y = act.q}, {.w = w.wk, .y = act.k}, {.w = w.wv, .y = act.v}};
  be.MatMuls(m == n ? std::span(qkv) : std::span(qkv).subspan(1), act.cur, n);
  if (w.bk != nullptr) be.AddBias(act.k, w.bk, n, kv_dim, act.k);
  if (w.bv != nullptr) be.AddBias(act.v, w.bv, n, kv_dim, act.v);
  s.Named(be, act.k, n * kv_dim, "k", il);
  s.Named(be, act.v, n * kv_dim, "v", il);
  if (w.k_norm != nullptr) {
    be.RmsNorm(act.k, w.k_norm, n * c.n_head_kv, c.head_dim, o.norm_eps, act.k);
    s.Named(be, act.k, n * kv_dim, "k_norm", il);
  }
  be.Rope(act.k, n, act.pos, rope_k);                   s.Named(be, act.k, n * kv_dim, "k_rope", il);
  for (const BatchSegment& g : s.segments) {  // each sequence's rows into its own cache
    be.KvStore(kv[g.seq], act.k + g.row0 * kv_dim, act.v + g.row0 * kv_dim, g.n_tok, g.pos0);
  }
  if (m == 0) return;
  if (m < n) be.MatMul(*w.wq, act.cur + r0 * c.n_embd, m, act.q);
  if (w.bq != nullptr) be.AddBias(act.q, w.bq, m, q_dim, act.q);
  s.Named(be, act.q, m * q_dim, "q", il);
  if (w.q_norm != nullptr) {
    be.RmsNorm(act.q, w.q_norm, m * c.n_head, c.head_dim, o.norm_eps, act.q);
    s.Named(be, act.q, m * q_dim, "q_norm", il);
  }
  be.Rope(act.q, m, act.pos + r0, o.rope);              s.Named(be, act.q, m * q_dim, "q_rope", il);
  for (const BatchSegment& g : s.segments) {  // each sequence's live queries against its own cache
    const int64_t first = std::max(g.row0, r0), end = g.row0 + g.n_tok;
    if (first >= end) continue;
    be.Attention(act.q + (first - r0) * q_dim, kv[g.seq], end - first, g.pos0 + (first - g.row0), o.attn,
                 act.att + (first - r0) * q_dim);
  }
  s.Named(be, act.att, m * q_dim, "kqv", il);
  be.MatMul(*w.wo, act.att, m, act.cur);
  if (w.bo != nullptr) be.AddBias(act.cur, w.bo, m, c.n_embd, act.cur);
  s.Named(be, act.cur, m * c.n_embd, "attn_out", il);
  be.Add(x, act.cur, m * c.n_embd, x);                  s.Named(be, x, m * c.n_embd, "ffn_inp", il);
}

float* FfnNormBlock(Backend& be, const StepContext& s, int il, const WeightMatrix& norm, float eps, Activations& act) {
  const int64_t n = s.n_live, n_embd = s.cfg->n_embd;
  float* x = act.x + (s.n_tok - n) * n_embd;
  be.RmsNorm(x, static_cast<const float*>(norm.data), n, n_embd, eps, act.cur);
  s.Named(be, act.cur, n * n_embd, "ffn_norm", il);
  return x;
}

void LayerOutBlock(Backend& be, const StepContext& s, int il, const float* x) {
  s.Named(be, x, s.n_live * s.cfg->n_embd, "l_out", il);
}

void GatedFfnBlock(Backend& be, const StepContext& s, int il, const FfnWeights& w, const GluParams& act_params,
                   int64_t n, float* x, Activations& act) {
  const int64_t n_embd = s.cfg->n_embd, n_ff = w.gate->rows;
  be.MatMul(*w.gate, act.cur, n, act.gate);
  if (w.b_gate != nullptr) be.AddBias(act.gate, w.b_gate, n, n_ff, act.gate);
  s.Named(be, act.gate, n * n_ff, "ffn_gate", il);
  be.MatMul(*w.up, act.cur, n, act.up);
  if (w.b_up != nullptr) be.AddBias(act.up, w.b_up, n, n_ff, act.up);
  s.Named(be, act.up, n * n_ff, "ffn_up", il);
  be.Glu(act.gate, act.up, n * n_ff, act_params, act.gate);
  s.Named(be, act.gate, n * n_ff, "ffn_swiglu", il);
  be.MatMul(*w.down, act.gate, n, act.cur);
  if (w.b_down != nullptr) be.AddBias(act.cur, w.b_down, n, n_embd, act.cur);
  if (x == nullptr) return;
  s.Named(be, act.cur, n * n_embd, "ffn_out", il);
  be.Add(x, act.cur, n * n_embd, x);
}

ExpertMatrices ExpertViews(const UnitWeights& unit, const MoeWeights& w, int e) {
  auto bias = [&](int slot) -> const float* {
    if (slot < 0 || !unit.expert(slot, e).present()) return nullptr;
    return static_cast<const float*>(unit.expert(slot, e).data);
  };
  return ExpertMatrices{.gate = &unit.expert(w.gate_slot, e), .up = &unit.expert(w.up_slot, e),
                        .down = &unit.expert(w.down_slot, e), .gate_bias = bias(w.gate_bias_slot),
                        .up_bias = bias(w.up_bias_slot), .down_bias = bias(w.down_bias_slot)};
}

void MoeFfnBlock(Backend& be, const StepContext& s, int il, const MoeWeights& w, const MoeOptions& o, int64_t n,
                 float* x, Activations& act) {
  const ModelConfig& c = *s.cfg;
  const int k = o.route.k;
  const int64_t slot_elems = n * c.n_embd;
  be.MatMul(*w.router, act.cur, n, act.router);
  if (w.router_bias != nullptr) be.AddBias(act.router, w.router_bias, n, c.n_expert, act.router);
  s.Named(be, act.router, n * c.n_expert, "ffn_gate_inp", il);
  be.MoeRoute(act.router, n, o.route, act.expert_ids, act.expert_weights);
  for (int e = 0; e < c.n_expert; ++e) s.expert_views[e] = ExpertViews(*w.unit, w, e);
  const MoeExpertsArgs experts{
      .experts = s.expert_views, .n_expert = c.n_expert, .x = act.cur, .n_tok = n, .ids = act.expert_ids,
      .weights = act.expert_weights, .k = k, .act = o.act, .weight_input = o.weight_input,
      .buf = ExpertBuffers{.xe = act.xe, .gate = act.gate, .up = act.up, .rows = act.expert_rows},
      .out = act.slots};
  if (s.experts != nullptr) {
    s.experts->Run(be, il, w, experts);
  } else {
    be.MoeExperts(experts);
  }
  for (int j = 1; j < k; ++j) be.Add(act.slots, act.slots + j * slot_elems, slot_elems, act.slots);
  s.Named(be, act.slots, slot_elems, "ffn_moe_out", il);
  if (w.shared != nullptr) {
    // The router's logits are spent, so its buffer takes the gate's; act.cur, the experts' input, is read by the
    // gate, up and shared gate products before the shared expert's down product overwrites it.
    const SharedExpertWeights& sh = *w.shared;
    if (sh.gate_inp != nullptr) {
      be.MatMul(*sh.gate_inp, act.cur, n, act.router);
      s.Named(be, act.router, n, "ffn_shexp_gate_inp", il);
    }
    GatedFfnBlock(be, s, il, sh.ffn, o.act, n, /*x=*/nullptr, act);
    s.Named(be, act.cur, slot_elems, "ffn_shexp", il);
    if (sh.gate_inp != nullptr) {
      be.ScaleRows(act.cur, act.router, n, c.n_embd, RowScale::kSigmoid, act.cur);
      s.Named(be, act.cur, slot_elems, "ffn_shexp_out", il);
    }
    be.Add(act.slots, act.cur, slot_elems, act.slots);
    s.Named(be, act.slots, slot_elems, "ffn_out", il);
  }
  be.Add(x, act.slots, slot_elems, x);
}

void SwigluFfnUnit(Backend& be, const StepContext& s, const UnitWeights& w, const SwigluFfnSlots& slots,
                   const MoeRouteParams& route, Activations& act) {
  const int64_t n = s.n_live;
  if (n == 0) return;
  float* x = FfnNormBlock(be, s, w.layer, w[slots.norm], s.cfg->rms_eps, act);
  if (s.cfg->is_moe()) {
    SharedExpertWeights shared;
    const bool has_shared = slots.shexp_gate >= 0;
    if (has_shared) {
      shared.ffn = {.gate = &w[slots.shexp_gate], .up = &w[slots.shexp_up], .down = &w[slots.shexp_down]};
      if (slots.shexp_gate_inp >= 0) shared.gate_inp = &w[slots.shexp_gate_inp];
    }
    MoeFfnBlock(be, s, w.layer,
                {.router = &w[slots.router], .unit = &w, .gate_slot = slots.exp_gate, .up_slot = slots.exp_up,
                 .down_slot = slots.exp_down, .shared = has_shared ? &shared : nullptr},
                {.route = route}, n, x, act);
  } else {
    GatedFfnBlock(be, s, w.layer, {.gate = &w[slots.gate], .up = &w[slots.up], .down = &w[slots.down]}, GluParams{},
                  n, x, act);
  }
  LayerOutBlock(be, s, w.layer, x);
}

void OutputBlock(Backend& be, const StepContext& s, const WeightMatrix& norm, float eps, const WeightMatrix& output,
                 int64_t first_row, Activations& act, const float* bias) {
  const ModelConfig& c = *s.cfg;
  const int64_t rows = s.n_tok - first_row;
  if (rows == 0) return;  // a prefill chunk that asks for no logits
  be.RmsNorm(act.x + first_row * c.n_embd, static_cast<const float*>(norm.data), rows, c.n_embd, eps, act.cur);
  s.Named(be, act.cur, rows * c.n_embd, "result_norm", -1);
  be.MatMul(output, act.cur, rows, act.logits);
  if (bias != nullptr) be.AddBias(act.logits, bias, rows, c.n_vocab, act.logits);
  s.Named(be, act.logits, rows * c.n_vocab, "result_output", -1);
}

}  // namespace tandem

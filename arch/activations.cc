#include "arch/activations.h"

#include <algorithm>

namespace tandem {
namespace {

struct ActLayout {
  int64_t x, cur, q, k, v, att, gate, up, router, xe, slots, logits, ids, pos, expert_ids, expert_weights;
  int64_t expert_rows;
};

ActLayout LayoutOf(const ModelConfig& c, int64_t t) {
  const int64_t q_dim = c.q_dim();
  const int64_t te = ExpertRows(c, t);
  const int64_t ff = c.max_ff();
  const int64_t k = std::max(c.n_expert_used, 1);
  return ActLayout{
      .x = t * c.n_embd, .cur = t * std::max<int64_t>(c.n_embd, q_dim), .q = t * q_dim,
      .k = t * c.n_embd_kv(), .v = t * c.n_embd_kv(), .att = t * q_dim, .gate = te * ff, .up = te * ff,
      .router = t * std::max(c.n_expert, 1), .xe = te * c.n_embd, .slots = t * c.n_embd * k,
      .logits = t * c.n_vocab, .ids = t, .pos = t, .expert_ids = c.is_moe() ? t * k : 0,
      .expert_weights = c.is_moe() ? t * k : 0, .expert_rows = te};
}

// Each buffer starts on a 64-byte boundary.
int64_t Pad(int64_t n) { return (n + 15) / 16 * 16; }

}  // namespace

// A small batch gets one row per (token, expert) pair, so MoeExperts runs all of its experts in one pass: in decode
// two parallel regions a layer instead of two per expert, each with its fixed costs (activation quantization, the
// threads' start and wait). A large batch runs its experts in passes of max_tokens rows; its arithmetic hides them.
int64_t ExpertRows(const ModelConfig& cfg, int64_t max_tokens) {
  constexpr int64_t kAllPairsMaxRows = 64;
  if (cfg.n_expert == 0) return max_tokens;
  return std::max(max_tokens, std::min(max_tokens * std::max(cfg.n_expert_used, 1), kAllPairsMaxRows));
}

size_t ActivationBytes(const ModelConfig& cfg, int64_t max_tokens) {
  const ActLayout l = LayoutOf(cfg, max_tokens);
  int64_t n = 0;
  for (int64_t e : {l.x, l.cur, l.q, l.k, l.v, l.att, l.gate, l.up, l.router, l.xe, l.slots, l.logits, l.ids, l.pos,
                    l.expert_ids, l.expert_weights}) {
    n += Pad(e);
  }
  return static_cast<size_t>(n) * 4;
}

Activations CarveActivations(void* block, const ModelConfig& cfg, int64_t max_tokens) {
  const ActLayout l = LayoutOf(cfg, max_tokens);
  float* p = static_cast<float*>(block);
  auto take = [&p](int64_t n) {
    float* r = p;
    p += Pad(n);
    return r;
  };
  Activations a;
  a.x = take(l.x);
  a.cur = take(l.cur);
  a.q = take(l.q);
  a.k = take(l.k);
  a.v = take(l.v);
  a.att = take(l.att);
  a.gate = take(l.gate);
  a.up = take(l.up);
  a.router = take(l.router);
  a.xe = take(l.xe);
  a.slots = take(l.slots);
  a.logits = take(l.logits);
  a.ids = reinterpret_cast<int32_t*>(take(l.ids));
  a.pos = reinterpret_cast<int32_t*>(take(l.pos));
  a.expert_ids = reinterpret_cast<int32_t*>(take(l.expert_ids));
  a.expert_weights = take(l.expert_weights);
  a.max_tok = max_tokens;
  a.expert_rows = l.expert_rows;
  return a;
}

}  // namespace tandem

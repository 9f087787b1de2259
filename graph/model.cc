#include "graph/model.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"

namespace tandem {
namespace {

// A 2-D (or one 2-D slice of a 3-D) tensor as a weight matrix: ne0 = cols (contiguous), ne1 = rows.
WeightMatrix MatrixOf(const GgufFile& f, const GgufTensorInfo& t, int64_t slice = 0) {
  WeightMatrix m;
  m.type = t.type;
  m.cols = t.ne[0];
  m.rows = t.ne[1];
  m.row_stride = RowBytes(t.type, m.cols);
  m.data = f.TensorData(t) + static_cast<size_t>(slice) * m.row_stride * static_cast<size_t>(m.rows);
  return m;
}

absl::StatusOr<WeightMatrix> Find(const GgufFile& f, const std::string& name, int64_t slice = 0) {
  const GgufTensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return InvalidArgument("missing tensor '", name, "'");
  return MatrixOf(f, *t, slice);
}

std::string Blk(int il, const char* what) { return Cat("blk.", il, ".", what, ".weight"); }

void Named(const StepContext& s, Backend& be, const float* data, int64_t n, std::string_view name, int il) {
  if (s.on_named) s.on_named(be, data, n, name, il);
}

}  // namespace

absl::StatusOr<ModelWeights> MapWeights(const GgufFile& f, const ModelConfig& cfg) {
  ModelWeights w;
  // Llama 3.1's per-pair RoPE frequency factors change the rotation; running without them would be silently wrong.
  if (f.FindTensor("rope_freqs.weight") != nullptr) {
    return Unimplemented("rope_freqs.weight (Llama 3.1 RoPE frequency factors) is not supported yet");
  }
  TANDEM_ASSIGN_OR_RETURN(w.token_embd, Find(f, "token_embd.weight"));
  TANDEM_ASSIGN_OR_RETURN(w.output_norm, Find(f, "output_norm.weight"));
  if (cfg.tied_output) {
    w.output = w.token_embd;
  } else {
    TANDEM_ASSIGN_OR_RETURN(w.output, Find(f, "output.weight"));
  }
  w.attn.resize(cfg.n_layer);
  w.ffn.resize(cfg.n_layer);
  for (int il = 0; il < cfg.n_layer; ++il) {
    AttnWeights& a = w.attn[il];
    TANDEM_ASSIGN_OR_RETURN(a.norm, Find(f, Blk(il, "attn_norm")));
    TANDEM_ASSIGN_OR_RETURN(a.wq, Find(f, Blk(il, "attn_q")));
    TANDEM_ASSIGN_OR_RETURN(a.wk, Find(f, Blk(il, "attn_k")));
    TANDEM_ASSIGN_OR_RETURN(a.wv, Find(f, Blk(il, "attn_v")));
    TANDEM_ASSIGN_OR_RETURN(a.wo, Find(f, Blk(il, "attn_output")));
    FfnWeights& m = w.ffn[il];
    TANDEM_ASSIGN_OR_RETURN(m.norm, Find(f, Blk(il, "ffn_norm")));
    if (!cfg.is_moe()) {
      TANDEM_ASSIGN_OR_RETURN(m.dense.gate, Find(f, Blk(il, "ffn_gate")));
      TANDEM_ASSIGN_OR_RETURN(m.dense.up, Find(f, Blk(il, "ffn_up")));
      TANDEM_ASSIGN_OR_RETURN(m.dense.down, Find(f, Blk(il, "ffn_down")));
      continue;
    }
    TANDEM_ASSIGN_OR_RETURN(m.router, Find(f, Blk(il, "ffn_gate_inp")));
    m.experts.resize(cfg.n_expert);
    for (int e = 0; e < cfg.n_expert; ++e) {
      ExpertWeights& x = m.experts[e];
      if (cfg.legacy_experts) {  // older Mixtral files: one 2-D tensor per expert
        TANDEM_ASSIGN_OR_RETURN(x.gate, Find(f, Cat("blk.", il, ".ffn_gate.", e, ".weight")));
        TANDEM_ASSIGN_OR_RETURN(x.up, Find(f, Cat("blk.", il, ".ffn_up.", e, ".weight")));
        TANDEM_ASSIGN_OR_RETURN(x.down, Find(f, Cat("blk.", il, ".ffn_down.", e, ".weight")));
      } else {  // merged 3-D tensors, ne2 = expert
        TANDEM_ASSIGN_OR_RETURN(x.gate, Find(f, Blk(il, "ffn_gate_exps"), e));
        TANDEM_ASSIGN_OR_RETURN(x.up, Find(f, Blk(il, "ffn_up_exps"), e));
        TANDEM_ASSIGN_OR_RETURN(x.down, Find(f, Blk(il, "ffn_down_exps"), e));
      }
    }
  }
  return w;
}

void ForEachMatrix(AttnWeights& w, const std::function<void(WeightMatrix&)>& fn) {
  for (WeightMatrix* m : {&w.norm, &w.wq, &w.wk, &w.wv, &w.wo}) fn(*m);
}

void ForEachMatrix(FfnWeights& w, const std::function<void(WeightMatrix&)>& fn) {
  fn(w.norm);
  if (w.experts.empty()) {
    for (WeightMatrix* m : {&w.dense.gate, &w.dense.up, &w.dense.down}) fn(*m);
    return;
  }
  fn(w.router);
  for (ExpertWeights& e : w.experts) {
    for (WeightMatrix* m : {&e.gate, &e.up, &e.down}) fn(*m);
  }
}

// ---- Activation buffers ----
// A small batch gets one row per (token, expert) pair, so ExpertFfns runs all of its experts in one pass: in decode
// two parallel regions a layer instead of two per expert, each with its fixed costs (activation quantization, the
// threads' start and wait). A large batch runs its experts in passes of max_tokens rows; its arithmetic hides them.
int64_t ExpertRows(const ModelConfig& cfg, int64_t max_tokens) {
  constexpr int64_t kAllPairsMaxRows = 64;
  if (cfg.n_expert == 0) return max_tokens;
  return std::max(max_tokens, std::min(max_tokens * std::max(cfg.n_expert_used, 1), kAllPairsMaxRows));
}

namespace {

struct ActLayout {
  int64_t x, cur, q, k, v, att, gate, up, router, xe, slots, logits, ids, pos;  // element counts
  int64_t expert_rows;
};

ActLayout LayoutOf(const ModelConfig& c, int64_t t) {
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  const int64_t te = ExpertRows(c, t);
  return ActLayout{
      .x = t * c.n_embd, .cur = t * std::max<int64_t>(c.n_embd, q_dim), .q = t * q_dim,
      .k = t * c.n_embd_kv(), .v = t * c.n_embd_kv(), .att = t * q_dim, .gate = te * c.n_ff, .up = te * c.n_ff,
      .router = t * std::max(c.n_expert, 1), .xe = te * c.n_embd,
      .slots = t * c.n_embd * std::max(c.n_expert_used, 1), .logits = t * c.n_vocab, .ids = t, .pos = t,
      .expert_rows = te};
}

// Each buffer starts on a 64-byte boundary.
int64_t Pad(int64_t n) { return (n + 15) / 16 * 16; }

}  // namespace

size_t ActivationBytes(const ModelConfig& cfg, int64_t max_tokens) {
  const ActLayout l = LayoutOf(cfg, max_tokens);
  int64_t n = 0;
  for (int64_t e : {l.x, l.cur, l.q, l.k, l.v, l.att, l.gate, l.up, l.router, l.xe, l.slots, l.logits, l.ids, l.pos}) {
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
  a.max_tok = max_tokens;
  a.expert_rows = l.expert_rows;
  return a;
}

void MoeScratch::Reserve(const ModelConfig& cfg, int64_t max_tokens) {
  const int64_t k = std::max(cfg.n_expert_used, 1);
  topk_ids.resize(max_tokens * k);
  topk_weights.resize(max_tokens * k);
  rows.resize(max_tokens * k);
  slot_rows.resize(max_tokens * k);
  row_weights.resize(max_tokens * k);
  expert_begin.resize(cfg.n_expert + 1);
  jobs.resize(cfg.n_expert);
}

// ---- The model, one named step per line ----

void Embed(Backend& be, const StepContext& s, const WeightMatrix& token_embd, Activations& act) {
  be.GetRows(token_embd, act.ids, s.n_tok, act.x);  Named(s, be, act.x, s.n_tok * s.cfg->n_embd, "inp_embd", -1);
}

void AttentionUnit(Backend& be, const StepContext& s, int il, const AttnWeights& w, const KvLayer& kv,
                   Activations& act) {
  const ModelConfig& c = *s.cfg;
  const int64_t n = s.n_tok;
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  const RopeParams rope_q{.n_head = c.n_head, .head_dim = c.head_dim, .n_rot = c.n_rot,
                          .freq_base = c.rope_freq_base, .freq_scale = c.rope_freq_scale};
  RopeParams rope_k = rope_q;
  rope_k.n_head = c.n_head_kv;
  const AttentionParams ap{.n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim,
                           .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim))};

  const int64_t m = s.n_live;  // trailing tokens whose outputs go on; all n enter the KV cache
  const int64_t r0 = n - m;
  float* x = act.x + r0 * c.n_embd;

  be.RmsNorm(act.x, static_cast<const float*>(w.norm.data), n, c.n_embd, c.rms_eps, act.cur);
  Named(s, be, act.cur, n * c.n_embd, "attn_norm", il);
  // q, k and v share their input, so they go as one call, unless only the last m rows' queries go on.
  const MatMulOutput qkv[] = {{.w = &w.wq, .y = act.q}, {.w = &w.wk, .y = act.k}, {.w = &w.wv, .y = act.v}};
  be.MatMuls(m == n ? std::span(qkv) : std::span(qkv).subspan(1), act.cur, n);
  Named(s, be, act.k, n * c.n_embd_kv(), "k", il);
  Named(s, be, act.v, n * c.n_embd_kv(), "v", il);
  be.Rope(act.k, n, act.pos, rope_k);                   Named(s, be, act.k, n * c.n_embd_kv(), "k_rope", il);
  be.KvStore(kv, act.k, act.v, n, s.pos0);
  if (m == 0) return;
  if (m < n) be.MatMul(w.wq, act.cur + r0 * c.n_embd, m, act.q);
  Named(s, be, act.q, m * q_dim, "q", il);
  be.Rope(act.q, m, act.pos + r0, rope_q);              Named(s, be, act.q, m * q_dim, "q_rope", il);
  be.Attention(act.q, kv, m, s.pos0 + r0, ap, act.att); Named(s, be, act.att, m * q_dim, "kqv", il);
  be.MatMul(w.wo, act.att, m, act.cur);                 Named(s, be, act.cur, m * c.n_embd, "attn_out", il);
  be.Add(x, act.cur, m * c.n_embd, x);                  Named(s, be, x, m * c.n_embd, "ffn_inp", il);
}

namespace {

// x: the n live residual rows; act.cur holds their normed copy.
void DenseFfn(Backend& be, const StepContext& s, int il, const ExpertWeights& w, int64_t n, float* x,
              Activations& act) {
  const ModelConfig& c = *s.cfg;
  be.MatMul(w.gate, act.cur, n, act.gate);              Named(s, be, act.gate, n * c.n_ff, "ffn_gate", il);
  be.MatMul(w.up, act.cur, n, act.up);                  Named(s, be, act.up, n * c.n_ff, "ffn_up", il);
  be.SwiGlu(act.gate, act.up, n * c.n_ff, act.gate);    Named(s, be, act.gate, n * c.n_ff, "ffn_swiglu", il);
  be.MatMul(w.down, act.gate, n, act.cur);              Named(s, be, act.cur, n * c.n_embd, "ffn_out", il);
  be.Add(x, act.cur, n * c.n_embd, x);
}

// out = x + sum over the token's top-k experts of weight * FFN_e(norm(x)). Tokens are grouped by expert so each
// expert runs one matmul over all of its tokens. Its weighted outputs land in the token's top-k slot, and the slots
// are summed in slot order (descending probability) before the residual add, the order llama.cpp sums them in:
// quantized models amplify even last-bit differences at activation rounding boundaries.
void MoeFfn(Backend& be, const StepContext& s, int il, const FfnWeights& w, int64_t n, float* x, Activations& act,
            MoeScratch& moe) {
  const ModelConfig& c = *s.cfg;
  const int k = c.n_expert_used;
  const int64_t slot_elems = n * c.n_embd;
  be.MatMul(w.router, act.cur, n, act.router);          Named(s, be, act.router, n * c.n_expert, "ffn_gate_inp", il);
  be.MoeRoute(act.router, n, c.n_expert, k, moe.topk_ids.data(), moe.topk_weights.data());
  // Group the (token, slot) pairs by expert, in token order within each: a counting sort.
  std::fill(moe.expert_begin.begin(), moe.expert_begin.end(), 0);
  for (int64_t i = 0; i < n * k; ++i) ++moe.expert_begin[moe.topk_ids[i] + 1];
  for (int e = 0; e < c.n_expert; ++e) moe.expert_begin[e + 1] += moe.expert_begin[e];
  for (int64_t t = 0; t < n; ++t) {
    for (int j = 0; j < k; ++j) {
      const int64_t at = moe.expert_begin[moe.topk_ids[t * k + j]]++;
      moe.rows[at] = static_cast<int32_t>(t);
      moe.slot_rows[at] = static_cast<int32_t>(j * n + t);
      moe.row_weights[at] = moe.topk_weights[t * k + j];
    }
  }
  size_t n_jobs = 0;
  int64_t begin = 0;
  for (int e = 0; e < c.n_expert; ++e) {
    const int64_t end = moe.expert_begin[e];  // the pass above moved each expert's start to its end
    if (end > begin) {
      const ExpertWeights& ex = w.experts[e];
      moe.jobs[n_jobs++] = ExpertFfnJob{.gate = &ex.gate, .up = &ex.up, .down = &ex.down, .rows = &moe.rows[begin],
                                        .slot_rows = &moe.slot_rows[begin], .weights = &moe.row_weights[begin],
                                        .m = end - begin};
    }
    begin = end;
  }
  be.ExpertFfns(moe.jobs.data(), n_jobs, act.cur, c.n_embd, c.n_ff,
                ExpertBuffers{.xe = act.xe, .gate = act.gate, .up = act.up, .rows = act.expert_rows}, act.slots);
  for (int j = 1; j < k; ++j) be.Add(act.slots, act.slots + j * slot_elems, slot_elems, act.slots);
  Named(s, be, act.slots, slot_elems, "ffn_moe_out", il);
  be.Add(x, act.slots, slot_elems, x);
}

}  // namespace

void FfnUnit(Backend& be, const StepContext& s, int il, const FfnWeights& w, Activations& act, MoeScratch& moe) {
  const ModelConfig& c = *s.cfg;
  const int64_t n = s.n_live;
  if (n == 0) return;
  float* x = act.x + (s.n_tok - n) * c.n_embd;
  be.RmsNorm(x, static_cast<const float*>(w.norm.data), n, c.n_embd, c.rms_eps, act.cur);
  Named(s, be, act.cur, n * c.n_embd, "ffn_norm", il);
  if (c.is_moe()) {
    MoeFfn(be, s, il, w, n, x, act, moe);
  } else {
    DenseFfn(be, s, il, w.dense, n, x, act);
  }
  Named(s, be, x, n * c.n_embd, "l_out", il);
}

void OutputUnit(Backend& be, const StepContext& s, const WeightMatrix& norm, const WeightMatrix& output,
                int64_t first_row, Activations& act) {
  const ModelConfig& c = *s.cfg;
  const int64_t rows = s.n_tok - first_row;
  if (rows == 0) return;  // a prefill chunk that asks for no logits
  be.RmsNorm(act.x + first_row * c.n_embd, static_cast<const float*>(norm.data), rows, c.n_embd, c.rms_eps,
             act.cur);
  Named(s, be, act.cur, rows * c.n_embd, "result_norm", -1);
  be.MatMul(output, act.cur, rows, act.logits);         Named(s, be, act.logits, rows * c.n_vocab, "result_output", -1);
}

}  // namespace tandem

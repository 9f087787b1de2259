// The llama-family model (Llama and Mixtral), written once as named ops over the Backend interface.
// Each placement unit is one function: Embed, AttentionUnit, FfnUnit, OutputUnit. The executor decides on which
// backend each runs and where its weights live; these functions only read the math.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "graph/backend.h"

namespace tandem {

struct AttnWeights {
  WeightMatrix norm;  // [n_embd], F32
  WeightMatrix wq;    // [n_embd -> n_head * head_dim], rows = outputs
  WeightMatrix wk;    // [n_embd -> n_head_kv * head_dim]
  WeightMatrix wv;    // [n_embd -> n_head_kv * head_dim]
  WeightMatrix wo;    // [n_head * head_dim -> n_embd]
};

struct ExpertWeights {
  WeightMatrix gate;  // [n_embd -> n_ff]
  WeightMatrix up;    // [n_embd -> n_ff]
  WeightMatrix down;  // [n_ff -> n_embd]
};

struct FfnWeights {
  WeightMatrix norm;                   // [n_embd], F32
  ExpertWeights dense;                 // dense FFN (unused for MoE)
  WeightMatrix router;                 // MoE: [n_embd -> n_expert], F32
  std::vector<ExpertWeights> experts;  // MoE: n_expert entries
};

struct ModelWeights {
  WeightMatrix token_embd;   // [n_embd] x n_vocab rows
  std::vector<AttnWeights> attn;
  std::vector<FfnWeights> ffn;
  WeightMatrix output_norm;  // [n_embd], F32
  WeightMatrix output;       // [n_embd -> n_vocab] (token_embd when tied)
};

// Views of every weight inside the file's mapping. The file must outlive the views.
absl::StatusOr<ModelWeights> MapWeights(const GgufFile& file, const ModelConfig& cfg);

// Calls fn on every matrix of a unit (for relocation into VRAM or staging).
void ForEachMatrix(AttnWeights& w, const std::function<void(WeightMatrix&)>& fn);
void ForEachMatrix(FfnWeights& w, const std::function<void(WeightMatrix&)>& fn);

// Activation buffers of one backend, sized for max_tokens at planning. Residual stream x is [n_tok][n_embd].
struct Activations {
  float* x = nullptr;       // [max_tok][n_embd] residual stream
  float* cur = nullptr;     // [max_tok][n_embd] normed input / projections back to n_embd
  float* q = nullptr;       // [max_tok][n_head * head_dim]
  float* k = nullptr;       // [max_tok][n_head_kv * head_dim]
  float* v = nullptr;       // [max_tok][n_head_kv * head_dim]
  float* att = nullptr;     // [max_tok][n_head * head_dim]
  float* gate = nullptr;    // [expert_rows][n_ff]
  float* up = nullptr;      // [expert_rows][n_ff]
  float* router = nullptr;  // [max_tok][n_expert]
  float* xe = nullptr;      // [expert_rows][n_embd] tokens gathered for the experts of one ExpertFfns pass
  float* slots = nullptr;   // [n_expert_used][max_tok][n_embd] weighted expert outputs, slot-major
  float* logits = nullptr;  // [max_tok][n_vocab]
  int32_t* ids = nullptr;   // [max_tok] token ids (this backend's memory)
  int32_t* pos = nullptr;   // [max_tok] positions (this backend's memory)
  int64_t max_tok = 0;      // rows each [max_tok] buffer holds
  int64_t expert_rows = 0;  // rows of xe, gate and up: >= max_tok, and every (token, expert) pair of a small batch
};
// Rows of the expert buffers (Activations::xe, gate, up) for batches of up to max_tokens.
int64_t ExpertRows(const ModelConfig& cfg, int64_t max_tokens);
// Bytes of the activation buffers for one backend.
size_t ActivationBytes(const ModelConfig& cfg, int64_t max_tokens);
// Carves the buffers out of one block of ActivationBytes bytes.
Activations CarveActivations(void* block, const ModelConfig& cfg, int64_t max_tokens);

// Host scratch for MoE routing: which tokens go to which expert. Sized once.
struct MoeScratch {
  std::vector<int32_t> topk_ids;    // [max_tok][k]
  std::vector<float> topk_weights;  // [max_tok][k]
  std::vector<int32_t> rows;        // token rows, grouped by the expert they are routed to
  std::vector<int32_t> slot_rows;   // their rows in Activations::slots (slot * n_tok + token)
  std::vector<float> row_weights;   // their routing weights
  std::vector<int64_t> expert_begin;  // [n_expert + 1] each expert's first entry in rows
  std::vector<ExpertFfnJob> jobs;     // [n_expert] the experts with tokens
  void Reserve(const ModelConfig& cfg, int64_t max_tokens);
};

// What one forward step knows: the batch, its first position, and a hook that sees named intermediates.
struct StepContext {
  const ModelConfig* cfg = nullptr;
  int64_t n_tok = 0;
  int64_t pos0 = 0;
  // The trailing n_live tokens of the batch whose residual rows later units still read. It is n_tok except in the
  // last layer, where only the logit rows go on: there the attention unit still caches every token's K and V but
  // computes queries, attention and all that follows for the live rows only, as llama.cpp does.
  int64_t n_live = 0;
  // Called after each named op with (backend, data, n floats, name, layer); null = no dump.
  std::function<void(Backend&, const float*, int64_t, std::string_view, int)> on_named;
};

// Units. Each reads and writes the residual stream act.x on backend `be`; rows before n_tok - n_live are dead.
void Embed(Backend& be, const StepContext& s, const WeightMatrix& token_embd, Activations& act);
void AttentionUnit(Backend& be, const StepContext& s, int il, const AttnWeights& w, const KvLayer& kv,
                   Activations& act);
void FfnUnit(Backend& be, const StepContext& s, int il, const FfnWeights& w, Activations& act, MoeScratch& moe);
// Logits of rows [first_row, n_tok) into act.logits (row 0 = first_row).
void OutputUnit(Backend& be, const StepContext& s, const WeightMatrix& norm, const WeightMatrix& output,
                int64_t first_row, Activations& act);

}  // namespace tandem

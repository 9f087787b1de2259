// The activation buffers of one device: the residual stream and the named intermediates the unit functions write,
// sized for a batch of max_tokens at planning so that nothing is allocated per token.
#pragma once

#include <cstddef>
#include <cstdint>

#include "arch/model_config.h"

namespace tandem {

struct Activations {
  float* x = nullptr;       // [max_tok][n_embd] residual stream
  float* cur = nullptr;     // [max_tok][max(n_embd, q_dim)] normed input / projections back to n_embd
  float* q = nullptr;       // [max_tok][n_head * head_dim]
  float* k = nullptr;       // [max_tok][n_head_kv * head_dim]
  float* v = nullptr;       // [max_tok][n_head_kv * head_dim]
  float* att = nullptr;     // [max_tok][n_head * head_dim]
  float* gate = nullptr;    // [expert_rows][max_ff]
  float* up = nullptr;      // [expert_rows][max_ff]
  float* router = nullptr;  // [max_tok][n_expert] router logits
  float* xe = nullptr;      // [expert_rows][n_embd] tokens gathered for the experts of one pass
  float* slots = nullptr;   // [n_expert_used][max_tok][n_embd] weighted expert outputs, slot-major
  float* logits = nullptr;  // [max_tok][n_vocab]
  int32_t* ids = nullptr;   // [max_tok] token ids
  int32_t* pos = nullptr;   // [max_tok] positions
  int32_t* expert_ids = nullptr;    // [max_tok][n_expert_used] routing: each token's experts
  float* expert_weights = nullptr;  // [max_tok][n_expert_used] and their weights
  int64_t max_tok = 0;      // rows each [max_tok] buffer holds
  int64_t expert_rows = 0;  // rows of xe, gate and up: >= max_tok, and every (token, expert) pair of a small batch
};

// Rows of the expert buffers (Activations::xe, gate, up) for batches of up to max_tokens.
int64_t ExpertRows(const ModelConfig& cfg, int64_t max_tokens);
// Bytes of the activation buffers for one device.
size_t ActivationBytes(const ModelConfig& cfg, int64_t max_tokens);
// Carves the buffers out of one block of ActivationBytes bytes.
Activations CarveActivations(void* block, const ModelConfig& cfg, int64_t max_tokens);

}  // namespace tandem

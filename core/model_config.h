// The llama-family hyperparameters, read from GGUF metadata and checked against the tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/gguf.h"

namespace tandem {

struct ModelConfig {
  std::string arch;            // "llama" (Mixtral files also say "llama")
  std::string name;            // general.name, may be empty
  int n_layer = 0;             // {arch}.block_count
  int n_embd = 0;              // {arch}.embedding_length
  int n_ff = 0;                // {arch}.feed_forward_length (per expert for MoE)
  int n_head = 0;              // {arch}.attention.head_count
  int n_head_kv = 0;           // {arch}.attention.head_count_kv (defaults to n_head)
  int head_dim = 0;            // n_embd / n_head
  int n_rot = 0;               // {arch}.rope.dimension_count (defaults to head_dim)
  int n_ctx_train = 0;         // {arch}.context_length
  int n_vocab = 0;             // rows of token_embd
  int n_expert = 0;            // {arch}.expert_count, 0 for dense
  int n_expert_used = 0;       // {arch}.expert_used_count
  float rms_eps = 1e-5f;       // {arch}.attention.layer_norm_rms_epsilon
  float rope_freq_base = 10000.0f;  // {arch}.rope.freq_base (default 10000)
  float rope_freq_scale = 1.0f;     // 1 / {arch}.rope.scale_linear (default 1)
  bool tied_output = false;    // no output.weight: the head reuses token_embd
  bool legacy_experts = false;  // per-expert blk.N.ffn_{gate,up,down}.E.weight tensors
  int bos_id = -1, eos_id = -1;  // from tokenizer.ggml.*, -1 when absent

  bool is_moe() const { return n_expert > 0; }
  int64_t n_embd_kv() const { return static_cast<int64_t>(n_head_kv) * head_dim; }
};

// Reads and validates: required keys and tensors present with the right shapes and supported types,
// head counts that divide, expert_used_count <= expert_count, token ids in range.
absl::StatusOr<ModelConfig> LoadModelConfig(const GgufFile& file);

}  // namespace tandem

// The hyper-parameters of a model, as its architecture module (arch/arch.h) reads them from GGUF metadata and
// checks them against the module's tensor schema. One struct for every family: a family fills what it has, and the
// rest keep the defaults that mean "not used".
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/gguf.h"

namespace tandem {

struct ModelConfig {
  std::string arch;            // general.architecture: the module that runs the file ("llama" for Mixtral too)
  std::string name;            // general.name, may be empty
  int n_layer = 0;             // {arch}.block_count
  int n_embd = 0;              // {arch}.embedding_length
  int n_ff = 0;                // {arch}.feed_forward_length: the dense FFN's width
  int n_ff_expert = 0;         // {arch}.expert_feed_forward_length: one expert's width (n_ff when absent)
  int n_ff_shexp = 0;          // {arch}.expert_shared_feed_forward_length: the shared expert's width, 0 without one
  int n_swa = 0;               // {arch}.attention.sliding_window: keys a windowed layer sees, 0 = no windowed layers
  int swa_period = 0;          // {arch}.attention.sliding_window_pattern: of every period layers, all but the last
                               // are windowed (gpt-oss: 2, the even layers)
  int n_head = 0;              // {arch}.attention.head_count
  int n_head_kv = 0;           // {arch}.attention.head_count_kv (defaults to n_head)
  int head_dim = 0;            // {arch}.attention.key_length (defaults to n_embd / n_head)
  int n_rot = 0;               // {arch}.rope.dimension_count (defaults to head_dim)
  int n_ctx_train = 0;         // {arch}.context_length
  int n_vocab = 0;             // rows of the token embeddings
  int n_expert = 0;            // {arch}.expert_count, 0 for dense
  int n_expert_used = 0;       // {arch}.expert_used_count
  float rms_eps = 1e-5f;       // {arch}.attention.layer_norm_rms_epsilon
  float rope_freq_base = 10000.0f;  // {arch}.rope.freq_base (default 10000)
  float rope_freq_scale = 1.0f;     // 1 / the linear or YaRN scaling factor (default 1)
  // YaRN ({arch}.rope.scaling.type = "yarn"), as llama.cpp applies it: ext_factor 1, the magnitude correction
  // folded so that attn_factor * (1 + 0.1 ln factor) is what rotates, and the original context of the ramps.
  float rope_ext_factor = 0.0f;     // 0: no YaRN
  float rope_attn_factor = 1.0f;
  int rope_n_ctx_orig = 0;          // {arch}.rope.scaling.original_context_length (n_ctx_train when absent)
  bool tied_output = false;    // no output matrix: the head reuses the token embeddings
  bool legacy_experts = false;  // experts stored one tensor per expert (older Mixtral files)
  int bos_id = -1, eos_id = -1;  // from tokenizer.ggml.*, -1 when absent

  bool is_moe() const { return n_expert > 0; }
  // Whether layer il attends through the sliding window (as llama.cpp's standard pattern numbers them).
  bool is_swa(int il) const { return n_swa > 0 && swa_period > 0 && il % swa_period < swa_period - 1; }
  // Rows of layer il's KV cache for n_ctx positions and batches of up to max_batch tokens: a windowed layer keeps
  // only its window and one batch, as a ring (runtime/tensor.h's KvLayer); the others every position.
  int64_t KvRows(int il, int64_t n_ctx, int64_t max_batch) const {
    return is_swa(il) ? std::min<int64_t>(n_ctx, int64_t{n_swa} + max_batch - 1) : n_ctx;
  }
  int64_t q_dim() const { return static_cast<int64_t>(n_head) * head_dim; }
  int64_t n_embd_kv() const { return static_cast<int64_t>(n_head_kv) * head_dim; }
  // The widest FFN of any kind (dense, one expert, the shared expert): the gate and up buffers' width.
  int64_t max_ff() const { return std::max({n_ff, n_ff_expert, n_ff_shexp}); }
};

// Finds the file's architecture module, reads its hyper-parameters and checks every tensor against the module's
// schema: required keys and tensors present with the right shapes and supported types, each tensor claimed by
// exactly one schema entry, head counts that divide, expert_used_count <= expert_count, token ids in range.
absl::StatusOr<ModelConfig> LoadModelConfig(const GgufFile& file);

}  // namespace tandem

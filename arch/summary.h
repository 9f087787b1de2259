// Bytes of a model's weights per layer and per group, from the tensor table and its family's schema (no tensor
// data is read). `tandem inspect` prints it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "arch/model_config.h"
#include "core/gguf.h"

namespace tandem {

// Where a tensor's bytes are counted. Norms count with the unit that applies them: attn_norm with attention,
// ffn_norm with the FFN (dense or experts), output_norm with the output; the MoE router counts with the experts.
enum class TensorGroup { kEmbeddings, kAttention, kDenseFfn, kExperts, kOutput, kOther };
constexpr int kNumTensorGroups = 6;
std::string_view TensorGroupName(
    TensorGroup g);  // "embeddings", "attention", "dense_ffn", "experts", "output", "other"

struct GroupBytes {
  uint64_t bytes[kNumTensorGroups] = {};
  uint64_t& operator[](TensorGroup g) { return bytes[static_cast<int>(g)]; }
  uint64_t operator[](TensorGroup g) const { return bytes[static_cast<int>(g)]; }
  uint64_t total() const;
};

struct LayerSummary {
  GroupBytes groups;          // this layer's attention, dense FFN or experts (other groups stay 0 here)
  uint64_t norm_bytes = 0;    // the layer's norms (already inside groups; shown for information)
  uint64_t router_bytes = 0;  // the MoE router (already inside experts)
  uint64_t expert_bytes = 0;  // gate+up+down of ALL experts, no router or norm
  int n_expert = 0;
  // One expert's gate+up+down: what a decode step reads per selected expert.
  uint64_t bytes_per_expert() const { return n_expert > 0 ? expert_bytes / n_expert : 0; }
  uint64_t total() const { return groups.total(); }
};

struct ModelSummary {
  std::vector<LayerSummary> layers;  // blk.0 .. blk.(n_layer-1)
  GroupBytes global;                 // tensors outside the layers: embeddings, output, others
  GroupBytes totals;                 // global + every layer
  uint64_t total_bytes = 0;          // sum of every tensor's bytes (== totals.total())
  uint64_t n_params = 0;             // sum of every tensor's elements
};

// With a config (LoadModelConfig's, so the file matched its family's schema) every tensor counts in its entry's
// group; without one (a vocab-only file) every tensor counts as "other".
ModelSummary SummarizeModel(const GgufFile& file, const ModelConfig* config);

}  // namespace tandem

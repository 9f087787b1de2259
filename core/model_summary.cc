#include "core/model_summary.h"

#include <algorithm>
#include <string>

#include "absl/strings/numbers.h"

namespace tandem {
namespace {

constexpr int kMaxLayers = 1 << 16;  // blk indices beyond this are not layers of any real model

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// "blk.N.rest" -> N and rest; false when the name has no layer prefix.
bool SplitLayer(std::string_view name, int* layer, std::string_view* rest) {
  if (!StartsWith(name, "blk.")) return false;
  const size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos || dot == 4 || dot - 4 > 6) return false;
  int n = 0;
  for (char c : name.substr(4, dot - 4)) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + (c - '0');
  }
  if (n >= kMaxLayers) return false;
  *layer = n;
  *rest = name.substr(dot + 1);
  return true;
}

// Legacy per-expert names: ffn_gate.E.weight, ffn_up.E.weight, ffn_down.E.weight. Returns E or -1.
int LegacyExpertIndex(std::string_view rest) {
  for (std::string_view p : {"ffn_gate.", "ffn_up.", "ffn_down."}) {
    if (!StartsWith(rest, p)) continue;
    std::string_view tail = rest.substr(p.size());
    const size_t dot = tail.find('.');
    if (dot == 0 || dot == std::string_view::npos || dot > 6) return -1;
    int e = 0;
    for (char c : tail.substr(0, dot)) {
      if (c < '0' || c > '9') return -1;
      e = e * 10 + (c - '0');
    }
    return e;
  }
  return -1;
}

bool IsExpertWeight(std::string_view rest) {
  return StartsWith(rest, "ffn_gate_exps.") || StartsWith(rest, "ffn_up_exps.") || StartsWith(rest, "ffn_down_exps.") ||
         LegacyExpertIndex(rest) >= 0;
}

}  // namespace

std::string_view TensorGroupName(TensorGroup g) {
  switch (g) {
    case TensorGroup::kEmbeddings:
      return "embeddings";
    case TensorGroup::kAttention:
      return "attention";
    case TensorGroup::kDenseFfn:
      return "dense_ffn";
    case TensorGroup::kExperts:
      return "experts";
    case TensorGroup::kOutput:
      return "output";
    case TensorGroup::kOther:
      return "other";
  }
  return "other";
}

uint64_t GroupBytes::total() const {
  uint64_t s = 0;
  for (uint64_t b : bytes) s += b;
  return s;
}

TensorGroup ClassifyTensor(std::string_view name, bool moe_layer, int* layer) {
  *layer = -1;
  std::string_view rest;
  if (!SplitLayer(name, layer, &rest)) {
    *layer = -1;
    if (StartsWith(name, "token_embd.")) return TensorGroup::kEmbeddings;
    if (StartsWith(name, "output_norm.") || StartsWith(name, "output.")) return TensorGroup::kOutput;
    return TensorGroup::kOther;
  }
  if (StartsWith(rest, "attn_")) return TensorGroup::kAttention;
  if (StartsWith(rest, "ffn_gate_inp.") || IsExpertWeight(rest)) return TensorGroup::kExperts;
  if (StartsWith(rest, "ffn_norm.")) return moe_layer ? TensorGroup::kExperts : TensorGroup::kDenseFfn;
  if (StartsWith(rest, "ffn_gate.") || StartsWith(rest, "ffn_up.") || StartsWith(rest, "ffn_down.")) {
    return TensorGroup::kDenseFfn;
  }
  return TensorGroup::kOther;
}

ModelSummary SummarizeModel(const GgufFile& file, const ModelConfig* config) {
  // First pass: the layer count and which layers are MoE (decides where ffn_norm counts).
  int n_layer = config ? config->n_layer : 0;
  std::vector<char> moe(static_cast<size_t>(n_layer), config && config->is_moe());
  for (const GgufTensorInfo& t : file.tensors()) {
    int layer;
    std::string_view rest;
    if (!SplitLayer(t.name, &layer, &rest)) continue;
    if (!config && layer >= n_layer) {
      n_layer = layer + 1;
      moe.resize(static_cast<size_t>(n_layer), 0);
    }
    if (!config && layer < n_layer && (StartsWith(rest, "ffn_gate_inp.") || IsExpertWeight(rest))) moe[layer] = 1;
  }

  ModelSummary s;
  s.layers.resize(static_cast<size_t>(n_layer));
  for (const GgufTensorInfo& t : file.tensors()) {
    int layer;
    std::string_view rest;
    const bool in_layer = SplitLayer(t.name, &layer, &rest) && layer < n_layer;
    const TensorGroup g = ClassifyTensor(t.name, in_layer && moe[layer], &layer);
    s.total_bytes += t.nbytes;
    s.n_params += static_cast<uint64_t>(t.n_elements());
    s.totals[g] += t.nbytes;
    if (!in_layer) {
      s.global[g] += t.nbytes;
      continue;
    }
    LayerSummary& L = s.layers[layer];
    L.groups[g] += t.nbytes;
    if (StartsWith(rest, "attn_norm.") || StartsWith(rest, "ffn_norm.")) L.norm_bytes += t.nbytes;
    if (StartsWith(rest, "ffn_gate_inp.")) L.router_bytes += t.nbytes;
    if (IsExpertWeight(rest)) {
      L.expert_bytes += t.nbytes;
      const int e = LegacyExpertIndex(rest);
      if (e >= 0) {
        L.n_expert = std::max(L.n_expert, e + 1);
      } else if (t.n_dims == 3 && t.ne[2] <= kMaxLayers) {
        L.n_expert = std::max(L.n_expert, static_cast<int>(t.ne[2]));
      }
    }
  }
  if (config && config->is_moe()) {
    for (LayerSummary& L : s.layers) L.n_expert = config->n_expert;
  }
  return s;
}

}  // namespace tandem

#include "arch/summary.h"

#include "arch/arch.h"

namespace tandem {

std::string_view TensorGroupName(TensorGroup g) {
  switch (g) {
    case TensorGroup::kEmbeddings: return "embeddings";
    case TensorGroup::kAttention: return "attention";
    case TensorGroup::kDenseFfn: return "dense_ffn";
    case TensorGroup::kExperts: return "experts";
    case TensorGroup::kOutput: return "output";
    case TensorGroup::kOther: return "other";
  }
  return "other";
}

uint64_t GroupBytes::total() const {
  uint64_t s = 0;
  for (uint64_t b : bytes) s += b;
  return s;
}

ModelSummary SummarizeModel(const GgufFile& file, const ModelConfig* config) {
  ModelSummary s;
  for (const GgufTensorInfo& t : file.tensors()) {
    s.total_bytes += t.nbytes;
    s.n_params += static_cast<uint64_t>(t.n_elements());
  }
  std::optional<ModelSchema> model;
  if (config != nullptr) {
    if (absl::StatusOr<ModelSchema> m = MatchModelSchema(*config, file.tensors()); m.ok()) model = *std::move(m);
  }
  if (!model) {
    for (const GgufTensorInfo& t : file.tensors()) {
      s.global[TensorGroup::kOther] += t.nbytes;
      s.totals[TensorGroup::kOther] += t.nbytes;
    }
    return s;
  }
  const ModelConfig& c = model->cfg;
  s.layers.resize(static_cast<size_t>(c.n_layer));
  for (LayerSummary& L : s.layers) L.n_expert = c.n_expert;
  const std::vector<GgufTensorInfo>& tensors = file.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorClaim& claim = model->match.claim(i);
    const TensorEntry& e = model->match.schema()[claim.entry];
    TensorGroup g = TensorGroup::kOther;
    switch (e.unit) {
      case UnitKind::kEmbd: g = TensorGroup::kEmbeddings; break;
      case UnitKind::kOutput: g = TensorGroup::kOutput; break;
      case UnitKind::kAttn: g = TensorGroup::kAttention; break;
      case UnitKind::kFfn: g = c.is_moe() ? TensorGroup::kExperts : TensorGroup::kDenseFfn; break;
    }
    if (!e.per_layer()) {
      if (e.shared()) g = TensorGroup::kOther;  // a global that every layer reads (rope factors)
      s.global[g] += tensors[i].nbytes;
      s.totals[g] += tensors[i].nbytes;
      continue;
    }
    LayerSummary& L = s.layers[claim.layer];
    L.groups[g] += tensors[i].nbytes;
    s.totals[g] += tensors[i].nbytes;
    if (e.role == TensorRole::kNorm) L.norm_bytes += tensors[i].nbytes;
    if (e.role == TensorRole::kRouter) L.router_bytes += tensors[i].nbytes;
    if (e.expert_stack()) L.expert_bytes += tensors[i].nbytes;
  }
  return s;
}

}  // namespace tandem

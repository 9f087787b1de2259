// BuildUnits: a model's placement units from its family's schema: each unit's tensors, bytes, and its unit function
// bound to weight views without data, for the cost model to count.
#include <algorithm>
#include <map>

#include "core/status.h"
#include "cpu_backend/repack.h"
#include "graph/partitioner.h"

namespace tandem {
namespace {

UnitSpec MakeUnit(const ModelSchema& model, UnitKind kind, int layer) {
  UnitSpec u;
  u.kind = kind;
  u.layer = layer;
  u.name = UnitName(kind, layer);
  const SchemaMatch::UnitTensors t = model.match.TensorsOf(kind, layer);
  std::map<DType, uint64_t> bytes_by_type;
  for (const auto* list : {&t.owned, &t.shared}) {
    for (const GgufTensorInfo* info : *list) {
      u.tensors.push_back(info->name);
      u.weight_bytes += info->nbytes;
      bytes_by_type[info->type] += info->nbytes;
    }
  }
  u.owned_tensors = t.owned.size();
  for (const GgufTensorInfo* info : t.owned) u.owned_bytes += info->nbytes;
  for (size_t i = 0; i < model.match.tensors().size(); ++i) {
    const TensorClaim& c = model.match.claim(i);
    if (model.match.schema()[c.entry].expert_stack() && model.match.OwnerOf(i) == std::pair(kind, layer)) {
      u.expert_bytes += model.match.tensors()[i].nbytes;
    }
  }
  uint64_t best = 0;
  for (const auto& [type, bytes] : bytes_by_type) {
    if (bytes > best) {
      u.main_type = type;
      best = bytes;
    }
  }
  if (kind == UnitKind::kAttn) {
    u.n_embd_kv = model.cfg.n_embd_kv();
    if (model.cfg.is_swa(layer)) u.kv_window = model.cfg.n_swa;
  }
  auto program = std::make_shared<UnitProgram>();
  program->arch = model.arch;
  program->cfg = model.cfg;
  program->weights = BindUnit(model, kind, layer, nullptr);
  u.packed_bytes = UnitBlockBytes(program->weights);
  if (kind == UnitKind::kFfn && program->weights.n_expert > 0) {
    // One expert's block (expert 0's matrices; every expert of a stack is shaped alike), and the unit without them.
    constexpr uint64_t kAlign = 256;
    UnitWeights& w = program->weights;
    const int n_expert = w.n_expert;
    for (size_t i = 0; i < w.expert_slots.size(); i += n_expert) {
      const WeightMatrix& m = w.expert_slots[i];
      if (!m.present()) continue;
      u.expert_block_bytes = (u.expert_block_bytes + m.bytes() + kAlign - 1) / kAlign * kAlign;
      u.expert_raw_bytes += m.bytes();
      u.expert_params += static_cast<double>(m.rows) * static_cast<double>(m.cols);
      if (cpu::CanRepack(m)) {
        u.expert_repacked_bytes += cpu::PackedBytes(m);
        u.expert_repacked_source_bytes += m.bytes();
      }
    }
    UnitWeights own = w;
    own.expert_slots.clear();
    u.own_packed_bytes = UnitBlockBytes(own);
  }
  if (kind != UnitKind::kEmbd) {
    // The matrices CpuBackend::PrepareMatMulWeights would repack: the same views the executor hands it.
    uint64_t source_bytes = 0;
    program->weights.ForEach([&](WeightMatrix& m) {
      if (!cpu::CanRepack(m)) return;
      u.repacked_bytes += cpu::PackedBytes(m);
      source_bytes += m.bytes();
    });
    // Shared tensors (a tied head's token_embd, two-dimensional) keep their pages: the owner's row lookups read
    // them there.
    for (const GgufTensorInfo* info : t.shared) {
      WeightMatrix m{.type = info->type, .rows = 1, .cols = info->ne[0]};
      for (int d = 1; d < info->n_dims; ++d) m.rows *= info->ne[d];
      m.row_stride = RowBytes(m.type, m.cols);
      if (cpu::CanRepack(m)) source_bytes -= std::min<uint64_t>(source_bytes, m.bytes());
    }
    u.repacked_owned_source_bytes = std::min(source_bytes, u.owned_bytes);
  }
  u.program = std::move(program);
  u.ops = OpsOf(u);
  return u;
}

}  // namespace

std::vector<UnitSpec> BuildUnits(const ModelSchema& model) {
  std::vector<UnitSpec> units;
  units.push_back(MakeUnit(model, UnitKind::kEmbd, -1));
  for (int l = 0; l < model.cfg.n_layer; ++l) {
    units.push_back(MakeUnit(model, UnitKind::kAttn, l));
    units.push_back(MakeUnit(model, UnitKind::kFfn, l));
  }
  units.push_back(MakeUnit(model, UnitKind::kOutput, -1));
  return units;
}

absl::StatusOr<std::vector<UnitSpec>> BuildUnits(const ModelConfig& cfg, std::span<const GgufTensorInfo> tensors) {
  if (cfg.n_layer <= 0) return InvalidArgument("the model has no layers");
  TANDEM_ASSIGN_OR_RETURN(const ModelSchema model, MatchModelSchema(cfg, tensors));
  return BuildUnits(model);
}

absl::StatusOr<std::vector<UnitSpec>> BuildUnits(const GgufFile& file, const ModelConfig& cfg) {
  return BuildUnits(cfg, file.tensors());
}

}  // namespace tandem

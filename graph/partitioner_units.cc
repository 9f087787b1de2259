// BuildUnits: groups a model's tensors into placement units and counts their bytes and arithmetic.
#include <algorithm>
#include <map>
#include <regex>

#include "absl/strings/numbers.h"
#include "core/status.h"
#include "graph/partitioner.h"

namespace tandem {
namespace {

struct Tally {
  std::map<DType, uint64_t> bytes_by_type;
  double legacy_expert_params = 0;  // all per-expert matrices of the legacy layout together
};

// The executor packs a unit's tensors into one block, each starting on this boundary.
constexpr uint64_t kPackAlign = 256;

void AddTensor(const GgufTensorInfo& t, UnitSpec* u, Tally* tally) {
  u->tensors.push_back(t.name);
  u->weight_bytes += t.nbytes;
  u->packed_bytes += (t.nbytes + kPackAlign - 1) / kPackAlign * kPackAlign;
  tally->bytes_by_type[t.type] += t.nbytes;
}

DType MainType(const Tally& tally) {
  DType best = DType::kF32;
  uint64_t best_bytes = 0;
  for (const auto& [type, bytes] : tally.bytes_by_type) {
    if (bytes > best_bytes) {
      best = type;
      best_bytes = bytes;
    }
  }
  return best;
}

double MatrixParams(const GgufTensorInfo& t) {
  return t.n_dims >= 2 ? static_cast<double>(t.ne[0]) * static_cast<double>(t.ne[1]) : 0.0;
}

}  // namespace

absl::StatusOr<std::vector<UnitSpec>> BuildUnits(const GgufFile& file, const ModelConfig& cfg) {
  return BuildUnits(cfg, file.tensors());
}

absl::StatusOr<std::vector<UnitSpec>> BuildUnits(const ModelConfig& cfg, std::span<const GgufTensorInfo> tensors) {
  if (cfg.n_layer <= 0) return InvalidArgument("the model has no layers");
  const int n_layer = cfg.n_layer;
  // Index 0: embd; 1 + 2*l: blk.l.attn; 2 + 2*l: blk.l.ffn; last: output.
  std::vector<UnitSpec> units(2 + 2 * static_cast<size_t>(n_layer));
  std::vector<Tally> tally(units.size());
  UnitSpec& embd = units.front();
  UnitSpec& output = units.back();
  embd.name = "embd";
  embd.kind = UnitKind::kEmbd;
  output.name = "output";
  output.kind = UnitKind::kOutput;
  for (int l = 0; l < n_layer; ++l) {
    UnitSpec& a = units[1 + 2 * l];
    a.name = Cat("blk.", l, ".attn");
    a.kind = UnitKind::kAttn;
    a.layer = l;
    a.n_head = cfg.n_head;
    a.head_dim = cfg.head_dim;
    a.n_embd_kv = cfg.n_embd_kv();
    UnitSpec& f = units[2 + 2 * l];
    f.name = Cat("blk.", l, ".ffn");
    f.kind = UnitKind::kFfn;
    f.layer = l;
  }

  static const std::regex kLegacyExpert(R"(^ffn_(gate|up|down)\.(\d+)\.weight$)");
  const GgufTensorInfo* token_embd = nullptr;
  bool has_output_matrix = false;
  for (const GgufTensorInfo& t : tensors) {
    const std::string& name = t.name;
    if (name.rfind("blk.", 0) == 0) {
      const size_t dot = name.find('.', 4);
      int layer = -1;
      if (dot == std::string::npos ||
          !absl::SimpleAtoi(absl::string_view(name.data() + 4, dot - 4), &layer) || layer < 0) {
        return InvalidArgument("tensor '", name, "' has no layer number after 'blk.'");
      }
      if (layer >= n_layer) {
        return InvalidArgument("tensor '", name, "' names layer ", layer, " but the model has ", n_layer,
                               " layers");
      }
      const std::string rest = name.substr(dot + 1);
      const bool is_ffn = rest.rfind("ffn", 0) == 0;
      const size_t idx = 1 + 2 * static_cast<size_t>(layer) + (is_ffn ? 1 : 0);
      UnitSpec& u = units[idx];
      AddTensor(t, &u, &tally[idx]);
      if (!is_ffn) {
        u.dense_params += MatrixParams(t);
        if (rest.rfind("attn_k.", 0) == 0 || rest.rfind("attn_v.", 0) == 0) u.kv_params += MatrixParams(t);
      } else if (rest.find("_exps") != std::string::npos && t.n_dims >= 3) {
        u.expert_bytes += t.nbytes;
        u.expert_params += MatrixParams(t);  // one expert's slice
        u.n_expert = static_cast<int>(t.ne[2]);
      } else if (std::regex_match(rest, kLegacyExpert)) {
        u.expert_bytes += t.nbytes;
        tally[idx].legacy_expert_params += MatrixParams(t);
      } else {
        u.dense_params += MatrixParams(t);  // norm (0), router, dense gate/up/down
      }
    } else if (name.rfind("token_embd.", 0) == 0) {
      AddTensor(t, &embd, &tally.front());
      if (name == "token_embd.weight") {
        token_embd = &t;
        embd.rows = t.ne[1];
      }
    } else if (name.rfind("output_norm.", 0) == 0 || name.rfind("output.", 0) == 0) {
      AddTensor(t, &output, &tally.back());
      output.dense_params += MatrixParams(t);
      if (name == "output.weight") has_output_matrix = true;
    } else {
      // Globals outside the blocks (e.g. rope_freqs) are small: they travel with the embeddings.
      AddTensor(t, &embd, &tally.front());
    }
  }
  if (token_embd == nullptr) return InvalidArgument("the model has no token_embd.weight");
  if (!has_output_matrix) {
    // Tied head: the output matmul reads the embedding table.
    AddTensor(*token_embd, &output, &tally.back());
    output.dense_params += MatrixParams(*token_embd);
  }

  for (size_t i = 0; i < units.size(); ++i) {
    UnitSpec& u = units[i];
    if (u.tensors.empty()) return InvalidArgument("unit ", u.name, " has no tensors in the model");
    if (u.kind == UnitKind::kFfn && u.expert_bytes > 0) {
      if (u.n_expert == 0) u.n_expert = cfg.n_expert;
      if (u.n_expert <= 0) return InvalidArgument(u.name, " has expert tensors but the model has no expert_count");
      if (tally[i].legacy_expert_params > 0) u.expert_params += tally[i].legacy_expert_params / u.n_expert;
      u.n_expert_used = std::max(1, std::min(cfg.n_expert_used, u.n_expert));
    }
    u.main_type = MainType(tally[i]);
  }
  return units;
}

}  // namespace tandem

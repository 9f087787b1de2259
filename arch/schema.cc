#include "arch/schema.h"

#include <algorithm>

#include "core/status.h"

namespace tandem {
namespace {

constexpr int64_t kMaxVocab = int64_t{1} << 24;

// Reads a decimal index written without leading zeros (as the converters write them) at name[*at..].
bool ReadIndex(std::string_view name, size_t* at, int* out) {
  size_t i = *at;
  int64_t v = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i - *at < 9) v = v * 10 + (name[i++] - '0');
  if (i == *at || (name[*at] == '0' && i - *at > 1)) return false;
  *at = i;
  *out = static_cast<int>(v);
  return true;
}

// Matches `name` against a pattern with {L} and {E}; the indices it holds go to *layer and *expert.
bool MatchPattern(std::string_view pattern, std::string_view name, int* layer, int* expert) {
  size_t p = 0, n = 0;
  *layer = -1;
  *expert = -1;
  while (p < pattern.size()) {
    if (pattern.compare(p, 3, "{L}") == 0 || pattern.compare(p, 3, "{E}") == 0) {
      if (!ReadIndex(name, &n, pattern[p + 1] == 'L' ? layer : expert)) return false;
      p += 3;
      continue;
    }
    if (n >= name.size() || pattern[p] != name[n]) return false;
    ++p;
    ++n;
  }
  return n == name.size();
}

std::string ShapeStr(const int64_t* ne, int n_dims) {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) s += Cat(d ? ", " : "", ne[d]);
  return s + "]";
}

bool Refused(const TensorEntry& e, const ModelConfig& c) {
  return (e.presence == Presence::kDenseOnly && c.is_moe()) || (e.presence == Presence::kMoeOnly && !c.is_moe());
}

}  // namespace

bool EntryWanted(const TensorEntry& e, const ModelConfig& c) {
  return e.presence == Presence::kRequired || (e.presence == Presence::kDenseOnly && !c.is_moe()) ||
         (e.presence == Presence::kMoeOnly && c.is_moe());
}

std::string_view UnitKindName(UnitKind k) {
  switch (k) {
    case UnitKind::kEmbd: return "embd";
    case UnitKind::kAttn: return "attn";
    case UnitKind::kFfn: return "ffn";
    case UnitKind::kOutput: return "output";
  }
  return "?";
}

std::string UnitName(UnitKind k, int layer) {
  return layer >= 0 ? Cat("blk.", layer, ".", UnitKindName(k)) : std::string(UnitKindName(k));
}

std::string_view DimName(Dim d) {
  switch (d) {
    case Dim::kOne: return "1";
    case Dim::kEmbd: return "n_embd";
    case Dim::kFf: return "n_ff";
    case Dim::kFfExpert: return "n_ff_expert";
    case Dim::kFfShexp: return "n_ff_shexp";
    case Dim::kVocab: return "n_vocab";
    case Dim::kQ: return "n_head*head_dim";
    case Dim::kKv: return "n_head_kv*head_dim";
    case Dim::kExpert: return "n_expert";
    case Dim::kRotHalf: return "n_rot/2";
    case Dim::kHeadDim: return "head_dim";
    case Dim::kHead: return "n_head";
  }
  return "?";
}

int64_t DimValue(Dim d, const ModelConfig& c) {
  switch (d) {
    case Dim::kOne: return 1;
    case Dim::kEmbd: return c.n_embd;
    case Dim::kFf: return c.n_ff;
    case Dim::kFfExpert: return c.n_ff_expert;
    case Dim::kFfShexp: return c.n_ff_shexp;
    case Dim::kVocab: return c.n_vocab;
    case Dim::kQ: return c.q_dim();
    case Dim::kKv: return c.n_embd_kv();
    case Dim::kExpert: return c.n_expert;
    case Dim::kRotHalf: return c.n_rot / 2;
    case Dim::kHeadDim: return c.head_dim;
    case Dim::kHead: return c.n_head;
  }
  return 0;
}

std::string TensorName(std::string_view pattern, int layer, int expert) {
  std::string out;
  for (size_t p = 0; p < pattern.size();) {
    if (pattern.compare(p, 3, "{L}") == 0) {
      out += std::to_string(layer);
      p += 3;
    } else if (pattern.compare(p, 3, "{E}") == 0) {
      out += std::to_string(expert);
      p += 3;
    } else {
      out += pattern[p++];
    }
  }
  return out;
}

std::optional<TensorClaim> ClaimTensorName(Schema schema, std::string_view name) {
  for (size_t e = 0; e < schema.size(); ++e) {
    int layer = -1, expert = -1;
    if (MatchPattern(schema[e].name, name, &layer, &expert)) {
      return TensorClaim{.entry = static_cast<int>(e), .layer = layer, .expert = -1};
    }
    if (!schema[e].per_expert_name.empty() && MatchPattern(schema[e].per_expert_name, name, &layer, &expert)) {
      return TensorClaim{.entry = static_cast<int>(e), .layer = layer, .expert = expert};
    }
  }
  return std::nullopt;
}

absl::StatusOr<SchemaMatch> SchemaMatch::Match(Schema schema, std::string_view family, const ModelConfig& cfg,
                                               std::span<const GgufTensorInfo> tensors) {
  SchemaMatch m;
  m.schema_ = schema;
  m.tensors_ = tensors;
  m.n_layer_ = cfg.n_layer;
  m.claims_.assign(tensors.size(), TensorClaim{});
  m.index_.assign(schema.size(), {});
  m.experts_.assign(schema.size(), {});
  for (size_t e = 0; e < schema.size(); ++e) {
    m.index_[e].assign(schema[e].per_layer() ? cfg.n_layer : 1, -1);
    if (!schema[e].per_expert_name.empty()) {
      m.experts_[e].assign(cfg.n_layer, std::vector<int>(std::max(cfg.n_expert, 0), -1));
    }
  }

  // Claim every tensor: exactly one entry, in range.
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string& name = tensors[i].name;
    int found = -1;
    TensorClaim claim;
    for (size_t e = 0; e < schema.size(); ++e) {
      int layer = -1, expert = -1;
      const bool stacked = MatchPattern(schema[e].name, name, &layer, &expert);
      const bool single = !stacked && !schema[e].per_expert_name.empty() &&
                          MatchPattern(schema[e].per_expert_name, name, &layer, &expert);
      if (!stacked && !single) continue;
      if (found >= 0) {
        return absl::InternalError(Cat("the ", family, " schema claims tensor '", name, "' twice"));
      }
      found = static_cast<int>(e);
      claim = TensorClaim{.entry = found, .layer = layer, .expert = single ? expert : -1};
    }
    if (found < 0) return InvalidArgument("unexpected tensor '", name, "': no entry of the ", family, " schema claims it");
    const TensorEntry& entry = schema[found];
    if (claim.layer >= cfg.n_layer) {
      return InvalidArgument("unexpected tensor '", name, "': the model has ", cfg.n_layer, " layers");
    }
    if (claim.expert >= cfg.n_expert) {
      return InvalidArgument("unexpected tensor '", name, "': the model has ", cfg.n_expert, " experts");
    }
    if (Refused(entry, cfg)) {
      return InvalidArgument("unexpected tensor '", name, "' in a", cfg.is_moe() ? "n MoE" : " dense", " model");
    }
    m.claims_[i] = claim;
    int& slot = claim.expert >= 0 ? m.experts_[found][claim.layer][claim.expert]
                                  : m.index_[found][entry.per_layer() ? claim.layer : 0];
    if (slot >= 0) return InvalidArgument("tensor '", name, "' appears twice");
    slot = static_cast<int>(i);
  }

  // Expert stacks: one spelling for the whole model, and whole in each layer.
  int stacked_layer = -1, single_layer = -1;
  for (size_t e = 0; e < schema.size(); ++e) {
    if (schema[e].per_expert_name.empty()) continue;
    for (int l = 0; l < cfg.n_layer; ++l) {
      const bool any_single = std::any_of(m.experts_[e][l].begin(), m.experts_[e][l].end(), [](int t) { return t >= 0; });
      if (any_single) single_layer = l;
      if (m.index_[e][l] >= 0) stacked_layer = l;
      if (any_single && m.index_[e][l] >= 0) {
        return InvalidArgument("layer ", l, ": '", TensorName(schema[e].name, l), "' mixes with per-expert tensors");
      }
    }
  }
  if (stacked_layer >= 0 && single_layer >= 0) {
    return InvalidArgument("layer ", std::max(stacked_layer, single_layer),
                           ": mixes stacked expert tensors and per-expert ones across layers");
  }
  m.per_expert_ = single_layer >= 0;

  // The vocabulary comes from the file: the first tensor that has it.
  ModelConfig c = cfg;
  for (size_t e = 0; e < schema.size() && m.vocab_ == 0; ++e) {
    const GgufTensorInfo* t = m.Find(static_cast<int>(e), 0);
    for (int d = 0; t != nullptr && d < schema[e].n_dims; ++d) {
      if (schema[e].shape[d] != Dim::kVocab) continue;
      if (t->ne[d] < 1 || t->ne[d] > kMaxVocab) {
        return InvalidArgument("tensor '", t->name, "': n_vocab ", t->ne[d], " is outside [1, ", kMaxVocab, "]");
      }
      m.vocab_ = t->ne[d];
      break;
    }
  }
  c.n_vocab = static_cast<int>(m.vocab_);

  // Presence, shapes and types.
  for (size_t e = 0; e < schema.size(); ++e) {
    const TensorEntry& entry = schema[e];
    const int n_layers = entry.per_layer() ? cfg.n_layer : 1;
    for (int l = 0; l < n_layers; ++l) {
      const int layer = entry.per_layer() ? l : -1;
      std::vector<std::pair<const GgufTensorInfo*, std::string>> found;  // tensor, the name it should have
      int n_dims = entry.n_dims;
      if (entry.expert_stack() && m.per_expert_) {
        --n_dims;  // one expert's matrix
        for (int x = 0; x < cfg.n_expert; ++x) {
          const int t = m.experts_[e][l][x];
          found.emplace_back(t >= 0 ? &tensors[t] : nullptr, TensorName(entry.per_expert_name, layer, x));
        }
      } else {
        const int t = m.index_[e][l];
        found.emplace_back(t >= 0 ? &tensors[t] : nullptr, TensorName(entry.name, layer));
      }
      for (const auto& [t, name] : found) {
        if (t == nullptr) {
          if (EntryWanted(entry, cfg)) return InvalidArgument("missing tensor '", name, "'");
          continue;
        }
        int64_t want[4] = {1, 1, 1, 1};
        for (int d = 0; d < n_dims; ++d) want[d] = DimValue(entry.shape[d], c);
        if (!std::equal(want, want + 4, t->ne.begin())) {
          return InvalidArgument("tensor '", name, "': shape ", ShapeStr(t->ne.data(), t->n_dims), ", expected ",
                                 ShapeStr(want, n_dims));
        }
        if (entry.role != TensorRole::kMatrix && t->type != DType::kF32) {
          return InvalidArgument("tensor '", name, "': type ", DTypeName(t->type), ", expected F32");
        }
        // Q8_K is an activation format and Q8_1 has no weight kernels anywhere; neither appears in weight files.
        if (t->type == DType::kQ8_K || t->type == DType::kQ8_1) {
          return InvalidArgument("tensor '", name, "': type ", DTypeName(t->type), " is not supported for weights");
        }
      }
    }
  }
  return m;
}

const GgufTensorInfo* SchemaMatch::Find(int entry, int layer) const {
  const std::vector<int>& idx = index_[entry];
  const int t = schema_[entry].per_layer() ? (layer >= 0 && layer < static_cast<int>(idx.size()) ? idx[layer] : -1)
                                           : idx[0];
  return t >= 0 ? &tensors_[t] : nullptr;
}

const GgufTensorInfo* SchemaMatch::FindExpert(int entry, int layer, int expert) const {
  if (experts_[entry].empty()) return nullptr;
  const int t = experts_[entry].at(layer).at(expert);
  return t >= 0 ? &tensors_[t] : nullptr;
}

SchemaMatch::UnitTensors SchemaMatch::TensorsOf(UnitKind kind, int layer) const {
  UnitTensors out;
  for (size_t e = 0; e < schema_.size(); ++e) {
    const TensorEntry& entry = schema_[e];
    if (entry.unit != kind) continue;
    const int entry_i = static_cast<int>(e);
    if (entry.expert_stack() && per_expert_) {
      for (const int t : experts_[e].at(layer)) {
        if (t >= 0) out.owned.push_back(&tensors_[t]);
      }
      continue;
    }
    const GgufTensorInfo* t = Find(entry_i, layer);
    if (t == nullptr && !entry.fallback.empty()) {
      for (size_t f = 0; f < schema_.size(); ++f) {
        if (schema_[f].name == entry.fallback) {
          if (const GgufTensorInfo* ft = Find(static_cast<int>(f), layer)) out.shared.push_back(ft);
        }
      }
      continue;
    }
    if (t == nullptr) continue;
    (entry.shared() && layer > 0 ? out.shared : out.owned).push_back(t);
  }
  return out;
}

std::pair<UnitKind, int> SchemaMatch::OwnerOf(size_t tensor) const {
  const TensorClaim& c = claims_.at(tensor);
  const TensorEntry& entry = schema_[c.entry];
  if (entry.per_layer()) return {entry.unit, c.layer};
  return {entry.unit, entry.shared() ? 0 : -1};
}

}  // namespace tandem

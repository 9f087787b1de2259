// A family's tensor schema: every tensor its files hold, with its name pattern, shape in terms of the
// hyper-parameters, the placement unit and slot the forward pass reads it from, its role and whether it is
// optional. Config validation, weight mapping, unit classification, NUMA planning, `inspect`, `bench`, `synth` and
// the cost model all read the one schema; a tensor no entry claims is an error that names it.
#pragma once

#include <array>
#include <optional>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "arch/model_config.h"
#include "core/gguf.h"

namespace tandem {

// The placement units of a model (graph/ places them): the embeddings, each layer's attention and FFN (dense or
// the router with every expert), the output head.
enum class UnitKind { kEmbd, kAttn, kFfn, kOutput };
std::string_view UnitKindName(UnitKind k);  // "embd", "attn", "ffn", "output"
// A unit's name in plans and --place messages: "embd", "blk.3.attn", "blk.3.ffn", "output".
std::string UnitName(UnitKind k, int layer);

// A dimension of a tensor's shape, in terms of the hyper-parameters.
enum class Dim : uint8_t {
  kOne,
  kEmbd,      // n_embd
  kFf,        // n_ff
  kFfExpert,  // n_ff_expert
  kFfShexp,   // n_ff_shexp: the shared expert's width
  kVocab,     // n_vocab, taken from the first tensor that has it
  kQ,         // n_head * head_dim
  kKv,        // n_head_kv * head_dim
  kExpert,    // n_expert: the router's outputs, or a stack of experts (the last dimension)
  kRotHalf,   // n_rot / 2
  kHeadDim,   // head_dim: a per-head norm's width
  kHead,      // n_head: one value per query head (attention sinks)
};
std::string_view DimName(Dim d);
int64_t DimValue(Dim d, const ModelConfig& c);

// What a tensor is, for the consumers that do not run the model: types allowed, synth's initialisation, the
// summary's counts.
enum class TensorRole : uint8_t {
  kMatrix,       // a weight the matmuls read: any weight type
  kNorm,         // a norm's scale vector: F32
  kRouter,       // the MoE router's matrix: F32
  kBias,         // a bias vector: F32
  kRopeFactors,  // per-pair RoPE frequency divisors: F32
};

enum class Presence : uint8_t {
  kRequired,
  kOptional,
  kDenseOnly,  // required in a dense model, and refused in an MoE one
  kMoeOnly,    // required in an MoE model, and refused in a dense one
};

struct TensorEntry {
  std::string_view name;             // pattern (arch/tensor_names.h): {L} the layer, {E} the expert
  std::string_view per_expert_name;  // an expert stack's one-tensor-per-expert spelling, or empty
  UnitKind unit = UnitKind::kEmbd;
  // Where the forward pass finds it in its unit's UnitWeights: UnitWeights::slots[slot], or for an expert stack
  // UnitWeights::expert(slot, e). Each family numbers its slots with enums of its own.
  int slot = 0;
  TensorRole role = TensorRole::kMatrix;
  std::array<Dim, 3> shape = {Dim::kOne, Dim::kOne, Dim::kOne};  // ggml order, innermost first
  int n_dims = 1;
  Presence presence = Presence::kRequired;
  // One matrix per expert, stacked along the last dimension (kExpert); older files may spell it one tensor per
  // expert (per_expert_name).
  bool stack = false;
  // An absent optional tensor whose slot reads this other entry's tensor instead (a tied output head).
  std::string_view fallback;

  bool per_layer() const { return name.find("{L}") != std::string_view::npos; }
  bool expert_stack() const { return stack; }
  // A global entry of a per-layer unit (rope factors): every unit of that kind reads it.
  bool shared() const { return !per_layer() && (unit == UnitKind::kAttn || unit == UnitKind::kFfn); }
};

// A family's schema: its entries in the order its files list tensors.
using Schema = std::span<const TensorEntry>;

// Which entry claims a tensor of the file.
struct TensorClaim {
  int entry = -1;
  int layer = -1;   // -1 for global entries
  int expert = -1;  // one expert's tensor, in the per-expert spelling; -1 otherwise
};

// The entry that claims one tensor name, by name alone (no shape or presence checks); nullopt when none does.
std::optional<TensorClaim> ClaimTensorName(Schema schema, std::string_view name);

// The file's tensors matched to a schema.
class SchemaMatch {
 public:
  // Claims every tensor and checks the set: each tensor claimed by exactly one entry (else an error naming it),
  // required ones present, shapes and types as the entries say, and expert stacks whole in one spelling. Binds
  // kVocab from the file, which the caller reads back with vocab().
  static absl::StatusOr<SchemaMatch> Match(Schema schema, std::string_view family, const ModelConfig& cfg,
                                           std::span<const GgufTensorInfo> tensors);

  Schema schema() const { return schema_; }
  std::span<const GgufTensorInfo> tensors() const { return tensors_; }
  const TensorClaim& claim(size_t tensor) const { return claims_[tensor]; }
  int64_t vocab() const { return vocab_; }
  bool per_expert_spelling() const { return per_expert_; }
  // The tensor an entry names in a layer (layer ignored for global entries), or null when the file lacks it.
  const GgufTensorInfo* Find(int entry, int layer) const;
  // One expert's tensor in the per-expert spelling.
  const GgufTensorInfo* FindExpert(int entry, int layer, int expert) const;
  // The tensors one unit reads, owned first (claimed for it), then shared or fallback ones that another unit
  // owns; each in schema order.
  struct UnitTensors {
    std::vector<const GgufTensorInfo*> owned;
    std::vector<const GgufTensorInfo*> shared;
  };
  UnitTensors TensorsOf(UnitKind kind, int layer) const;
  // The unit that owns (claims) a tensor: its kind and layer. A shared global belongs to the first unit of its kind.
  std::pair<UnitKind, int> OwnerOf(size_t tensor) const;

 private:
  Schema schema_;
  std::span<const GgufTensorInfo> tensors_;
  std::vector<TensorClaim> claims_;  // [tensor]
  // [entry][layer or 0] -> tensor index or -1; per-expert spellings in experts_[entry][layer][expert].
  std::vector<std::vector<int>> index_;
  std::vector<std::vector<std::vector<int>>> experts_;
  int64_t vocab_ = 0;
  bool per_expert_ = false;
  int n_layer_ = 0;
};

// Whether a model with this config must have the entry's tensor (required, or dense-only/MoE-only as it is).
bool EntryWanted(const TensorEntry& e, const ModelConfig& cfg);

// Expands a pattern: {L} -> layer, {E} -> expert.
std::string TensorName(std::string_view pattern, int layer, int expert = -1);

}  // namespace tandem

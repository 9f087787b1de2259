// An architecture module: one model family in one place. A module declares its hyper-parameter keys (hparams.h),
// its tensor schema (schema.h) and its unit functions: the forward pass, written once against the Backend
// interface, one function per placement unit. graph/ places and runs the units; it never names a tensor.
// docs/adding-an-architecture.md walks through adding a family.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "arch/activations.h"
#include "arch/hparams.h"
#include "arch/model_config.h"
#include "arch/schema.h"
#include "core/gguf.h"
#include "runtime/backend.h"

namespace tandem {

class ExpertDispatch;  // arch/blocks.h

// The weights of one placement unit, where its family's schema put them: slots[entry.slot], and for expert
// stacks expert(entry.slot, e). An optional tensor the file lacks is an empty matrix. The views point into the
// file's mapping, a device's memory or nowhere (data null: planning and counting).
struct UnitWeights {
  UnitKind kind = UnitKind::kEmbd;
  int layer = -1;
  std::vector<WeightMatrix> slots;
  std::vector<WeightMatrix> expert_slots;  // [slot * n_expert + e]
  int n_expert = 0;

  const WeightMatrix& operator[](int slot) const { return slots[slot]; }
  const WeightMatrix& expert(int slot, int e) const { return expert_slots[slot * n_expert + e]; }
  // The data of a present F32 vector (a norm, a bias), or null; also null for a slot past the schema's last (a
  // family whose variants share one slot enum, some without that tensor).
  const float* vec(int slot) const {
    if (slot >= static_cast<int>(slots.size()) || !slots[slot].present()) return nullptr;
    return static_cast<const float*>(slots[slot].data);
  }
  // Every present matrix, slots first then expert slots, in a fixed order (for copies between devices).
  template <typename Fn>
  void ForEach(Fn&& fn) {
    for (WeightMatrix& m : slots) {
      if (m.present()) fn(m);
    }
    for (WeightMatrix& m : expert_slots) {
      if (m.present()) fn(m);
    }
  }
};

// One sequence's share of a batch: rows [row0, row0 + n_tok) at positions pos0.., cached in KV sequence `seq`.
// A batch is one or more segments, back to back, each of a different sequence (continuous batching: decode tokens
// of running requests beside a chunk of a waiting prompt).
struct BatchSegment {
  int64_t row0 = 0;
  int64_t n_tok = 0;
  int64_t pos0 = 0;
  int seq = 0;
};

// What one forward step knows: the batch, its sequences, and a hook that sees named intermediates.
struct StepContext {
  const ModelConfig* cfg = nullptr;
  int64_t n_tok = 0;
  std::span<const BatchSegment> segments;  // covering rows [0, n_tok) in order
  // The trailing n_live tokens of the batch whose residual rows later units still read. It is n_tok except in the
  // last layer, where only the logit rows go on: there the attention unit still caches every token's K and V but
  // computes queries, attention and all that follows for the live rows only, as llama.cpp does.
  int64_t n_live = 0;
  // Host scratch for one MoE layer's expert views (MoeExpertsArgs::experts), n_expert long; sized at planning.
  ExpertMatrices* expert_views = nullptr;
  // The executor's hand in MoE layers (experts split between devices, routing recorded); null: every expert runs
  // on the unit's backend.
  ExpertDispatch* experts = nullptr;
  // Called after each named op with (backend, data, n floats, name, layer); null = no dump.
  std::function<void(Backend&, const float*, int64_t, std::string_view, int)> on_named;

  void Named(Backend& be, const float* data, int64_t n, std::string_view name, int layer) const {
    if (on_named) on_named(be, data, n, name, layer);
  }
};

class Architecture {
 public:
  virtual ~Architecture() = default;
  // general.architecture's value for this family's files.
  virtual std::string_view name() const = 0;
  // The models it runs, for people: "Qwen3-MoE".
  virtual std::string_view family() const = 0;
  virtual std::span<const HParam> hparams() const = 0;
  virtual Schema schema() const = 0;
  // Derives and checks what the keys alone decide (defaults that depend on other keys, divisibility); called
  // after ReadHParams.
  virtual absl::Status FinishHParams(const GgufFile& file, ModelConfig& cfg) const = 0;

  // ---- The forward pass: each unit reads and writes the residual stream act.x on `be` ----
  virtual void Embed(Backend& be, const StepContext& s, const UnitWeights& w, Activations& act) const = 0;
  // kv: the layer's cache of each sequence, indexed by BatchSegment::seq.
  virtual void Attention(Backend& be, const StepContext& s, const UnitWeights& w, std::span<const KvLayer> kv,
                         Activations& act) const = 0;
  virtual void Ffn(Backend& be, const StepContext& s, const UnitWeights& w, Activations& act) const = 0;
  // Logits of rows [first_row, n_tok) into act.logits (row 0 = first_row).
  virtual void Output(Backend& be, const StepContext& s, const UnitWeights& w, int64_t first_row,
                      Activations& act) const = 0;
};

// The module for general.architecture, or null.
const Architecture* FindArchitecture(std::string_view name);
// Every registered module (tests walk them).
std::span<const Architecture* const> Architectures();

// A file's model as its module sees it: the module, the checked hyper-parameters and the claimed tensors.
struct ModelSchema {
  const Architecture* arch = nullptr;
  ModelConfig cfg;
  SchemaMatch match;
};
// From a whole file (keys and tensors).
absl::StatusOr<ModelSchema> ReadModelSchema(const GgufFile& file);
// From a checked config and a tensor table (planning without a file: tests, `plan` on shapes). The tensors must
// outlive the result.
absl::StatusOr<ModelSchema> MatchModelSchema(const ModelConfig& cfg, std::span<const GgufTensorInfo> tensors);

// The views of one unit's weights. `data_of` gives a tensor's bytes (the file's mapping), or is null for views
// without data (planning).
using TensorData = std::function<const uint8_t*(const GgufTensorInfo&)>;
UnitWeights BindUnit(const ModelSchema& model, UnitKind kind, int layer, const TensorData& data_of);

// Runs one unit's function; kv is the layer's caches (per sequence) for attention, empty otherwise.
void RunUnit(const Architecture& arch, Backend& be, const StepContext& s, const UnitWeights& w,
             std::span<const KvLayer> kv, int64_t first_row, Activations& act);

}  // namespace tandem

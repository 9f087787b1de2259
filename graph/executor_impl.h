// The executor's insides, shared by graph/executor.cc (loading and the step) and graph/executor_experts.cc (MoE
// layers whose experts are placed one by one). Only those two files include it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "arch/blocks.h"
#include "graph/executor.h"

namespace tandem {
namespace executor_internal {

inline constexpr size_t kAlign = 256;
inline size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// A split MoE unit's experts (UnitPlan::experts), each packed in a block of its own matrices (its expert slots).
struct ExpertStore {
  std::vector<int> slots;        // the expert slots present, in slot order
  std::vector<size_t> offsets;   // [i]: offset of slot slots[i]'s matrix in an expert's block
  size_t block = 0;              // one expert's packed bytes
  void* vram = nullptr;          // the resident experts, `block` apart
  void* pinned = nullptr;        // the streamed experts (in either phase), `block` apart
  std::vector<int> vram_at, pinned_at;  // [e]: the expert's place in vram / pinned, or -1
  UnitWeights resident;          // expert views into vram (others: the file's)
  UnitWeights staged;            // expert views into the accelerator's expert staging, set per batch
};

// One placement unit: its weights in each place they live.
struct Unit {
  const UnitPlan* plan = nullptr;
  int device = 0;         // its accelerator when either phase is GPU-side
  UnitWeights host;       // views into the mmap
  UnitWeights cpu_view;   // what the CPU computes with: host, with MatMul weights in the CPU's own layout
  UnitWeights resident;   // views into its accelerator's memory (when resident)
  UnitWeights staged[2];  // views into its accelerator's two staging buffers (when streamed)
  std::vector<size_t> offsets;  // packed offset of each matrix, in ForEach order
  size_t packed_bytes = 0;
  void* vram = nullptr;         // resident copy
  void* pinned = nullptr;       // packed source for streaming
  std::vector<WeightMatrix> cpu_copies;  // the CPU backend's own copies, released through it
  // Experts placed one by one: the unit's own block (offsets, packed_bytes, vram, pinned) then holds its slots only,
  // and cpu_view's expert slots are the CPU's experts (the others empty).
  bool split = false;
  ExpertStore ex;
  std::string experts_label;  // "blk.3.ffn.experts": traces name the experts' share apart from the router's

  // The unit's own matrices: all of them, or its slots only when its experts are placed one by one.
  template <typename Fn>
  void ForEachOwn(UnitWeights& w, Fn&& fn) const {
    if (!split) return w.ForEach(fn);
    for (WeightMatrix& m : w.slots) {
      if (m.present()) fn(m);
    }
  }
};

// An accelerator's state.
struct Accelerator {
  Backend* be = nullptr;
  bool used = false;            // the plan puts something here
  bool runs[2] = {false, false};  // per phase: a unit runs here
  Activations act;
  void* staging[2] = {nullptr, nullptr};
  void* expert_staging = nullptr;  // routed experts of one streamed MoE layer
  int expert_copy_done = -1;
  float* merge = nullptr;          // [k][max_tok][n_embd]: the CPU's expert slots, added to the accelerator's
  // Decode's LRU cache of streamed experts (Plan::expert_cache_bytes): slot s holds expert key cache_owner[s]
  // (layer * n_expert + e, or -1); the slots are kept in recent-use order by an intrusive list.
  uint8_t* cache = nullptr;
  size_t cache_slot_bytes = 0;
  std::vector<int> cache_owner, cache_prev, cache_next;
  int cache_head = -1, cache_tail = -1;  // most and least recently used
  void CacheTouch(int s) {  // moves slot s to the front
    if (s == cache_head) return;
    if (cache_prev[s] >= 0) cache_next[cache_prev[s]] = cache_next[s];
    if (cache_next[s] >= 0) cache_prev[cache_next[s]] = cache_prev[s];
    if (s == cache_tail) cache_tail = cache_prev[s];
    cache_prev[s] = -1;
    cache_next[s] = cache_head;
    cache_prev[cache_head] = s;
    cache_head = s;
  }
  int copy_done[2] = {-1, -1};
  int compute_done[2] = {-1, -1};
  std::vector<void*> allocs;
  std::vector<size_t> streamed[2];  // per phase: indices of the units streamed here, in order; slot = rank % 2
};

// Rewrites the views of `u.host`'s own matrices to point into a packed block at `base`.
inline UnitWeights Relocate(const Unit& u, void* base) {
  UnitWeights w = u.host;
  size_t i = 0;
  u.ForEachOwn(w, [&](WeightMatrix& m) { m.data = static_cast<uint8_t*>(base) + u.offsets[i++]; });
  return w;
}

// Points expert e's matrices in `w` at its packed block.
inline void RelocateExpert(const ExpertStore& ex, int e, const void* block, UnitWeights& w) {
  for (size_t i = 0; i < ex.slots.size(); ++i) {
    w.expert_slots[ex.slots[i] * w.n_expert + e].data = static_cast<const uint8_t*>(block) + ex.offsets[i];
  }
}

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}


}  // namespace executor_internal

using executor_internal::Accelerator;
using executor_internal::AlignUp;
using executor_internal::ExpertStore;
using executor_internal::NowNs;
using executor_internal::Relocate;
using executor_internal::RelocateExpert;
using executor_internal::Unit;

struct Executor::Impl {
  const GgufFile* file = nullptr;
  ModelSchema model;
  ExecutorOptions opts;
  Backend* cpu = nullptr;
  std::vector<Accelerator> accel;  // [device]; [0] unused (the host)
  std::vector<Unit> units;         // plan order
  std::vector<KvLayer> kv;         // [layer * n_seq + seq], on the device of the layer's attention unit
  int64_t decode_max_tok = 1;      // the largest batch that runs with the decode placement (one token per sequence)
  Activations cpu_act;
  void* cpu_act_block = nullptr;
  Backend* cpu_act_pinned_by = nullptr;  // the accelerator that pinned the host activations, or null
  std::vector<void*> cpu_allocs;
  std::vector<ExpertMatrices> expert_views;
  std::vector<size_t> next_streamed;  // [device] during a step: how many of its streamed units have run
  std::vector<float> dump_scratch;
  std::vector<const void*> embd_data;  // the embeddings' matrices in the mmap: row lookups read them there, so they
                                       // stay mapped
  bool IsEmbd(const void* p) const { return std::find(embd_data.begin(), embd_data.end(), p) != embd_data.end(); }

  // MoE layers: the executor's hand in them (StepContext::experts), and its state during a step.
  class Dispatch;
  std::unique_ptr<Dispatch> dispatch;
  std::vector<Unit*> ffn_of;                 // [layer]
  std::vector<ExpertMatrices> side_views;    // [n_expert]: one device's share of a layer's experts
  std::vector<uint8_t> staged;               // [n_expert]: routed this batch and copied to the staging buffer
  std::vector<int> cache_slot_of;            // [layer * n_expert + e]: its slot in its accelerator's expert cache
  Phase phase = Phase::kDecode;
  uint64_t* step_pcie = nullptr;
  absl::Status step_error;
  ExecutorStats* stats = nullptr;
  void Fail(absl::Status st) {
    if (step_error.ok()) step_error = std::move(st);
  }
  void RunExperts(Backend& be, int il, const MoeWeights& w, const MoeExpertsArgs& a);

  ~Impl() {
    for (size_t d = 1; d < accel.size(); ++d) {
      Accelerator& a = accel[d];
      if (a.be == nullptr) continue;
      (void)a.be->Synchronize(Stream::kCompute);
      (void)a.be->Synchronize(Stream::kCopy);
      for (void* p : a.allocs) a.be->Free(p);
    }
    for (Unit& u : units) {
      if (u.pinned != nullptr) accel[u.device].be->FreeHostPinned(u.pinned);
      if (u.ex.pinned != nullptr) accel[u.device].be->FreeHostPinned(u.ex.pinned);
      for (const WeightMatrix& m : u.cpu_copies) cpu->ReleaseMatMulWeights(m);
    }
    if (cpu_act_pinned_by != nullptr) cpu_act_pinned_by->FreeHostPinned(cpu_act_block);
    for (void* p : cpu_allocs) cpu->Free(p);
  }

  absl::StatusOr<void*> DeviceAlloc(int d, size_t bytes, std::string_view what) {
    TANDEM_ASSIGN_OR_RETURN(void* p, accel[d].be->Alloc(bytes, what));
    accel[d].allocs.push_back(p);
    return p;
  }

  absl::Status BuildUnits(const Plan& plan);
  absl::Status CheckSplit(const UnitPlan& up) const;
  absl::Status PrepareCpuWeights(Unit& u);
  absl::Status PrepareCpuMatrix(Unit& u, WeightMatrix& m);
  absl::Status LoadExperts(Unit& u, ExecutorStats& stats);
  absl::Status AllocateExpertCache();
  const Plan* plan = nullptr;
  void ReleaseHostPages(const Unit& u, const UnitWeights& kept);
  absl::Status Load(ExecutorStats& stats);
  absl::Status AllocateState();
};

class Executor::Impl::Dispatch final : public ExpertDispatch {
 public:
  explicit Dispatch(Impl* m) : m_(m) {}
  void Run(Backend& be, int il, const MoeWeights& w, const MoeExpertsArgs& a) override { m_->RunExperts(be, il, w, a); }

 private:
  Impl* m_;
};

}  // namespace tandem

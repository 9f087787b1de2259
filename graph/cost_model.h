// The cost model: predicted seconds for one placement unit, placed one way, over a batch of tokens.
//   cpu    = max(bytes / cpu GB/s, flops / cpu GFLOP/s) + attention + per-op overhead
//   gpu    = max(bytes / gpu GB/s, flops / gpu GFLOP/s) + attention + per-kernel launch
//   stream = max(unit bytes / h2d GB/s, gpu compute without launches) + launches + one sync: the copy into the
//            staging buffer overlaps the previous unit's compute, so the slower of the two sets the pace
// plus, between consecutive units on different devices, the activations crossing PCIe (see TransferSeconds).
// What a unit does (bytes, FLOPs, kernel calls) is counted by running its family's unit function on a counting
// backend, so the cost model reads the same forward pass the devices run and cannot fall out of step with it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "arch/arch.h"
#include "core/dtype.h"
#include "graph/plan.h"
#include "graph/profile.h"
#include "runtime/backend.h"

namespace tandem {

// A unit's forward pass, for counting: its family, the config, and views of its weights without data.
struct UnitProgram {
  const Architecture* arch = nullptr;
  ModelConfig cfg;
  UnitWeights weights;
};

// One placement unit as the partitioner sees it.
struct UnitSpec {
  std::string name;  // "embd", "blk.N.attn", "blk.N.ffn", "output"
  UnitKind kind = UnitKind::kAttn;
  int layer = -1;
  std::vector<std::string> tensors;  // GGUF names it reads: its own, then those another unit owns (a tied head)
  size_t owned_tensors = 0;          // tensors[0, owned_tensors) are claimed for this unit
  uint64_t weight_bytes = 0;         // all of them: what residency holds and streaming copies
  uint64_t packed_bytes = 0;         // the same packed as the executor packs a unit (UnitBlockBytes)
  uint64_t expert_bytes = 0;         // of which routed-expert weights (all experts together)
  uint64_t owned_bytes = 0;          // of the tensors it owns: the file pages it alone maps
  // What the CPU backend's repacking (cpu_backend/repack.h) makes of the matrices the unit computes with when the
  // CPU runs it: bytes of the copies (a tied head's copy of token_embd included), and of the owned matrices they
  // replace, whose pages are then released. Both 0 for embd, which is looked up by row, never repacked.
  uint64_t repacked_bytes = 0;
  uint64_t repacked_owned_source_bytes = 0;
  // MoE FFN units, for placing experts one by one: one expert's matrices packed as the executor packs them, the
  // unit's own (router, norm, shared experts) packed apart, what the CPU holds of one expert (its mapped pages and
  // repacked copy, repack on), and one expert's parameters.
  uint64_t expert_block_bytes = 0;
  uint64_t own_packed_bytes = 0;
  uint64_t expert_raw_bytes = 0;
  uint64_t expert_repacked_bytes = 0;
  uint64_t expert_repacked_source_bytes = 0;
  double expert_params = 0;
  DType main_type = DType::kF32;     // the type holding most of the bytes: selects the CPU rate
  int64_t n_embd_kv = 0;             // attention units: K (and V) row width per position
  int kv_window = 0;                 // attention units of windowed layers: the window, whose cache is a ring
  // The (op, weight type) pairs the unit issues: a device runs the unit only if it supports them all.
  std::vector<std::pair<Op, DType>> ops;
  std::shared_ptr<const UnitProgram> program;

  // The host memory the CPU computes this unit with: the file's pages it still reads, and its repacked copies.
  uint64_t CpuMappedBytes(bool repack) const { return owned_bytes - (repack ? repacked_owned_source_bytes : 0); }
  uint64_t CpuRepackedBytes(bool repack) const { return repack ? repacked_bytes : 0; }
  uint64_t ExpertCpuMappedBytes(bool repack) const {
    return expert_raw_bytes - (repack ? expert_repacked_source_bytes : 0);
  }
  uint64_t ExpertCpuRepackedBytes(bool repack) const { return repack ? expert_repacked_bytes : 0; }

  // K+V cache of this layer for n_ctx positions and batches of max_batch (0 for non-attention units): a windowed
  // layer's ring holds the window and one batch (ModelConfig::KvRows).
  uint64_t KvBytes(int64_t n_ctx, int kv_elem_bytes, int64_t max_batch) const {
    if (kind != UnitKind::kAttn) return 0;
    const int64_t rows = kv_window > 0 ? std::min<int64_t>(n_ctx, kv_window + max_batch - 1) : n_ctx;
    return 2ull * static_cast<uint64_t>(rows) * static_cast<uint64_t>(n_embd_kv) * static_cast<uint64_t>(kv_elem_bytes);
  }
};

// What a unit does for n_tok tokens attending (on average) to `ctx` cache rows. n_live < n_tok (the model's last
// layer and head in prefill, where only the tokens whose logits are asked for go on): all n_tok are cached, but
// queries, attention, the FFN and the head run for n_live tokens only; negative means all.
struct UnitWork {
  double weight_bytes_read = 0;  // weights the ops read (MoE: the experts the batch is expected to route to)
  double flops = 0;              // matmul FLOPs
  double kv_bytes_read = 0;      // attention: cache bytes read
  double attn_flops = 0;         // attention: QK^T and PV FLOPs
  int n_ops = 0;                 // kernel calls
  double expert_bytes_read = 0;  // of weight_bytes_read and flops, the routed experts' share
  double expert_flops = 0;
};
UnitWork WorkOf(const UnitSpec& u, int64_t n_tok, double ctx, int kv_elem_bytes, int64_t n_live = -1);
// The (op, weight type) pairs a unit's function issues (for UnitSpec::ops).
std::vector<std::pair<Op, DType>> OpsOf(const UnitSpec& u);

// Expected distinct experts hit when n_tok tokens each pick k of e uniformly: e * (1 - (1 - k/e)^n_tok).
double ExpectedExpertsHit(int e, int k, int64_t n_tok);

struct CostQuery {
  int64_t n_tok = 1;       // tokens in the batch
  double ctx = 0;          // average cache rows each token attends to
  int kv_elem_bytes = 2;   // F16 cache
  int64_t n_live = -1;     // tokens past the cache store (WorkOf); negative: all n_tok
};
// Predicted seconds for the unit placed at `p`.
double UnitSeconds(const UnitSpec& u, Placement p, const CostQuery& q, const MachineProfile& prof);

// Activations crossing PCIe: bytes / h2d GB/s + one sync (the receiving side waits on an event).
double TransferSeconds(uint64_t bytes, const MachineProfile& prof);

// An MoE FFN unit with its experts placed one by one (UnitPlan::experts): its router on the accelerator, expert e
// at where[e] (gpu: resident; stream: copied when routed; cpu), a token picking e with chance share[e]:
//   router on the GPU + the routing back to the host (when an expert is not resident)
//   + max(GPU: copies of the routed streamed experts, then theirs and the resident ones' products;
//         CPU: its routed experts' products, from a copy of the input)
//   + the CPU's slots back to the GPU.
// A batch of T tokens reaches expert e with chance 1 - (1 - share[e])^T.
struct SplitCost {
  double seconds = 0;
  double pcie_bytes = 0;      // routing, input and slots crossing, and streamed experts copied
  double gpu_picks = 0;       // of the k picks per token, those landing on a resident expert
  double stream_bytes = 0;    // streamed experts' weights copied
};
// `w` is WorkOf(u, q...), counted once by the caller.
// `copied[e]`: the chance that a streamed expert, once routed, must be copied (an expert cache holds the rest);
// empty: always.
SplitCost SplitFfnCost(const UnitSpec& u, const UnitWork& w, const CostQuery& q, std::span<const double> share,
                       std::span<const Placement> where, int k, const MachineProfile& prof,
                       std::span<const double> copied = {});

}  // namespace tandem

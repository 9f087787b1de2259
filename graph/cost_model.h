// The cost model: predicted seconds for one placement unit, placed one way, over a batch of tokens.
//   cpu    = max(bytes / cpu GB/s, flops / cpu GFLOP/s) + attention + per-op overhead
//   gpu    = max(bytes / gpu GB/s, flops / gpu GFLOP/s) + attention + per-kernel launch
//   stream = max(unit bytes / h2d GB/s, gpu compute without launches) + launches + one sync: the copy into the
//            staging buffer overlaps the previous unit's compute, so the slower of the two sets the pace
// plus, between consecutive units on different sides, the activations crossing PCIe (see TransferSeconds).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "graph/plan.h"
#include "graph/profile.h"

namespace tandem {

// One placement unit as the partitioner sees it: its tensors, bytes and the arithmetic it does per token.
struct UnitSpec {
  std::string name;  // "embd", "blk.N.attn", "blk.N.ffn", "output"
  UnitKind kind = UnitKind::kAttn;
  int layer = -1;
  std::vector<std::string> tensors;  // GGUF names, in file order
  uint64_t weight_bytes = 0;         // all tensors: what residency holds and streaming copies
  uint64_t packed_bytes = 0;         // the same packed for the device, each tensor aligned to 256 bytes (VRAM use)
  uint64_t expert_bytes = 0;         // of which routed-expert weights (all experts together)
  int n_expert = 0;                  // routed experts (0: dense unit)
  int n_expert_used = 0;             // experts each token is routed to
  double dense_params = 0;           // matmul weights every token multiplies by (q/k/v/o, router, dense FFN, head)
  double kv_params = 0;              // attention: of dense_params, wk and wv (what a token multiplies by to be cached)
  double expert_params = 0;          // matmul weights of ONE expert (gate + up + down)
  DType main_type = DType::kF32;     // the type holding most of the bytes: selects the CPU rate
  int64_t rows = 0;                  // embd: table rows (n_vocab), for the bytes a lookup reads
  // Attention units only.
  int n_head = 0;
  int head_dim = 0;
  int64_t n_embd_kv = 0;  // K (and V) row width per position

  // K+V cache of this layer for n_ctx positions (0 for non-attention units).
  uint64_t KvBytes(int64_t n_ctx, int kv_elem_bytes) const {
    return kind == UnitKind::kAttn ? 2ull * n_ctx * n_embd_kv * kv_elem_bytes : 0;
  }
};

// What a unit does for n_tok tokens attending (on average) to `ctx` cache rows. n_live < n_tok (the model's last
// layer and head in prefill, where only the tokens whose logits are asked for go on, graph/model.cc): all n_tok
// are cached, but queries, attention, `wo`, the FFN and the head run for n_live tokens only; negative means all.
struct UnitWork {
  double weight_bytes_read = 0;  // weights the matmuls read (MoE: only the experts the batch routes to)
  double flops = 0;              // matmul FLOPs
  double kv_bytes_read = 0;      // attention: cache bytes read
  double attn_flops = 0;         // attention: QK^T and PV FLOPs
  int n_ops = 0;                 // kernel calls
};
UnitWork WorkOf(const UnitSpec& u, int64_t n_tok, double ctx, int kv_elem_bytes, int64_t n_live = -1);

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

// True for placements that run on the GPU side (gpu and stream).
inline bool GpuSide(Placement p) { return p != Placement::kCpu; }

}  // namespace tandem

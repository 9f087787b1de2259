// The partitioner: a pure, deterministic function from (model units, devices, machine profile, request, budget) to a
// Plan.
//
// Units come from the family's schema (BuildUnits): "embd", then per layer "blk.N.attn" and "blk.N.ffn", then
// "output". What each does is counted by running its unit function (graph/cost_model.h).
// Each unit runs, per phase (prefill batch, decode), on the cpu (weights read from the mmap), resident on the
// gpu, or streamed (on the GPU, its weights copied from pinned RAM into one of two staging buffers just before
// use). An attention unit stays on one side (cpu, or gpu/stream) in both phases because its KV cache lives there.
// An MoE FFN unit may be split (PlacementRequest::expert_level, the default): its router resident and each expert
// resident, on the CPU (beside the GPU's) or streamed when routed, per phase (UnitPlan::experts), priced by
// SplitFfnCost with the routing's shares (PartitionInput::routing) and, with --expert-cache, Che's approximation of
// an LRU cache.
//
// Modes:
//  - counts (--gpu-layers/--cpu-layers/--stream-layers): layers [0,cpu) on the CPU, then streamed layers, then
//    resident layers last (llama.cpp's convention); embd on the CPU; output follows the last layer. With several
//    accelerators the resident layers are split over them in order, in proportion to their memory (llama.cpp's
//    layer split); streamed layers go to the first.
//  - auto: for every streaming threshold S (no streaming, or units up to each unit size), units are made
//    resident greedily by predicted time saved per VRAM byte while the account fits; the rest are placed per phase
//    (cpu or stream, units larger than S never stream) by an exact dynamic program over the unit chain that
//    includes the activation transfers at side changes. The cheapest variant for the expected mix
//    (prompt_tokens in prefill batches + gen_tokens decoded) wins; ties go to the earlier (less streaming) variant.
//    Split MoE layers join the greedy one hot expert at a time (or a layer's rest at once), hottest first, and the
//    dynamic program then picks where their other experts go; a streamed counts-mode MoE layer is split too.
//    --place 'REGEX@0-15=gpu' rules name experts.
//    Auto places on the first accelerator only; the others take layers through counts.
//  - --place rules override both, per unit, on the first accelerator; embd stays on the CPU unless a rule moves it.
// A unit goes to an accelerator only if the device Supports() every (op, weight type) its function issues; counts
// or rules that ask otherwise are errors.
//
// The VRAM account (Plan::gpu): resident weights (packed as the executor loads them, each tensor 256-aligned)
// + KV of GPU-side attention + two staging buffers of the largest streamed unit + split layers' routers and resident
// experts, the expert staging (the most streamed experts one batch routes to), the expert cache and the buffer for
// the CPU's expert slots + activation buffers for one
// prefill batch + workspace (the GPU libraries' own from the profile, 64 MiB for CUDA and 0 for sim; the quantized
// matmul input; attention scores of 16 queries at a time; the MoE grouping), per accelerator. No accelerator's
// account exceeds the cap: --vram-budget when given, else the device's capacity less 10% headroom. An accelerator
// with nothing on it holds no activations or workspace either.
//
// The host account (Plan::host): pinned copies of streamed units, the file's pages and the CPU's repacked copies
// that CPU units compute with, KV of CPU-side attention, activations. Held against host_ram_available: what does
// not fit of the mapped pages is read from disk as decode touches it (at the profile's disk_read_gbps, added to the
// predicted times), and what does not fit of the rest swaps; both are one-line Plan::warnings. Auto placement does
// not weigh paging (the GPU side is already filled as far as it fits).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "arch/arch.h"
#include "core/gguf.h"
#include "graph/cost_model.h"
#include "graph/placement.h"
#include "graph/plan.h"
#include "graph/profile.h"
#include "graph/routing_stats.h"

namespace tandem {

// The units of a model, in execution order, from its family's schema. Every tensor is owned by the one unit its
// entry names; a unit also lists the tensors it reads that another owns (a tied head reads token_embd).
std::vector<UnitSpec> BuildUnits(const ModelSchema& model);
absl::StatusOr<std::vector<UnitSpec>> BuildUnits(const ModelConfig& cfg, std::span<const GgufTensorInfo> tensors);
absl::StatusOr<std::vector<UnitSpec>> BuildUnits(const GgufFile& file, const ModelConfig& cfg);

// An accelerator the plan may use.
struct DeviceDesc {
  std::string name;                          // "sim:12GiB", "cuda:0"
  uint64_t capacity = 0;                     // memory in bytes (0: unknown; then --vram-budget is required)
  std::function<bool(Op, DType)> supports;   // Backend::Supports; null: everything
};

struct PartitionInput {
  ModelConfig config;
  std::vector<UnitSpec> units;  // from BuildUnits
  MachineProfile profile;
  PlacementRequest request;
  std::vector<DeviceDesc> devices;  // the accelerators (device 1, 2, ...); none: everything on the CPU
  int n_ctx = 4096;                 // KV cache rows of each sequence
  int n_seq = 1;                    // KV sequences (server slots), each of n_ctx rows
  int kv_elem_bytes = 2;            // F16 cache
  int prefill_batch = 512;          // tokens per prefill batch
  int prompt_tokens = 512;          // expected mix
  int gen_tokens = 128;
  int n_threads = 1;
  bool cpu_repack = false;          // the CPU backend repacks the matrices it computes with (ResolveRepack)
  uint64_t host_ram_available = 0;  // RAM the plan may use; 0: unknown (no host checks)
  // MoE: how the routers spread tokens (recorded with --routing-out), for hot experts and hit rates; null: uniform.
  std::shared_ptr<const RoutingStats> routing;
};

// Errors: bad input, counts or rules that do not fit (saying what would), and a KV cache that fits neither in the
// accelerators' caps nor in host_ram_available (saying the largest context that would).
absl::StatusOr<Plan> Partition(const PartitionInput& in);

// Bytes of activation buffers one device holds for a batch of max_tokens (arch/activations.h's ActivationBytes).
uint64_t ActivationBytesEstimate(const ModelConfig& cfg, int64_t max_tokens);
// Workspace estimate for the GPU side: the libraries' own (profile), the quantized matmul input of a batch, and
// attention scores for max(16 * n_head, n_threads) rows of n_ctx.
uint64_t GpuWorkspaceEstimate(const ModelConfig& cfg, int64_t max_tokens, int64_t n_ctx, int n_threads,
                              uint64_t library_bytes);

// The bytes of a unit's block as the executor packs it: each matrix on a 256-byte boundary.
uint64_t UnitBlockBytes(const UnitWeights& w);

}  // namespace tandem

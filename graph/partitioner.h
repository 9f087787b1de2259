// The partitioner: a pure, deterministic function from (model units, machine profile, request, budget) to a Plan.
//
// Units: "embd", then per layer "blk.N.attn" (norm, q/k/v, attention over its KV cache, output projection) and
// "blk.N.ffn" (norm and dense FFN, or router and all experts), then "output" (output_norm and the head).
// Each unit runs, per phase (prefill batch, decode), on the cpu (weights read from the mmap), resident on the
// gpu, or streamed (on the GPU, its weights copied from pinned RAM into one of two staging buffers just before
// use). An attention unit stays on one side (cpu, or gpu/stream) in both phases because its KV cache lives there.
//
// Modes:
//  - counts (--gpu-layers/--cpu-layers/--stream-layers): layers [0,cpu) on the CPU, then streamed layers, then
//    resident layers last (llama.cpp's convention); embd on the CPU; output follows the last layer.
//  - auto: for every streaming threshold S (no streaming, or units up to each unit size), units are made
//    resident greedily by predicted time saved per VRAM byte while the account fits; the rest are placed per phase
//    (cpu or stream, units larger than S never stream) by an exact dynamic program over the unit chain that
//    includes the activation transfers at side changes. The cheapest variant for the expected mix
//    (prompt_tokens in prefill batches + gen_tokens decoded) wins; ties go to the earlier (less streaming) variant.
//  - --place rules override both, per unit; embd stays on the CPU unless a rule moves it.
//
// The VRAM account (Plan::gpu): resident weights (packed as the executor loads them, each tensor 256-aligned)
// + KV of GPU-side attention + two staging buffers of the largest streamed unit + activation buffers for one
// prefill batch + workspace (the GPU libraries' own from the profile, 64 MiB for CUDA and 0 for sim; the quantized
// matmul input; attention scores of 16 queries at a time). It never exceeds the cap: --vram-budget when given,
// else the device capacity less 10% headroom. Nothing GPU-side means no activations or workspace either.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "graph/cost_model.h"
#include "graph/placement.h"
#include "graph/plan.h"
#include "graph/profile.h"

namespace tandem {

// The units of a model, in execution order, from its tensor table. Every tensor lands in exactly one unit
// (globals other than token_embd/output go to "embd"); a tied head lists token_embd.weight in "output" too.
absl::StatusOr<std::vector<UnitSpec>> BuildUnits(const ModelConfig& cfg, std::span<const GgufTensorInfo> tensors);
absl::StatusOr<std::vector<UnitSpec>> BuildUnits(const GgufFile& file, const ModelConfig& cfg);

struct PartitionInput {
  ModelConfig config;
  std::vector<UnitSpec> units;  // from BuildUnits
  MachineProfile profile;
  PlacementRequest request;
  bool has_gpu = false;             // a GPU-side device (CUDA or sim) exists
  uint64_t device_capacity = 0;     // its memory in bytes (0: unknown; then --vram-budget is required)
  std::string device_name = "none";
  int n_ctx = 4096;                 // KV cache rows
  int kv_elem_bytes = 2;            // F16 cache
  int prefill_batch = 512;          // tokens per prefill batch
  int prompt_tokens = 512;          // expected mix
  int gen_tokens = 128;
  int n_threads = 1;
};

absl::StatusOr<Plan> Partition(const PartitionInput& in);

// Bytes of activation buffers one device holds for a batch of max_tokens (graph/model.h's ActivationBytes).
uint64_t ActivationBytesEstimate(const ModelConfig& cfg, int64_t max_tokens);
// Workspace estimate for the GPU side: the libraries' own (profile), the quantized matmul input of a batch, and
// attention scores for max(16 * n_head, n_threads) rows of n_ctx.
uint64_t GpuWorkspaceEstimate(const ModelConfig& cfg, int64_t max_tokens, int64_t n_ctx, int n_threads,
                              uint64_t library_bytes);

}  // namespace tandem

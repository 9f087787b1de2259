// The executor runs a Plan over a list of devices: it is the only code that moves bytes between devices, records
// events and prefetches. Weights go to their tier at load (resident -> the unit's accelerator, streamed -> pinned
// RAM, cpu -> the mmap or the CPU's own copy; a unit streamed in one phase and run on the CPU in the other uses its
// pinned copy); activations cross devices only at unit boundaries, through the host between two accelerators. The
// units' math is the family's (arch/); errors are checked once per step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "arch/arch.h"
#include "core/gguf.h"
#include "graph/plan.h"
#include "runtime/backend.h"

namespace tandem {

struct ExecutorOptions {
  using DumpFn = std::function<void(std::string_view name, int layer, std::span<const float> data)>;
  using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;
  int n_ctx = 512;                 // KV cache length of each sequence, allocated once
  int n_seq = 1;                   // KV sequences (server slots); every one holds n_ctx positions
  int max_batch = 256;             // largest prefill batch (tokens per Forward)
  DType kv_type = DType::kF16;     // F16 or F32
  // Sees every named intermediate as host floats (copied back from an accelerator first). Null: no dumps.
  DumpFn dump;
  // Called during load with (bytes done, bytes total) for a progress bar. Null: quiet.
  ProgressFn progress;
  // Called for each matrix the CPU computes with from a copy of its own (Backend::PrepareMatMulWeights), with the
  // file's view and the copy, so that the copy can be placed where the file's pages were (NUMA). Null: nothing.
  using CopyFn = std::function<absl::Status(const WeightMatrix& original, const WeightMatrix& copy)>;
  CopyFn on_cpu_copy;
  // Sees each MoE layer's routing as host ids ([n_tok][k], each in [0, n_expert)): `tandem run --routing-out`.
  // Routing computed on an accelerator is copied back first. Null: nothing recorded.
  using RoutingFn = std::function<void(int layer, std::span<const int32_t> ids, int64_t n_tok, int k)>;
  RoutingFn on_routing;
  // Records the host CPU's share of split MoE layers (ExecutorStats::host_trace). Tests read it to check overlap.
  bool trace_host = false;
};

// A stretch of host CPU work, in steady_clock nanoseconds (the clock SimBackend's trace counts from).
struct HostTraceEvent {
  std::string label;  // "blk.3.ffn.experts"
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

struct ExecutorStats {
  uint64_t pcie_bytes = 0;             // all host<->device bytes so far (weights streamed + activations)
  uint64_t pcie_bytes_prefill = 0;
  uint64_t pcie_bytes_decode = 0;
  uint64_t load_h2d_bytes = 0;         // resident weights copied at load
  uint64_t peak_vram_bytes = 0;        // all accelerators together
  uint64_t decode_tokens = 0;
  uint64_t prefill_tokens = 0;
  // Experts placed one by one (in layers with an expert off the GPU): routed (token, expert) picks, and those that
  // found their expert resident, per phase [prefill, decode]; and the streamed experts' weights copied.
  uint64_t expert_picks[2] = {0, 0};
  uint64_t expert_gpu_picks[2] = {0, 0};
  uint64_t expert_stream_bytes[2] = {0, 0};
  // Decode's expert cache (Plan::expert_cache_bytes): routed streamed experts found there, and those copied in.
  uint64_t expert_cache_hits = 0;
  uint64_t expert_cache_misses = 0;
  std::vector<HostTraceEvent> host_trace;  // ExecutorOptions::trace_host
};

class Executor {
 public:
  // devices[i] runs the plan's device i: [0] the host CPU, then the accelerators (null where the plan uses none).
  // The file and the devices must outlive the executor. Allocates everything up front.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(const GgufFile& file, const ModelSchema& model,
                                                           const Plan& plan, std::span<Backend* const> devices,
                                                           const ExecutorOptions& opts);
  ~Executor();

  // Runs tokens of sequence 0 at positions pos0.. (tokens.size() <= max_batch, pos0 + size <= n_ctx). Writes the
  // logits of the last `n_logit_rows` tokens to `logits` ([n_logit_rows][n_vocab], host). Decode when
  // tokens.size() == 1.
  absl::Status Forward(std::span<const int32_t> tokens, int64_t pos0, int64_t n_logit_rows, float* logits);
  // The same for a batch of several sequences: `segments` split the tokens, in order, one per sequence. The MoE
  // layers route the whole batch at once, so an expert two sequences share is read once. The step runs with the
  // decode placement when every segment is one token (and the batch fits decode's expert buffers), else with
  // prefill's.
  absl::Status Forward(std::span<const int32_t> tokens, std::span<const BatchSegment> segments, int64_t n_logit_rows,
                       float* logits);
  int n_seq() const;

  const ExecutorStats& stats() const { return stats_; }
  const Plan& plan() const { return plan_; }

 private:
  Executor() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Plan plan_;
  ExecutorStats stats_;
};

// A plan that runs everything on the CPU (the planner's trivial case, also used by tests).
Plan CpuOnlyPlan(const ModelConfig& cfg);

}  // namespace tandem

// From a --device spec and a model to a Plan: opens (or describes) the accelerators, finds their profile, and runs
// the partitioner. Used by `tandem plan`, `tandem calibrate` and the engine.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "arch/model_config.h"
#include "core/gguf.h"
#include "cpu_backend/cpu_backend.h"
#include "runtime/backend.h"
#include "graph/placement.h"
#include "graph/plan.h"
#include "graph/routing_stats.h"
#include "graph/profile.h"

namespace tandem {

struct DeviceSetupOptions {
  int n_threads = 0;           // CPU threads (0: OpenMP default); the CPU profile is measured with these
  bool open_backend = true;    // false: describe the device only (plan does not need a sim backend); true also
                               // applies this CPU's measured kernel settings (measured once when absent)
  std::string profile_path;    // a profile file to use instead of the cache (its GPU-side numbers are kept for
                               // cuda; for sim they come from the spec)
  bool quick_calibration = false;
  // With no cached CPU profile: measure it (a few seconds, then cached), or, when false, plan with
  // DefaultProfile's rough numbers (fine when there is no GPU: every unit is on the CPU anyway).
  bool calibrate_cpu = true;
  uint64_t cuda_vram_budget = 0;  // passed to the CUDA backend (0: all free memory)
};

struct AcceleratorSetup {
  std::string spec;                  // "sim:12GiB,pcie=25", "cuda:0"
  uint64_t capacity = 0;             // memory the backend may hand out
  bool (*supports)(Op, DType) = nullptr;  // what its backend runs (Backend::Supports), known without opening it
  std::unique_ptr<Backend> backend;  // the device when opened
};

struct DeviceSetup {
  std::string spec = "none";         // the accelerators' specs joined by '+', or "none"
  bool has_gpu = false;              // at least one accelerator
  uint64_t capacity = 0;             // the first accelerator's memory
  MachineProfile profile;            // CPU numbers plus the first accelerator's GPU-side numbers
  std::vector<AcceleratorSetup> accelerators;  // device 1, 2, ... of the plans made with it
  bool measured = false;             // a profile was measured (not read from a file or the cache)
  // Lines for the user: a profile not used because it describes another machine, kernel settings measured...
  std::vector<std::string> notes;
};

// spec: auto|none|cpu, or accelerators joined by '+': cuda[:I] and sim:VRAM[,pcie=GBPS][,gpu_gbps=GBPS]
// ("sim:12GiB+sim:12GiB" is two simulated GPUs). auto is cuda:0 when a CUDA device exists, else none. Profiles:
// the CPU one from ProfileCachePath("cpu") (measured once), the CUDA one from ProfileCachePath("cuda:I") (measured
// once), the sim one derived from the spec (SimProfile); the plan predicts every accelerator with the first's.
absl::StatusOr<DeviceSetup> SetupDevice(std::string_view spec, const DeviceSetupOptions& opts);

struct PlanOptions {
  int n_ctx = 0;          // 0: min(4096, the model's training context)
  int n_batch = 512;      // prefill batch (capped at n_ctx)
  int n_seq = 1;          // KV sequences, each of n_ctx positions (serve --parallel)
  int n_threads = 1;
  int kv_elem_bytes = 2;  // F16 cache
  int prompt_tokens = 512;
  int gen_tokens = 128;
  // The CPU backend's setting. kAuto also gives way when the repacked copies would not fit in RAM and the file's
  // pages (which can be paged) would: the plan then says cpu_repack = false, and the engine opens its CPU so.
  Repack repack = Repack::kAuto;
  std::shared_ptr<const RoutingStats> routing;  // PartitionInput::routing
};

// BuildUnits + Partition for an opened model on a set-up device, held against this machine's available RAM
// (/proc/meminfo) unless the request gives host_ram.
absl::StatusOr<Plan> PlanModel(const GgufFile& file, const ModelConfig& cfg, const DeviceSetup& dev,
                               const PlacementRequest& req, const PlanOptions& opts);

// The context size PlanOptions::n_ctx = 0 stands for.
int DefaultContext(const ModelConfig& cfg);

}  // namespace tandem

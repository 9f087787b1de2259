// From a --device spec and a model to a Plan: opens (or describes) the GPU-side device, finds its profile, and
// runs the partitioner. Used by `tandem plan`, `tandem calibrate` and the engine.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "graph/backend.h"
#include "graph/placement.h"
#include "graph/plan.h"
#include "graph/profile.h"

namespace tandem {

struct DeviceSetupOptions {
  int n_threads = 0;           // CPU threads (0: OpenMP default); the CPU profile is measured with these
  bool open_backend = true;    // false: describe the device only (plan does not need a sim backend)
  std::string profile_path;    // a profile file to use instead of the cache (its GPU-side numbers are kept for
                               // cuda; for sim they come from the spec)
  bool quick_calibration = false;
  // With no cached CPU profile: measure it (a few seconds, then cached), or, when false, plan with
  // DefaultProfile's rough numbers (fine when there is no GPU: every unit is on the CPU anyway).
  bool calibrate_cpu = true;
  uint64_t cuda_vram_budget = 0;  // passed to the CUDA backend (0: all free memory)
};

struct DeviceSetup {
  std::string spec = "none";         // "none", "sim:12GiB,pcie=25", "cuda:0"
  bool has_gpu = false;
  uint64_t capacity = 0;             // GPU memory the backend may hand out
  MachineProfile profile;            // CPU numbers plus this device's GPU-side numbers
  std::unique_ptr<Backend> backend;  // the device when opened; null for none
  bool measured = false;             // a profile was measured (not read from a file or the cache)
};

// spec: auto|none|cpu|cuda[:I]|sim:VRAM[,pcie=GBPS][,gpu_gbps=GBPS]. auto is cuda:0 when a CUDA device exists,
// else none. Profiles: the CPU one from ProfileCachePath("cpu") (measured once), the CUDA one from
// ProfileCachePath("cuda:I") (measured once), the sim one derived from the spec (SimProfile).
absl::StatusOr<DeviceSetup> SetupDevice(std::string_view spec, const DeviceSetupOptions& opts);

struct PlanOptions {
  int n_ctx = 0;          // 0: min(4096, the model's training context)
  int n_batch = 512;      // prefill batch (capped at n_ctx)
  int n_threads = 1;
  int kv_elem_bytes = 2;  // F16 cache
  int prompt_tokens = 512;
  int gen_tokens = 128;
};

// BuildUnits + Partition for an opened model on a set-up device.
absl::StatusOr<Plan> PlanModel(const GgufFile& file, const ModelConfig& cfg, const DeviceSetup& dev,
                               const PlacementRequest& req, const PlanOptions& opts);

// The context size PlanOptions::n_ctx = 0 stands for.
int DefaultContext(const ModelConfig& cfg);

}  // namespace tandem

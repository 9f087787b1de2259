// MachineProfile: the measured speeds the cost model predicts with. Written by calibration (graph/calibrate.h),
// stored as JSON so that a plan can be made without measuring again.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace tandem {

struct MachineProfile {
  std::string device = "cpu";  // what the GPU-side numbers describe: "none", "sim:...", "cuda:0"
  int n_threads = 1;           // CPU threads the CPU numbers were measured with

  // ---- CPU (weights read from RAM) ----
  std::map<DType, double> cpu_gemv_gbps;    // weight bytes/s of a one-token MatMul, per weight type
  std::map<DType, double> cpu_gemm_gflops;  // FLOP/s of a many-token MatMul, per weight type
  double cpu_attn_gflops = 10;              // FLOP/s of Attention (QK^T and PV) over an F16 cache
  double cpu_op_overhead_s = 5e-6;          // fixed cost of one kernel call (thread fork/join)
  // Reads of the model file's pages that are not in RAM (weights larger than the RAM left for them). A default for
  // an NVMe SSD, not measured: calibration leaves it, a profile file may set it.
  double disk_read_gbps = 2;

  // ---- GPU side ----
  bool has_gpu = false;
  uint64_t gpu_capacity_bytes = 0;  // device memory seen at calibration; 0 when unknown
  double h2d_gbps = 25;             // pinned host -> device copy rate (also used for device -> host)
  double gpu_gemv_gbps = 900;       // weight bytes/s of a one-token MatMul
  double gpu_gemm_gflops = 50000;   // FLOP/s of a many-token MatMul
  double gpu_launch_s = 5e-6;       // one kernel launch
  double gpu_sync_s = 20e-6;        // one host<->device synchronisation (event wait, stream sync)
  uint64_t gpu_library_workspace_bytes = 64ull << 20;  // what the GPU libraries (cuBLAS) keep; 0 for sim

  // Rates for a weight type; types never measured fall back to the slowest measured one (or a
  // conservative constant when the map is empty), so an unusual type is never predicted to be fast.
  double CpuGemvGbps(DType t) const;
  double CpuGemmGflops(DType t) const;
};

// Numbers for a machine that was never measured: a modest desktop CPU and, when has_gpu, a PCIe 4 GPU.
MachineProfile DefaultProfile(bool has_gpu);

// JSON round trip. Unknown keys are ignored; missing keys keep DefaultProfile's values; rates must be > 0.
std::string ProfileToJson(const MachineProfile& p);
absl::StatusOr<MachineProfile> ProfileFromJson(const std::string& text);
absl::Status SaveProfile(const std::string& path, const MachineProfile& p);
absl::StatusOr<MachineProfile> LoadProfile(const std::string& path);

// $XDG_CACHE_HOME/tandem (or ~/.cache/tandem) + "/profile-<device>.json", the device name made file-safe.
std::string ProfileCachePath(const std::string& device);

}  // namespace tandem

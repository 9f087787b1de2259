// MachineProfile: the measured speeds the cost model predicts with. Written by calibration (graph/calibrate.h),
// stored as JSON so that a plan can be made without measuring again.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace tandem {

// The machine a profile describes: a profile measured on another one is not used silently.
struct HostIdentity {
  std::string cpu_model;  // as the system names it
  int n_cores = 0;        // physical cores
  int n_pus = 0;          // hardware threads
  int n_numa_nodes = 0;
  bool operator==(const HostIdentity&) const = default;
  std::string Describe() const;  // "AMD EPYC 9654 (96 cores, 192 threads, 2 NUMA nodes)"
};
// This machine, read once through hwloc.
const HostIdentity& ThisHost();

enum class ProfileKind {
  kDefault,   // nothing measured: DefaultProfile's rough numbers
  kSettings,  // only the kernel settings measured (a first run without a profile); rates are the defaults
  kQuick,     // `calibrate --quick`: small sizes, rough rates; never replaces a full profile
  kFull,
};
std::string_view ProfileKindName(ProfileKind k);

struct MachineProfile {
  std::string device = "cpu";  // what the GPU-side numbers describe: "none", "sim:...", "cuda:0"
  int n_threads = 1;           // CPU threads the CPU numbers were measured with
  ProfileKind kind = ProfileKind::kDefault;
  std::string measured_at;     // UTC, ISO 8601 (UtcNowIso8601); empty when nothing was measured
  HostIdentity host;           // where it was measured
  std::string gpu_description;  // the device as its driver names it (name, driver, PCIe); empty for sim/none

  // ---- CPU kernel settings, chosen by measurement (calibrate, or the first run without a profile) ----
  int64_t cpu_decode_prefetch_bytes = -1;  // one-token kernels' prefetch distance; -1: not measured (the ISA's
                                           // vendor default stands)
  double cpu_decode_prefetch_gain = 1;     // its decode GB/s over no prefetch, as measured
  int64_t cpu_row_prefetch_bytes = -1;     // the float GEMVs' prefetch of the rows ahead; -1: not measured
  double cpu_row_prefetch_gain = 1;        // its GB/s over no prefetch, as measured
  // Quantized types whose prefill measured faster through oneDNN's bf16 matmul on AMX, and the smallest batch it
  // did (full calibrations only; cpu_backend/onednn_matmul.h, OneDnnQuantMinTokens). Empty: MatMul's kernels.
  std::map<DType, int64_t> cpu_onednn_quant_min_tokens;

  // ---- CPU (weights read from RAM) ----
  std::map<DType, double> cpu_gemv_gbps;    // weight bytes/s of a one-token MatMul, per weight type
  std::map<DType, double> cpu_gemm_gflops;  // FLOP/s of a many-token MatMul, per weight type
  double cpu_attn_gflops = 10;              // FLOP/s of Attention (QK^T and PV) over an F16 cache
  double cpu_op_overhead_s = 5e-6;          // fixed cost of one kernel call (thread fork/join)
  // The spread of each measured figure over its trials, (max - min) / median (graph/measure.h).
  std::map<DType, double> cpu_gemv_spread;
  std::map<DType, double> cpu_gemm_spread;
  double cpu_attn_spread = 0;
  double cpu_clock_ghz = 0;  // one core's clock measured alongside, which bounds the GEMM rates; 0: unknown
  // The share of the machine's CPUs other processes used while it measured (core/cpu_load.h), 0..1. Above
  // kBusyCalibration the rates are likely low: plan and run say so.
  double others_cpu_share = 0;
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

// The kernel settings of `p` take effect in this process (cpu_backend's globals), unless the user's environment
// (TANDEM_DECODE_PREFETCH) set them.
void ApplyKernelSettings(const MachineProfile& p);

// JSON round trip. Unknown keys are ignored; missing keys keep DefaultProfile's values; rates must be > 0.
std::string ProfileToJson(const MachineProfile& p);
absl::StatusOr<MachineProfile> ProfileFromJson(const std::string& text);
absl::Status SaveProfile(const std::string& path, const MachineProfile& p);
absl::StatusOr<MachineProfile> LoadProfile(const std::string& path);

// $XDG_CACHE_HOME/tandem (or ~/.cache/tandem) + "/profile-<device>.json", the device name made file-safe.
std::string ProfileCachePath(const std::string& device);

// Other processes' share of the CPUs during a calibration above which its rates are called into doubt.
inline constexpr double kBusyCalibration = 0.25;

// Now, UTC, as profiles record it: "2026-12-02T06:30:00Z" (also llama-bench's test_time).
std::string UtcNowIso8601();

}  // namespace tandem

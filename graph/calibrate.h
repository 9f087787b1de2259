// Calibration: measures the numbers of a MachineProfile on this machine. CPU numbers come from cpu::MatMul and
// cpu::Attention on synthetic matrices; GPU-side numbers through the Backend interface (pinned copies, device
// MatMul, launches, syncs), so the same code measures a CUDA device and the simulated one.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cpu_backend/cpu_backend.h"
#include "runtime/backend.h"
#include "graph/profile.h"
#include "sim_backend/sim_backend.h"

namespace tandem {

struct CalibrateOptions {
  int n_threads = 0;        // 0: OpenMP's default
  bool quick = false;       // small sizes and few repetitions (tests); numbers are rougher
  std::vector<DType> types;  // weight types to measure on the CPU; empty: the common GGUF types
  // The CPU weight layout to measure: the one the CPU backend would use (kAuto follows it, cpu_backend.h).
  Repack repack = Repack::kAuto;
};

// CPU numbers only (the GPU-side fields keep DefaultProfile's values, has_gpu = false).
absl::StatusOr<MachineProfile> CalibrateCpu(const CalibrateOptions& opts);

// Fills the GPU-side fields of *p by timing `dev` (which must not be host memory): H2D rate, GEMV GB/s,
// GEMM GFLOP/s, launch and sync overheads; sets has_gpu and gpu_capacity_bytes.
absl::Status CalibrateDevice(Backend& dev, const CalibrateOptions& opts, MachineProfile* p);

// The CPU profile from the cache (ProfileCachePath("cpu")), measured and saved there when absent or unreadable.
// *measured (optional) says which happened.
absl::StatusOr<MachineProfile> CachedCpuProfile(const CalibrateOptions& opts, bool* measured = nullptr);

// A profile for planning against a simulated device without measuring it: CPU numbers from `cpu`, h2d = pcie,
// gpu GB/s = gpu_gbps (900 when unthrottled), a GPU-class GEMM rate, the capacity from the spec.
MachineProfile SimProfile(const MachineProfile& cpu, const SimOptions& sim);

}  // namespace tandem

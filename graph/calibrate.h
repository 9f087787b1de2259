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

// CPU numbers only (the GPU-side fields keep DefaultProfile's values, has_gpu = false). Every figure is the median
// of several trials, its spread kept, and held to a bound (graph/measure.h): a GEMV's GB/s to a streaming read of
// the same bytes taken alongside, a GEMM's rate to the ISA's peak at the measured clock. A figure that keeps
// breaking its bound fails the calibration with a message: nothing is stored.
absl::StatusOr<MachineProfile> CalibrateCpu(const CalibrateOptions& opts);

// Kernel knobs chosen by measuring them on this machine rather than by the CPU's vendor.
struct KernelSettings {
  int64_t decode_prefetch_bytes = 0;  // one-token kernels' software prefetch distance (cpu_backend/kernels.h)
  double decode_prefetch_gain = 1;    // its GB/s over none
  int64_t row_prefetch_bytes = 0;     // the float GEMVs' prefetch of the rows ahead (cpu_backend/kernels.h)
  double row_prefetch_gain = 1;       // its GB/s over none
};
// A few seconds (quick: less): the Q4_K one-token product with each candidate decode prefetch, then BF16 and F16
// ones with each candidate row prefetch, round after round.
absl::StatusOr<KernelSettings> MeasureKernelSettings(const CalibrateOptions& opts);
// Writes k into the profile's kernel-setting fields.
void SetKernelSettings(const KernelSettings& k, MachineProfile* p);

// Fills the GPU-side fields of *p by timing `dev` (which must not be host memory): H2D rate, GEMV GB/s,
// GEMM GFLOP/s, launch and sync overheads; sets has_gpu and gpu_capacity_bytes.
absl::Status CalibrateDevice(Backend& dev, const CalibrateOptions& opts, MachineProfile* p);

// Why a cached CPU profile cannot stand for this machine with n_threads threads ("was measured on <host>, not on
// this <host>", "holds no measured rates", ...), or "" when it can.
std::string CachedProfileMismatch(const MachineProfile& p, int n_threads);

// Saves p at path unless that would replace a profile of a higher kind of the same host (a quick calibration never
// replaces a full one). Returns whether it wrote.
absl::StatusOr<bool> StoreProfile(const std::string& path, const MachineProfile& p);

// The CPU profile from the cache (ProfileCachePath("cpu")), measured and stored there when absent, unreadable,
// or not this machine's (CachedProfileMismatch). *measured (optional) says which happened; *notes (optional)
// gets a line saying why a cached profile was not used.
absl::StatusOr<MachineProfile> CachedCpuProfile(const CalibrateOptions& opts, bool* measured = nullptr,
                                                std::vector<std::string>* notes = nullptr);

// True when p holds no kernel settings measured on this host.
bool KernelSettingsMissing(const MachineProfile& p);

// The kernel settings for computing on this CPU, applied (ApplyKernelSettings): from the cached profile when it
// holds this host's, else measured now (about a second) and kept there. Returns the profile holding them.
absl::StatusOr<MachineProfile> EnsureKernelSettings(const CalibrateOptions& opts,
                                                    std::vector<std::string>* notes = nullptr);

// A profile for planning against a simulated device without measuring it: CPU numbers from `cpu`, h2d = pcie,
// gpu GB/s = gpu_gbps (900 when unthrottled), a GPU-class GEMM rate, the capacity from the spec.
MachineProfile SimProfile(const MachineProfile& cpu, const SimOptions& sim);

}  // namespace tandem

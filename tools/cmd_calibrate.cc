// tandem calibrate: measures this machine (and a GPU-side device) for the cost model and writes the profile.
#include <cstdio>
#include <map>
#include <string>

#include "core/status.h"
#include "gpu_backend/cuda_backend.h"
#include "graph/calibrate.h"
#include "graph/profile.h"
#include "sim_backend/sim_backend.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

namespace tandem::cli {
namespace {

constexpr const char* kCalibrateUsage =
    R"(usage: tandem calibrate [--device auto|none|cuda[:I]|sim:...] [-t THREADS] [--quick] [-o PROFILE]
  Measures CPU matmul GB/s and GFLOP/s per weight type, CPU attention, the CPU kernels' settings (decode
  prefetch distance), and the device's copy rate, matmul rates, launch and sync overheads. Each figure is the
  median of several trials, kept with its spread; one that keeps exceeding what the machine can do (a GEMV faster
  than memory reads alongside it, a GEMM over the ISA's peak at the measured clock) fails the calibration and
  nothing is stored. The profile names the host it describes, and is cached in
  ~/.cache/tandem/profile-<device>.v3.json (where tandem plan and run find it) and also written to PROFILE when
  -o is given.
  --device auto|none|cuda[:I]|sim:VRAM[,...]   the accelerator to measure besides the CPU (default auto: the first
                       CUDA GPU, else none)
  -t, --threads N      CPU threads the CPU figures are measured with (default: all cores)
  -o, --output FILE    also write the profile to FILE (default: only the cache)
  --quick              small sizes and few trials: rough numbers in about a second; never replaces a full profile
  -h, --help           this text
)";

// The device to measure, or null for none.
absl::StatusOr<std::unique_ptr<Backend>> OpenDevice(std::string spec, std::string* name) {
  if (spec == "auto") spec = CudaDeviceCount() > 0 ? "cuda:0" : "none";
  *name = spec;
  if (spec == "none" || spec == "cpu") return std::unique_ptr<Backend>();
  if (spec.rfind("sim:", 0) == 0) {
    TANDEM_ASSIGN_OR_RETURN(const SimOptions sim, ParseSimSpec(spec));
    return std::unique_ptr<Backend>(std::make_unique<SimBackend>(sim));
  }
  if (spec == "cuda" || spec.rfind("cuda:", 0) == 0) {
    int64_t index = 0;
    if (spec.size() > 5) {
      TANDEM_ASSIGN_OR_RETURN(index, ParseInt("--device", spec.substr(5)));
    }
    if (index < 0 || index > 1024) return InvalidArgument("invalid device '", spec, "'");
    *name = Cat("cuda:", index);
    CudaOptions co;
    co.device = static_cast<int>(index);
    return CreateCudaBackend(co);
  }
  return InvalidArgument("unknown device '", spec, "' (expected auto, none, cuda[:I] or sim:VRAM[,pcie=GBPS])");
}

// A figure with its spread over the trials: "31.2 ±4%".
std::string WithSpread(double value, const std::map<DType, double>& spreads, DType t, int precision) {
  auto it = spreads.find(t);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, value);
  return it == spreads.end() ? buf : Cat(buf, " ±", static_cast<int>(it->second * 50 + 0.5), "%");
}

void PrintProfile(const MachineProfile& p) {
  std::printf("%s, %s profile, %s\nCPU (%d threads, %.2f GHz measured)\n  %-6s %14s %16s\n",
              p.host.Describe().c_str(), std::string(ProfileKindName(p.kind)).c_str(), p.measured_at.c_str(),
              p.n_threads, p.cpu_clock_ghz, "type", "GEMV GB/s", "GEMM GFLOP/s");
  for (const auto& [type, gbps] : p.cpu_gemv_gbps) {
    std::printf("  %-6s %14s %16s\n", std::string(DTypeName(type)).c_str(),
                WithSpread(gbps, p.cpu_gemv_spread, type, 2).c_str(),
                WithSpread(p.CpuGemmGflops(type), p.cpu_gemm_spread, type, 1).c_str());
  }
  std::printf("  attention %.2f GFLOP/s, %.1f us per kernel call\n", p.cpu_attn_gflops, p.cpu_op_overhead_s * 1e6);
  if (p.cpu_decode_prefetch_bytes >= 0) {
    std::printf("  decode prefetch %lld bytes (%.2fx the GB/s of none)\n",
                static_cast<long long>(p.cpu_decode_prefetch_bytes), p.cpu_decode_prefetch_gain);
  }
  if (p.cpu_row_prefetch_bytes >= 0) {
    std::printf("  float GEMV row prefetch %lld bytes (%.2fx the GB/s of none)\n",
                static_cast<long long>(p.cpu_row_prefetch_bytes), p.cpu_row_prefetch_gain);
  }
  if (!p.cpu_onednn_quant_min_tokens.empty()) {
    std::string routes;
    for (const auto& [type, n] : p.cpu_onednn_quant_min_tokens) {
      routes += Cat(routes.empty() ? "" : ", ", DTypeName(type), " from ", n, " tokens");
    }
    std::printf("  prefill through oneDNN's bf16 matmul (AMX): %s\n", routes.c_str());
  }
  if (p.has_gpu) {
    if (!p.gpu_description.empty()) std::printf("%s\n", p.gpu_description.c_str());
    std::printf("%s (%.1f GiB)\n  H2D %.2f GB/s, GEMV %.1f GB/s, GEMM %.1f GFLOP/s, launch %.1f us, sync %.1f us\n",
                p.device.c_str(), p.gpu_capacity_bytes / 1073741824.0, p.h2d_gbps, p.gpu_gemv_gbps,
                p.gpu_gemm_gflops, p.gpu_launch_s * 1e6, p.gpu_sync_s * 1e6);
  }
}

}  // namespace

int CmdCalibrate(std::span<const std::string> args) {
  ArgReader r(args);
  std::string device = "auto", out;
  CalibrateOptions opts;
  while (!r.Done()) {
    const std::string& flag = r.Next();
    if (flag == "--device") {
      absl::StatusOr<std::string> v = r.Value(flag);
      if (!v.ok()) return Fail(v.status());
      device = *v;
    } else if (flag == "-o" || flag == "--output") {
      absl::StatusOr<std::string> v = r.Value(flag);
      if (!v.ok()) return Fail(v.status());
      out = *v;
    } else if (flag == "-t" || flag == "--threads") {
      absl::StatusOr<std::string> v = r.Value(flag);
      if (!v.ok()) return Fail(v.status());
      absl::StatusOr<int64_t> n = ParseInt(flag, *v);
      if (!n.ok()) return Fail(n.status());
      if (*n < 0 || *n > 4096) return Fail(Cat(flag, " must be in 0..4096, got ", *n));
      opts.n_threads = static_cast<int>(*n);
    } else if (flag == "--quick") {
      opts.quick = true;
    } else if (flag == "-h" || flag == "--help") {
      std::fputs(kCalibrateUsage, stdout);
      return 0;
    } else {
      return Fail(Cat("calibrate: unknown flag '", flag, "' (see tandem calibrate --help)"));
    }
  }

  std::string name;
  absl::StatusOr<std::unique_ptr<Backend>> dev = OpenDevice(device, &name);
  if (!dev.ok()) return Fail(dev.status());
  std::fprintf(stderr, "calibrating the CPU...\n");
  absl::StatusOr<MachineProfile> p = CalibrateCpu(opts);
  if (!p.ok()) return Fail(p.status());
  if (p->others_cpu_share > kBusyCalibration) {
    std::fprintf(stderr, "warning: other processes used %.0f %% of the CPUs while this measured, so its rates are "
                 "likely low; calibrate again on an idle machine\n", 100 * p->others_cpu_share);
  }
  // A quick calibration never replaces a full one: its rates are rough (small matrices inside the caches).
  if (absl::StatusOr<bool> stored = StoreProfile(ProfileCachePath("cpu"), *p); !stored.ok()) {
    std::fprintf(stderr, "warning: %s\n", Message(stored.status()).c_str());
  } else if (!*stored) {
    std::fprintf(stderr, "note: kept the full profile in %s (a quick calibration never replaces it)\n",
                 ProfileCachePath("cpu").c_str());
  }
  if (*dev) {
    std::fprintf(stderr, "calibrating %s...\n", name.c_str());
    if (absl::Status s = CalibrateDevice(**dev, opts, &*p); !s.ok()) return Fail(s);
    p->device = name;
    if (absl::StatusOr<bool> stored = StoreProfile(ProfileCachePath(name), *p); !stored.ok()) {
      std::fprintf(stderr, "warning: %s\n", Message(stored.status()).c_str());
    } else if (!*stored) {
      std::fprintf(stderr, "note: kept the full profile in %s (a quick calibration never replaces it)\n",
                   ProfileCachePath(name).c_str());
    }
  }
  if (!out.empty()) {
    if (absl::Status s = SaveProfile(out, *p); !s.ok()) return Fail(s);
  }
  PrintProfile(*p);
  std::printf("profile: %s\n", out.empty() ? ProfileCachePath(*dev ? name : "cpu").c_str() : out.c_str());
  return 0;
}

}  // namespace tandem::cli

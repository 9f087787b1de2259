// tandem calibrate: measures this machine (and a GPU-side device) for the cost model and writes the profile.
#include <cstdio>

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
  Measures CPU matmul GB/s and GFLOP/s per weight type, CPU attention, and the device's copy rate, matmul
  rates, launch and sync overheads. The profile is cached in ~/.cache/tandem/profile-<device>.v2.json (where
  tandem plan and run find it) and also written to PROFILE when -o is given.
  --quick   small sizes and few repetitions: rough numbers in about a second
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

void PrintProfile(const MachineProfile& p) {
  std::printf("CPU (%d threads)\n  %-6s %10s %12s\n", p.n_threads, "type", "GEMV GB/s", "GEMM GFLOP/s");
  for (const auto& [type, gbps] : p.cpu_gemv_gbps) {
    std::printf("  %-6s %10.2f %12.1f\n", std::string(DTypeName(type)).c_str(), gbps, p.CpuGemmGflops(type));
  }
  std::printf("  attention %.2f GFLOP/s, %.1f us per kernel call\n", p.cpu_attn_gflops, p.cpu_op_overhead_s * 1e6);
  if (p.has_gpu) {
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
  if (absl::Status s = SaveProfile(ProfileCachePath("cpu"), *p); !s.ok()) {
    std::fprintf(stderr, "warning: %s\n", Message(s).c_str());
  }
  if (*dev) {
    std::fprintf(stderr, "calibrating %s...\n", name.c_str());
    if (absl::Status s = CalibrateDevice(**dev, opts, &*p); !s.ok()) return Fail(s);
    p->device = name;
    if (absl::Status s = SaveProfile(ProfileCachePath(name), *p); !s.ok()) {
      std::fprintf(stderr, "warning: %s\n", Message(s).c_str());
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

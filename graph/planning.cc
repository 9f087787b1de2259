#include "graph/planning.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "core/status.h"
#include "gpu_backend/cuda_backend.h"
#include "graph/calibrate.h"
#include "graph/partitioner.h"
#include "graph/sim_backend.h"

namespace tandem {
namespace {

// Copies the GPU-side fields of `gpu` into `p`.
void TakeGpuNumbers(const MachineProfile& gpu, MachineProfile* p) {
  p->device = gpu.device;
  p->has_gpu = gpu.has_gpu;
  p->gpu_capacity_bytes = gpu.gpu_capacity_bytes;
  p->h2d_gbps = gpu.h2d_gbps;
  p->gpu_gemv_gbps = gpu.gpu_gemv_gbps;
  p->gpu_gemm_gflops = gpu.gpu_gemm_gflops;
  p->gpu_launch_s = gpu.gpu_launch_s;
  p->gpu_sync_s = gpu.gpu_sync_s;
  p->gpu_library_workspace_bytes = gpu.gpu_library_workspace_bytes;
}

absl::StatusOr<DeviceSetup> SetupCuda(int index, const DeviceSetupOptions& opts, MachineProfile cpu,
                                      bool file_has_gpu) {
  DeviceSetup d;
  d.spec = Cat("cuda:", index);
  d.has_gpu = true;
  CudaOptions co;
  co.device = index;
  co.vram_budget = opts.cuda_vram_budget;
  TANDEM_ASSIGN_OR_RETURN(d.backend, CreateCudaBackend(co));
  d.capacity = d.backend->capacity();
  d.profile = std::move(cpu);  // a --profile file with GPU numbers is used as is
  absl::StatusOr<MachineProfile> cached =
      file_has_gpu ? absl::StatusOr<MachineProfile>(d.profile) : LoadProfile(ProfileCachePath(d.spec));
  if (cached.ok() && cached->has_gpu) {
    TakeGpuNumbers(*cached, &d.profile);
  } else {
    CalibrateOptions co2;
    co2.n_threads = opts.n_threads;
    co2.quick = opts.quick_calibration;
    MachineProfile measured = d.profile;
    TANDEM_RETURN_IF_ERROR(CalibrateDevice(*d.backend, co2, &measured));
    measured.device = d.spec;
    (void)SaveProfile(ProfileCachePath(d.spec), measured);
    TakeGpuNumbers(measured, &d.profile);
    d.measured = true;
  }
  d.profile.device = d.spec;
  d.profile.has_gpu = true;
  d.profile.gpu_capacity_bytes = d.capacity;
  if (!opts.open_backend) d.backend.reset();  // its size was all the caller needed
  return d;
}

}  // namespace

int DefaultContext(const ModelConfig& cfg) { return cfg.n_ctx_train > 0 ? std::min(4096, cfg.n_ctx_train) : 4096; }

absl::StatusOr<DeviceSetup> SetupDevice(std::string_view spec, const DeviceSetupOptions& opts) {
  if (spec == "auto") spec = CudaDeviceCount() > 0 ? "cuda:0" : "none";
  // With no GPU every unit runs on the CPU whatever the numbers say, so nothing is worth measuring.
  const bool cpu_only = spec == "none" || spec == "cpu";
  // CPU numbers first: every device plan needs them.
  MachineProfile cpu;
  bool measured = false;
  bool file_has_gpu = false;
  if (!opts.profile_path.empty()) {
    TANDEM_ASSIGN_OR_RETURN(cpu, LoadProfile(opts.profile_path));
    file_has_gpu = cpu.has_gpu;
  } else if (absl::StatusOr<MachineProfile> cached = LoadProfile(ProfileCachePath("cpu"));
             (cpu_only || !opts.calibrate_cpu) && cached.ok()) {
    cpu = *std::move(cached);
  } else if (cpu_only || !opts.calibrate_cpu) {
    cpu = DefaultProfile(false);
  } else {
    CalibrateOptions co;
    co.n_threads = opts.n_threads;
    co.quick = opts.quick_calibration;
    TANDEM_ASSIGN_OR_RETURN(cpu, CachedCpuProfile(co, &measured));
  }

  if (cpu_only) {
    DeviceSetup d;
    d.spec = "none";
    d.profile = std::move(cpu);
    d.profile.has_gpu = false;
    d.measured = measured;
    return d;
  }
  if (spec.rfind("sim:", 0) == 0) {
    TANDEM_ASSIGN_OR_RETURN(const SimOptions sim, ParseSimSpec(spec));
    DeviceSetup d;
    d.spec = sim.spec;
    d.has_gpu = true;
    d.capacity = sim.capacity;
    d.profile = SimProfile(cpu, sim);
    d.measured = measured;
    if (opts.open_backend) d.backend = std::make_unique<SimBackend>(sim);
    return d;
  }
  if (spec == "cuda" || spec.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (spec.size() > 5 && (!absl::SimpleAtoi(absl::string_view(spec.data() + 5, spec.size() - 5), &index) ||
                            index < 0)) {
      return InvalidArgument("invalid device '", spec, "' (expected cuda or cuda:I)");
    }
    if (spec == "cuda:") return InvalidArgument("invalid device 'cuda:' (expected cuda or cuda:I)");
    TANDEM_ASSIGN_OR_RETURN(DeviceSetup d, SetupCuda(index, opts, std::move(cpu), file_has_gpu));
    d.measured = d.measured || measured;
    return d;
  }
  return InvalidArgument("unknown device '", spec, "' (expected auto, none, cuda[:I] or sim:VRAM[,pcie=GBPS])");
}

absl::StatusOr<Plan> PlanModel(const GgufFile& file, const ModelConfig& cfg, const DeviceSetup& dev,
                               const PlacementRequest& req, const PlanOptions& opts) {
  PartitionInput in;
  in.config = cfg;
  TANDEM_ASSIGN_OR_RETURN(in.units, BuildUnits(file, cfg));
  in.profile = dev.profile;
  in.request = req;
  in.has_gpu = dev.has_gpu;
  in.device_capacity = dev.capacity;
  in.device_name = dev.spec;
  in.n_ctx = opts.n_ctx > 0 ? opts.n_ctx : DefaultContext(cfg);
  in.kv_elem_bytes = opts.kv_elem_bytes;
  in.prefill_batch = std::max(1, std::min(opts.n_batch, in.n_ctx));
  in.prompt_tokens = opts.prompt_tokens;
  in.gen_tokens = opts.gen_tokens;
  in.n_threads = opts.n_threads;
  return Partition(in);
}

}  // namespace tandem

#include "graph/planning.h"

#include <omp.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/host_memory.h"
#include "core/status.h"
#include "gpu_backend/cuda_backend.h"
#include "graph/calibrate.h"
#include "graph/partitioner.h"
#include "sim_backend/sim_backend.h"

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
  p->gpu_description = gpu.gpu_description;
}

absl::StatusOr<AcceleratorSetup> SetupCuda(int index, const DeviceSetupOptions& opts, MachineProfile* profile,
                                           bool use_profile, bool* measured, std::vector<std::string>* notes) {
  AcceleratorSetup a;
  a.spec = Cat("cuda:", index);
  a.supports = CudaSupports;
  CudaOptions co;
  co.device = index;
  co.vram_budget = opts.cuda_vram_budget;
  TANDEM_ASSIGN_OR_RETURN(a.backend, CreateCudaBackend(co));
  a.capacity = a.backend->capacity();
  if (profile != nullptr) {
    // A --profile file with GPU numbers is used as is.
    absl::StatusOr<MachineProfile> cached =
        use_profile ? absl::StatusOr<MachineProfile>(*profile) : LoadProfile(ProfileCachePath(a.spec));
    // A cached device profile of another machine is measured again (a --profile file is the user's to give).
    if (cached.ok() && cached->has_gpu && !use_profile && !(cached->host == ThisHost())) {
      notes->push_back(Cat("the cached profile ", ProfileCachePath(a.spec), " was measured on ",
                           cached->host.Describe(), "; measuring ", a.spec, " on this machine"));
      cached = absl::NotFoundError("another host");
    }
    if (cached.ok() && cached->has_gpu) {
      TakeGpuNumbers(*cached, profile);
    } else {
      CalibrateOptions co2;
      co2.n_threads = opts.n_threads;
      co2.quick = opts.quick_calibration;
      MachineProfile measured_profile = *profile;
      TANDEM_RETURN_IF_ERROR(CalibrateDevice(*a.backend, co2, &measured_profile));
      measured_profile.device = a.spec;
      (void)SaveProfile(ProfileCachePath(a.spec), measured_profile);
      TakeGpuNumbers(measured_profile, profile);
      *measured = true;
    }
    profile->device = a.spec;
    profile->has_gpu = true;
    profile->gpu_capacity_bytes = a.capacity;
  }
  if (!opts.open_backend) a.backend.reset();  // its size was all the caller needed
  return a;
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
  std::vector<std::string> notes;
  const int threads = opts.n_threads > 0 ? opts.n_threads : omp_get_max_threads();
  CalibrateOptions co;
  co.n_threads = opts.n_threads;
  co.quick = opts.quick_calibration;
  if (!opts.profile_path.empty()) {
    TANDEM_ASSIGN_OR_RETURN(cpu, LoadProfile(opts.profile_path));
    file_has_gpu = cpu.has_gpu;
    // The user's own file is used as given, but not silently when it names another machine.
    if (!(cpu.host == HostIdentity{}) && !(cpu.host == ThisHost())) {
      notes.push_back(Cat("the profile ", opts.profile_path, " was measured on ", cpu.host.Describe(),
                          ", not on this ", ThisHost().Describe(), "; planning with it as given"));
    }
  } else if (cpu_only || !opts.calibrate_cpu) {
    absl::StatusOr<MachineProfile> cached = LoadProfile(ProfileCachePath("cpu"));
    const std::string why = cached.ok() ? CachedProfileMismatch(*cached, threads) : "is absent";
    cpu = why.empty() ? *cached : DefaultProfile(false);
    if (!why.empty() && cached.ok() && !KernelSettingsMissing(*cached)) {  // a first run's settings, say
      cpu.cpu_decode_prefetch_bytes = cached->cpu_decode_prefetch_bytes;
      cpu.cpu_decode_prefetch_gain = cached->cpu_decode_prefetch_gain;
      cpu.cpu_row_prefetch_bytes = cached->cpu_row_prefetch_bytes;
      cpu.cpu_row_prefetch_gain = cached->cpu_row_prefetch_gain;
      cpu.host = cached->host;
    }
    // With no GPU every unit runs on the CPU whatever the rates say: only a plan for a device needs to know.
    if (!why.empty() && !cpu_only && cached.ok() && cached->kind != ProfileKind::kSettings) {
      notes.push_back(Cat("the cached profile ", ProfileCachePath("cpu"), " ", why, "; planning with default rates"));
    }
  } else {
    TANDEM_ASSIGN_OR_RETURN(cpu, CachedCpuProfile(co, &measured, &notes));
  }
  // What will compute on this CPU runs with this CPU's measured kernel settings (the engine measures them once,
  // after planning, when no profile holds them: KernelSettingsMissing).
  if (opts.open_backend && !KernelSettingsMissing(cpu)) ApplyKernelSettings(cpu);

  DeviceSetup d;
  d.measured = measured;
  d.notes = std::move(notes);
  if (cpu_only) {
    d.profile = std::move(cpu);
    d.profile.has_gpu = false;
    return d;
  }
  d.profile = cpu;
  const std::vector<std::string> specs = absl::StrSplit(absl::string_view(spec.data(), spec.size()), '+');
  for (const std::string& one : specs) {
    const bool first = d.accelerators.empty();
    if (one.rfind("sim:", 0) == 0) {
      TANDEM_ASSIGN_OR_RETURN(const SimOptions sim, ParseSimSpec(one));
      AcceleratorSetup a;
      a.spec = sim.spec;
      a.capacity = sim.capacity;
      a.supports = SimSupports;
      if (opts.open_backend) a.backend = std::make_unique<SimBackend>(sim);
      if (first) d.profile = SimProfile(cpu, sim);
      d.accelerators.push_back(std::move(a));
      continue;
    }
    if (one == "cuda" || one.rfind("cuda:", 0) == 0) {
      int index = 0;
      if (one == "cuda:" || (one.size() > 5 && (!absl::SimpleAtoi(absl::string_view(one).substr(5), &index) ||
                                                index < 0))) {
        return InvalidArgument("invalid device '", one, "' (expected cuda or cuda:I)");
      }
      bool cuda_measured = false;
      TANDEM_ASSIGN_OR_RETURN(AcceleratorSetup a, SetupCuda(index, opts, first ? &d.profile : nullptr, file_has_gpu,
                                                            &cuda_measured, &d.notes));
      d.measured = d.measured || cuda_measured;
      d.accelerators.push_back(std::move(a));
      continue;
    }
    if (specs.size() > 1 && (one == "auto" || one == "none" || one == "cpu")) {
      return InvalidArgument("device '", one, "' cannot be one of several; list accelerators: cuda:I or sim:...");
    }
    return InvalidArgument("unknown device '", one, "' (expected auto, none, cuda[:I] or sim:VRAM[,pcie=GBPS])");
  }
  d.has_gpu = true;
  d.capacity = d.accelerators.front().capacity;
  d.spec.clear();
  for (const AcceleratorSetup& a : d.accelerators) d.spec += Cat(d.spec.empty() ? "" : "+", a.spec);
  return d;
}

absl::StatusOr<Plan> PlanModel(const GgufFile& file, const ModelConfig& cfg, const DeviceSetup& dev,
                               const PlacementRequest& req, const PlanOptions& opts) {
  PartitionInput in;
  in.config = cfg;
  TANDEM_ASSIGN_OR_RETURN(in.units, BuildUnits(file, cfg));
  in.profile = dev.profile;
  in.request = req;
  for (const AcceleratorSetup& a : dev.accelerators) {
    in.devices.push_back(DeviceDesc{.name = a.spec, .capacity = a.capacity, .supports = a.supports});
  }
  in.n_ctx = opts.n_ctx > 0 ? opts.n_ctx : DefaultContext(cfg);
  in.kv_elem_bytes = opts.kv_elem_bytes;
  in.n_seq = std::max(opts.n_seq, 1);
  in.prefill_batch = std::max(1, std::min(opts.n_batch, in.n_ctx));
  in.prompt_tokens = opts.prompt_tokens;
  in.gen_tokens = opts.gen_tokens;
  in.n_threads = opts.n_threads;
  in.cpu_repack = ResolveRepack(opts.repack);
  in.routing = opts.routing;  // Partition refuses a recording of another model
  if (req.host_ram) {
    in.host_ram_available = *req.host_ram;
  } else if (absl::StatusOr<HostMemory> host = ReadHostMemory(); host.ok()) {
    in.host_ram_available = host->available;
  }
  TANDEM_ASSIGN_OR_RETURN(Plan plan, Partition(in));
  for (const AcceleratorSetup& a : dev.accelerators) {
    if (req.vram_budget && a.capacity > 0 && *req.vram_budget > a.capacity) {
      plan.warnings.push_back(Cat("--vram-budget ", FormatBytes(*req.vram_budget), " is more than ", a.spec, "'s ",
                                  FormatBytes(a.capacity), "; the plan holds to the device's memory"));
    }
  }
  // Repacked copies cannot be paged out; the file's pages can. When only the copies push the account past RAM,
  // computing from the pages (slower kernels, but no swapping) is the better plan.
  const uint64_t avail = in.host_ram_available;
  if (opts.repack == Repack::kAuto && plan.cpu_repack && avail > 0 && plan.host.anonymous() > avail &&
      plan.host.anonymous() - plan.host.repacked <= avail) {
    in.cpu_repack = false;
    TANDEM_ASSIGN_OR_RETURN(plan, Partition(in));
    plan.warnings.insert(plan.warnings.begin(),
                         Cat("host memory: the CPU's repacked weights would not fit in the ", FormatBytes(avail),
                             " of RAM available; it computes from the model file's pages instead"));
  }
  return plan;
}

}  // namespace tandem

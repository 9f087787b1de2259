// tandem sweep: measure the model over a range of placements (GPU layers, or layers' experts, from none to all,
// plus the auto plan) next to the planner's predictions, and write OUT.csv|json and OUT.svg.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "arch/model_config.h"
#include "core/gguf.h"
#include "core/status.h"
#include "gpu_backend/cuda_backend.h"
#include "graph/engine.h"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/placement_flags.h"
#include "tools/placement_request.h"
#include "tools/sweep.h"
#include "tools/sweep_output.h"
#include "tools/sweep_svg.h"
#include "tools/throughput.h"

namespace tandem::cli {
namespace {

constexpr const char* kSweepUsage =
    R"(usage: tandem sweep -m MODEL [placement flags] [-p N_PROMPT] [-n N_GEN] [-r REPS] [-t THREADS] -o OUT
  -m, --model FILE     GGUF model (default: the bundled stories260K)
  -o, --output OUT     writes OUT.csv (or OUT.json) and OUT.svg
  -p, --n-prompt N     prefill test length (default 512; 0 skips prefill)
  -n, --n-gen N        decode test length (default 64; 0 skips decode)
  -r, --repetitions N  repetitions per point (default 3)
  -t, --threads N      CPU threads (default: all cores)
  -b, --batch-size N   prefill batch (default 512)
  --over layers|experts  what the x axis counts (default layers):
                       layers:  --gpu-layers N with the rest on the CPU, N from 0 to all
                       experts: all attention on the GPU, the experts of the last N layers too (MoE models)
  --max-points N       at most N swept placements (default 12), plus the auto plan
  --format csv|json    the table's format (default csv)
  --profile FILE       machine profile to plan with (default: the cached calibration)
  -h, --help           this text
Placement flags apply to every point, except the layer counts, which the sweep sets. A point that does not fit the
VRAM budget is kept as a row with status "infeasible".
)";

struct SweepFlags {
  std::string model;
  std::string out;
  int n_prompt = 512;
  int n_gen = 64;
  int reps = 3;
  int n_threads = 0;
  int n_batch = 512;
  int max_points = 12;
  SweepAxis axis = SweepAxis::kLayers;
  bool json = false;
  std::string profile;
  PlacementFlags placement;
  bool help = false;
};

absl::StatusOr<SweepFlags> ParseSweepFlags(std::span<const std::string> argv) {
  SweepFlags f;
  ArgReader args(argv);
  auto number = [&](const std::string& flag, int lo, int hi, int* out) -> absl::Status {
    TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
    TANDEM_ASSIGN_OR_RETURN(int64_t n, ParseInt(flag, v));
    if (n < lo || n > hi) return InvalidArgument(flag, " must be between ", lo, " and ", hi, ", got ", n);
    *out = static_cast<int>(n);
    return absl::OkStatus();
  };
  while (!args.Done()) {
    const std::string flag = args.Next();
    TANDEM_ASSIGN_OR_RETURN(bool placed, ParsePlacementFlag(flag, args, f.placement));
    if (placed) continue;
    if (flag == "-h" || flag == "--help") {
      f.help = true;
    } else if (flag == "-m" || flag == "--model") {
      TANDEM_ASSIGN_OR_RETURN(f.model, args.Value(flag));
    } else if (flag == "-o" || flag == "--output") {
      TANDEM_ASSIGN_OR_RETURN(f.out, args.Value(flag));
    } else if (flag == "-p" || flag == "--n-prompt") {
      TANDEM_RETURN_IF_ERROR(number(flag, 0, 1 << 20, &f.n_prompt));
    } else if (flag == "-n" || flag == "--n-gen") {
      TANDEM_RETURN_IF_ERROR(number(flag, 0, 1 << 20, &f.n_gen));
    } else if (flag == "-r" || flag == "--repetitions") {
      TANDEM_RETURN_IF_ERROR(number(flag, 1, 10000, &f.reps));
    } else if (flag == "-t" || flag == "--threads") {
      TANDEM_RETURN_IF_ERROR(number(flag, 1, 4096, &f.n_threads));
    } else if (flag == "-b" || flag == "--batch-size") {
      TANDEM_RETURN_IF_ERROR(number(flag, 1, 65536, &f.n_batch));
    } else if (flag == "--max-points") {
      TANDEM_RETURN_IF_ERROR(number(flag, 2, 1000, &f.max_points));
    } else if (flag == "--over") {
      TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
      if (v != "layers" && v != "experts") return InvalidArgument("--over must be layers or experts, got '", v, "'");
      f.axis = v == "layers" ? SweepAxis::kLayers : SweepAxis::kExperts;
    } else if (flag == "--format") {
      TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
      if (v != "csv" && v != "json") return InvalidArgument("--format must be csv or json, got '", v, "'");
      f.json = v == "json";
    } else if (flag == "--profile") {
      TANDEM_ASSIGN_OR_RETURN(f.profile, args.Value(flag));
    } else {
      return InvalidArgument("unknown flag '", flag, "' for sweep (see tandem sweep --help)");
    }
  }
  if (f.help) return f;
  if (f.out.empty()) return InvalidArgument("sweep needs -o OUT (it writes OUT.csv and OUT.svg)");
  if (f.n_prompt == 0 && f.n_gen == 0) return InvalidArgument("-p 0 and -n 0 leave nothing to measure");
  for (const char* ext : {".csv", ".json", ".svg"}) {  // "-o x.csv" means the base x
    if (f.out.size() > 4 && f.out.ends_with(ext)) f.out.resize(f.out.size() - std::string_view(ext).size());
  }
  const std::string_view dev = f.placement.device;
  if (dev == "none" || dev == "cpu" || (dev == "auto" && CudaDeviceCount() == 0)) {
    return InvalidArgument("sweep needs a GPU to place layers on; there is none (--device sim:12GiB simulates one)");
  }
  if (f.model.empty()) f.model = DefaultModelPath();
  return f;
}

// One line on stderr: rewritten in place with \r on a terminal, one line per update otherwise (logs, pipes).
class Progress {
 public:
  explicit Progress(size_t total) : total_(total), tty_(isatty(fileno(stderr)) != 0) {}
  // `transient`: worth showing on a terminal only ("measuring..."), not as a line of its own in a log.
  void Update(size_t done, const std::string& what, bool transient = false) {
    if (!tty_) {
      if (transient) return;
      std::fprintf(stderr, "sweep %zu/%zu: %s\n", done, total_, what.c_str());
      return;
    }
    constexpr size_t kBar = 24;
    const size_t filled = total_ > 0 ? kBar * done / total_ : kBar;
    std::string line = Cat("\r[", std::string(filled, '#'), std::string(kBar - filled, ' '), "] ", done, "/", total_,
                           " ", what);
    if (line.size() < last_width_) line += std::string(last_width_ - line.size(), ' ');  // clear the old tail
    last_width_ = line.size();
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }
  void Finish() {
    if (tty_) std::fputc('\n', stderr);
  }

 private:
  size_t total_;
  bool tty_;
  size_t last_width_ = 0;
};

// Opens the engine for one point and measures it. Err only for what would fail every point (bad flags, a broken
// file); a placement that does not fit comes back as a result with ok = false.
absl::StatusOr<SweepResult> MeasurePoint(const SweepFlags& f, const SweepPoint& point, int n_layer,
                                         std::shared_ptr<const RoutingStats> routing) {
  SweepResult r{.point = point, .x = static_cast<double>(point.count)};
  TANDEM_ASSIGN_OR_RETURN(PlacementRequest req, ToPlacementRequest(point.placement));
  const int n_tokens = std::max(f.n_prompt, 1);
  EngineOptions eo{.model_path = f.model, .device = point.placement.device, .placement = req,
                   .profile_path = f.profile, .prompt_tokens = f.n_prompt, .gen_tokens = f.n_gen,
                   .n_ctx = std::max(f.n_prompt, f.n_gen) + 1, .n_batch = std::min(f.n_batch, n_tokens),
                   .n_threads = f.n_threads};
  eo.numa = point.placement.numa;
  eo.routing = std::move(routing);
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(eo);
  if (absl::IsResourceExhausted(engine.status())) {
    r.note = Cat("infeasible: ", engine.status().message());
    return r;
  }
  if (!engine.ok()) return engine.status();
  Engine& e = **engine;
  const Plan& plan = e.plan();
  r.plan_why = plan.why;
  if (point.is_auto) r.x = std::min<double>(PlanPosition(plan, f.axis, n_layer), n_layer);
  r.predicted_prefill_tps = plan.predicted_prefill_tps;
  r.predicted_decode_tps = plan.predicted_decode_tps;
  r.predicted_vram_bytes = plan.gpu.total();
  r.predicted_pcie_bytes_per_decode_token = plan.pcie_bytes_per_decode_token;
  r.predicted_pcie_bytes_per_prefill_token = plan.pcie_bytes_per_prefill_token;
  r.vram_budget_bytes = plan.vram_budget;

  ThroughputMeter meter(e, {.reps = f.reps, .max_prompt = n_tokens});
  if (f.n_prompt > 0) {
    TANDEM_ASSIGN_OR_RETURN(ThroughputResult pp, meter.Prefill(f.n_prompt));
    r.prefill_tps = pp.avg_ts;
    r.prefill_tps_sd = pp.stddev_ts;
  }
  if (f.n_gen > 0) {
    TANDEM_ASSIGN_OR_RETURN(ThroughputResult tg, meter.Decode(f.n_gen));
    r.decode_tps = tg.avg_ts;
    r.decode_tps_sd = tg.stddev_ts;
  }
  const ExecutorStats& st = e.executor().stats();
  r.peak_vram_bytes = st.peak_vram_bytes;
  r.pcie_bytes_per_decode_token = st.decode_tokens > 0 ? st.pcie_bytes_decode / st.decode_tokens : 0;
  r.pcie_bytes_per_prefill_token = st.prefill_tokens > 0 ? st.pcie_bytes_prefill / st.prefill_tokens : 0;
  r.ok = true;
  return r;
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return absl::UnavailableError(Cat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status RunSweep(const SweepFlags& f) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(f.model));
  TANDEM_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(*file));
  // Loaded once, before any point runs, so that a mismatched file fails at once.
  TANDEM_ASSIGN_OR_RETURN(std::shared_ptr<const RoutingStats> routing, LoadRoutingFlag(f.placement, cfg));
  TANDEM_ASSIGN_OR_RETURN(std::vector<SweepPoint> points,
                          MakeSweepPoints(f.placement, f.axis, cfg.n_layer, cfg.is_moe(), f.max_points));
  SweepReport report{.model = cfg.name.empty() ? std::filesystem::path(f.model).stem().string() : cfg.name,
                     .device = f.placement.device == "auto" ? "cuda:0" : f.placement.device, .axis = f.axis, .n_layer = cfg.n_layer,
                     .n_prompt = f.n_prompt, .n_gen = f.n_gen, .reps = f.reps,
                     .n_threads = f.n_threads > 0 ? f.n_threads : omp_get_max_threads()};
  file.reset();

  Progress progress(points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    progress.Update(i, Cat(points[i].label, ": measuring..."), /*transient=*/true);
    TANDEM_ASSIGN_OR_RETURN(SweepResult r, MeasurePoint(f, points[i], cfg.n_layer, routing));
    progress.Update(i + 1, r.ok ? absl::StrFormat("%s: prefill %.1f tok/s, decode %.2f tok/s", r.point.label,
                                                  r.prefill_tps, r.decode_tps)
                                : Cat(r.point.label, ": does not fit"));
    report.results.push_back(std::move(r));
  }
  progress.Finish();
  for (const SweepResult& r : report.results) {
    if (!r.ok) std::fprintf(stderr, "note: %s: %s\n", r.point.label.c_str(), r.note.c_str());
  }
  MarkSweep(report);

  const std::string table = f.json ? SweepJson(report).dump(2) + "\n" : SweepCsv(report);
  const std::string table_path = f.out + (f.json ? ".json" : ".csv");
  TANDEM_RETURN_IF_ERROR(WriteFile(table_path, table));
  TANDEM_RETURN_IF_ERROR(WriteFile(f.out + ".svg", SweepSvg(report)));
  std::printf("wrote %s and %s.svg\n%s\n", table_path.c_str(), f.out.c_str(), SweepSummary(report).c_str());
  return absl::OkStatus();
}

}  // namespace

int CmdSweep(std::span<const std::string> args) {
  absl::StatusOr<SweepFlags> f = ParseSweepFlags(args);
  if (!f.ok()) return Fail(f.status());
  if (f->help) {
    std::printf("%s\n%s", kSweepUsage, PlacementFlagsHelp());
    return 0;
  }
  if (absl::Status s = RunSweep(*f); !s.ok()) return Fail(s);
  return 0;
}

}  // namespace tandem::cli

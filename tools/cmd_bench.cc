// tandem bench: prefill (pp N) and decode (tg N) tokens/s, mean +- stdev over repetitions, in llama-bench's spirit.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "graph/engine.h"
#include "graph/profile.h"
#include "nlohmann/json.hpp"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/placement_flags.h"
#include "tools/placement_request.h"
#include "tools/run_report.h"
#include "tools/throughput.h"

namespace tandem::cli {
namespace {

constexpr const char* kBenchUsage = R"(usage: tandem bench -m MODEL [-p N_PROMPT[,..]] [-n N_GEN[,..]] [-r REPS] [-t THREADS[,..]] [-b BATCH]
                    [placement flags] [-o md|csv|json] [--no-probe]
Defaults: -p 512 -n 128 -r 5 -b 512, -t the cores. -p 0 or -n 0 skips that test. Each -t value opens the model
again with that many CPU threads and runs every test, as llama-bench does. Decode rows also show the weight bytes read per
token as GB/s next to a streaming-read probe that reads about as many bytes before every token (--no-probe: none).
The probe reads a 1 GiB buffer of its own, which adds 1 GiB to bench's peak RSS; --no-probe leaves it out.
  -m, --model FILE        GGUF model (default: the bundled stories260K)
  -p, --n-prompt N[,..]   prefill test lengths (default 512)
  -n, --n-gen N[,..]      decode test lengths (default 128)
  -r, --repetitions N     repetitions of each test (default 5)
  -t, --threads N[,..]    CPU thread counts (default: all cores)
  -b, --batch-size N      prefill batch (default 512)
  -o, --output md|csv|json   the table's format (default md); json has llama-bench's keys
  --no-probe              no read probe (no GB/s roof, and 1 GiB less RSS)
  -h, --help              this text
)";

struct BenchFlags {
  std::string model;
  std::vector<int> n_prompt = {512};
  std::vector<int> n_gen = {128};
  int reps = 5;
  std::vector<int> n_threads = {0};  // 0: the cores
  int n_batch = 512;
  std::string output = "md";
  bool probe = true;
  PlacementFlags placement;
};

absl::StatusOr<std::vector<int>> ParseList(const std::string& flag, const std::string& v, int lo = 0,
                                           int hi = 1 << 20) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(absl::string_view(v.data(), v.size()), ',')) {
    TANDEM_ASSIGN_OR_RETURN(int64_t n, ParseInt(flag, std::string(part)));
    if (n < lo || n > hi) return InvalidArgument(flag, " values must be between ", lo, " and ", hi);
    out.push_back(static_cast<int>(n));
  }
  return out;
}

// llama-bench's samples_ts: tokens per second of each repetition.
std::vector<double> SamplesTs(const ThroughputResult& r) {
  std::vector<double> ts;
  const double tokens = r.n_prompt > 0 ? r.n_prompt : r.n_gen;
  for (double ns : r.ns) ts.push_back(ns > 0 ? tokens * 1e9 / ns : 0);
  return ts;
}

// llama-bench's n_gpu_layers, read off the plan: layers whose attention and FFN both decode on an accelerator.
int GpuLayers(const Plan& p, int n_layer) {
  std::vector<int> gpu(n_layer, 0);
  for (const UnitPlan& u : p.units) {
    if (u.layer >= 0 && u.layer < n_layer && GpuSide(u.decode)) ++gpu[u.layer];
  }
  return static_cast<int>(std::count(gpu.begin(), gpu.end(), 2));
}

absl::StatusOr<BenchFlags> ParseBenchFlags(std::span<const std::string> argv, bool* help) {
  BenchFlags f;
  ArgReader args(argv);
  while (!args.Done()) {
    const std::string flag = args.Next();
    TANDEM_ASSIGN_OR_RETURN(bool placed, ParsePlacementFlag(flag, args, f.placement));
    if (placed) continue;
    if (flag == "--help" || flag == "-h") {
      *help = true;
      return f;
    }
    if (flag == "--no-probe") {
      f.probe = false;
      continue;
    }
    TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
    if (flag == "-m" || flag == "--model") {
      f.model = v;
    } else if (flag == "-p" || flag == "--n-prompt") {
      TANDEM_ASSIGN_OR_RETURN(f.n_prompt, ParseList(flag, v));
    } else if (flag == "-n" || flag == "--n-gen") {
      TANDEM_ASSIGN_OR_RETURN(f.n_gen, ParseList(flag, v));
    } else if (flag == "-r" || flag == "--repetitions") {
      TANDEM_ASSIGN_OR_RETURN(int64_t r, ParseInt(flag, v));
      if (r < 1 || r > 10000) return InvalidArgument("-r must be between 1 and 10000");
      f.reps = static_cast<int>(r);
    } else if (flag == "-t" || flag == "--threads") {
      TANDEM_ASSIGN_OR_RETURN(f.n_threads, ParseList(flag, v, 1, 4096));
    } else if (flag == "-b" || flag == "--batch-size") {
      TANDEM_ASSIGN_OR_RETURN(int64_t b, ParseInt(flag, v));
      if (b < 1 || b > 65536) return InvalidArgument("-b must be between 1 and 65536");
      f.n_batch = static_cast<int>(b);
    } else if (flag == "-o" || flag == "--output") {
      if (v != "md" && v != "csv" && v != "json") return InvalidArgument("-o must be md, csv or json");
      f.output = v;
    } else {
      return InvalidArgument("unknown flag '", flag, "' for bench (see tandem bench --help)");
    }
  }
  if (f.model.empty()) f.model = DefaultModelPath();
  return f;
}

}  // namespace

int CmdBench(std::span<const std::string> argv) {
  bool help = false;
  absl::StatusOr<BenchFlags> parsed = ParseBenchFlags(argv, &help);
  if (!parsed.ok()) return Fail(parsed.status());
  if (help) {
    std::printf("%s\n%s", kBenchUsage, PlacementFlagsHelp());
    return 0;
  }
  const BenchFlags& f = *parsed;
  for (int t : f.n_threads) WarnIfOverHardwareThreads(t);
  const int max_p = *std::max_element(f.n_prompt.begin(), f.n_prompt.end());
  const int max_n = *std::max_element(f.n_gen.begin(), f.n_gen.end());
  absl::StatusOr<PlacementRequest> placement = ToPlacementRequest(f.placement);
  if (!placement.ok()) return Fail(placement.status());
  absl::StatusOr<std::shared_ptr<const RoutingStats>> routing = LoadRoutingFlag(f.placement, f.model);
  if (!routing.ok()) return Fail(routing.status());

  // One engine per thread count (the CPU backend's threads are set when it opens), every test on each.
  struct Row {
    ThroughputResult r;
    int n_threads = 0;
    int n_batch = 0;
    int n_gpu_layers = 0;  // layers whose attention and FFN both run on an accelerator in decode
    std::string test_time;
    std::string plan_why;
    nlohmann::json plan;
  };
  std::vector<Row> rows;
  std::string model_type;
  uint64_t model_bytes = 0, n_params = 0;
  for (int threads : f.n_threads) {
    EngineOptions eo{.model_path = f.model, .device = f.placement.device, .placement = *placement,
                     .prompt_tokens = std::max(max_p, 1), .gen_tokens = std::max(max_n, 1),
                     .n_ctx = std::max(max_p, max_n) + 1,
                     .n_batch = std::max(1, std::min(f.n_batch, std::max(max_p, 1))), .n_threads = threads};
    eo.numa = f.placement.numa;
    eo.routing = *routing;
    auto engine_or = Engine::Open(eo);
    if (!engine_or.ok()) return Fail(engine_or.status());
    Engine& e = **engine_or;
    const ModelConfig& cfg = e.config();
    if (model_type.empty()) {
      model_type =
          Cat(cfg.is_moe() ? Cat(cfg.n_expert, "x ") : "", cfg.n_layer, "L ", DTypeName(MainWeightType(e.file())));
      for (const GgufTensorInfo& t : e.file().tensors()) {
        model_bytes += t.nbytes;
        n_params += static_cast<uint64_t>(t.n_elements());
      }
    }
    const int n_threads = threads > 0 ? threads : omp_get_max_threads();
    // A long prefill test is silent for a long time: say how long the plan expects, before it starts.
    if (const double tps = e.plan().predicted_prefill_tps; tps > 0 && max_p > 0) {
      double tokens = 0;
      for (int p : f.n_prompt) tokens += static_cast<double>(p) * f.reps;
      if (const double seconds = tokens / tps; seconds > 30) {
        std::fprintf(stderr, "note: the prefill tests (%s tokens, %d repetitions each) take about %.0f s at the plan's "
                             "predicted %.0f t/s, with %d threads\n",
                     absl::StrJoin(f.n_prompt, ",").c_str(), f.reps, seconds, tps, n_threads);
      }
    }
    const std::string test_time = UtcNowIso8601();  // llama-bench's test_time
    ThroughputMeter meter(e, {.reps = f.reps, .max_prompt = std::max(max_p, 1), .probe = f.probe});
    auto add = [&](absl::StatusOr<ThroughputResult> r) -> absl::Status {
      if (!r.ok()) return r.status();
      rows.push_back(Row{*r, n_threads, static_cast<int>(e.n_batch()), GpuLayers(e.plan(), cfg.n_layer), test_time,
                         e.plan().why, f.output == "json" ? PlanJson(e.plan()) : nlohmann::json()});
      return absl::OkStatus();
    };
    for (int p : f.n_prompt) {
      if (p == 0) continue;
      if (absl::Status st = add(meter.Prefill(p)); !st.ok()) return Fail(st);
    }
    for (int n : f.n_gen) {
      if (n == 0) continue;
      if (absl::Status st = add(meter.Decode(n)); !st.ok()) return Fail(st);
    }
  }

  if (f.output == "json") {
    nlohmann::json arr = nlohmann::json::array();
    for (const Row& row : rows) {
      const ThroughputResult& r = row.r;
      arr.push_back({{"build_commit", std::string(kBuildCommit)},
                     {"model_filename", f.model},
                     {"model_type", model_type},
                     {"model_size", model_bytes},
                     {"model_n_params", n_params},
                     {"n_batch", row.n_batch},
                     {"n_threads", row.n_threads},
                     {"n_gpu_layers", row.n_gpu_layers},
                     {"type_k", "f16"},
                     {"type_v", "f16"},
                     {"test_time", row.test_time},
                     {"n_prompt", r.n_prompt},
                     {"n_gen", r.n_gen},
                     {"avg_ns", static_cast<uint64_t>(r.avg_ns)},
                     {"stddev_ns", static_cast<uint64_t>(r.stddev_ns)},
                     {"avg_ts", r.avg_ts},
                     {"stddev_ts", r.stddev_ts},
                     {"samples_ns", r.ns},
                     {"samples_ts", SamplesTs(r)},
                     {"weight_gbps", r.gbps},
                     {"read_probe_gbps", r.probe_gbps},
                     {"plan", row.plan}});
    }
    std::printf("%s\n", arr.dump(2).c_str());
    return 0;
  }
  const bool csv = f.output == "csv";
  if (csv) {
    std::printf("model,size,params,threads,test,avg_ts,stddev_ts,weight_gbps,read_probe_gbps,plan\n");
  } else {
    std::printf("| model | size | params | threads | test | t/s | GB/s (probe) |\n");
    std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  }
  for (const Row& row : rows) {
    const ThroughputResult& r = row.r;
    const int n_threads = row.n_threads;
    const std::string& plan_why = row.plan_why;
    const std::string test = r.n_prompt > 0 ? Cat("pp", r.n_prompt) : Cat("tg", r.n_gen);
    if (csv) {
      std::printf("%s,%llu,%llu,%d,%s,%.3f,%.3f,%.2f,%.2f,\"%s\"\n", model_type.c_str(),
                  static_cast<unsigned long long>(model_bytes), static_cast<unsigned long long>(n_params), n_threads,
                  test.c_str(), r.avg_ts, r.stddev_ts, r.gbps, r.probe_gbps, plan_why.c_str());
    } else {
      const std::string bw = r.n_gen > 0 ? (r.probe_gbps > 0 ? absl::StrFormat("%.1f (%.1f, %.0f%%)", r.gbps, r.probe_gbps,
                                                                               100 * r.gbps / r.probe_gbps)
                                                             : absl::StrFormat("%.1f", r.gbps))
                                         : std::string("");
      std::printf("| %s | %s | %.2f B | %d | %s | %.2f ± %.2f | %s |\n", model_type.c_str(),
                  HumanBytes(model_bytes).c_str(), n_params * 1e-9, n_threads, test.c_str(), r.avg_ts, r.stddev_ts,
                  bw.c_str());
    }
  }
  if (!csv && !rows.empty()) std::printf("\nplan: %s\n", rows.back().plan_why.c_str());
  return 0;
}

}  // namespace tandem::cli

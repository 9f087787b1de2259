// tandem bench: prefill (pp N) and decode (tg N) tokens/s, mean +- stdev over repetitions, in llama-bench's spirit.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "core/status.h"
#include "cpu_backend/read_bandwidth.h"
#include "graph/engine.h"
#include "graph/partitioner.h"
#include "nlohmann/json.hpp"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/placement_flags.h"
#include "tools/placement_request.h"
#include "tools/run_report.h"

namespace tandem::cli {
namespace {

constexpr const char* kBenchUsage = R"(usage: tandem bench -m MODEL [-p N_PROMPT[,..]] [-n N_GEN[,..]] [-r REPS] [-t THREADS] [-b BATCH]
                    [placement flags] [-o md|csv|json] [--no-probe]
Defaults: -p 512 -n 128 -r 5 -b 512. -p 0 or -n 0 skips that test. Decode rows also show the weight bytes read per
token as GB/s next to a streaming-read probe that reads about as many bytes before every token (--no-probe: none).
)";

struct BenchFlags {
  std::string model;
  std::vector<int> n_prompt = {512};
  std::vector<int> n_gen = {128};
  int reps = 5;
  int n_threads = 0;
  int n_batch = 512;
  std::string output = "md";
  bool probe = true;
  PlacementFlags placement;
};

absl::StatusOr<std::vector<int>> ParseList(const std::string& flag, const std::string& v) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(absl::string_view(v.data(), v.size()), ',')) {
    TANDEM_ASSIGN_OR_RETURN(int64_t n, ParseInt(flag, std::string(part)));
    if (n < 0 || n > (1 << 20)) return InvalidArgument(flag, " values must be between 0 and 1048576");
    out.push_back(static_cast<int>(n));
  }
  return out;
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
      TANDEM_ASSIGN_OR_RETURN(int64_t t, ParseInt(flag, v));
      if (t < 1 || t > 4096) return InvalidArgument("-t must be between 1 and 4096");
      f.n_threads = static_cast<int>(t);
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

// Weight bytes one decoded token reads, as the cost model counts them from the model's own unit functions: every
// matrix once, the k routed experts of each MoE layer, one embedding row.
uint64_t DecodeBytesPerToken(const ModelSchema& model) {
  double bytes = 0;
  for (const UnitSpec& u : BuildUnits(model)) bytes += WorkOf(u, 1, 1, 2).weight_bytes_read;
  return static_cast<uint64_t>(bytes);
}

struct TestResult {
  int n_prompt = 0;
  int n_gen = 0;
  std::vector<double> ns;  // per repetition
  double avg_ts = 0, stddev_ts = 0, avg_ns = 0, stddev_ns = 0;
  double gbps = 0;          // decode only: weight bytes per second
  double probe_gbps = 0;    // read probe interleaved with the decode tokens
};

void Summarize(TestResult& r) {
  const int tokens = r.n_prompt + r.n_gen;
  std::vector<double> ts;
  for (double ns : r.ns) ts.push_back(tokens * 1e9 / ns);
  auto mean_sd = [](const std::vector<double>& v, double* mean, double* sd) {
    *mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
    double ss = 0;
    for (double x : v) ss += (x - *mean) * (x - *mean);
    *sd = v.size() > 1 ? std::sqrt(ss / (v.size() - 1)) : 0.0;
  };
  mean_sd(ts, &r.avg_ts, &r.stddev_ts);
  mean_sd(r.ns, &r.avg_ns, &r.stddev_ns);
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
  const int max_p = *std::max_element(f.n_prompt.begin(), f.n_prompt.end());
  const int max_n = *std::max_element(f.n_gen.begin(), f.n_gen.end());
  absl::StatusOr<PlacementRequest> placement = ToPlacementRequest(f.placement);
  if (!placement.ok()) return Fail(placement.status());
  EngineOptions eo{.model_path = f.model, .device = f.placement.device, .placement = *placement,
                   .prompt_tokens = std::max(max_p, 1), .gen_tokens = std::max(max_n, 1),
                   .n_ctx = std::max(max_p, max_n) + 1,
                   .n_batch = std::max(1, std::min(f.n_batch, std::max(max_p, 1))), .n_threads = f.n_threads};
  eo.numa = f.placement.numa;
  auto engine_or = Engine::Open(eo);
  if (!engine_or.ok()) return Fail(engine_or.status());
  Engine& e = **engine_or;
  const ModelConfig& cfg = e.config();
  const int n_threads = f.n_threads > 0 ? f.n_threads : omp_get_max_threads();
  const uint64_t decode_bytes = DecodeBytesPerToken(e.model());

  std::unique_ptr<cpu::ReadBandwidthProbe> probe;
  if (f.probe) probe = std::make_unique<cpu::ReadBandwidthProbe>();

  std::mt19937 rng(42);
  std::vector<int32_t> tokens(std::max(max_p, 1));
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % cfg.n_vocab);
  std::vector<float> logits(cfg.n_vocab);
  using Clock = std::chrono::steady_clock;

  auto run_pp = [&](int n) -> absl::Status {
    return e.Prefill(std::span<const int32_t>(tokens.data(), n), 0, false, logits.data());
  };
  // Decode: n tokens, their time summed into *ns. With `probed`, before every token the probe reads about the
  // token's weight bytes, so probe and kernel alternate every few milliseconds and see the same memory load (on a
  // shared host it swings by 2x within a second); the probe's bytes and seconds add up separately, untimed.
  double probe_bytes = 0, probe_sec = 0;
  auto run_tg = [&](int n, bool probed, double* ns) -> absl::Status {
    const auto slice = probed ? static_cast<double>(probe->SliceBytes(decode_bytes)) : 0.0;
    int32_t tok = tokens[0];
    *ns = 0;
    for (int i = 0; i < n; ++i) {
      if (probed) {
        probe_sec += slice / (probe->Run(decode_bytes) * 1e9);
        probe_bytes += slice;
      }
      const auto t0 = Clock::now();
      TANDEM_RETURN_IF_ERROR(e.executor().Forward(std::span<const int32_t>(&tok, 1), i, 1, logits.data()));
      *ns += std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      tok = static_cast<int32_t>((tok + 1) % cfg.n_vocab);
    }
    return absl::OkStatus();
  };

  std::vector<TestResult> results;
  auto measure = [&](int p, int n) -> absl::Status {
    TestResult r{.n_prompt = p, .n_gen = n};
    double ns = 0;
    TANDEM_RETURN_IF_ERROR(p > 0 ? run_pp(p) : run_tg(std::min(n, 4), false, &ns));  // warm-up
    probe_bytes = probe_sec = 0;
    for (int rep = 0; rep < f.reps; ++rep) {
      if (n > 0) {
        TANDEM_RETURN_IF_ERROR(run_tg(n, probe != nullptr, &ns));
      } else {
        const auto t0 = Clock::now();
        TANDEM_RETURN_IF_ERROR(run_pp(p));
        ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      }
      r.ns.push_back(ns);
    }
    Summarize(r);
    if (n > 0) {
      r.gbps = decode_bytes * r.avg_ts * 1e-9;
      if (probe_sec > 0) r.probe_gbps = probe_bytes / probe_sec * 1e-9;
    }
    results.push_back(r);
    return absl::OkStatus();
  };
  for (int p : f.n_prompt) {
    if (p > 0) {
      if (absl::Status st = measure(p, 0); !st.ok()) return Fail(st);
    }
  }
  for (int n : f.n_gen) {
    if (n > 0) {
      if (absl::Status st = measure(0, n); !st.ok()) return Fail(st);
    }
  }

  // Named after the type holding the most bytes, as llama-bench names a file by its main quantization.
  std::map<DType, uint64_t> bytes_by_type;
  for (const GgufTensorInfo& t : e.file().tensors()) bytes_by_type[t.type] += t.nbytes;
  DType main_type = DType::kF32;
  for (const auto& [type, bytes] : bytes_by_type) {
    if (bytes > bytes_by_type[main_type]) main_type = type;
  }
  const std::string model_type =
      Cat(cfg.is_moe() ? Cat(cfg.n_expert, "x ") : "", cfg.n_layer, "L ", DTypeName(main_type));
  uint64_t model_bytes = 0, n_params = 0;
  for (const GgufTensorInfo& t : e.file().tensors()) {
    model_bytes += t.nbytes;
    n_params += static_cast<uint64_t>(t.n_elements());
  }
  const std::string plan_why = e.plan().why;
  if (f.output == "json") {
    nlohmann::json arr = nlohmann::json::array();
    for (const TestResult& r : results) {
      arr.push_back({{"build_commit", TANDEM_VERSION},
                     {"model_filename", f.model},
                     {"model_type", model_type},
                     {"model_size", model_bytes},
                     {"model_n_params", n_params},
                     {"n_batch", e.n_batch()},
                     {"n_threads", n_threads},
                     {"type_k", "f16"},
                     {"n_prompt", r.n_prompt},
                     {"n_gen", r.n_gen},
                     {"avg_ns", static_cast<uint64_t>(r.avg_ns)},
                     {"stddev_ns", static_cast<uint64_t>(r.stddev_ns)},
                     {"avg_ts", r.avg_ts},
                     {"stddev_ts", r.stddev_ts},
                     {"samples_ns", r.ns},
                     {"weight_gbps", r.gbps},
                     {"read_probe_gbps", r.probe_gbps},
                     {"plan", PlanJson(e.plan())}});
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
  for (const TestResult& r : results) {
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
  if (!csv) std::printf("\nplan: %s\n", plan_why.c_str());
  return 0;
}

}  // namespace tandem::cli

// The hybrid engine on the simulated GPU: plans of every kind give the CPU-only answers, budgets hold, streamed
// copies overlap compute, and the work the cost model counts is the work the run does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/engine.h"
#include "graph/partitioner.h"
#include "graph/planning.h"
#include "graph/profile.h"
#include "sim_backend/sim_backend.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

// These hold every placement's logits to the CPU-only run's bit for bit, which takes kernels that compute a row
// alike whatever the batch and the device: ours (the simulated GPU computes with them), not oneDNN's. Set before
// main, so before the first backend reads it.
const bool kOwnKernels = [] { return setenv("TANDEM_ONEDNN", "0", 1) == 0; }();

struct ModelCase {
  std::string name;
  std::string path;  // empty: the model of golden `name`, written by `tandem synth` when first asked for
};

// A golden's synth model with 4 layers instead of 2, so that a plan can split layers between devices.
std::string PathOf(const ModelCase& m) {
  if (!m.path.empty()) return m.path;
  nlohmann::json g = test::ReadJson(test::DataPath("goldens/" + m.name + ".json"));
  std::string flags = g["tandem_synth"].get<std::string>();
  const size_t at = flags.find("--layers 2");
  if (at != std::string::npos) flags.replace(at, 10, "--layers 4");
  g["tandem_synth"] = flags;
  g["model"] = "4L-" + g["model"].get<std::string>();
  return test::SynthGoldenModel(g);
}

std::vector<ModelCase> AllModels() {
  std::vector<ModelCase> m = {{"stories260K", test::ModelPath("stories260K.gguf")},
                              {"stories260K-moe4", test::ModelPath("stories260K-moe4.gguf")}};
  for (const char* stem : {"tiny-llama-F16", "tiny-llama-Q8_0", "tiny-llama-Q4_0", "tiny-llama-Q4_K_M",
                           "tiny-mixtral-Q4_0", "tiny-mixtral-Q4_K_M"}) {
    m.push_back({stem, test::DataPath(std::string("models/") + stem + ".gguf")});
  }
  return m;
}

// The other families, as their goldens' synth flags write them with real vocabularies (tests/data/README.md).
std::vector<ModelCase> FamilyModels() {
  std::vector<ModelCase> m;
  for (const char* golden : {"synth-llama3", "synth-qwen2", "synth-qwen3", "synth-qwen3moe", "synth-qwen3moe-Q4_K_M",
                             "synth-qwen2moe", "synth-qwen2-yarn", "synth-gpt-oss", "synth-gpt-oss-MXFP4"}) {
    m.push_back({golden, ""});
  }
  return m;
}

// A fixed machine profile, so plans do not depend on this machine's calibration or its load.
std::string WriteProfile(const std::string& name, double cpu_gbps, double cpu_gflops) {
  MachineProfile p = DefaultProfile(false);
  for (auto& [type, gbps] : p.cpu_gemv_gbps) gbps = cpu_gbps;
  for (auto& [type, gflops] : p.cpu_gemm_gflops) gflops = cpu_gflops;
  p.cpu_attn_gflops = cpu_gflops;
  // Per process: CTest runs the cases of this file in parallel processes.
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tandem-hybrid-" + name + "-" + std::to_string(getpid()) + ".json")).string();
  EXPECT_TRUE(SaveProfile(path, p).ok());
  return path;
}

const std::vector<int32_t>& Prompt() {
  static const std::vector<int32_t> kPrompt = [] {
    const nlohmann::json g = test::ReadJson(test::DataPath("goldens/tiny-llama-F16.json"));
    return g["prompt_tokens"].get<std::vector<int32_t>>();
  }();
  return kPrompt;
}

// Logits of every prompt position (one prefill batch), then of 3 greedy decode steps.
struct RunResult {
  std::vector<float> logits;
  Plan plan;
  ExecutorStats stats;
  size_t gpu_capacity = 0;
};

absl::StatusOr<RunResult> RunModel(const ModelCase& m, EngineOptions eo) {
  eo.model_path = PathOf(m);
  eo.n_ctx = 64;
  eo.n_batch = 64;
  eo.kv_type = DType::kF32;
  // The sim GPU computes with the CPU's GGUF-layout kernels; the CPU side uses the same layout so that every plan
  // gives bit-identical answers. (A real device computes in its own order anyway, so there the CPU repacks.)
  if (std::getenv("TANDEM_TEST_DEVICE") == nullptr) eo.repack = Repack::kOff;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::Open(eo));
  const int n_vocab = e->config().n_vocab;
  const std::vector<int32_t>& prompt = Prompt();
  RunResult r;
  r.logits.resize((prompt.size() + 3) * n_vocab);
  test::Poison(r.logits);
  TANDEM_RETURN_IF_ERROR(e->Prefill(prompt, 0, true, r.logits.data()));
  for (int step = 0; step < 3; ++step) {
    float* row = r.logits.data() + (prompt.size() + step) * n_vocab;
    const float* prev = row - n_vocab;
    const int32_t tok = static_cast<int32_t>(std::max_element(prev, prev + n_vocab) - prev);
    TANDEM_RETURN_IF_ERROR(e->executor().Forward(std::span<const int32_t>(&tok, 1), prompt.size() + step, 1, row));
  }
  r.plan = e->plan();
  r.stats = e->executor().stats();
  if (e->gpu() != nullptr) r.gpu_capacity = e->gpu()->capacity();
  return r;
}

std::set<Placement> ModesOf(const Plan& p) {
  std::set<Placement> s;
  for (const UnitPlan& u : p.units) {
    s.insert(u.prefill);
    s.insert(u.decode);
    for (const ExpertPlacement& e : u.experts) {  // a split MoE layer's experts, each where it runs
      s.insert(e.prefill);
      s.insert(e.decode);
    }
  }
  return s;
}

enum class Kind { kAllGpu, kMixed, kStreamAll, kFfnOnCpu, kAutoRoomy, kAutoFastLink, kAutoSlowLink };
const char* KindName(Kind k) {
  switch (k) {
    case Kind::kAllGpu: return "all_gpu";
    case Kind::kMixed: return "cpu2_gpu_rest";
    case Kind::kStreamAll: return "stream_all";
    case Kind::kFfnOnCpu: return "ffn_cpu_attn_gpu";
    case Kind::kAutoRoomy: return "auto_roomy";
    case Kind::kAutoFastLink: return "auto_tight_fast_link";
    case Kind::kAutoSlowLink: return "auto_tight_slow_link";
  }
  return "?";
}

class SameAnswers : public ::testing::TestWithParam<std::tuple<ModelCase, Kind>> {};

// Every plan runs the same kernels on the same weights, so the logits must equal CPU-only's to float rounding
// (bit-identical in practice). Bound: NMSE 1e-10 for every dtype.
TEST_P(SameAnswers, PlanGivesCpuOnlyLogits) {
  const auto& [model, kind] = GetParam();
  static std::map<std::string, std::vector<float>> cpu_only;  // per model, computed once
  if (!cpu_only.count(model.name)) {
    absl::StatusOr<RunResult> ref = RunModel(model, EngineOptions{.device = "none"});
    ASSERT_TRUE(ref.ok()) << ref.status();
    cpu_only[model.name] = ref->logits;
  }
  const std::string model_path = PathOf(model);
  const uint64_t model_bytes = std::filesystem::file_size(model_path);
  // TANDEM_TEST_DEVICE=cuda runs the same plans on a real GPU (tools/gpu-check.sh does), budgets via --vram-budget.
  const char* real_device = std::getenv("TANDEM_TEST_DEVICE");
  const std::string roomy =
      real_device != nullptr ? std::string(real_device) : "sim:" + std::to_string(model_bytes * 4 + (64 << 20));

  EngineOptions eo;
  eo.profile_path = WriteProfile("mid", 20, 100);
  eo.prompt_tokens = 32;
  eo.gen_tokens = 3;
  int n_layer = 0;
  {
    auto file = GgufFile::Open(model_path);
    ASSERT_TRUE(file.ok());
    auto cfg = LoadModelConfig(**file);
    ASSERT_TRUE(cfg.ok());
    n_layer = cfg->n_layer;
  }
  // Tight: the all-GPU plan's buffers (KV, activations, workspace) plus half of its weights, so auto must
  // leave some units off the GPU. The budget is explicit, so no headroom is taken off it.
  uint64_t tight_budget = 0;
  {
    auto file = GgufFile::Open(model_path);
    auto cfg = LoadModelConfig(**file);
    auto dev = SetupDevice(roomy, DeviceSetupOptions{.open_backend = false, .profile_path = eo.profile_path});
    ASSERT_TRUE(dev.ok()) << dev.status();
    PlacementRequest all_gpu;
    all_gpu.gpu_layers = n_layer;
    auto plan = PlanModel(**file, *cfg, *dev, all_gpu,
                          PlanOptions{.n_ctx = 64, .n_batch = 64, .kv_elem_bytes = 4, .prompt_tokens = 32});
    ASSERT_TRUE(plan.ok()) << plan.status();
    tight_budget = plan->gpu.total() - plan->gpu.weights / 2;
  }
  const std::string tight = real_device != nullptr ? std::string(real_device) : "sim:" + std::to_string(tight_budget);

  std::set<Placement> must_have;
  switch (kind) {
    case Kind::kAllGpu:
      eo.device = roomy;
      eo.placement.gpu_layers = n_layer;
      must_have = {Placement::kGpu};
      break;
    case Kind::kMixed:
      eo.device = roomy;
      eo.placement.cpu_layers = 2;
      eo.placement.gpu_layers = n_layer - 2;
      must_have = {Placement::kGpu, Placement::kCpu};
      break;
    case Kind::kStreamAll:
      eo.device = roomy;
      eo.placement.stream_layers = n_layer;
      must_have = {Placement::kStream};
      break;
    case Kind::kFfnOnCpu: {
      eo.device = roomy;
      eo.placement.gpu_layers = n_layer;
      absl::StatusOr<PlaceRule> rule = ParsePlaceRule("ffn_(gate|up|down)=cpu");
      ASSERT_TRUE(rule.ok());
      eo.placement.rules.push_back(*rule);
      must_have = {Placement::kGpu, Placement::kCpu};
      break;
    }
    case Kind::kAutoRoomy:
      eo.device = roomy;
      must_have = {Placement::kGpu};
      break;
    case Kind::kAutoFastLink:  // a slow CPU and a fast link: what does not fit is streamed
      eo.device = real_device != nullptr ? tight : tight + ",pcie=50";
      eo.placement.vram_budget = tight_budget;
      eo.profile_path = WriteProfile("slowcpu", 0.001, 0.001);
      must_have = {Placement::kStream};
      break;
    case Kind::kAutoSlowLink:  // a fast CPU and a slow link: what does not fit stays on the CPU
      eo.device = real_device != nullptr ? tight : tight + ",pcie=0.01";
      eo.placement.vram_budget = tight_budget;
      eo.profile_path = WriteProfile("fastcpu", 1000, 10000);
      must_have = {Placement::kCpu};
      break;
  }
  absl::StatusOr<RunResult> r = RunModel(model, eo);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::set<Placement> modes = ModesOf(r->plan);
  // On a real device the link speed comes from its calibration, so only the sim can force the auto modes.
  const bool auto_kind = kind == Kind::kAutoFastLink || kind == Kind::kAutoSlowLink;
  for (Placement p : must_have) {
    if (real_device != nullptr && auto_kind) break;
    EXPECT_TRUE(modes.count(p)) << "plan lacks " << PlacementName(p) << ": " << r->plan.why;
  }
  // The sim runs the CPU kernels: bit-identical in practice. A GPU computes in its own order and dequantizes in
  // registers against f32 activations: held to the GPU backend's per-dtype matmul bound.
  EXPECT_LT(test::Nmse(r->logits, cpu_only[model.name]), real_device != nullptr ? 1e-3 : 1e-10);
  // The budget: what the sim handed out never exceeded its capacity, nor the plan's own account.
  EXPECT_LE(r->stats.peak_vram_bytes, r->gpu_capacity);
  EXPECT_LE(r->stats.peak_vram_bytes, r->plan.gpu.total());
}

std::string CaseName(const ::testing::TestParamInfo<std::tuple<ModelCase, Kind>>& info) {
  std::string s = std::get<0>(info.param).name + "_" + KindName(std::get<1>(info.param));
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    AllPlans, SameAnswers,
    ::testing::Combine(::testing::ValuesIn(AllModels()),
                       ::testing::Values(Kind::kAllGpu, Kind::kMixed, Kind::kStreamAll, Kind::kFfnOnCpu,
                                         Kind::kAutoRoomy, Kind::kAutoFastLink, Kind::kAutoSlowLink)),
    CaseName);
// Not kAutoFastLink: with a real vocabulary the tiny models' weights are mostly the embeddings and the head, so
// the tight budget leaves the head out and every layer in; nothing is left to stream.
INSTANTIATE_TEST_SUITE_P(
    Families, SameAnswers,
    ::testing::Combine(::testing::ValuesIn(FamilyModels()),
                       ::testing::Values(Kind::kAllGpu, Kind::kMixed, Kind::kStreamAll, Kind::kFfnOnCpu,
                                         Kind::kAutoRoomy, Kind::kAutoSlowLink)),
    CaseName);

TEST(Hybrid, ImpossibleBudgetIsAClearError) {
  EngineOptions eo{.model_path = test::DataPath("models/tiny-mixtral-Q4_0.gguf"), .device = "sim:1MiB"};
  eo.placement.gpu_layers = 4;
  absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Open(eo);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("fit"), std::string::npos) << e.status();
}

// Runs tiny-mixtral fully streamed on a slow simulated link and a slower GPU, and returns the sim's trace. The
// GPU throttle makes every unit compute for milliseconds, so a copy worker woken late on a loaded machine
// (sanitizer builds) still starts unit i+1's copy inside unit i's compute.
std::vector<TraceEvent> StreamedTrace(std::vector<std::string>* streamed_units) {
  EngineOptions eo{.model_path = test::DataPath("models/tiny-mixtral-Q4_0.gguf"),
                   .device = "sim:64MiB,pcie=0.25,gpu_gbps=0.05", .n_ctx = 64, .n_batch = 64};
  eo.placement.stream_layers = 4;
  absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Open(eo);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  auto* sim = dynamic_cast<SimBackend*>((*e)->gpu());
  EXPECT_NE(sim, nullptr);
  if (sim == nullptr) return {};
  for (const UnitPlan& u : (*e)->plan().units) {
    if (u.prefill == Placement::kStream) streamed_units->push_back(u.name);
  }
  sim->ClearTrace();
  std::vector<float> logits((*e)->config().n_vocab);
  EXPECT_TRUE((*e)->Prefill(Prompt(), 0, false, logits.data()).ok());
  return sim->Trace();
}

// Double buffering: the copy of streamed unit i+1 starts before unit i's compute ends.
TEST(Hybrid, StreamedCopiesOverlapCompute) {
  std::vector<std::string> units;
  const std::vector<TraceEvent> trace = StreamedTrace(&units);
  ASSERT_GE(units.size(), 4u);
  auto copy_start = [&](const std::string& u) {
    for (const TraceEvent& ev : trace) {
      if (ev.kind == TraceEvent::Kind::kCopy && ev.stream == Stream::kCopy && ev.label == u) return ev.start_ns;
    }
    return int64_t{-1};
  };
  auto compute_end = [&](const std::string& u) {
    int64_t end = -1;
    for (const TraceEvent& ev : trace) {
      if (ev.kind == TraceEvent::Kind::kCompute && ev.label == u) end = std::max(end, ev.end_ns);
    }
    return end;
  };
  for (size_t i = 0; i + 1 < units.size(); ++i) {
    const int64_t next_copy = copy_start(units[i + 1]);
    const int64_t this_end = compute_end(units[i]);
    ASSERT_GE(next_copy, 0) << units[i + 1];
    ASSERT_GE(this_end, 0) << units[i];
    EXPECT_LT(next_copy, this_end) << "copy of " << units[i + 1] << " waited for " << units[i] << " to finish";
  }
}

// The cost model counts what each unit does by running the family's unit functions on a counting backend. Here
// the plan runs on the simulated GPU, which records what every op really read; the two must agree, unit by unit:
// the weight bytes of a prompt chunk (the last layer past its cache store, and the head, for the logit row only) and
// of a decode step, the cache bytes attention read, and the PCIe bytes the plan predicted. Unlike a timing check,
// nothing on the measured side comes from the cost model's own numbers, so a unit function the counting misreads,
// an op the executor adds, or a copy the plan forgets all fail it.
class PredictedWork : public ::testing::TestWithParam<std::string> {};

TEST_P(PredictedWork, MatchesWhatTheSimRead) {
  const std::vector<int32_t>& prompt = Prompt();
  const int64_t n = static_cast<int64_t>(prompt.size());
  EngineOptions eo{.model_path = test::DataPath("models/" + GetParam() + ".gguf"), .device = "sim:64MiB,gpu_gbps=0",
                   .n_ctx = 64, .n_batch = static_cast<int>(n), .kv_type = DType::kF32};
  eo.placement.gpu_layers = 99;
  eo.placement.rules.push_back(*ParsePlaceRule("^token_embd=gpu"));  // every unit on the sim, so it sees them all
  eo.profile_path = WriteProfile("work", 20, 100);
  {
    auto file = GgufFile::Open(eo.model_path);
    ASSERT_TRUE(file.ok());
    eo.placement.gpu_layers = LoadModelConfig(**file).value().n_layer;
  }
  absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Open(eo);
  ASSERT_TRUE(e.ok()) << e.status();
  auto* sim = dynamic_cast<SimBackend*>((*e)->gpu());
  ASSERT_NE(sim, nullptr);
  const ModelConfig& c = (*e)->config();
  const std::vector<UnitSpec> units = BuildUnits((*e)->model());

  // What the sim read per unit: weights (every op but attention) and the cache (attention).
  struct Read {
    uint64_t weights = 0, cache = 0;
  };
  auto read_per_unit = [&] {
    std::map<std::string, Read> r;
    for (const TraceEvent& ev : sim->Trace()) {
      if (ev.kind != TraceEvent::Kind::kCompute) continue;
      (ev.op == "Attention" ? r[ev.label].cache : r[ev.label].weights) += ev.bytes;
    }
    return r;
  };
  auto check = [&](const std::map<std::string, Read>& read, int64_t n_tok, double ctx, bool last_row_only,
                   bool skip_experts) {
    for (const UnitSpec& u : units) {
      const bool past_cache = last_row_only && (u.layer == c.n_layer - 1 || u.kind == UnitKind::kOutput);
      const UnitWork w = WorkOf(u, n_tok, ctx, 4, past_cache ? 1 : -1);
      const auto it = read.find(u.name);
      ASSERT_NE(it, read.end()) << u.name << " ran nothing on the sim";
      EXPECT_DOUBLE_EQ(w.kv_bytes_read, static_cast<double>(it->second.cache)) << u.name;
      if (skip_experts && u.expert_bytes > 0) continue;  // which experts a batch reaches is data, predicted as expected
      EXPECT_DOUBLE_EQ(w.weight_bytes_read, static_cast<double>(it->second.weights)) << u.name;
    }
  };

  // The prompt in one chunk, the logits of its last row only.
  std::vector<float> logits(c.n_vocab);
  uint64_t pcie0 = (*e)->executor().stats().pcie_bytes;
  sim->ClearTrace();
  ASSERT_TRUE((*e)->Prefill(prompt, 0, false, logits.data()).ok());
  ASSERT_TRUE(sim->Synchronize(Stream::kCompute).ok());
  // Queries 0..n-1 attend to 1..n rows: an average of (n + 1) / 2.
  check(read_per_unit(), n, (n + 1) / 2.0, /*last_row_only=*/true, /*skip_experts=*/true);
  const uint64_t prefill_pcie = (*e)->executor().stats().pcie_bytes - pcie0;
  const Plan& plan = (*e)->plan();
  ASSERT_EQ(plan.prefill_batch, n);
  EXPECT_EQ(prefill_pcie / static_cast<uint64_t>(n), plan.pcie_bytes_per_prefill_token);

  // Decode steps: the token at position p attends to p + 1 rows; a token's experts are exactly its k.
  for (int step = 0; step < 3; ++step) {
    const int32_t tok = 300 + step;
    pcie0 = (*e)->executor().stats().pcie_bytes;
    sim->ClearTrace();
    ASSERT_TRUE((*e)->executor().Forward(std::span<const int32_t>(&tok, 1), n + step, 1, logits.data()).ok());
    ASSERT_TRUE(sim->Synchronize(Stream::kCompute).ok());
    check(read_per_unit(), 1, static_cast<double>(n + step + 1), false, false);
    EXPECT_EQ((*e)->executor().stats().pcie_bytes - pcie0, plan.pcie_bytes_per_decode_token);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PredictedWork,
                         ::testing::Values("tiny-llama-Q8_0", "tiny-llama-Q4_K_M", "tiny-mixtral-Q4_0"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace tandem

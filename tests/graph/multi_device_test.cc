// Plans over several accelerators: two simulated GPUs split a model's layers, give the CPU-only logits, and the
// activations cross between them through the host, as the traces show.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "arch/model_config.h"
#include "core/status.h"
#include "graph/engine.h"
#include "sim_backend/sim_backend.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

struct RunResult {
  std::vector<float> logits;  // every prompt position, then 3 greedy decode steps
  Plan plan;
  std::vector<std::vector<TraceEvent>> traces;  // [device], empty for the CPU
};

const std::vector<int32_t>& Prompt() {
  static const std::vector<int32_t> kPrompt = [] {
    const nlohmann::json g = test::ReadJson(test::DataPath("goldens/tiny-llama-F16.json"));
    return g["prompt_tokens"].get<std::vector<int32_t>>();
  }();
  return kPrompt;
}

absl::StatusOr<RunResult> RunOn(const std::string& model, const std::string& device, std::optional<int> gpu_layers) {
  EngineOptions eo{.model_path = model, .device = device, .n_ctx = 64, .n_batch = 64, .repack = Repack::kOff,
                   .kv_type = DType::kF32};
  eo.placement.gpu_layers = gpu_layers;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::Open(eo));
  const int n_vocab = e->config().n_vocab;
  RunResult r;
  r.logits.resize((Prompt().size() + 3) * n_vocab);
  test::Poison(r.logits);
  TANDEM_RETURN_IF_ERROR(e->Prefill(Prompt(), 0, true, r.logits.data()));
  for (size_t step = 0; step < 3; ++step) {
    float* row = r.logits.data() + (Prompt().size() + step) * n_vocab;
    const float* prev = row - n_vocab;
    const int32_t tok = static_cast<int32_t>(std::max_element(prev, prev + n_vocab) - prev);
    TANDEM_RETURN_IF_ERROR(e->executor().Forward(std::span<const int32_t>(&tok, 1), Prompt().size() + step, 1, row));
  }
  r.plan = e->plan();
  for (int d = 0; d < static_cast<int>(r.plan.devices.size()); ++d) {
    auto* sim = dynamic_cast<SimBackend*>(e->device(d));
    r.traces.push_back(sim != nullptr ? sim->Trace() : std::vector<TraceEvent>());
  }
  return r;
}

class TwoSimulatedGpus : public ::testing::TestWithParam<std::string> {};

TEST_P(TwoSimulatedGpus, SplitLayersGiveCpuOnlyLogits) {
  const std::string model = test::DataPath("models/" + GetParam() + ".gguf");
  absl::StatusOr<RunResult> cpu = RunOn(model, "none", std::nullopt);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const int n_layer = (static_cast<int>(cpu->plan.units.size()) - 2) / 2;
  absl::StatusOr<RunResult> two = RunOn(model, "sim:64MiB+sim:64MiB", n_layer);
  ASSERT_TRUE(two.ok()) << two.status();
  const Plan& p = two->plan;
  ASSERT_EQ(p.devices.size(), 3u) << p.why;

  // Equal devices take equal halves, the first the earlier layers; each layer's two units stay together.
  std::string first_on_2;
  for (const UnitPlan& u : p.units) {
    if (u.layer < 0) continue;
    const int want = u.layer < n_layer / 2 ? 1 : 2;
    EXPECT_EQ(u.device, want) << u.name;
    EXPECT_EQ(u.prefill, Placement::kGpu) << u.name;
    if (u.device == 2 && first_on_2.empty()) first_on_2 = u.name;
  }
  EXPECT_GT(p.device_accounts[1].weights, 0u);
  EXPECT_GT(p.device_accounts[2].weights, 0u);

  // The same kernels on the same weights: the CPU-only logits, bit for bit.
  ASSERT_EQ(two->logits.size(), cpu->logits.size());
  EXPECT_EQ(test::MaxAbsDiff(two->logits, cpu->logits), 0.0);

  // The residual leaves the first GPU (device to host) and enters the second (host to device) at the first unit
  // that runs there: in prefill all the prompt's rows, in decode one.
  std::unique_ptr<GgufFile> file = GgufFile::Open(model).value();
  const uint64_t row_bytes = static_cast<uint64_t>(LoadModelConfig(*file).value().n_embd) * sizeof(float);
  auto copies = [](const std::vector<TraceEvent>& trace, const char* op) {
    std::vector<uint64_t> bytes;
    for (const TraceEvent& ev : trace) {
      if (ev.kind == TraceEvent::Kind::kCopy && ev.op == op) bytes.push_back(ev.bytes);
    }
    return bytes;
  };
  const std::vector<uint64_t> out_of_1 = copies(two->traces[1], "D2H");
  std::vector<uint64_t> into_2;
  for (const TraceEvent& ev : two->traces[2]) {
    if (ev.kind == TraceEvent::Kind::kCopy && ev.op == "H2D" && ev.label == first_on_2) into_2.push_back(ev.bytes);
  }
  ASSERT_EQ(into_2.size(), 4u) << "one crossing per step: the prompt and 3 decode steps";
  EXPECT_EQ(into_2[1], into_2[2]);
  EXPECT_EQ(into_2[0], row_bytes * Prompt().size());
  EXPECT_EQ(into_2[1], row_bytes);
  // What left GPU 1 is exactly those residual rows (the logits leave from GPU 2).
  EXPECT_EQ(out_of_1, into_2);
}

INSTANTIATE_TEST_SUITE_P(Models, TwoSimulatedGpus,
                         ::testing::Values("tiny-llama-Q8_0", "tiny-llama-Q4_K_M", "tiny-mixtral-Q4_0"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// `tandem plan` lists both devices and each one's memory.
TEST(TwoSimulatedGpus, PlanShowsBothDevices) {
  const test::CmdResult r = test::RunCommand(
      test::TandemBin() + " plan -m " + test::DataPath("models/tiny-mixtral-Q4_0.gguf") +
      " --device sim:64MiB+sim:64MiB --gpu-layers 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["devices"].size(), 2u);
  EXPECT_EQ(j["devices"][0]["device"], "sim:64MiB");
  EXPECT_GT(j["devices"][0]["memory"]["weights"].get<uint64_t>(), 0u);
  EXPECT_GT(j["devices"][1]["memory"]["weights"].get<uint64_t>(), 0u);
  std::set<int> used;
  for (const nlohmann::json& u : j["units"]) {
    if (u.contains("device_index")) used.insert(u["device_index"].get<int>());
  }
  EXPECT_EQ(used.size(), 2u);
}

}  // namespace
}  // namespace tandem

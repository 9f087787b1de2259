// `tandem plan` and `tandem calibrate` end to end on the bundled MoE models with a simulated device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "core/status.h"
#include "graph/profile.h"
#include "tests/graph/mixtral_units.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using test::CmdResult;
using test::DataPath;
using test::ModelPath;
using test::RunCommand;
using test::TandemBin;

class PlanCli : public ::testing::Test {
 protected:
  void SetUp() override {
    // Per process: CTest runs this fixture's tests in parallel processes, and they must not share a profile file.
    dir_ = ::testing::TempDir() + "/tandem_plan_test_" + std::to_string(getpid());
    profile_ = dir_ + "/profile.json";
    // A fixed profile: no calibration in the test, and the same answer on every machine.
    ASSERT_TRUE(SaveProfile(profile_, test::CpuProfile(/*gemv_gbps=*/20, /*gemm_gflops=*/100)).ok());
  }
  CmdResult Plan(const std::string& args) {
    return RunCommand("XDG_CACHE_HOME=" + dir_ + "/cache " + TandemBin() + " plan --profile " + profile_ + " " + args);
  }
  nlohmann::json PlanJson(const std::string& args) {
    const CmdResult r = Plan(args + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code != 0) return nlohmann::json::object();
    return nlohmann::json::parse(r.out);
  }
  std::string dir_, profile_;
};

const nlohmann::json& Unit(const nlohmann::json& plan, const std::string& name) {
  for (const nlohmann::json& u : plan["units"]) {
    if (u["name"] == name) return u;
  }
  ADD_FAILURE() << "no unit " << name;
  return plan["units"][0];
}

TEST_F(PlanCli, JsonPlanOnASimulatedDevice) {
  const nlohmann::json j = PlanJson("-m " + ModelPath("stories260K-moe4.gguf") + " --device sim:64MiB,pcie=25");
  ASSERT_TRUE(j.contains("units"));
  EXPECT_EQ(j["units"].size(), 12u);  // embd, 5 x (attn, ffn), output
  EXPECT_EQ(j["device"], "sim:64MiB,pcie=25");
  EXPECT_EQ(j["vram_budget"].get<uint64_t>(), (64ull << 20) - (64ull << 20) / 10);
  EXPECT_LE(j["memory"]["gpu"]["total"].get<uint64_t>(), j["vram_budget"].get<uint64_t>());
  EXPECT_GT(j["predicted"]["prefill_tps"].get<double>(), 0);
  EXPECT_GT(j["predicted"]["decode_tps"].get<double>(), 0);
  EXPECT_TRUE(j["pcie_bytes_per_token"].contains("decode"));
  EXPECT_EQ(j["model"]["n_layer"], 5);
  for (const nlohmann::json& u : j["units"]) {
    for (const char* phase : {"prefill", "decode"}) {
      const std::string p = u[phase];
      EXPECT_TRUE(p == "cpu" || p == "gpu" || p == "stream") << p;
    }
  }
}

TEST_F(PlanCli, GpuLayersGoLast) {
  const nlohmann::json j =
      PlanJson("-m " + ModelPath("stories260K-moe4.gguf") + " --device sim:64MiB --gpu-layers 3");
  for (int l = 0; l < 5; ++l) {
    const std::string want = l >= 2 ? "gpu" : "cpu";
    EXPECT_EQ(Unit(j, Cat("blk.", l, ".attn"))["decode"], want) << l;
    EXPECT_EQ(Unit(j, Cat("blk.", l, ".ffn"))["prefill"], want) << l;
  }
  EXPECT_EQ(Unit(j, "embd")["decode"], "cpu");
  EXPECT_EQ(Unit(j, "output")["decode"], "gpu");
}

TEST_F(PlanCli, ExpertsOnCpuAttentionOnGpu) {
  const nlohmann::json j = PlanJson("-m " + DataPath("models/tiny-mixtral-Q4_0.gguf") +
                                    " --device sim:64MiB --place 'ffn_.*_exps=cpu'");
  int n_attn = 0;
  const int last = j["model"]["n_layer"].get<int>() - 1;
  for (const nlohmann::json& u : j["units"]) {
    if (u["kind"] == "ffn") {
      EXPECT_EQ(u["prefill"], "cpu") << u["name"];
      EXPECT_EQ(u["decode"], "cpu") << u["name"];
    } else if (u["kind"] == "attn" && u["layer"] != last) {
      ++n_attn;
      EXPECT_EQ(u["decode"], "gpu") << u["name"];
    }
  }
  // Not the last layer's: it computes only K and V for all but the prompt's last token (cost_model_test), so on
  // this tiny model its prefill gain on the GPU no longer pays for the two PCIe crossings around it.
  EXPECT_GT(n_attn, 0);
}

TEST_F(PlanCli, TableShowsPlacementMemoryAndPredictions) {
  const CmdResult r = Plan("-m " + ModelPath("stories260K-moe4.gguf") + " --device sim:64MiB");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* want : {"blk.4.ffn", "prefill", "decode", "KV cache", "staging", "activations", "predicted:",
                           "PCIe bytes per token"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
}

TEST_F(PlanCli, ErrorsSayWhatWouldFit) {
  CmdResult r = Plan("-m " + ModelPath("stories260K-moe4.gguf") + " --device sim:64MiB --gpu-layers 9");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("the model has 5"), std::string::npos) << r.err;

  r = Plan("-m " + ModelPath("stories260K-moe4.gguf") + " --device sim:64MiB --gpu-layers 5 --vram-budget 4MiB");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("at most"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--vram-budget is 4 MiB"), std::string::npos) << r.err;

  r = Plan("-m " + ModelPath("stories260K-moe4.gguf") + " --device none --gpu-layers 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no GPU"), std::string::npos) << r.err;

  r = Plan("-m " + ModelPath("stories260K-moe4.gguf") + " --device sim:64MiB --place '([=gpu'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;

  r = Plan("-m " + ModelPath("stories260K-moe4.gguf") + " --device sim:lots");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
}

TEST_F(PlanCli, CalibrateWritesAProfile) {
  const std::string out = dir_ + "/measured.json";
  const CmdResult r = RunCommand("XDG_CACHE_HOME=" + dir_ + "/cache " + TandemBin() +
                                 " calibrate --quick -t 1 --device sim:64MiB,pcie=10 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const MachineProfile p = LoadProfile(out).value();
  EXPECT_TRUE(p.has_gpu);
  EXPECT_EQ(p.gpu_capacity_bytes, 64ull << 20);
  EXPECT_FALSE(p.cpu_gemv_gbps.empty());
  for (const auto& [type, gbps] : p.cpu_gemv_gbps) EXPECT_GT(gbps, 0) << DTypeName(type);
  // The copies are throttled to 10 GB/s, so the measured link cannot be faster (plus timer slack).
  EXPECT_LE(p.h2d_gbps, 10.5);
  EXPECT_GT(p.h2d_gbps, 0);
  // Cached where plan looks for it.
  EXPECT_TRUE(LoadProfile(dir_ + "/cache/tandem/profile-cpu.v3.json").ok());
}

}  // namespace
}  // namespace tandem

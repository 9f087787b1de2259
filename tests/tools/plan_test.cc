// `tandem plan` and `tandem calibrate` end to end on the bundled MoE models with a simulated device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

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
  void TearDown() override { std::filesystem::remove_all(dir_); }  // the synthesized files are sparse but large
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

// The host rows' footnote explains the rows the plan fills, and no others.
TEST_F(PlanCli, FootnotesOnlyWhereTheyApply) {
  const std::string moe = "-m " + ModelPath("stories260K-moe4.gguf");
  const CmdResult cpu = Plan(moe + " --device none"), streamed = Plan(moe + " --device sim:64MiB --stream-layers 5");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  EXPECT_NE(cpu.out.find("host: mapped,"), std::string::npos) << cpu.out;
  EXPECT_EQ(cpu.out.find("pinned copies of streamed units"), std::string::npos) << cpu.out;
  EXPECT_EQ(cpu.out.find("staging:"), std::string::npos) << cpu.out;
  EXPECT_NE(streamed.out.find("pinned copies of streamed units"), std::string::npos) << streamed.out;
}

// A Mixtral-8x7B-shaped file (zeros: sparse, instant) on a 12 GiB card: experts placed one by one, shown per layer,
// against the layer-level plan of the same request.
TEST_F(PlanCli, MixtralOnTwelveGiBPlacesExpertsOneByOne) {
  const std::string model = dir_ + "/mixtral-zeros.gguf";
  const CmdResult s = RunCommand(TandemBin() + " synth --arch mixtral --type Q4_K --zeros -o " + model);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const CmdResult r = Plan("-m " + model + " --device sim:12GiB");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* want : {"experts gpu/cpu/stream", "MoE layers split by expert", "expert staging",
                           "layer-level plan (--expert-level off)"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  const nlohmann::json j = PlanJson("-m " + model + " --device sim:12GiB");
  ASSERT_TRUE(j.contains("layer_level"));
  EXPECT_GE(j["predicted"]["decode_tps"].get<double>(), j["layer_level"]["predicted"]["decode_tps"].get<double>());
  int split = 0, resident = 0;
  for (const nlohmann::json& u : j["units"]) {
    if (!u.contains("experts")) continue;
    ++split;
    const nlohmann::json& d = u["experts"]["decode"];
    EXPECT_EQ(d["gpu"].get<int>() + d["cpu"].get<int>() + d["stream"].get<int>(), 8) << u["name"];
    EXPECT_EQ(u["experts"]["each"]["decode"].size(), 8u);
    resident += d["gpu"].get<int>();
    EXPECT_NEAR(u["experts"]["expected_gpu_hit_rate"].get<double>(), d["gpu"].get<int>() / 8.0, 1e-9);
  }
  EXPECT_GT(split, 16);
  EXPECT_GT(resident, 0);
  EXPECT_LT(resident, 8 * 32);  // 24.5 GiB of experts do not fit in 10.8
  // Off: whole FFN units, none split.
  const nlohmann::json off = PlanJson("-m " + model + " --device sim:12GiB --expert-level off");
  for (const nlohmann::json& u : off["units"]) EXPECT_FALSE(u.contains("experts")) << u["name"];
  EXPECT_FALSE(off.contains("layer_level"));
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

// llama.cpp's spellings are tandem's own flags under other names: each gives, byte for byte, the plan of the tandem
// flags it stands for (stories260K-moe4 has 5 layers).
TEST_F(PlanCli, LlamaCppSpellingsGiveTheSamePlansAsTheirTandemFlags) {
  // --host-ram: the plan holds this machine's MemAvailable otherwise, which moves between two calls.
  const std::string moe = "-m " + ModelPath("stories260K-moe4.gguf") + " --device sim:64MiB --host-ram 16GiB ";
  const std::vector<std::pair<std::string, std::string>> same = {
      {"-ngl 99", "--gpu-layers 5"},
      {"--n-gpu-layers 5", "--gpu-layers 5"},
      {"-ngl 3", "--gpu-layers 3"},
      {"-ngl 99 -ot exps=CPU", "--gpu-layers 5 --place exps=cpu"},
      {"-ngl 99 --override-tensor 'exps=cpu,attn_q=Cuda0'", "--gpu-layers 5 --place exps=cpu --place attn_q=gpu"},
      {"-ngl 99 --cpu-moe", "--gpu-layers 5 --place 'ffn_(up|down|gate)_exps=cpu'"},
      {"-ngl 99 --n-cpu-moe 2", "--gpu-layers 5 --place 'blk\\.[01]\\.ffn_(up|down|gate)_exps=cpu'"},
      {"--n-cpu-moe 2", "--place 'blk\\.[01]\\.ffn_(up|down|gate)_exps=cpu'"},
      {"--n-cpu-moe 99", "--cpu-moe"},
  };
  for (const auto& [llama, tandem] : same) {
    const nlohmann::json a = PlanJson(moe + llama), b = PlanJson(moe + tandem);
    ASSERT_TRUE(a.contains("units")) << llama;
    EXPECT_EQ(a, b) << llama << " against " << tandem;
  }
  // What they mean: -ngl 99 --n-cpu-moe 2 keeps the first two MoE layers' FFNs on the CPU, the rest on the GPU.
  const nlohmann::json j = PlanJson(moe + "-ngl 99 --n-cpu-moe 2");
  for (int l = 0; l < 5; ++l) {
    EXPECT_EQ(Unit(j, Cat("blk.", l, ".attn"))["decode"], "gpu") << l;
    EXPECT_EQ(Unit(j, Cat("blk.", l, ".ffn"))["decode"], l < 2 ? "cpu" : "gpu") << l;
  }
  // --gpu-layers keeps its strict count; llama.cpp's buffers other than CPU and CUDA0, and malformed overrides, are
  // one-line errors, as is --n-cpu-moe on a dense model.
  for (const std::string& bad : {moe + "--gpu-layers 99", moe + "-ot exps=CUDA1", moe + "-ot exps=NPU",
                                 moe + "-ot exps", moe + "-ot '=CPU'", moe + "--n-cpu-moe -1",
                                 "-m " + ModelPath("stories260K.gguf") + " --n-cpu-moe 2"}) {
    const CmdResult r = Plan(bad);
    EXPECT_EQ(r.exit_code, 1) << bad;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << bad << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << bad << ": " << r.err;
  }
  EXPECT_NE(Plan("--help").out.find("--n-cpu-moe N"), std::string::npos);
}

// A budget over the device's memory is not silently cut down: the plan says so, and holds to the device.
TEST_F(PlanCli, ABudgetOverTheDeviceWarns) {
  const nlohmann::json j = PlanJson("-m " + ModelPath("stories260K-moe4.gguf") + " --device sim:64MiB --vram-budget 1GiB");
  ASSERT_TRUE(j.contains("warnings"));
  ASSERT_EQ(j["warnings"].size(), 1u) << j["warnings"];
  EXPECT_NE(j["warnings"][0].get<std::string>().find("--vram-budget 1 GiB is more than sim:64MiB's 64 MiB"),
            std::string::npos);
  EXPECT_EQ(j["vram_budget"], 64u << 20);
  EXPECT_EQ(PlanJson("-m " + ModelPath("stories260K-moe4.gguf") + " --device sim:64MiB --vram-budget 32MiB")["warnings"]
                .size(),
            0u);
}

// A profile measured while other programs took the CPUs says so wherever its predictions are shown.
TEST_F(PlanCli, AProfileMeasuredOnABusyMachineIsCalledIntoDoubt) {
  MachineProfile busy = test::CpuProfile(/*gemv_gbps=*/20, /*gemm_gflops=*/100);
  busy.others_cpu_share = 0.6;
  const std::string busy_path = dir_ + "/busy.json";
  ASSERT_TRUE(SaveProfile(busy_path, busy).ok());
  ASSERT_EQ(LoadProfile(busy_path)->others_cpu_share, 0.6);
  const std::string moe = " -m " + ModelPath("stories260K-moe4.gguf") + " --device none";
  const CmdResult doubted = RunCommand(TandemBin() + " plan --profile " + busy_path + moe);
  ASSERT_EQ(doubted.exit_code, 0) << doubted.err;
  EXPECT_NE(doubted.out.find("other processes used 60 % of the CPUs"), std::string::npos) << doubted.out;
  const CmdResult idle = Plan(moe);
  EXPECT_EQ(idle.out.find("other processes used"), std::string::npos) << idle.out;
  // A share above one is not a share.
  busy.others_cpu_share = 1.5;
  ASSERT_TRUE(SaveProfile(busy_path, busy).ok());
  EXPECT_FALSE(LoadProfile(busy_path).ok());
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

// ---- The host memory account, and plans that cannot work as asked (warnings, or one-line errors) ----

// The lines of `text` that start with `prefix` and contain `needle`.
int LinesWith(const std::string& text, const std::string& prefix, const std::string& needle) {
  int n = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    n += line.rfind(prefix, 0) == 0 && line.find(needle) != std::string::npos;
    start = end + 1;
  }
  return n;
}

uint64_t AccountParts(const nlohmann::json& m) {
  uint64_t sum = 0;
  for (const char* k : {"weights", "mapped", "repacked", "kv", "staging", "activations", "workspace"}) {
    sum += m[k].get<uint64_t>();
  }
  return sum;
}

TEST_F(PlanCli, ModelLargerThanRamWithNoGpuWarnsAndPredictsDiskSpeed) {
  const std::string model = "-m " + ModelPath("stories260K-moe4.gguf") + " --device none";
  const nlohmann::json fits = PlanJson(model + " --host-ram 1GiB");
  const uint64_t total = fits["memory"]["host"]["total"].get<uint64_t>();
  EXPECT_EQ(fits["memory"]["host_paged_bytes"].get<uint64_t>(), 0u);
  // Less RAM than the account, more than what cannot be paged: the rest of the weights come from disk.
  const uint64_t mapped = fits["memory"]["host"]["mapped"].get<uint64_t>();
  const uint64_t ram = total - mapped / 2;
  const std::string small = model + " --host-ram " + std::to_string(ram);
  const nlohmann::json paged = PlanJson(small);
  EXPECT_EQ(paged["memory"]["host_paged_bytes"].get<uint64_t>(), total - ram);
  EXPECT_GT(paged["memory"]["disk_bytes_per_decode_token"].get<uint64_t>(), 0u);
  EXPECT_LT(paged["predicted"]["decode_tps"].get<double>(), fits["predicted"]["decode_tps"].get<double>());
  EXPECT_EQ(paged["warnings"].size(), 1u) << paged["warnings"];

  const CmdResult r = Plan(small);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(LinesWith(r.err, "warning: ", "read from disk"), 1) << r.err;
  EXPECT_NE(r.out.find("paged from disk"), std::string::npos) << r.out;
  EXPECT_EQ(Plan(model + " --host-ram 1GiB").err.find("warning: "), std::string::npos);
}

TEST_F(PlanCli, ContextPastTheTrainedOneWarns) {
  const std::string model = "-m " + ModelPath("stories260K-moe4.gguf") + " --device none --host-ram 1GiB";
  const int trained = PlanJson(model)["model"]["n_ctx_train"].get<int>();
  ASSERT_GT(trained, 0);
  const CmdResult at = Plan(model + " -c " + std::to_string(trained));
  ASSERT_EQ(at.exit_code, 0) << at.err;
  EXPECT_EQ(LinesWith(at.err, "warning: ", "trained"), 0) << at.err;
  const CmdResult past = Plan(model + " -c " + std::to_string(2 * trained));
  ASSERT_EQ(past.exit_code, 0) << past.err;
  EXPECT_EQ(LinesWith(past.err, "warning: ", "trained"), 1) << past.err;
  EXPECT_EQ(PlanJson(model + " -c " + std::to_string(2 * trained))["warnings"].size(), 1u);
}

TEST_F(PlanCli, ContextThatFitsNowhereIsAnErrorThatSaysWhatFits) {
  for (const char* device : {"none", "sim:4MiB"}) {
    SCOPED_TRACE(device);
    const std::string model = "-m " + ModelPath("stories260K-moe4.gguf") + " --device " + device + " --host-ram 8MiB";
    const CmdResult r = Plan(model + " -c 1000000");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;  // one line
    const std::string key = "largest context that fits is -c ";
    const size_t at = r.err.find(key);
    ASSERT_NE(at, std::string::npos) << r.err;
    const int largest = std::stoi(r.err.substr(at + key.size()));
    EXPECT_EQ(Plan(model + " -c " + std::to_string(largest)).exit_code, 0);
    EXPECT_NE(Plan(model + " -c " + std::to_string(largest + 1)).exit_code, 0);
  }
}

class HostAccountCli : public PlanCli {
 protected:
  void SetUp() override {
    PlanCli::SetUp();
    // Q4_0 matrices of 16-row multiples: what the CPU repacks.
    model_ = dir_ + "/q4_0.gguf";
    // Wide experts, so that the repacked copies are most of the host account.
    const CmdResult r = RunCommand(TandemBin() + " synth --arch mixtral --layers 2 --embd 256 --ff 512 " +
                                   "--expert-ff 14336 --heads 4 --kv-heads 2 --experts 4 --experts-used 2 " +
                                   "--type Q4_0 --zeros -o " + model_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  nlohmann::json PlanWithRepack(const char* repack, const std::string& args) {
    const CmdResult r = RunCommand(std::string("TANDEM_REPACK=") + repack + " XDG_CACHE_HOME=" + dir_ + "/cache " +
                                   TandemBin() + " plan --profile " + profile_ + " --json -m " + model_ + " " + args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  }
  std::string model_;
};

TEST_F(HostAccountCli, AddsUpAndFollowsTheRepackSetting) {
  const nlohmann::json off = PlanWithRepack("0", "--device none --host-ram 4GiB");
  const nlohmann::json on = PlanWithRepack("1", "--device none --host-ram 4GiB");
  for (const nlohmann::json* j : {&off, &on}) {
    const nlohmann::json& host = (*j)["memory"]["host"];
    EXPECT_EQ(host["total"].get<uint64_t>(), AccountParts(host)) << host;
    EXPECT_GT(host["kv"].get<uint64_t>(), 0u);
    EXPECT_GT(host["activations"].get<uint64_t>(), 0u);
  }
  EXPECT_FALSE(off["memory"]["cpu_repack"].get<bool>());
  EXPECT_TRUE(on["memory"]["cpu_repack"].get<bool>());
  EXPECT_EQ(off["memory"]["host"]["repacked"].get<uint64_t>(), 0u);
  const uint64_t mapped_off = off["memory"]["host"]["mapped"].get<uint64_t>();
  const uint64_t mapped_on = on["memory"]["host"]["mapped"].get<uint64_t>();
  const uint64_t repacked = on["memory"]["host"]["repacked"].get<uint64_t>();
  EXPECT_GT(repacked, 0u);
  EXPECT_LT(mapped_on, mapped_off);
  // 16 Q4_0 blocks of 18 bytes pack into one of 288: the copies take what the pages they replace took.
  EXPECT_EQ(mapped_off - mapped_on, repacked);
  // Streamed units' pinned copies are host weights too, beside the mapped and repacked ones.
  const nlohmann::json streamed = PlanWithRepack("0", "--device sim:256MiB --stream-layers 2");
  EXPECT_GT(streamed["memory"]["host"]["weights"].get<uint64_t>(), 0u);
  EXPECT_EQ(streamed["memory"]["host"]["total"].get<uint64_t>(), AccountParts(streamed["memory"]["host"]));
}

TEST_F(HostAccountCli, RepackingGivesWayWhenItsCopiesDoNotFit) {
  const nlohmann::json on = PlanWithRepack("1", "--device none --host-ram 4GiB");
  const nlohmann::json& host = on["memory"]["host"];
  // Room for everything but the copies: computing from the file's pages, paged where they do not fit, is safer.
  const uint64_t ram = host["total"].get<uint64_t>() - host["repacked"].get<uint64_t>() / 2;
  const nlohmann::json tight = PlanWithRepack("1", "--device none --host-ram " + std::to_string(ram));
  EXPECT_FALSE(tight["memory"]["cpu_repack"].get<bool>());
  EXPECT_EQ(tight["memory"]["host"]["repacked"].get<uint64_t>(), 0u);
  EXPECT_GT(tight["memory"]["host_paged_bytes"].get<uint64_t>(), 0u);
  int gave_way = 0;
  for (const nlohmann::json& w : tight["warnings"]) gave_way += w.get<std::string>().find("repacked") != std::string::npos;
  EXPECT_EQ(gave_way, 1) << tight["warnings"];
}

TEST_F(PlanCli, RunAndBenchApplyTheSameChecks) {
  const std::string model = " -m " + ModelPath("stories260K-moe4.gguf") + " --device none";
  const std::string env = "XDG_CACHE_HOME=" + dir_ + "/cache ";
  CmdResult r = RunCommand(env + TandemBin() + " run" + model + " --host-ram 8MiB -c 1000000 -n 1 -p hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("largest context that fits"), std::string::npos) << r.err;

  r = RunCommand(env + TandemBin() + " run" + model + " --host-ram 1GiB -c 4096 -n 2 -p hi --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(LinesWith(r.err, "warning: ", "trained"), 1) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out).contains("tokens"));  // stdout stays one JSON object

  r = RunCommand(env + TandemBin() + " bench" + model + " --host-ram 1MiB -p 0 -n 2 -r 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(LinesWith(r.err, "warning: ", "read from disk"), 1) << r.err;
}

}  // namespace
}  // namespace tandem

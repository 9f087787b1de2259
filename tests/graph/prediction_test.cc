// A test of prediction that can fail: the cost model, fed a profile calibrated here and now, against CPU-only runs
// whose speed it did not set (real kernels on a Mixtral-shaped file that `tandem synth` writes). The bounds are
// wide (a factor of three either way) because CTest shares the machine with other tests, but a cost model that
// counted the wrong bytes, the wrong batch or the wrong phase misses them by far more.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "graph/calibrate.h"
#include "graph/engine.h"
#include "graph/profile.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

constexpr double kFactor = 3.0;

std::string* g_dir = nullptr;

class Prediction : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_dir = new std::string(::testing::TempDir() + "/tandem_prediction_" + std::to_string(getpid()));
    std::filesystem::create_directories(*g_dir);
    // 2 layers of 8 experts 4096 wide over 2048: a decoded token reads about 65 MiB, beyond the caches.
    const test::CmdResult r = test::RunCommand(
        test::TandemBin() + " synth --arch mixtral --layers 2 --embd 2048 --ff 4096 --heads 16 --kv-heads 4 " +
        "--vocab 4096 --type Q4_0 -o " + *g_dir + "/m.gguf");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*g_dir);
    delete g_dir;
  }
};

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Comparison {
  double predicted_prefill_tps = 0, prefill_tps = 0, predicted_decode_tps = 0, decode_tps = 0;
  double predicted_ttft_s = 0, ttft_s = 0;
  bool Within(double factor) const {
    auto near = [&](double measured, double predicted) {
      return measured < predicted * factor && measured > predicted / factor;
    };
    return near(prefill_tps, predicted_prefill_tps) && near(decode_tps, predicted_decode_tps) &&
           near(ttft_s, predicted_ttft_s);
  }
};

// A quick calibration, then a plan for the run and the run itself, the best of three repetitions of each phase.
Comparison CalibrateAndRun() {
  constexpr int kPrompt = 96, kGen = 32;
  Comparison c;
  absl::StatusOr<MachineProfile> profile = CalibrateCpu(CalibrateOptions{.n_threads = 2, .quick = true});
  EXPECT_TRUE(profile.ok()) << profile.status();
  if (!profile.ok() || !SaveProfile(*g_dir + "/profile.json", *profile).ok()) return c;
  auto engine = Engine::Open(EngineOptions{.model_path = *g_dir + "/m.gguf", .device = "none",
                                           .profile_path = *g_dir + "/profile.json", .prompt_tokens = kPrompt,
                                           .gen_tokens = kGen, .n_threads = 2});
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return c;
  Engine& e = **engine;
  const Plan& plan = e.plan();
  c.predicted_prefill_tps = plan.predicted_prefill_tps;
  c.predicted_decode_tps = plan.predicted_decode_tps;
  c.predicted_ttft_s = plan.predicted_ttft_s;

  std::vector<int32_t> prompt(kPrompt);
  for (int i = 0; i < kPrompt; ++i) prompt[i] = 1 + (i * 37) % 4000;
  std::vector<float> logits(static_cast<size_t>(e.config().n_vocab));
  EXPECT_TRUE(e.Prefill(prompt, 0, false, logits.data()).ok());  // warm-up: first touches, thread start
  c.ttft_s = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(e.Prefill(prompt, 0, false, logits.data()).ok());
    c.ttft_s = std::min(c.ttft_s, Seconds(t0));
  }
  double decode_s = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kGen; ++i) {
      const int32_t tok = 1 + i;
      EXPECT_TRUE(e.executor().Forward(std::span<const int32_t>(&tok, 1), kPrompt + i, 1, logits.data()).ok());
    }
    decode_s = std::min(decode_s, Seconds(t0) / kGen);
  }
  c.prefill_tps = kPrompt / c.ttft_s;
  c.decode_tps = 1 / decode_s;
  std::printf("prefill: predicted %.1f t/s, measured %.1f; decode: predicted %.1f t/s, measured %.1f; "
              "time to first token: predicted %.2f ms, measured %.2f\n",
              c.predicted_prefill_tps, c.prefill_tps, c.predicted_decode_tps, c.decode_tps,
              c.predicted_ttft_s * 1e3, c.ttft_s * 1e3);
  return c;
}

// Another test's burst on the same cores can slow a whole calibration (CTest -j2 on two hardware threads of one
// core failed it once in a full run, and passed alone); so a miss is taken again, up to twice, from a new
// calibration. A cost model that is wrong misses every time.
TEST_F(Prediction, CpuRunsLandWithinAFactorOfThePlan) {
  Comparison c = CalibrateAndRun();
  for (int retry = 0; retry < 2 && !c.Within(kFactor); ++retry) c = CalibrateAndRun();
  EXPECT_LT(c.prefill_tps, c.predicted_prefill_tps * kFactor);
  EXPECT_GT(c.prefill_tps, c.predicted_prefill_tps / kFactor);
  EXPECT_LT(c.decode_tps, c.predicted_decode_tps * kFactor);
  EXPECT_GT(c.decode_tps, c.predicted_decode_tps / kFactor);
  EXPECT_LT(c.ttft_s, c.predicted_ttft_s * kFactor);
  EXPECT_GT(c.ttft_s, c.predicted_ttft_s / kFactor);
}

}  // namespace
}  // namespace tandem

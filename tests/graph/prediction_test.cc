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

class Prediction : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/tandem_prediction_" + std::to_string(getpid()));
    std::filesystem::create_directories(*dir_);
    // 2 layers of 8 experts, 1024 wide: a decoded token reads about 10 MiB, beyond the caches of most machines.
    const test::CmdResult r = test::RunCommand(
        test::TandemBin() + " synth --arch mixtral --layers 2 --embd 1024 --ff 2048 --heads 8 --kv-heads 4 " +
        "--vocab 4096 --type Q4_0 -o " + *dir_ + "/m.gguf");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    absl::StatusOr<MachineProfile> p = CalibrateCpu(CalibrateOptions{.n_threads = 2, .quick = true});
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE(SaveProfile(*dir_ + "/profile.json", *p).ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  static std::string* dir_;
};
std::string* Prediction::dir_ = nullptr;

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST_F(Prediction, CpuRunsLandWithinAFactorOfThePlan) {
  constexpr int kPrompt = 96, kGen = 32;
  auto engine = Engine::Open(EngineOptions{.model_path = *dir_ + "/m.gguf", .device = "none",
                                           .profile_path = *dir_ + "/profile.json", .prompt_tokens = kPrompt,
                                           .gen_tokens = kGen, .n_threads = 2});
  ASSERT_TRUE(engine.ok()) << engine.status();
  Engine& e = **engine;
  const Plan& plan = e.plan();
  ASSERT_GT(plan.predicted_prefill_tps, 0);
  ASSERT_GT(plan.predicted_decode_tps, 0);

  std::vector<int32_t> prompt(kPrompt);
  for (int i = 0; i < kPrompt; ++i) prompt[i] = 1 + (i * 37) % 4000;
  std::vector<float> logits(static_cast<size_t>(e.config().n_vocab));
  ASSERT_TRUE(e.Prefill(prompt, 0, false, logits.data()).ok());  // warm-up: first touches, thread start
  // Prefill: the best of three (the plan predicts a machine to itself, not the other tests).
  double prefill_s = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(e.Prefill(prompt, 0, false, logits.data()).ok());
    prefill_s = std::min(prefill_s, Seconds(t0));
  }
  double decode_s = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kGen; ++i) {
      const int32_t tok = 1 + i;
      ASSERT_TRUE(e.executor().Forward(std::span<const int32_t>(&tok, 1), kPrompt + i, 1, logits.data()).ok());
    }
    decode_s = std::min(decode_s, Seconds(t0) / kGen);
  }
  const double prefill_tps = kPrompt / prefill_s, decode_tps = 1 / decode_s;
  std::printf("prefill: predicted %.1f t/s, measured %.1f; decode: predicted %.1f t/s, measured %.1f; "
              "time to first token: predicted %.2f ms, measured %.2f\n",
              plan.predicted_prefill_tps, prefill_tps, plan.predicted_decode_tps, decode_tps,
              plan.predicted_ttft_s * 1e3, prefill_s * 1e3);
  EXPECT_LT(prefill_tps, plan.predicted_prefill_tps * kFactor);
  EXPECT_GT(prefill_tps, plan.predicted_prefill_tps / kFactor);
  EXPECT_LT(decode_tps, plan.predicted_decode_tps * kFactor);
  EXPECT_GT(decode_tps, plan.predicted_decode_tps / kFactor);
  EXPECT_LT(prefill_s, plan.predicted_ttft_s * kFactor);
  EXPECT_GT(prefill_s, plan.predicted_ttft_s / kFactor);
}

}  // namespace
}  // namespace tandem

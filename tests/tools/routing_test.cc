// `tandem run --routing-out` and `--routing` end to end: the recorded file loads and counts every token the run
// evaluated in every layer; plan, run, bench and sweep take it; a file of another model, a hostile file and a
// dense model are one-line errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/profile.h"
#include "graph/routing_stats.h"
#include "tests/graph/mixtral_units.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using test::CmdResult;
using test::ModelPath;
using test::RunCommand;
using test::TandemBin;

class Routing : public ::testing::Test {
 protected:
  void SetUp() override {
    // Per process: CTest runs this fixture's tests in parallel processes.
    dir_ = Cat(::testing::TempDir(), "/tandem_routing_cli_", getpid());
    std::filesystem::create_directories(dir_);
    profile_ = dir_ + "/profile.json";
    ASSERT_TRUE(SaveProfile(profile_, test::CpuProfile(/*gemv_gbps=*/20, /*gemm_gflops=*/100)).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  CmdResult Tandem(const std::string& args) const {
    return RunCommand("XDG_CACHE_HOME=" + dir_ + "/cache " + TandemBin() + " " + args);
  }
  // A one-line error (exit 1, "error: ..." and nothing more on stderr) containing `what`.
  void ExpectOneLineError(const std::string& args, const std::string& what) const {
    const CmdResult r = Tandem(args);
    EXPECT_EQ(r.exit_code, 1) << args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << args << ": " << r.err;
  }
  std::string dir_, profile_;
};

// -b 5 splits the prompt into several batches: each is asked for every row so the last layer routes them all.
TEST_F(Routing, RunRecordsEveryTokenAndPlanTakesIt) {
  const std::string out = dir_ + "/moe4.json";
  const CmdResult r = Tandem("run -m " + ModelPath("stories260K-moe4.gguf") +
                             " -p 'Once upon a time, there was a little dog named Max.' -n 24 --temp 0 -b 5 --json"
                             " --routing-out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("routing: "), std::string::npos) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const size_t n_prompt = j["prompt_tokens"].size(), n_gen = j["tokens"].size();
  ASSERT_GT(n_prompt, 5u);
  ASSERT_GT(n_gen, 0u);
  const uint64_t evaluated = n_prompt + n_gen - 1;  // the last generated token is never fed back
  absl::StatusOr<RoutingStats> s = LoadRoutingStats(out);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->n_layer, 5);
  EXPECT_EQ(s->n_expert, 4);
  EXPECT_EQ(s->k, 2);
  for (int l = 0; l < s->n_layer; ++l) EXPECT_EQ(s->tokens[l], evaluated) << "layer " << l;

  // The recording leaves the run's answer alone: the same tokens without it.
  const CmdResult plain = Tandem("run -m " + ModelPath("stories260K-moe4.gguf") +
                                 " -p 'Once upon a time, there was a little dog named Max.' -n 24 --temp 0 --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(nlohmann::json::parse(plain.out)["tokens"], j["tokens"]);

  const std::string moe = " -m " + ModelPath("stories260K-moe4.gguf") + " --routing " + out;
  CmdResult p = Tandem("plan --profile " + profile_ + " --device sim:64MiB" + moe);
  EXPECT_EQ(p.exit_code, 0) << p.err;
  p = Tandem("plan --profile " + profile_ + " --device none" + moe);
  EXPECT_EQ(p.exit_code, 0) << p.err;
  const CmdResult again = Tandem("run -n 4 --temp 0" + moe + " --device none");
  EXPECT_EQ(again.exit_code, 0) << again.err;
  const CmdResult bench = Tandem("bench -p 8 -n 4 -r 1 --no-probe --device none" + moe);
  EXPECT_EQ(bench.exit_code, 0) << bench.err;
}

// A calibration set, one run per prompt: --routing-append adds each run's counts to the file's, so the file equals
// the sum of the runs recorded one by one.
TEST_F(Routing, AppendedRunsAddUpToTheirOwnRecordings) {
  const std::string moe4 = "run -m " + ModelPath("stories260K-moe4.gguf") + " -n 12 --temp 0 --routing-out ";
  const std::vector<std::string> prompts = {"'Once upon a time, there was a cat.'", "'Tom and Lily went to the park.'",
                                            "'The big red ball rolled away'"};
  const std::string set = dir_ + "/set.json";
  RoutingStats sum;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string one = Cat(dir_, "/one", i, ".json");
    CmdResult r = Tandem(moe4 + one + " -p " + prompts[i]);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = Tandem(moe4 + set + " --routing-append -p " + prompts[i]);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    absl::StatusOr<RoutingStats> s = LoadRoutingStats(one);
    ASSERT_TRUE(s.ok()) << s.status();
    if (i == 0) {
      sum = *s;
      continue;
    }
    for (size_t l = 0; l < sum.tokens.size(); ++l) sum.tokens[l] += s->tokens[l];
    for (size_t j = 0; j < sum.picks.size(); ++j) sum.picks[j] += s->picks[j];
  }
  absl::StatusOr<RoutingStats> appended = LoadRoutingStats(set);
  ASSERT_TRUE(appended.ok()) << appended.status();
  EXPECT_EQ(appended->tokens, sum.tokens);
  EXPECT_EQ(appended->picks, sum.picks);

  // Appending to a recording of another shape, or to a file that is not one, is refused and leaves it alone.
  const std::string other = dir_ + "/mixtral16.gguf", other_routing = dir_ + "/mixtral16.json";
  CmdResult r = Tandem("synth --arch mixtral --layers 2 --embd 64 --ff 64 --expert-ff 64 --heads 4 --kv-heads 2"
                       " --experts 16 --experts-used 2 --vocab 512 --type Q4_0 -o " + other);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectOneLineError("run -m " + other + " -p 'a b' -n 2 --routing-out " + set + " --routing-append",
                     "--routing-append " + set + ": routing: recorded for 5 layers");
  EXPECT_EQ(LoadRoutingStats(set)->tokens, sum.tokens);
  ExpectOneLineError("run -n 2 -m " + ModelPath("stories260K-moe4.gguf") + " --routing-append",
                     "--routing-append needs --routing-out FILE");
}

TEST_F(Routing, MismatchedHostileAndDenseAreOneLineErrors) {
  // A recording of another MoE shape: the 16-expert synthetic Mixtral.
  const std::string other = dir_ + "/mixtral16.gguf", other_routing = dir_ + "/mixtral16.json";
  CmdResult r = Tandem("synth --arch mixtral --layers 2 --embd 64 --ff 64 --expert-ff 64 --heads 4 --kv-heads 2"
                       " --experts 16 --experts-used 2 --vocab 512 --type Q4_0 -o " + other);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Tandem("run -m " + other + " -p 'a b c' -n 4 --temp 0 --routing-out " + other_routing);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(LoadRoutingStats(other_routing).ok());

  const std::string moe4 = " -m " + ModelPath("stories260K-moe4.gguf");
  const std::string mismatch = "recorded for 2 layers of 16 experts (top-2), but the model has 5 layers of 4";
  ExpectOneLineError("plan --profile " + profile_ + " --device sim:64MiB" + moe4 + " --routing " + other_routing,
                     mismatch);
  ExpectOneLineError("run -n 4" + moe4 + " --routing " + other_routing, mismatch);
  ExpectOneLineError("bench -p 8 -n 4 -r 1" + moe4 + " --routing " + other_routing, mismatch);
  ExpectOneLineError("sweep --device sim:64MiB -o " + dir_ + "/sweep" + moe4 + " --routing " + other_routing,
                     mismatch);

  const std::string hostile = dir_ + "/hostile.json";
  {
    FILE* f = std::fopen(hostile.c_str(), "wb");
    std::fputs(R"({"n_layer":5,"n_expert":4,"k":2,"layers":[{"tokens":3,"picks":[3,2)", f);
    std::fclose(f);
  }
  ExpectOneLineError("plan --profile " + profile_ + moe4 + " --routing " + hostile, "not valid JSON");
  ExpectOneLineError("plan --profile " + profile_ + moe4 + " --routing " + dir_ + "/missing.json",
                     "cannot read routing statistics");
  ExpectOneLineError("plan --profile " + profile_ + moe4 + " --routing", "--routing");

  // A dense model routes nothing: nothing to record, nothing to read.
  const std::string dense = " -m " + ModelPath("stories260K.gguf");
  ExpectOneLineError("run -n 4" + dense + " --routing-out " + dir_ + "/dense.json", "not an MoE model");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/dense.json"));
  ExpectOneLineError("plan --profile " + profile_ + dense + " --routing " + other_routing, "no experts");
}

TEST_F(Routing, HelpNamesTheFlags) {
  EXPECT_NE(Tandem("run --help").out.find("--routing-out FILE"), std::string::npos);
  EXPECT_NE(Tandem("run --help").out.find("--routing-append"), std::string::npos);
  for (const char* cmd : {"run", "plan", "bench", "sweep"}) {
    EXPECT_NE(Tandem(Cat(cmd, " --help")).out.find("--routing FILE"), std::string::npos) << cmd;
  }
}

}  // namespace
}  // namespace tandem

// The `tandem run` contract (spec/cli.md): greedy ids from BOS equal llama.cpp's, the --json fields, --logits-out,
// the bundled default model, and one-line errors for bad flags and files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/testutil.h"

namespace tandem {
namespace {

using test::RunCommand;
using test::TandemBin;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// The acceptance command of the CPU engine issue, on both real models.
class RunGreedyFromBos : public ::testing::TestWithParam<std::string> {};

TEST_P(RunGreedyFromBos, JsonTokensEqualLlamaCpp) {
  const std::string stem = GetParam();
  const nlohmann::json golden = test::ReadJson(test::DataPath("goldens/" + stem + ".bos.json"));
  const test::CmdResult r = RunCommand(TandemBin() + " run -m " + Quote(test::ModelPath(stem + ".gguf")) +
                                       " -p '' -n 64 --temp 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["prompt_tokens"].get<std::vector<int32_t>>(), golden["prompt_tokens"].get<std::vector<int32_t>>());
  EXPECT_EQ(out["tokens"].get<std::vector<int32_t>>(), golden["greedy_tokens"].get<std::vector<int32_t>>());
  EXPECT_EQ(out["text"].get<std::string>(), golden["greedy_text"].get<std::string>());
  for (const char* key : {"prompt_ms", "prompt_tps", "gen_ms", "gen_tps", "ttft_ms"}) {
    EXPECT_TRUE(out["timings"].contains(key)) << key;
  }
  EXPECT_GT(out["memory"]["peak_rss_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(out["memory"]["peak_vram_bytes"].get<uint64_t>(), 0u);  // CPU-only run
  EXPECT_EQ(out["pcie_bytes"].get<uint64_t>(), 0u);
  EXPECT_TRUE(out["plan"].contains("units"));
}

INSTANTIATE_TEST_SUITE_P(RealModels, RunGreedyFromBos, ::testing::Values("stories260K", "stories260K-moe4"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

TEST(Run, DefaultModelIsTheBundledOne) {
  const test::CmdResult r = RunCommand(TandemBin() + " run -p '' -n 8 --temp 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json golden = test::ReadJson(test::DataPath("goldens/stories260K.bos.json"));
  std::vector<int32_t> want = golden["greedy_tokens"].get<std::vector<int32_t>>();
  want.resize(8);
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].get<std::vector<int32_t>>(), want);
}

// --logits-out: every prompt position from one prompt pass, [n_prompt][n_vocab] float32, against llama.cpp.
TEST(Run, LogitsOutMatchesTheGolden) {
  const nlohmann::json golden = test::ReadJson(test::DataPath("goldens/stories260K.json"));
  const std::string path = (std::filesystem::temp_directory_path() / ("tandem-run-logits-" + std::to_string(getpid()) + ".bin")).string();
  const test::CmdResult r =
      RunCommand(TandemBin() + " run -m " + Quote(test::ModelPath("stories260K.gguf")) + " -p " +
                 Quote(golden["prompt"].get<std::string>()) + " -n 1 --temp 0 --kv-type f32 --json --logits-out " +
                 Quote(path));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<float> got = test::ReadF32(path);
  const std::vector<float> want = test::ReadF32(test::DataPath("goldens/stories260K.logits.f32.bin"));
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LT(test::Nmse(got, want), 1e-10);  // F32 model: float rounding only (README: exact math 2.5e-14)
  std::filesystem::remove(path);
}

// Text mode: the story on stdout, the summary on stderr.
TEST(Run, StreamsTextAndPrintsASummary) {
  const test::CmdResult r = RunCommand(TandemBin() + " run -p 'Once upon a time' -n 16 --temp 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  for (const char* what : {"prompt:", "t/s", "time to first token", "peak RAM", "peak VRAM", "PCIe"}) {
    EXPECT_NE(r.err.find(what), std::string::npos) << what << " missing from: " << r.err;
  }
}

// Bad input: exactly one stderr line starting with "error: " and a non-zero exit, never a crash.
TEST(Run, BadFlagsAndFilesAreOneLineErrors) {
  const std::string bad_file = (std::filesystem::temp_directory_path() / ("tandem-not-a-model-" + std::to_string(getpid()) + ".gguf")).string();
  {
    FILE* f = std::fopen(bad_file.c_str(), "wb");
    std::fputs("GGUF but not really", f);
    std::fclose(f);
  }
  const std::vector<std::string> cases = {
      "run --bogus",
      "run -n",
      "run -n many",
      "run -t 0",
      "run --temp -1",
      "run --top-p 2",
      "run --kv-type q4",
      "run -m /nonexistent/model.gguf",
      "run -m " + Quote(bad_file),
      "run -f /nonexistent/prompt.txt",
      "run --device warp9",
      "run --device sim:lots",
      "run --gpu-layers 99 --device sim:1GiB",
      "run --place 'attn=elsewhere'",
      "run --numa sometimes",
      "run --vram-budget 12 parsecs",
      "run -c 2 -p 'a prompt much longer than two tokens'",
  };
  for (const std::string& args : cases) {
    const test::CmdResult r = RunCommand(TandemBin() + " " + args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_LT(r.exit_code, 128) << args << ": crashed";
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
  std::filesystem::remove(bad_file);
}

TEST(Run, HelpAndVersion) {
  EXPECT_EQ(RunCommand(TandemBin() + " run --help").exit_code, 0);
  const test::CmdResult v = RunCommand(TandemBin() + " --version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.out.rfind("tandem ", 0), 0u);
}

}  // namespace
}  // namespace tandem

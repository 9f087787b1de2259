// The `tandem run` contract (spec/cli.md): greedy ids from BOS equal llama.cpp's, the --json fields, --logits-out,
// the bundled default model, and one-line errors for bad flags and files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/status.h"
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
      "run -f " + Quote(std::filesystem::temp_directory_path().string()),  // a directory
      "run -r ''",
      "run --seed -2",
      "run --repeat-last-n -2",
      "run -fa off",
      "run --no-mmap",
      "run --mlock",
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

// The prompt is echoed before its continuation, as llama-cli shows it; --no-display-prompt leaves the continuation.
TEST(Run, EchoesThePromptUnlessToldNot) {
  const std::string run = TandemBin() + " run -p 'Once upon a time' -n 12 --temp 0";
  const test::CmdResult json = RunCommand(run + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const std::string text = nlohmann::json::parse(json.out)["text"];
  const test::CmdResult shown = RunCommand(run), bare = RunCommand(run + " --no-display-prompt");
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  EXPECT_EQ(shown.out, "Once upon a time" + text + "\n");
  EXPECT_EQ(bare.out, text + "\n");
  // The first line names the model and its placement.
  EXPECT_EQ(shown.err.rfind("model: ", 0), 0u) << shown.err;
  EXPECT_NE(shown.err.substr(0, shown.err.find('\n')).find("| placement: "), std::string::npos) << shown.err;
  EXPECT_NE(shown.err.find("load: "), std::string::npos) << shown.err;
}

// Seeds as llama.cpp has them: random unless given (or -1), and the one used is reported, so that giving it back
// repeats the run.
TEST(Run, SeedsAreRandomUnlessGivenAndAlwaysReported) {
  const std::string run = TandemBin() + " run -p 'Once upon a time' -n 24 --json";
  auto go = [&](const std::string& extra) {
    const test::CmdResult r = RunCommand(run + extra);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  };
  const nlohmann::json a = go(""), b = go(" --seed -1");
  ASSERT_TRUE(a.contains("seed") && b.contains("seed"));
  EXPECT_NE(a["seed"], b["seed"]);  // two draws of 32 bits
  const nlohmann::json again = go(Cat(" -s ", a["seed"].get<uint64_t>()));
  EXPECT_EQ(again["seed"], a["seed"]);
  EXPECT_EQ(again["tokens"], a["tokens"]);
  EXPECT_EQ(go(" --seed 42")["tokens"], go(" --seed 42")["tokens"]);
  const test::CmdResult text = RunCommand(TandemBin() + " run -p 'Once' -n 4 --seed 7");
  EXPECT_NE(text.err.find("seed 7"), std::string::npos) << text.err;
}

// An MXFP4 model end to end (gpt-oss's expert type): synth writes it with llama.cpp's file type, inspect shows its
// tensors as MXFP4, and greedy decoding gives the same tokens on every kernel path (the kernels are held to each
// other within float rounding, which random logits of this size never tie on).
TEST(Run, Mxfp4ModelInspectsAndDecodesAlikeOnEveryIsa) {
  const std::string dir = ::testing::TempDir() + "/tandem_run_mxfp4_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string model = dir + "/mxfp4.gguf";
  const test::CmdResult synth = RunCommand(TandemBin() + " synth --arch mixtral --layers 2 --embd 128 --ff 256 "
                                           "--heads 4 --kv-heads 2 --experts 4 --experts-used 2 --vocab 512 "
                                           "--type MXFP4 -o " + model);
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  const nlohmann::json info = nlohmann::json::parse(RunCommand(TandemBin() + " inspect --json " + model).out);
  int n_mxfp4 = 0;
  for (const nlohmann::json& t : info["tensors"]) {
    if (t["type"] == "MXFP4") ++n_mxfp4;
  }
  EXPECT_EQ(n_mxfp4, 2 + 2 * 7);  // token_embd and output, and per layer q, k, v, output, gate, up, down
  EXPECT_EQ(info["metadata"]["general.file_type"], 38);  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
  std::vector<nlohmann::json> tokens;
  for (const char* isa : {"scalar", "avx2", "avx512"}) {
    const test::CmdResult r = RunCommand(Cat("TANDEM_ISA=", isa, " ", TandemBin(), " run -m ", model,
                                             " -p 'Once upon a time' -n 24 --temp 0 --json"));
    ASSERT_EQ(r.exit_code, 0) << isa << ": " << r.err;
    tokens.push_back(nlohmann::json::parse(r.out)["tokens"]);
    EXPECT_EQ(tokens.back().size(), 24u) << isa;
    EXPECT_EQ(tokens.back(), tokens.front()) << isa << " differs from scalar";
  }
  std::filesystem::remove_all(dir);
}

// Why generation ended, in the JSON and the summary: an end-of-generation token (never sampled with --ignore-eos),
// a reverse prompt, a full context.
TEST(Run, StopsAtEosReversePromptAndFullContextAndSaysWhy) {
  const std::string dir = ::testing::TempDir() + "/tandem_run_stop_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  // A random model over 259 tokens at a high temperature samples EOS (id 2) within a few hundred tokens.
  const std::string tiny = dir + "/v259.gguf";
  const test::CmdResult synth = RunCommand(TandemBin() + " synth --arch llama --layers 1 --embd 64 --ff 64 --heads 4 "
                                           "--kv-heads 2 --vocab 259 --type F32 -o " + tiny);
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  // synth says what it wrote, and the file holds that many tensors.
  const size_t n_tensors = nlohmann::json::parse(RunCommand(TandemBin() + " inspect --json " + tiny).out)["tensors"].size();
  EXPECT_EQ(synth.out.rfind(Cat("wrote ", tiny, ": llama, 1 layer, n_embd 64, F32, ", n_tensors, " tensors, "), 0), 0u)
      << synth.out;
  const std::string hot = TandemBin() + " run -m " + tiny + " -p a -n 400 -c 1024 --seed 1 --temp 3 --top-k 0 "
                          "--top-p 1 --min-p 0 --json";
  nlohmann::json j = nlohmann::json::parse(RunCommand(hot).out);
  EXPECT_EQ(j["stop"], "eos");
  EXPECT_LT(j["tokens"].size(), 400u);
  EXPECT_EQ(j["tokens"].back(), 2);
  j = nlohmann::json::parse(RunCommand(hot + " --ignore-eos").out);
  EXPECT_EQ(j["stop"], "limit");
  ASSERT_EQ(j["tokens"].size(), 400u);
  EXPECT_EQ(std::count(j["tokens"].begin(), j["tokens"].end(), 2), 0);
  std::filesystem::remove_all(dir);

  const std::string story = TandemBin() + " run -p 'Once upon a time' -n 300 --temp 0 --json";
  const nlohmann::json full = nlohmann::json::parse(RunCommand(story).out);
  const std::string text = full["text"];
  const size_t lily = text.find("Lily");
  ASSERT_NE(lily, std::string::npos) << text;
  j = nlohmann::json::parse(RunCommand(story + " -r Lily -r 'never said'").out);
  EXPECT_EQ(j["stop"], "reverse prompt");
  EXPECT_EQ(j["text"], text.substr(0, lily + 4));
  // -e (the default) reads escapes in reverse prompts too: the story's first ", " written as "\x2c ". Generation
  // stops at the token that completes it, which may carry more text.
  j = nlohmann::json::parse(RunCommand(story + " -r '\\x2c '").out);
  const std::string cut = j["text"];
  EXPECT_EQ(text.rfind(cut, 0), 0u) << cut;
  EXPECT_GE(cut.size(), text.find(", ") + 2) << cut;
  EXPECT_LE(cut.size(), text.find(", ") + 2 + 16) << cut;
  j = nlohmann::json::parse(RunCommand(story + " --no-escape -r '\\x2c '").out);
  EXPECT_EQ(j["stop"], "limit");  // the four characters never appear

  // Context 16, a 5-token prompt: the first token comes from the prompt pass, then one per free position.
  j = nlohmann::json::parse(RunCommand(story + " -c 16").out);
  ASSERT_EQ(j["prompt_tokens"].size(), 5u);
  EXPECT_EQ(j["stop"], "context full");
  EXPECT_EQ(j["tokens"].size(), 16u - 5u + 1u);
  const test::CmdResult summary = RunCommand(TandemBin() + " run -p 'Once upon a time' -n 300 --temp 0 -c 16");
  EXPECT_NE(summary.err.find("stopped: context full"), std::string::npos) << summary.err;
}

// -e (the default) turns \n into a newline in the prompt; --no-escape keeps the two characters.
TEST(Run, EscapesInThePrompt) {
  auto ids = [](const std::string& args) {
    const test::CmdResult r = RunCommand(TandemBin() + " run -n 1 --temp 0 --json " + args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["prompt_tokens"];
  };
  const nlohmann::json newline = ids("-p 'Once\nupon'");
  EXPECT_EQ(ids("-e -p 'Once\\nupon'"), newline);
  EXPECT_EQ(ids("-p 'Once\\nupon'"), newline);
  EXPECT_NE(ids("--no-escape -p 'Once\\nupon'"), newline);
  EXPECT_EQ(ids("-fa -p 'Once\\nupon'"), newline);  // -fa and -fa on are accepted: attention is always fused
  EXPECT_EQ(ids("-fa on -p 'Once\\nupon'"), newline);
}

// Ctrl-C: generation stops at the next token, the summary (or the JSON) still comes, and the exit code is 130.
TEST(Run, InterruptStopsGenerationAndStillReports) {
  for (const bool json : {false, true}) {
    const std::string base = ::testing::TempDir() + "/tandem_run_int_" + std::to_string(getpid());
    // A run that would take minutes; the signal comes half a second in (during loading it would stop the run
    // before its first token, the same way).
    const test::CmdResult r = RunCommand(
        "sh -c '" + TandemBin() + " run -n 1000000 --ignore-eos -c 100000" + (json ? " --json" : "") + " > " + base +
        ".out 2> " + base + ".err & pid=$!; sleep 0.5; kill -INT $pid; wait $pid; echo $?'");
    EXPECT_EQ(r.out, "130\n") << json;
    const std::string out = test::ReadFile(base + ".out"), err = test::ReadFile(base + ".err");
    if (json) {
      const nlohmann::json j = nlohmann::json::parse(out);
      EXPECT_EQ(j["stop"], "interrupted");
      EXPECT_LT(j["tokens"].size(), 1000000u);
    } else {
      EXPECT_NE(err.find("stopped: interrupted"), std::string::npos) << err;
      EXPECT_NE(err.find("decode"), std::string::npos) << err;
    }
    std::filesystem::remove(base + ".out");
    std::filesystem::remove(base + ".err");
  }
}

// A vocab-only file (tokenizer tests use them) is named as such, not reported as a missing key.
TEST(Run, AVocabOnlyFileSaysSo) {
  const std::string vocab = Quote(test::DataPath("tokenizer/ggml-vocab-llama-spm.gguf"));
  for (const std::string cmd : {" run -m ", " plan -m ", " bench -m "}) {
    const test::CmdResult r = RunCommand(TandemBin() + cmd + vocab);
    EXPECT_EQ(r.exit_code, 1) << cmd;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << cmd << r.err;
    EXPECT_NE(r.err.find("vocab-only"), std::string::npos) << cmd << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << cmd << r.err;
  }
}

TEST(Run, MoreThreadsThanTheMachineHasWarns) {
  const test::CmdResult r = RunCommand(TandemBin() + " run -t 64 -n 2 -p hi --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.rfind("warning: -t 64 is more than the ", 0), 0u) << r.err;
}

TEST(Run, HelpAndVersion) {
  EXPECT_EQ(RunCommand(TandemBin() + " run --help").exit_code, 0);
  EXPECT_EQ(RunCommand(TandemBin() + " run -h").exit_code, 0);
  const test::CmdResult help = RunCommand(TandemBin() + " help run");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.out.rfind("usage: tandem run", 0), 0u) << help.out;
  for (const char* flag : {"--seed", "--ignore-eos", "--reverse-prompt", "--no-display-prompt", "--repeat-last-n",
                           "default 0.8", "-ngl", "--n-cpu-moe"}) {
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  }
  const test::CmdResult v = RunCommand(TandemBin() + " --version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.out.rfind("tandem ", 0), 0u);
}

}  // namespace
}  // namespace tandem

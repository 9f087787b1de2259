// `tandem inspect` as a user runs it: text and --json on every shared model, the vocab-only file, and bad usage.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/core/tiny_gguf.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using nlohmann::json;
using test::RunCommand;
using test::TandemBin;

struct Model {
  std::string path;
  size_t n_tensors;
  int n_layer;
  bool moe;
};

std::vector<Model> AllModels() {
  return {
      {test::ModelPath("stories260K.gguf"), 48, 5, false},
      {test::ModelPath("stories260K-moe4.gguf"), 53, 5, true},
      {test::DataPath("models/tiny-llama-F16.gguf"), 39, 4, false},
      {test::DataPath("models/tiny-llama-Q8_0.gguf"), 39, 4, false},
      {test::DataPath("models/tiny-llama-Q4_0.gguf"), 39, 4, false},
      {test::DataPath("models/tiny-llama-Q4_K_M.gguf"), 39, 4, false},
      {test::DataPath("models/tiny-mixtral-Q4_0.gguf"), 43, 4, true},
      {test::DataPath("models/tiny-mixtral-Q4_K_M.gguf"), 43, 4, true},
  };
}

uint64_t FileSize(const std::string& path) { return test::ReadFile(path).size(); }

TEST(Inspect, JsonOnEveryModelAddsUp) {
  const std::vector<std::string> groups = {"embeddings", "attention", "dense_ffn", "experts", "output", "other"};
  for (const Model& m : AllModels()) {
    SCOPED_TRACE(m.path);
    const test::CmdResult r = RunCommand(TandemBin() + " inspect '" + m.path + "' --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    const json j = json::parse(r.out);
    ASSERT_TRUE(j["tensors"].is_array());
    ASSERT_EQ(j["tensors"].size(), m.n_tensors);

    // total_bytes is the sum of the tensors' bytes, and the data section holds them (each padded to 32).
    uint64_t sum = 0, padded = 0, params = 0;
    const uint64_t data_offset = j["data_offset"];
    for (const json& t : j["tensors"]) {
      ASSERT_TRUE(t["name"].is_string());
      ASSERT_TRUE(t["type"].is_string());
      ASSERT_TRUE(t["shape"].is_array());
      const uint64_t bytes = t["bytes"], offset = t["offset"];
      EXPECT_GE(offset, data_offset);
      EXPECT_EQ(offset % 32, 0u);
      uint64_t n = 1;
      for (const json& d : t["shape"]) n *= d.get<uint64_t>();
      params += n;
      // Bytes by hand from each type's block size (elements per block, bytes per block).
      const std::map<std::string, std::pair<uint64_t, uint64_t>> kBlocks = {
          {"F32", {1, 4}},      {"F16", {1, 2}},      {"Q8_0", {32, 34}},  {"Q4_0", {32, 18}},
          {"Q4_K", {256, 144}}, {"Q5_K", {256, 176}}, {"Q6_K", {256, 210}}};
      const auto blk = kBlocks.find(t["type"].get<std::string>());
      ASSERT_NE(blk, kBlocks.end()) << t["type"];
      EXPECT_EQ(bytes, n / blk->second.first * blk->second.second) << t["name"];
      sum += bytes;
      padded += (bytes + 31) / 32 * 32;
    }
    EXPECT_EQ(j["total_bytes"].get<uint64_t>(), sum);
    EXPECT_EQ(j["n_params"].get<uint64_t>(), params);
    EXPECT_EQ(data_offset + padded, FileSize(m.path));

    // The groups add up to the total, and the layers to the in-layer groups.
    uint64_t group_sum = 0;
    for (const std::string& g : groups) group_sum += j["groups"][g].get<uint64_t>();
    EXPECT_EQ(group_sum, sum);
    EXPECT_EQ(j["groups"]["other"], 0);
    EXPECT_GT(j["groups"]["embeddings"].get<uint64_t>(), 0u);
    EXPECT_GT(j["groups"]["attention"].get<uint64_t>(), 0u);
    EXPECT_GT(j["groups"]["output"].get<uint64_t>(), 0u);
    EXPECT_EQ(j["groups"]["experts"].get<uint64_t>() > 0, m.moe);
    EXPECT_EQ(j["groups"]["dense_ffn"].get<uint64_t>() > 0, !m.moe);
    ASSERT_EQ(j["layers"].size(), static_cast<size_t>(m.n_layer));
    uint64_t layer_sum = 0, layer_attn = 0;
    for (const json& l : j["layers"]) {
      layer_sum += l["total"].get<uint64_t>();
      layer_attn += l["attention"].get<uint64_t>();
    }
    EXPECT_EQ(layer_attn, j["groups"]["attention"].get<uint64_t>());
    EXPECT_EQ(layer_sum + j["groups"]["embeddings"].get<uint64_t>() + j["groups"]["output"].get<uint64_t>(), sum);

    // Hyperparameters and metadata, arrays shortened to their first items plus the count.
    EXPECT_EQ(j["hparams"]["n_layer"], m.n_layer);
    EXPECT_EQ(j["hparams"]["n_vocab"], 512);
    EXPECT_EQ(j["metadata"]["general.architecture"], "llama");
    const json& tokens = j["metadata"]["tokenizer.ggml.tokens"];
    EXPECT_EQ(tokens["count"], 512);
    EXPECT_EQ(tokens["elem_type"], "STRING");
    ASSERT_EQ(tokens["items"].size(), 8u);
    EXPECT_EQ(tokens["items"][1], "<s>");
    EXPECT_EQ(j["metadata"]["tokenizer.ggml.bos_token_id"], 1);
  }
}

TEST(Inspect, KnownFactsInJson) {
  const test::CmdResult r =
      RunCommand(TandemBin() + " inspect --json " + test::DataPath("models/tiny-llama-Q4_0.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  bool seen_output = false, seen_embd = false;
  for (const json& t : j["tensors"]) {
    if (t["name"] == "output.weight") {
      seen_output = true;
      EXPECT_EQ(t["type"], "Q6_K");
      EXPECT_EQ(t["shape"], json::array({256, 512}));
      EXPECT_EQ(t["bytes"], 256 * 512 / 256 * 210);
    }
    if (t["name"] == "token_embd.weight") {
      seen_embd = true;
      EXPECT_EQ(t["type"], "Q4_0");
      EXPECT_EQ(t["shape"], json::array({256, 512}));
    }
  }
  EXPECT_TRUE(seen_output && seen_embd);
  EXPECT_EQ(j["hparams"]["n_head"], 8);
  EXPECT_EQ(j["hparams"]["n_head_kv"], 4);
  EXPECT_EQ(j["hparams"]["n_ff"], 512);
  EXPECT_FLOAT_EQ(j["hparams"]["rope_freq_base"].get<float>(), 1e6f);

  // stories260K-moe4: per layer, 4 experts of 3 x 64x172 F32, a 64x4 F32 router and a 64 F32 ffn_norm.
  const test::CmdResult moe =
      RunCommand(TandemBin() + " inspect " + test::ModelPath("stories260K-moe4.gguf") + " --json");
  ASSERT_EQ(moe.exit_code, 0) << moe.err;
  const json m = json::parse(moe.out);
  EXPECT_EQ(m["n_params"], 789440);
  for (const json& l : m["layers"]) {
    EXPECT_EQ(l["bytes_per_expert"], 3 * 64 * 172 * 4);
    EXPECT_EQ(l["experts"], 4 * 3 * 64 * 172 * 4 + 64 * 4 * 4 + 64 * 4);
    EXPECT_EQ(l["dense_ffn"], 0);
  }
}

TEST(Inspect, TextOnEveryModel) {
  for (const Model& m : AllModels()) {
    SCOPED_TRACE(m.path);
    const test::CmdResult r = RunCommand(TandemBin() + " inspect '" + m.path + "'");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    for (const char* want :
         {"architecture: llama", "hyperparameters:", "n_layer ", "tensors (", "bytes per layer", "bytes per group",
          "embeddings", "attention", "output", "token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight"}) {
      EXPECT_NE(r.out.find(want), std::string::npos) << want;
    }
    EXPECT_NE(r.out.find(m.moe ? "ffn_gate_exps" : "blk.0.ffn_gate.weight"), std::string::npos);
  }
}

TEST(Inspect, VocabOnlyFileShowsMetadata) {
  const std::string vocab = test::DataPath("tokenizer/ggml-vocab-llama-spm.gguf");
  const test::CmdResult r = RunCommand(TandemBin() + " inspect " + vocab);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("vocab only"), std::string::npos);
  EXPECT_NE(r.out.find("[32000 x STRING]"), std::string::npos);
  const test::CmdResult j = RunCommand(TandemBin() + " inspect --json " + vocab);
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json o = json::parse(j.out);
  EXPECT_TRUE(o["vocab_only"].get<bool>());
  EXPECT_TRUE(o["hparams"].is_null());
  EXPECT_EQ(o["tensors"].size(), 0u);
  EXPECT_EQ(o["total_bytes"], 0);
  EXPECT_EQ(o["metadata"]["tokenizer.ggml.tokens"]["count"], 32000);
  EXPECT_EQ(o["metadata"]["tokenizer.ggml.add_bos_token"], true);
}

// Strings in a file need not be UTF-8 or printable: --json must still be valid JSON, text must not pass control
// bytes to the terminal.
TEST(Inspect, HostileStringsStayPrintable) {
  test::TinyModel m = test::MakeTinyModel();
  m.SetKey("general.name", GgufStr(std::string("bad \xff\xfe utf8 \x1b[31m red\n", 22)));
  m.SetKey("x.\x01key", GgufArr(GgufType::kString, {GgufStr("\xc3"), GgufStr(std::string("\0", 1))}));
  const std::string path = testing::TempDir() + "/inspect_strings.gguf";
  ASSERT_TRUE(WriteGguf(path, m.metadata, m.WriteList()).ok());
  const test::CmdResult j = RunCommand(TandemBin() + " inspect --json " + path);
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json o = json::parse(j.out);  // throws (fails the test) on invalid UTF-8
  EXPECT_EQ(o["metadata"].size(), m.metadata.size());
  EXPECT_EQ(o["hparams"]["n_layer"], 2);
  const test::CmdResult t = RunCommand(TandemBin() + " inspect " + path);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(t.out.find('\x1b'), std::string::npos);
  EXPECT_EQ(t.out.find('\x01'), std::string::npos);
  EXPECT_NE(t.out.find("\\x1b[31m"), std::string::npos);
  std::remove(path.c_str());
}

// inspect validates as a load does: a file whose tokenizer tandem cannot run, or whose vocabulary disagrees with
// its embeddings, is refused by inspect with the reason run gives.
TEST(Inspect, RefusesWhatRunRefuses) {
  const std::vector<std::pair<std::string, std::function<void(test::TinyModel&)>>> cases = {
      {"tokenizer model", [](test::TinyModel& m) { m.SetKey("tokenizer.ggml.model", GgufStr("bert")); }},
      {"vocabulary length", [](test::TinyModel& m) {
         m.SetKey("tokenizer.ggml.tokens", GgufArr(GgufType::kString, {GgufStr("a"), GgufStr("b")}));
         m.EraseKey("tokenizer.ggml.scores");
         m.EraseKey("tokenizer.ggml.token_type");
       }},
  };
  for (const auto& [name, mutate] : cases) {
    SCOPED_TRACE(name);
    test::TinyModel m = test::MakeTinyModel();
    mutate(m);
    const std::string path = testing::TempDir() + "/inspect_refuses.gguf";
    ASSERT_TRUE(WriteGguf(path, m.metadata, m.WriteList()).ok());
    const test::CmdResult inspect = RunCommand(TandemBin() + " inspect " + path);
    const test::CmdResult run = RunCommand(TandemBin() + " run -m " + path + " -p hi -n 1 --device none");
    EXPECT_EQ(inspect.exit_code, 1) << inspect.out;
    EXPECT_NE(run.exit_code, 0);
    EXPECT_EQ(inspect.err.rfind("error: ", 0), 0u) << inspect.err;
    EXPECT_EQ(inspect.err.find('\n'), inspect.err.size() - 1) << inspect.err;
    // The same reason, after the path both name.
    const std::string reason = inspect.err.substr(inspect.err.find(": ", 7) + 2);
    EXPECT_NE(run.err.find(reason.substr(0, reason.size() - 1)), std::string::npos) << run.err << " vs " << reason;
    std::remove(path.c_str());
  }
  // The shared models, real vocabularies and all, still pass.
  const test::CmdResult ok = RunCommand(TandemBin() + " inspect " + test::ModelPath("stories260K.gguf"));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST(Inspect, UsageErrorsAreOneLine) {
  const std::string model = test::ModelPath("stories260K.gguf");
  for (const std::string& args :
       {std::string(""), "--bogus " + model, model + " " + model, std::string("/no/such.gguf"), std::string("-m")}) {
    SCOPED_TRACE(args);
    const test::CmdResult r = RunCommand(TandemBin() + " inspect " + args);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
  }
  const test::CmdResult help = RunCommand(TandemBin() + " inspect --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("usage: tandem inspect"), std::string::npos);
  const test::CmdResult by_flag = RunCommand(TandemBin() + " inspect -m " + model + " --json");
  EXPECT_EQ(by_flag.exit_code, 0) << by_flag.err;
}

}  // namespace
}  // namespace tandem

// `tandem quantize` as a user runs it: llama-quantize's argument forms, thread counts, requantizing, BF16
// sources, and bad input, which is one `error:` line, a non-zero exit and no output file (nor its .tmp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/status.h"
#include "graph/engine.h"
#include "tests/core/tiny_gguf.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using test::RunCommand;
using test::TandemBin;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

const std::string kTinyLlama = test::DataPath("models/tiny-llama-F16.gguf");

// A folder of the test's own, empty at the start and removed at the end (some models are 200 MB).
struct Scratch {
  explicit Scratch(const std::string& name)
      : path(Cat(::testing::TempDir(), "/tandem-quantize-cli-", getpid(), "-", name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  const std::string path;
};

test::CmdResult Quantize(const std::string& args) { return RunCommand(TandemBin() + " quantize " + args); }

void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::map<std::string, DType> Types(const std::string& path) {
  std::map<std::string, DType> types;
  auto f = GgufFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status();
  if (f.ok()) {
    for (const GgufTensorInfo& t : (*f)->tensors()) types[t.name] = t.type;
  }
  return types;
}

int FileType(const std::string& path) {
  auto f = GgufFile::Open(path);
  if (!f.ok()) return -1;
  const GgufValue* v = (*f)->Find("general.file_type");
  return v == nullptr ? -1 : static_cast<int>(v->AsInt().value_or(-1));
}

// The model runs: finite logits for a short prompt.
void ExpectRuns(const std::string& model) {
  auto engine = Engine::Open({.model_path = model, .device = "none", .n_ctx = 64, .kv_type = DType::kF32});
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<int32_t> prompt = (*engine)->tokenizer().Encode("Once upon a time");
  std::vector<float> logits((*engine)->config().n_vocab);
  ASSERT_TRUE((*engine)->Prefill(prompt, 0, /*all_logits=*/false, logits.data()).ok());
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(QuantizeCli, HelpNamesEveryTypeAndFlag) {
  const test::CmdResult r = Quantize("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, "");
  for (const char* word : {"Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q4_K", "Q5_K", "--allow-requantize", "-t",
                           "--threads", "default"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word;
  }
  EXPECT_NE(RunCommand(TandemBin() + " --help").out.find("quantize"), std::string::npos);
}

// llama-quantize's habits: `IN TYPE` writes ggml-model-TYPE.gguf beside IN; a trailing number is the thread
// count; the type may be its ftype number or lower case; flags come anywhere.
TEST(QuantizeCli, LlamaQuantizeArgumentForms) {
  const Scratch scratch("forms");
  const std::string& dir = scratch.path;
  const std::string in = dir + "/model-f16.gguf";
  fs::copy_file(kTinyLlama, in);

  test::CmdResult r = Quantize(Quote(in) + " q8_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(FileType(dir + "/ggml-model-Q8_0.gguf"), 7);

  r = Quantize(Quote(in) + " " + Quote(dir + "/a.gguf") + " 15 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(FileType(dir + "/a.gguf"), 15);
  EXPECT_NE(r.out.find("Q4_K_M"), std::string::npos) << r.out;

  r = Quantize("-t 1 " + Quote(in) + " --allow-requantize " + Quote(dir + "/b.gguf") + " Q4_K");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(FileType(dir + "/b.gguf"), 15);  // Q4_K is llama-quantize's alias of Q4_K_M
  EXPECT_EQ(Types(dir + "/a.gguf"), Types(dir + "/b.gguf"));

  r = Quantize(Quote(in) + " " + Quote(dir + "/c.gguf") + " Q5_K --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(FileType(dir + "/c.gguf"), 17);
  EXPECT_FALSE(fs::exists(dir + "/c.gguf.tmp"));
}

// Rows are independent: any thread count writes the same bytes.
TEST(QuantizeCli, ThreadCountDoesNotChangeTheFile) {
  const Scratch scratch("threads");
  const std::string& dir = scratch.path;
  for (const char* type : {"Q4_K_M", "Q4_0", "Q6_K"}) {
    ASSERT_EQ(Quantize(Quote(kTinyLlama) + " " + Quote(dir + "/one.gguf") + " " + type + " -t 1").exit_code, 0);
    ASSERT_EQ(Quantize(Quote(kTinyLlama) + " " + Quote(dir + "/two.gguf") + " " + type + " -t 2").exit_code, 0);
    EXPECT_EQ(test::ReadFile(dir + "/one.gguf"), test::ReadFile(dir + "/two.gguf")) << type;
  }
}

// A quantized source is refused, naming the tensor and its type, unless --allow-requantize; a tensor already of
// its target type is copied as it is, so Q4_0 to Q4_0 needs no flag (as in llama-quantize).
TEST(QuantizeCli, RequantizeOnlyWhenAllowed) {
  const Scratch scratch("requant");
  const std::string& dir = scratch.path;
  const std::string q4 = test::DataPath("models/tiny-mixtral-Q4_0.gguf");
  const std::string out = dir + "/q8.gguf";
  test::CmdResult r = Quantize(Quote(q4) + " " + Quote(out) + " Q8_0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("tensor output.weight is Q6_K"), std::string::npos) << r.err;  // the first in the file
  EXPECT_NE(r.err.find("--allow-requantize"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));

  r = Quantize("--allow-requantize " + Quote(q4) + " " + Quote(out) + " Q8_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("requantized"), std::string::npos) << r.out;
  for (const auto& [name, type] : Types(out)) {
    const bool vector = name.find("norm") != std::string::npos || name.find("ffn_gate_inp") != std::string::npos;
    EXPECT_EQ(type, vector ? DType::kF32 : DType::kQ8_0) << name;
  }
  ExpectRuns(out);

  // Same types throughout (Q6_K head, Q8_0 attn_k/attn_v of 8 experts): every tensor's bytes are the source's.
  const std::string same = dir + "/q4.gguf";
  r = Quantize(Quote(q4) + " " + Quote(same) + " Q4_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto a = GgufFile::Open(q4), b = GgufFile::Open(same);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ((*a)->tensors().size(), (*b)->tensors().size());
  for (size_t i = 0; i < (*a)->tensors().size(); ++i) {
    const GgufTensorInfo &ta = (*a)->tensors()[i], &tb = (*b)->tensors()[i];
    ASSERT_EQ(ta.type, tb.type) << ta.name;
    ASSERT_EQ(ta.nbytes, tb.nbytes) << ta.name;
    EXPECT_EQ(std::memcmp((*a)->TensorData(ta), (*b)->TensorData(tb), ta.nbytes), 0) << ta.name;
  }
}

// BF16 weights quantize like F16 ones: the same types, and the file runs.
TEST(QuantizeCli, Bf16Source) {
  const Scratch scratch("bf16");
  const std::string& dir = scratch.path;
  const std::string flags = "--arch llama --layers 2 --embd 256 --ff 512 --heads 4 --kv-heads 2 --vocab 512";
  for (const char* type : {"BF16", "F16"}) {
    const test::CmdResult s =
        RunCommand(Cat(TandemBin(), " synth ", flags, " --type ", type, " -o ", Quote(Cat(dir, "/", type, ".gguf"))));
    ASSERT_EQ(s.exit_code, 0) << s.err;
    ASSERT_EQ(Quantize(Cat(Quote(Cat(dir, "/", type, ".gguf")), " ", Quote(Cat(dir, "/", type, "-q.gguf")), " Q4_K_M"))
                  .exit_code,
              0);
  }
  EXPECT_EQ(Types(dir + "/BF16-q.gguf"), Types(dir + "/F16-q.gguf"));
  ExpectRuns(dir + "/BF16-q.gguf");
}

// Every bad input: exit in 1..127, exactly one stderr line starting "error: ", and neither OUT nor OUT.tmp.
TEST(QuantizeCli, BadInputIsOneLineAndLeavesNoOutput) {
  const Scratch scratch("bad");
  const std::string& dir = scratch.path;
  const std::string out = dir + "/out.gguf";
  const std::string text = dir + "/not-gguf.gguf";
  std::ofstream(text) << "this is not a GGUF file\n";
  const std::string truncated = dir + "/truncated.gguf";
  {
    const std::string whole = test::ReadFile(kTinyLlama);
    std::ofstream(truncated, std::ios::binary) << whole.substr(0, whole.size() / 2);
  }
  const std::string header_only = dir + "/header.gguf";
  {
    std::string whole = test::ReadFile(kTinyLlama);
    std::memset(whole.data() + 8, 0xff, 8);  // a tensor count of 2^64 - 1
    std::ofstream(header_only, std::ios::binary) << whole.substr(0, 4096);
  }
  // A model with a NaN: the error comes while writing, after OUT.tmp was created.
  const std::string nan_model = dir + "/nan.gguf";
  {
    test::TinyModel m = test::MakeTinyModel({.n_embd = 64, .n_ff = 128});
    test::TinyTensor* t = m.Tensor("blk.1.ffn_up.weight");
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(t->data.data() + 4 * 70, &nan, 4);
    WriteBytes(nan_model, m.Bytes());
  }
  // An MoE whose expert stack names no layer: llama-quantize cannot place it either.
  const std::string no_layer = dir + "/nolayer.gguf";
  {
    test::TinyModel m = test::MakeTinyModel({.n_embd = 64, .n_ff = 128, .n_expert = 4, .n_expert_used = 2});
    m.Tensor("blk.1.ffn_down_exps.weight")->name = "ffn_down_exps.weight";
    WriteBytes(no_layer, m.Bytes());
  }
  // No architecture, or no layer count: not a model llama-quantize could type (a vocab-only file has both and
  // is copied, as llama-quantize copies it).
  const std::string no_arch = dir + "/noarch.gguf", no_layers = dir + "/nolayers.gguf";
  {
    test::TinyModel m = test::MakeTinyModel();
    m.EraseKey("llama.block_count");
    WriteBytes(no_layers, m.Bytes());
    m.EraseKey("general.architecture");
    WriteBytes(no_arch, m.Bytes());
  }
  const std::string dot_tmp_in = dir + "/x.gguf.tmp";  // OUT = x.gguf would be written as the input itself
  fs::copy_file(kTinyLlama, dot_tmp_in);
  const std::string in = Quote(kTinyLlama);
  const std::string o = Quote(out);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "needs"},
      {in, "needs"},
      {in + " " + o, "TYPE"},
      {"/nonexistent/model.gguf " + o + " Q8_0", "nonexistent"},
      {Quote(text) + " " + o + " Q8_0", ""},
      {Quote(truncated) + " " + o + " Q8_0", ""},
      {Quote(header_only) + " " + o + " Q8_0", ""},
      {Quote(dir) + " " + o + " Q8_0", ""},  // a directory as input
      {Quote(no_arch) + " " + o + " Q8_0", "general.architecture"},
      {Quote(no_layers) + " " + o + " Q8_0", "llama.block_count"},
      {in + " " + o + " Q9_9", "unknown type"},
      {in + " " + o + " MXFP4", "MXFP4_MOE puts the experts"},
      {in + " " + o + " Q3_K_M", "not supported"},
      {in + " " + in + " Q8_0", "same file"},
      {in + " " + Quote(test::DataPath("models/../models/tiny-llama-F16.gguf")) + " Q8_0", "same file"},
      {Quote(dot_tmp_in) + " " + Quote(dir + "/x.gguf") + " Q8_0", "is the input"},
      {in + " /nonexistent/dir/out.gguf Q8_0", "/nonexistent/dir/out.gguf"},
      {in + " " + Quote(dir) + " Q8_0", "directory"},
      {in + " " + o + " Q8_0 -t 0", "-t"},
      {in + " " + o + " Q8_0 -t many", "-t"},
      {in + " " + o + " Q8_0 -t", "-t"},
      {in + " " + o + " Q8_0 --bogus", "--bogus"},
      {in + " " + o + " Q8_0 2 3", "unexpected"},
      {in + " " + o + " Q8_0 two", ""},
      {in + " " + o + " Q8_0 2 -t 2", "twice"},
      {Quote(test::DataPath("models/tiny-llama-Q4_0.gguf")) + " " + o + " Q8_0", "--allow-requantize"},
      {Quote(test::ModelPath("stories260K.gguf")) + " " + o + " Q8_0", "172"},  // no fallback for Q8_0
      {Quote(nan_model) + " " + o + " Q4_K_M", "NaN"},
      {Quote(no_layer) + " " + o + " Q4_K_M", "ffn_down_exps.weight"},
  };
  for (const auto& [args, what] : cases) {
    const test::CmdResult r = Quantize(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_LT(r.exit_code, 128) << args << ": crashed";
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_FALSE(fs::exists(out)) << args;
    EXPECT_FALSE(fs::exists(out + ".tmp")) << args;
    EXPECT_FALSE(fs::exists(dir + "/x.gguf")) << args;
  }
  EXPECT_EQ(test::ReadFile(dot_tmp_in), test::ReadFile(kTinyLlama));  // the input is untouched
}

// A failed run leaves an existing OUT as it was: the new file only replaces it when complete.
TEST(QuantizeCli, FailureKeepsAnExistingOutput) {
  const Scratch scratch("keep");
  const std::string& dir = scratch.path;
  const std::string out = dir + "/out.gguf";
  std::ofstream(out) << "the previous file\n";
  const test::CmdResult r = Quantize(Quote(test::ModelPath("stories260K.gguf")) + " " + Quote(out) + " Q4_0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(test::ReadFile(out), "the previous file\n");
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  // And a successful one replaces it.
  ASSERT_EQ(Quantize(Quote(kTinyLlama) + " " + Quote(out) + " Q8_0").exit_code, 0);
  EXPECT_EQ(FileType(out), 7);
}

// Killed while writing (SIGTERM; Ctrl-C's SIGINT takes the same path), it removes OUT.tmp and dies of the signal.
TEST(QuantizeCli, KilledWhileWritingLeavesNoFile) {
  const Scratch scratch("kill");
  const std::string& dir = scratch.path;
  const std::string in = dir + "/big.gguf", out = dir + "/out.gguf";
  const test::CmdResult s = RunCommand(Cat(TandemBin(), " synth --arch llama --layers 2 --embd 1024 --ff 4096",
                                           " --heads 8 --kv-heads 8 --vocab 32000 --type F16 -o ", Quote(in)));
  ASSERT_EQ(s.exit_code, 0) << s.err;
  // Wait for OUT.tmp (the tensors are being written), then kill; about 2 s of work remain at one thread.
  const test::CmdResult r = RunCommand(
      Cat("bash -c '", TandemBin(), " quantize ", in, " ", out, " Q4_K_M -t 1 & pid=$!; ",
          "for i in $(seq 200); do [ -e ", out, ".tmp ] && break; sleep 0.02; done; ",
          "kill -TERM $pid; wait $pid; echo $?'"));
  if (r.out == "0\n") GTEST_SKIP() << "the quantization finished before the signal";
  EXPECT_EQ(r.out, "143\n") << r.err;  // 128 + SIGTERM
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace tandem

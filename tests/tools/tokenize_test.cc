// `tandem tokenize` end to end: --ids output against llama-tokenize's vectors, the readable form, and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/gguf.h"
#include "core/status.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using test::CmdResult;
using test::DataPath;
using test::ModelPath;
using test::ReadJson;
using test::RunCommand;
using test::TandemBin;

// Single-quoted for /bin/sh: everything literal, a ' becomes '\''.
std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q.push_back(c);
    }
  }
  return q + "'";
}

CmdResult Tokenize(const std::string& args) { return RunCommand(TandemBin() + " tokenize " + args); }

// "[1, 2, 3]\n" -> ids; an empty vector plus a test failure when the shape is wrong.
std::vector<int32_t> ParseIdList(const std::string& out) {
  std::vector<int32_t> ids;
  EXPECT_TRUE(out.size() >= 3 && out.front() == '[' && out.substr(out.size() - 2) == "]\n") << out;
  if (out.size() < 3) return ids;
  const std::string inner = out.substr(1, out.size() - 3);
  for (absl::string_view part : absl::StrSplit(inner, ", ", absl::SkipEmpty())) {
    int32_t id;
    EXPECT_TRUE(absl::SimpleAtoi(part, &id)) << out;
    ids.push_back(id);
  }
  return ids;
}

void ExpectOneErrorLine(const CmdResult& r, const std::string& what) {
  EXPECT_EQ(r.exit_code, 1) << what;
  EXPECT_TRUE(r.out.empty()) << what << ": " << r.out;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << what << ": " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": " << r.err;
}

// Every case of a llama-tokenize JSON, each with one of the four flag sets in turn (so all four are covered
// without launching the binary four times per case).
void CheckVectors(const std::string& model, const std::string& json) {
  struct Flags {
    const char* key;
    const char* args;
  };
  const Flags kFlags[] = {
      {"tokens", "--parse-special"},
      {"tokens_no_bos", "--no-bos --parse-special"},
      {"tokens_no_parse_special", ""},
      {"tokens_no_bos_no_parse_special", "--no-bos"},
  };
  const nlohmann::json cases = ReadJson(json);
  ASSERT_GE(cases.size(), 35u);
  int matched = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Flags& f = kFlags[i % 4];
    const std::string text = cases[i]["text"].get<std::string>();
    const CmdResult r = Tokenize(Cat("-m ", Quote(model), " --ids ", f.args, " ", Quote(text)));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::vector<int32_t> want = cases[i][f.key].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = ParseIdList(r.out);
    EXPECT_EQ(got, want) << "case " << i << " (" << f.key << "): " << Quote(text);
    matched += got == want;
  }
  std::printf("%s via tandem tokenize --ids: %d/%zu match\n", json.c_str(), matched, cases.size());
}

TEST(TokenizeCli, IdsMatchLlamaTokenizeOnLlamaVocab) {
  CheckVectors(DataPath("tokenizer/ggml-vocab-llama-spm.gguf"), DataPath("tokenizer/tokenize-llama-spm.json"));
}

TEST(TokenizeCli, IdsMatchLlamaTokenizeOnStoriesVocab) {
  CheckVectors(ModelPath("stories260K.gguf"), DataPath("tokenizer/tokenize-stories260K.json"));
}

TEST(TokenizeCli, DefaultModelAndGoldenPrompt) {
  const nlohmann::json g = ReadJson(DataPath("goldens/stories260K.json"));
  const CmdResult r = Tokenize("--ids " + Quote(g["prompt"].get<std::string>()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ParseIdList(r.out), g["prompt_tokens"].get<std::vector<int32_t>>());
}

TEST(TokenizeCli, ReadableFormShowsIdsAndPieces) {
  const CmdResult r =
      Tokenize("-m " + Quote(DataPath("tokenizer/ggml-vocab-llama-spm.gguf")) + " " + Quote("Hello world\n"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // BOS, ▁Hello, ▁world, <0x0A>: the pieces with spaces restored and the newline escaped.
  EXPECT_EQ(r.out, "1 -> '<s>'\n15043 -> ' Hello'\n3186 -> ' world'\n13 -> '\\n'\n");
}

TEST(TokenizeCli, EmptyTextAndTextAfterDoubleDash) {
  const std::string m = "-m " + Quote(ModelPath("stories260K.gguf"));
  CmdResult r = Tokenize(m + " --ids ''");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[1]\n");
  r = Tokenize(m + " --ids --no-bos ''");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[]\n");
  // A text that looks like a flag, after --, equals the same text given with -p.
  const CmdResult dashed = Tokenize(m + " --ids -- --no-bos");
  const CmdResult prompt = Tokenize(m + " --ids -p --no-bos");
  ASSERT_EQ(dashed.exit_code, 0) << dashed.err;
  EXPECT_EQ(dashed.out, prompt.out);
  EXPECT_EQ(ParseIdList(dashed.out).front(), 1);  // BOS still added: "--no-bos" was the text
}

TEST(TokenizeCli, ErrorsAreOneLine) {
  const std::string m = "-m " + Quote(ModelPath("stories260K.gguf"));
  ExpectOneErrorLine(Tokenize(m), "missing TEXT");
  ExpectOneErrorLine(Tokenize(m + " --frobnicate x"), "unknown flag");
  ExpectOneErrorLine(Tokenize(m + " a b"), "two texts");
  ExpectOneErrorLine(Tokenize("x -m"), "-m without a value");
  ExpectOneErrorLine(Tokenize("-m /nonexistent/model.gguf x"), "missing file");
  ExpectOneErrorLine(Tokenize("-m " + Quote(DataPath("tokenizer/ggml-vocab-llama-spm.gguf.inp")) + " x"),
                     "not a GGUF");

  // A valid GGUF without tokenizer metadata, and one whose scores do not match its tokens.
  const std::string dir = ::testing::TempDir();
  const std::string no_vocab = dir + "/tandem_tokenize_no_vocab.gguf";
  ASSERT_TRUE(WriteGguf(no_vocab, {{"general.architecture", GgufStr("llama")}}, {}).ok());
  ExpectOneErrorLine(Tokenize("-m " + Quote(no_vocab) + " x"), "no tokenizer");
  const std::string bad_scores = dir + "/tandem_tokenize_bad_scores.gguf";
  ASSERT_TRUE(WriteGguf(bad_scores,
                        {{"tokenizer.ggml.model", GgufStr("llama")},
                         {"tokenizer.ggml.tokens",
                          GgufArr(GgufType::kString, {GgufStr("<unk>"), GgufStr("<s>"), GgufStr("</s>")})},
                         {"tokenizer.ggml.scores", GgufArr(GgufType::kFloat32, {GgufF32(0), GgufF32(0)})}},
                        {})
                  .ok());
  ExpectOneErrorLine(Tokenize("-m " + Quote(bad_scores) + " x"), "scores length");
  std::remove(no_vocab.c_str());
  std::remove(bad_scores.c_str());
}

}  // namespace
}  // namespace tandem

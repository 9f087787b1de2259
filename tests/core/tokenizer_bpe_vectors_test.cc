// Real byte-level BPE vocabularies (Llama 3.1, Qwen3, o200k for gpt-4o, o200k_harmony for gpt-oss), written at build
// time into TANDEM_VOCAB_DIR by tools/make_vocab_gguf.py, against the ids of tests/data/tokenizer/bpe-*.json:
// llama.cpp's llama-tokenize on the same GGUF, and quicktok (tiktoken-exact). Where the two agree tandem must give
// those ids; where they differ ("differs": true) the case names the one tandem follows ("follow"): llama.cpp, since
// tandem runs GGUF vocabularies as llama.cpp does (Qwen's NFC normalizer left out; Qwen's <think> and gpt-oss's
// <|start|>, <|channel|>, <|message|> ... matched in plain text; Qwen's "</s>" made a control token), except o200k's
// pre-tokenizer, which llama.cpp approximates (letter runs without combining marks) and tandem runs as tiktoken does.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/escaping.h"
#include "core/gguf.h"
#include "core/status.h"
#include "core/tokenizer.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using test::DataPath;
using test::ReadJson;

std::string VocabFile(const std::string& file) { return Cat(TANDEM_VOCAB_DIR, "/", file); }

std::unique_ptr<Tokenizer> Load(const std::string& file) {
  auto gguf = GgufFile::Open(VocabFile(file));
  if (!gguf.ok()) {
    ADD_FAILURE() << gguf.status() << " (the build writes it: tools/make_vocab_gguf.py)";
    return nullptr;
  }
  auto tok = Tokenizer::FromGguf(**gguf);
  if (!tok.ok()) {
    ADD_FAILURE() << file << ": " << tok.status();
    return nullptr;
  }
  return std::move(tok).value();
}

using test::DescribeTokens;
using test::EscapeBytes;

std::string CaseText(const nlohmann::json& c) {
  if (c.contains("text_b64")) {
    std::string bytes;
    EXPECT_TRUE(absl::Base64Unescape(c["text_b64"].get<std::string>(), &bytes));
    return bytes;
  }
  return c["text"].get<std::string>();
}

// Every case of one vectors file: tandem gives the ids both references agree on, or those the case follows.
void CheckVectors(const std::string& vectors_json) {
  const nlohmann::json doc = ReadJson(DataPath(vectors_json));
  const std::string vocab = doc["vocab"].get<std::string>();
  auto tok = Load(vocab);
  ASSERT_NE(tok, nullptr);
  int total = 0, matched = 0;
  for (const nlohmann::json& c : doc["cases"]) {
    const bool parse_special = c["parse_special"].get<bool>();
    const std::string text = CaseText(c);
    const std::string follow = c.value("follow", "llamacpp");
    ASSERT_TRUE(follow == "llamacpp" || follow == "quicktok") << follow;
    const auto want = c[follow].get<std::vector<int32_t>>();
    if (!c["quicktok"].is_null() && !c.value("differs", false)) {
      EXPECT_EQ(c["quicktok"].get<std::vector<int32_t>>(), c["llamacpp"].get<std::vector<int32_t>>())
          << vectors_json << ": unmarked disagreement";
    }
    const std::vector<int32_t> got = tok->Encode(text, {.add_bos = false, .parse_special = parse_special});
    ++total;
    if (got == want) {
      ++matched;
      continue;
    }
    ADD_FAILURE() << vocab << (parse_special ? " parse_special" : "") << " text \"" << EscapeBytes(text)
                  << "\"\n  want (" << follow << ") " << DescribeTokens(*tok, want) << "\n  got  " << DescribeTokens(*tok, got);
  }
  EXPECT_GT(total, 0);
  EXPECT_EQ(matched, total) << vocab << ": " << matched << " of " << total << " cases match";
}

TEST(TokenizerBpeVectors, Llama3) { CheckVectors("tokenizer/bpe-llama3.json"); }
TEST(TokenizerBpeVectors, Qwen3) { CheckVectors("tokenizer/bpe-qwen3.json"); }
TEST(TokenizerBpeVectors, O200k) { CheckVectors("tokenizer/bpe-o200k.json"); }
TEST(TokenizerBpeVectors, O200kHarmony) { CheckVectors("tokenizer/bpe-o200k_harmony.json"); }

// BOS by default where the vocab asks for it (add_bos_token), and the special ids the GGUFs carry.
TEST(TokenizerBpeVectors, DefaultsPerVocab) {
  auto llama = Load("llama3.gguf");
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(llama->n_vocab(), 128256);
  EXPECT_EQ(llama->bos_id(), 128000);
  EXPECT_EQ(llama->eos_id(), 128009);
  EXPECT_TRUE(llama->add_bos());
  EXPECT_EQ(llama->Encode("Hello"), (std::vector<int32_t>{128000, 9906}));
  EXPECT_TRUE(llama->IsEog(128009));  // <|eot_id|>
  EXPECT_TRUE(llama->IsEog(128008));  // <|eom_id|>, found by its text
  EXPECT_FALSE(llama->IsEog(9906));

  auto qwen = Load("qwen3.gguf");
  ASSERT_NE(qwen, nullptr);
  EXPECT_EQ(qwen->n_vocab(), 151936);
  EXPECT_EQ(qwen->eos_id(), 151645);
  EXPECT_FALSE(qwen->add_bos());
  EXPECT_EQ(qwen->Encode("Hello"), (std::vector<int32_t>{9707}));
  EXPECT_TRUE(qwen->IsEog(151645));  // <|im_end|>

  auto oss = Load("o200k_harmony.gguf");
  ASSERT_NE(oss, nullptr);
  EXPECT_EQ(oss->n_vocab(), 201088);
  EXPECT_EQ(oss->eos_id(), 200002);  // <|return|>
  EXPECT_FALSE(oss->add_bos());
  EXPECT_EQ(oss->Encode("Hello"), (std::vector<int32_t>{13225}));
}

}  // namespace
}  // namespace tandem

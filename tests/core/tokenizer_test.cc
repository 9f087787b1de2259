// The SentencePiece tokenizer against llama.cpp's own vectors (upstream .inp/.out, llama-tokenize output on
// both vocabs, golden prompts) plus hand-built vocabularies whose merges are worked out by hand.
#include "core/tokenizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/gguf.h"
#include "core/status.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using test::DataPath;
using test::ModelPath;
using test::ReadFile;
using test::ReadJson;

constexpr std::string_view kMark = "\xE2\x96\x81";  // U+2581

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path) {
  auto file = GgufFile::Open(path);
  if (!file.ok()) {
    ADD_FAILURE() << path << ": " << file.status();
    return nullptr;
  }
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    ADD_FAILURE() << path << ": " << tok.status();
    return nullptr;
  }
  return std::move(tok).value();
}

using test::DescribeTokens;
using test::EscapeBytes;

// Counts matches and reports each mismatch with the text, both id lists and their pieces.
struct Tally {
  int matched = 0;
  int total = 0;
  void Check(const Tokenizer& tok, std::string_view label, std::string_view text, const std::vector<int32_t>& want,
             const std::vector<int32_t>& got) {
    ++total;
    if (want == got) {
      ++matched;
      return;
    }
    ADD_FAILURE() << label << " text \"" << EscapeBytes(text) << "\"\n  want " << DescribeTokens(tok, want) << "\n  got  "
                  << DescribeTokens(tok, got);
  }
};

// ---- Hand-built vocabularies ----

// <unk> <s> </s>, then pieces with scores chosen per test.
TokenizerVocab SmallVocab(std::vector<std::pair<std::string, float>> normal) {
  TokenizerVocab v;
  v.pieces = {"<unk>", "<s>", "</s>"};
  v.scores = {0, 0, 0};
  v.token_types = {2, 3, 3};
  for (auto& [piece, score] : normal) {
    v.pieces.push_back(piece);
    v.scores.push_back(score);
    v.token_types.push_back(1);
  }
  return v;
}

std::unique_ptr<Tokenizer> Make(TokenizerVocab v) {
  auto t = Tokenizer::FromVocab(std::move(v));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(t).value() : nullptr;
}

const TokenizeOptions kRaw{.add_bos = false, .parse_special = false};

TEST(TokenizerSmall, HigherScoreMergesFirst) {
  // ids: 3 a, 4 b, 5 c, 6 ab, 7 bc. "abc": only one of ab / bc can form, the higher score wins.
  TokenizerVocab v = SmallVocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -1}, {"bc", -2}});
  v.add_space_prefix = false;
  auto t = Make(v);
  EXPECT_EQ(t->Encode("abc", kRaw), (std::vector<int32_t>{6, 5}));

  v.scores[6] = -3;  // now bc outranks ab
  t = Make(v);
  EXPECT_EQ(t->Encode("abc", kRaw), (std::vector<int32_t>{3, 7}));
}

TEST(TokenizerSmall, EqualScoresMergeLeftmostFirst) {
  TokenizerVocab v = SmallVocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -1}, {"bc", -1}});
  v.add_space_prefix = false;
  auto t = Make(v);
  EXPECT_EQ(t->Encode("abc", kRaw), (std::vector<int32_t>{6, 5}));
  // "bcab": pairs bc, ca (absent), ab; both merge since they do not overlap.
  EXPECT_EQ(t->Encode("bcab", kRaw), (std::vector<int32_t>{7, 6}));
}

TEST(TokenizerSmall, MergesChainThroughLongerPieces) {
  // ids: 3 ▁, 4 a, 5 b, 6 ▁a, 7 ▁ab, 8 ▁▁. " ab" with the prefix is "▁▁ab": ▁▁ (-1) beats ▁a (-2) and
  // takes the ▁ that ▁a needed; "▁▁a" and "ab" are absent, so the result is [▁▁, a, b].
  const std::string m(kMark);
  TokenizerVocab v = SmallVocab({{m, -5}, {"a", -5}, {"b", -5}, {m + "a", -2}, {m + "ab", -3}, {m + m, -1}});
  auto t = Make(v);
  EXPECT_EQ(t->Encode(" ab", kRaw), (std::vector<int32_t>{8, 4, 5}));
  // "ab" -> "▁ab": ▁a forms, then ▁a + b = ▁ab.
  EXPECT_EQ(t->Encode("ab", kRaw), (std::vector<int32_t>{7}));
  EXPECT_EQ(t->Encode("ab", {.add_bos = true, .parse_special = false}), (std::vector<int32_t>{1, 7}));
  EXPECT_EQ(t->Decode({1, 7}), "ab");
  EXPECT_EQ(t->Decode({8, 4, 5}), " ab");  // one of the two leading spaces was the prefix
}

TEST(TokenizerSmall, ByteFallbackThenUnknown) {
  // ids: 3 a, 4 <0xC3>, 5 <0xA9>. "é" is C3 A9 with no piece of its own; "ü" (C3 BC) has no 0xBC token -> <unk>.
  TokenizerVocab v = SmallVocab({{"a", -1}, {"<0xC3>", 0}, {"<0xA9>", 0}});
  v.token_types[4] = v.token_types[5] = 6;
  v.add_space_prefix = false;
  auto t = Make(v);
  EXPECT_EQ(t->Encode("a\xC3\xA9" "a", kRaw), (std::vector<int32_t>{3, 4, 5, 3}));
  EXPECT_EQ(t->Encode("\xC3\xBC", kRaw), (std::vector<int32_t>{4, 0}));
  EXPECT_EQ(t->Piece(4), "\xC3");
  EXPECT_EQ(t->Decode({3, 4, 5}), "a\xC3\xA9");
}

TEST(TokenizerSmall, SpecialTextSplitsOnlyWhenAsked) {
  // ids: 3 ▁, 4 <, 5 s, 6 >, 7 x, 8 ▁x, 9 <tool> (user-defined: split even without parse_special).
  const std::string m(kMark);
  TokenizerVocab v =
      SmallVocab({{m, -1}, {"<", -1}, {"s", -1}, {">", -1}, {"x", -1}, {m + "x", -0.5f}, {"<tool>", 0}});
  v.token_types[9] = 4;
  auto t = Make(v);
  // parse_special: "x<s>x" -> "▁x", <s>, then the fragment after a special token gets the space prefix again.
  EXPECT_EQ(t->Encode("x<s>x", {.add_bos = false, .parse_special = true}), (std::vector<int32_t>{8, 1, 8}));
  EXPECT_EQ(t->Encode("x<s>x", kRaw), (std::vector<int32_t>{8, 4, 5, 6, 7}));
  EXPECT_EQ(t->Encode("<tool>x", kRaw), (std::vector<int32_t>{9, 8}));
  // The longer control text wins over a shorter one inside it.
  EXPECT_EQ(t->Encode("</s>", {.add_bos = false, .parse_special = true}), (std::vector<int32_t>{2}));
  EXPECT_EQ(t->Piece(1), "");
  EXPECT_EQ(t->Piece(1, /*render_special=*/true), "<s>");
  EXPECT_EQ(t->Piece(9), "<tool>");
  EXPECT_TRUE(t->IsEog(2));
  EXPECT_FALSE(t->IsEog(1));
}

TEST(TokenizerSmall, VocabFlagsAreRespected) {
  TokenizerVocab v = SmallVocab({{"a", -1}});
  v.add_bos = false;
  v.add_space_prefix = false;
  auto t = Make(v);
  EXPECT_EQ(t->Encode("a"), (std::vector<int32_t>{3}));
  EXPECT_EQ(t->Encode(""), (std::vector<int32_t>{}));
}

TEST(TokenizerSmall, RejectsInconsistentVocab) {
  TokenizerVocab good = SmallVocab({{"a", -1}});
  ASSERT_TRUE(Tokenizer::FromVocab(good).ok());

  TokenizerVocab v = good;
  v.scores.pop_back();
  EXPECT_FALSE(Tokenizer::FromVocab(v).ok());
  v = good;
  v.token_types.push_back(1);
  EXPECT_FALSE(Tokenizer::FromVocab(v).ok());
  v = good;
  v.bos_id = 4;
  EXPECT_FALSE(Tokenizer::FromVocab(v).ok());
  v = good;
  v.eos_id = -1;
  EXPECT_FALSE(Tokenizer::FromVocab(v).ok());
  v = good;
  v.scores[3] = std::nanf("");
  EXPECT_FALSE(Tokenizer::FromVocab(v).ok());
  v = good;
  v.token_types[3] = 7;
  EXPECT_FALSE(Tokenizer::FromVocab(v).ok());
  v = good;
  v.token_types[3] = 6;  // "a" is not a <0xXX> byte piece
  EXPECT_FALSE(Tokenizer::FromVocab(v).ok());
  EXPECT_FALSE(Tokenizer::FromVocab(TokenizerVocab{}).ok());
}

// ---- GGUF metadata validation ----

std::vector<GgufKV> TokenizerKVs(size_t n_scores, size_t n_types, uint32_t bos) {
  std::vector<GgufValue> tokens, scores, types;
  const std::vector<std::string> pieces = {"<unk>", "<s>", "</s>", "a"};
  for (const auto& p : pieces) tokens.push_back(GgufStr(p));
  for (size_t i = 0; i < n_scores; ++i) scores.push_back(GgufF32(-static_cast<float>(i)));
  const int32_t kTypes[] = {2, 3, 3, 1, 1};
  for (size_t i = 0; i < n_types; ++i) types.push_back(GgufI32(kTypes[i]));
  return {
      {"tokenizer.ggml.model", GgufStr("llama")},
      {"tokenizer.ggml.tokens", GgufArr(GgufType::kString, tokens)},
      {"tokenizer.ggml.scores", GgufArr(GgufType::kFloat32, scores)},
      {"tokenizer.ggml.token_type", GgufArr(GgufType::kInt32, types)},
      {"tokenizer.ggml.bos_token_id", GgufU32(bos)},
  };
}

absl::StatusOr<std::unique_ptr<Tokenizer>> FromKVs(const std::vector<GgufKV>& kvs) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, SerializeGguf(kvs, {}));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::FromBytes(bytes));
  return Tokenizer::FromGguf(*file);
}

TEST(TokenizerGguf, ValidatesMetadata) {
  auto ok = FromKVs(TokenizerKVs(4, 4, 1));
  ASSERT_TRUE(ok.ok()) << ok.status();
  // "▁a" and "▁" are absent and there are no byte tokens: the three bytes of ▁ become <unk>.
  EXPECT_EQ((*ok)->Encode("a", kRaw), (std::vector<int32_t>{0, 0, 0, 3}));
  EXPECT_EQ((*ok)->n_vocab(), 4);

  EXPECT_FALSE(FromKVs(TokenizerKVs(3, 4, 1)).ok()) << "short scores";
  EXPECT_FALSE(FromKVs(TokenizerKVs(4, 5, 1)).ok()) << "long token_type";
  EXPECT_FALSE(FromKVs(TokenizerKVs(4, 4, 4)).ok()) << "BOS out of range";
  EXPECT_FALSE(FromKVs(TokenizerKVs(4, 4, 0xFFFFFFFFu)).ok()) << "BOS none";

  std::vector<GgufKV> kvs = TokenizerKVs(4, 4, 1);
  kvs[0].value = GgufStr("gpt2");
  EXPECT_FALSE(FromKVs(kvs).ok()) << "BPE vocab";
  kvs = TokenizerKVs(4, 4, 1);
  kvs.erase(kvs.begin() + 1);
  EXPECT_FALSE(FromKVs(kvs).ok()) << "no tokens";
  kvs = TokenizerKVs(4, 4, 1);
  kvs[1].value = GgufStr("a");
  EXPECT_FALSE(FromKVs(kvs).ok()) << "tokens not an array";
  kvs = TokenizerKVs(4, 4, 1);
  kvs.push_back({"tokenizer.ggml.add_bos_token", GgufBool(false)});
  auto no_bos = FromKVs(kvs);
  ASSERT_TRUE(no_bos.ok()) << no_bos.status();
  EXPECT_EQ((*no_bos)->Encode(""), (std::vector<int32_t>{}));
}

// ---- llama.cpp's vectors ----

std::vector<int32_t> JsonIds(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

TEST(TokenizerLlamaSpm, UpstreamInpOut) {
  auto tok = LoadTokenizer(DataPath("tokenizer/ggml-vocab-llama-spm.gguf"));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->n_vocab(), 32000);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::string inp = ReadFile(DataPath("tokenizer/ggml-vocab-llama-spm.gguf.inp"));
  ASSERT_TRUE(inp.size() >= sep.size() && inp.compare(inp.size() - sep.size(), sep.size(), sep) == 0);
  inp.resize(inp.size() - sep.size());
  const std::vector<std::string> texts = absl::StrSplit(inp, absl::string_view(sep.data(), sep.size()));
  // One line per input; an empty input has an empty line.
  std::vector<std::string> outs = absl::StrSplit(ReadFile(DataPath("tokenizer/ggml-vocab-llama-spm.gguf.out")), '\n');
  if (!outs.empty() && outs.back().empty()) outs.pop_back();
  ASSERT_EQ(texts.size(), outs.size());
  ASSERT_EQ(texts.size(), 46u);
  Tally tally;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> want;
    for (absl::string_view w : absl::StrSplit(outs[i], ' ', absl::SkipEmpty())) {
      int32_t id;
      ASSERT_TRUE(absl::SimpleAtoi(w, &id)) << outs[i];
      want.push_back(id);
    }
    tally.Check(*tok, Cat("inp #", i), texts[i], want, tok->Encode(texts[i], kRaw));
  }
  std::printf("ggml-vocab-llama-spm .inp/.out: %d/%d cases match\n", tally.matched, tally.total);
  EXPECT_EQ(tally.matched, tally.total);
}

void CheckJsonVectors(const std::string& vocab_path, const std::string& json_path, size_t want_cases) {
  auto tok = LoadTokenizer(vocab_path);
  ASSERT_NE(tok, nullptr);
  const nlohmann::json cases = ReadJson(json_path);
  ASSERT_EQ(cases.size(), want_cases);
  struct Flags {
    const char* key;
    TokenizeOptions opts;
  };
  const Flags kFlags[] = {
      {"tokens", {.add_bos = true, .parse_special = true}},
      {"tokens_no_bos", {.add_bos = false, .parse_special = true}},
      {"tokens_no_parse_special", {.add_bos = true, .parse_special = false}},
      {"tokens_no_bos_no_parse_special", {.add_bos = false, .parse_special = false}},
  };
  Tally tally;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    for (const Flags& f : kFlags) tally.Check(*tok, f.key, text, JsonIds(c[f.key]), tok->Encode(text, f.opts));
  }
  std::printf("%s: %d/%d (case, flags) pairs match\n", json_path.c_str(), tally.matched, tally.total);
  EXPECT_EQ(tally.matched, tally.total);
}

TEST(TokenizerLlamaSpm, LlamaTokenizeJson) {
  CheckJsonVectors(DataPath("tokenizer/ggml-vocab-llama-spm.gguf"), DataPath("tokenizer/tokenize-llama-spm.json"), 35);
}

TEST(TokenizerStories, LlamaTokenizeJson) {
  CheckJsonVectors(ModelPath("stories260K.gguf"), DataPath("tokenizer/tokenize-stories260K.json"), 36);
}

std::string GoldenModelPath(const std::string& model) {
  const std::string in_data = DataPath("models/" + model);
  return std::filesystem::exists(in_data) ? in_data : ModelPath(model);
}

TEST(TokenizerGoldens, PromptTokensOfEveryGolden) {
  Tally tally;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(DataPath("goldens"))) {
    if (entry.path().extension() != ".json") continue;
    const nlohmann::json g = ReadJson(entry.path().string());
    auto tok = LoadTokenizer(g.contains("tandem_synth") ? test::SynthGoldenModel(g)
                                                        : GoldenModelPath(g["model"].get<std::string>()));
    ASSERT_NE(tok, nullptr) << entry.path();
    ++files;
    const std::string prompt = g["prompt"].get<std::string>();
    tally.Check(*tok, entry.path().filename().string(), prompt, JsonIds(g["prompt_tokens"]),
                tok->Encode(prompt, {.add_bos = true, .parse_special = false}));
    // Pieces as stored by llama.cpp, too.
    const auto pieces = g["prompt_pieces"].get<std::vector<std::string>>();
    const auto ids = JsonIds(g["prompt_tokens"]);
    ASSERT_EQ(pieces.size(), ids.size());
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(tok->RawPiece(ids[i]), pieces[i]) << entry.path();
  }
  std::printf("golden prompt_tokens: %d/%d files match\n", tally.matched, tally.total);
  EXPECT_GE(files, 10);  // 4 tiny-llama, 2 tiny-mixtral, 4 stories260K(-moe4)
  EXPECT_EQ(tally.matched, tally.total);
}

TEST(TokenizerGoldens, GreedyTextDecodes) {
  auto tok = LoadTokenizer(ModelPath("stories260K.gguf"));
  ASSERT_NE(tok, nullptr);
  for (const char* name : {"stories260K.bos.json", "stories260K.json", "stories260K-moe4.bos.json",
                           "stories260K-moe4.json"}) {
    const nlohmann::json g = ReadJson(DataPath(std::string("goldens/") + name));
    const std::vector<int32_t> ids = JsonIds(g["greedy_tokens"]);
    EXPECT_EQ(tok->Decode(ids), g["greedy_text"].get<std::string>()) << name;
    // Piece by piece, the pieces concatenate to the same text with the first leading space kept.
    std::string joined;
    for (int32_t id : ids) joined += tok->Piece(id);
    EXPECT_EQ(joined, Cat(" ", g["greedy_text"].get<std::string>())) << name;
  }
}

TEST(TokenizerGoldens, EnglishRoundTrips) {
  for (const std::string& vocab : {DataPath("tokenizer/ggml-vocab-llama-spm.gguf"), ModelPath("stories260K.gguf")}) {
    auto tok = LoadTokenizer(vocab);
    ASSERT_NE(tok, nullptr);
    for (const char* s :
         {"Hello world", " Hello world", "  Hello  world  ", "trailing space ",
          "The quick brown fox jumps over the lazy dog. Once upon a time, in a land far away,",
          "def f(x):\n    return x**2  # comment", "Once upon a time, there was a little dog named Max.",
          "naïve café résumé", "Привет, мир!", "emoji 😀😃👍🏽", "1234567890"}) {
      EXPECT_EQ(tok->Decode(tok->Encode(s)), s) << vocab;
      EXPECT_EQ(tok->Decode(tok->Encode(s, kRaw)), s) << vocab;
    }
  }
}

TEST(TokenizerLlamaSpm, LongTextEncodesAndRoundTrips) {
  auto tok = LoadTokenizer(DataPath("tokenizer/ggml-vocab-llama-spm.gguf"));
  ASSERT_NE(tok, nullptr);
  // 100 KB with long runs without spaces: the merge loop must stay near n log n.
  std::string text;
  for (int i = 0; i < 800; ++i) text += "Once upon a time, aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa. ";
  text += std::string(40000, 'x');
  const std::vector<int32_t> ids = tok->Encode(text);
  EXPECT_GT(ids.size(), 1000u);
  EXPECT_EQ(tok->Decode(ids), text);
}

}  // namespace
}  // namespace tandem

// The byte-level BPE tokenizer (tokenizer.ggml.model = "gpt2"): llama.cpp's upstream vocabs and .inp/.out
// vectors, hand-built vocabularies whose merges are worked out by hand, exact round trips on a large mixed-script
// text, and hostile input.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/status.h"
#include "core/tokenizer.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using test::ReadFile;

constexpr TokenizeOptions kPlain{.add_bos = false, .parse_special = false};
constexpr TokenizeOptions kSpecial{.add_bos = false, .parse_special = true};

// ---- llama.cpp's vocabs (tests/data/tokenizer/llamacpp-vocabs.tar.xz, unpacked by CMake) ----

std::string VocabPath(const std::string& name) { return Cat(TANDEM_BPE_VOCAB_DIR, "/ggml-vocab-", name, ".gguf"); }

std::unique_ptr<Tokenizer> LoadVocab(const std::string& name) {
  auto file = GgufFile::Open(VocabPath(name));
  if (!file.ok()) {
    ADD_FAILURE() << file.status();
    return nullptr;
  }
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    ADD_FAILURE() << name << ": " << tok.status();
    return nullptr;
  }
  return std::move(*tok);
}

struct Vector {
  std::string text;
  std::vector<int32_t> ids;
};

// llama.cpp's test-tokenizer-0 format: inputs separated by "\n__ggml_vocab_test__\n" (the file ends with one,
// so the last input has no trailing newline of its own); one line of space-separated ids per input.
std::vector<Vector> ReadVectors(const std::string& name) {
  const std::string inp = ReadFile(VocabPath(name) + ".inp");
  const std::string out = ReadFile(VocabPath(name) + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<Vector> v;
  std::istringstream lines(out);
  std::string line;
  for (const std::string& t : texts) {
    if (!std::getline(lines, line)) {
      ADD_FAILURE() << name << ": fewer output lines than inputs";
      break;
    }
    Vector x{t, {}};
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) x.ids.push_back(id);
    v.push_back(std::move(x));
  }
  return v;
}

class LlamaCppVocab : public testing::TestWithParam<std::string> {};

TEST_P(LlamaCppVocab, AllUpstreamVectorsMatch) {
  const std::string name = GetParam();
  auto tok = LoadVocab(name);
  ASSERT_NE(tok, nullptr);
  const std::vector<Vector> vectors = ReadVectors(name);
  ASSERT_EQ(vectors.size(), 46u) << name;
  int matched = 0;
  for (const Vector& v : vectors) {
    // As llama.cpp's test-tokenizer-0: no BOS/EOS, special-token text left plain.
    const std::vector<int32_t> got = tok->Encode(v.text, kPlain);
    EXPECT_EQ(got, v.ids) << name << " on '" << v.text << "'";
    matched += got == v.ids;
    EXPECT_EQ(tok->Decode(got), v.text) << name;
  }
  EXPECT_EQ(matched, static_cast<int>(vectors.size())) << name;
  std::printf("%s: %d/%zu upstream vectors match\n", name.c_str(), matched, vectors.size());
}

INSTANTIATE_TEST_SUITE_P(Upstream, LlamaCppVocab,
                         testing::Values("gpt-2", "deepseek-llm", "deepseek-coder", "falcon", "starcoder", "refact",
                                         "mpt"),
                         [](const testing::TestParamInfo<std::string>& p) {
                           std::string s = p.param;
                           for (char& c : s) c = c == '-' ? '_' : c;
                           return s;
                         });

TEST(BpeVocabMetadata, SpecialIdsAndFlagsFromTheFile) {
  // gpt-2: BOS = EOS = <|endoftext|> (50256), no add_bos key: GPT-2 adds nothing.
  auto gpt2 = LoadVocab("gpt-2");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ(gpt2->n_vocab(), 50257);
  EXPECT_EQ(gpt2->bos_id(), 50256);
  EXPECT_TRUE(gpt2->IsEog(50256));
  EXPECT_FALSE(gpt2->add_bos());
  EXPECT_EQ(gpt2->Encode("Hello", {}), gpt2->Encode("Hello", kPlain));
  EXPECT_EQ(gpt2->Piece(50256), "");
  EXPECT_EQ(gpt2->Piece(50256, /*render_special=*/true), "<|endoftext|>");
  // The control token's text is plain text unless parse_special.
  EXPECT_EQ(gpt2->Encode("<|endoftext|>", kSpecial), (std::vector<int32_t>{50256}));
  EXPECT_GT(gpt2->Encode("<|endoftext|>", kPlain).size(), 1u);

  // deepseek-llm: add_bos_token = true, BOS 100000, EOS 100001.
  auto ds = LoadVocab("deepseek-llm");
  ASSERT_NE(ds, nullptr);
  EXPECT_TRUE(ds->add_bos());
  const std::vector<int32_t> ids = ds->Encode("Hello", {});
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 100000);
  EXPECT_TRUE(ds->IsEog(100001));
  EXPECT_EQ(ds->Decode(ids), "Hello");

  // gpt-neox has no tokenizer.ggml.pre: llama.cpp's "default" split.
  auto neox = LoadVocab("gpt-neox");
  ASSERT_NE(neox, nullptr);
  EXPECT_EQ(neox->Decode(neox->Encode("Hello world 12345!", kPlain)), "Hello world 12345!");
}

// ---- hand-built vocabularies ----

// GPT-2's byte alphabet, written out from its definition: bytes printable in Latin-1 keep their code point, the
// others (0-32, 127-160, 173) take U+0100, U+0101, ... in byte order.
std::string ByteText(int b) {
  int cp = b;
  if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) {
    int n = 0;
    for (int k = 0; k < b; ++k) n += !((k >= 0x21 && k <= 0x7E) || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE));
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

struct HandVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  std::vector<GgufKV> extra;
  std::string pre = "gpt-2";

  // Ids 0-255 are the bytes; the rest are added in order.
  HandVocab() {
    for (int b = 0; b < 256; ++b) Add(ByteText(b));
  }
  int32_t Add(const std::string& text, int32_t type = 1) {
    tokens.push_back(text);
    types.push_back(type);
    return static_cast<int32_t>(tokens.size()) - 1;
  }
  std::vector<GgufKV> KVs() const {
    std::vector<GgufValue> t, ty, m;
    for (const std::string& s : tokens) t.push_back(GgufStr(s));
    for (int32_t x : types) ty.push_back(GgufI32(x));
    for (const std::string& s : merges) m.push_back(GgufStr(s));
    std::vector<GgufKV> kvs = {
        {"tokenizer.ggml.model", GgufStr("gpt2")},
        {"tokenizer.ggml.tokens", GgufArr(GgufType::kString, t)},
        {"tokenizer.ggml.token_type", GgufArr(GgufType::kInt32, ty)},
        {"tokenizer.ggml.merges", GgufArr(GgufType::kString, m)},
    };
    if (!pre.empty()) kvs.push_back({"tokenizer.ggml.pre", GgufStr(pre)});
    kvs.insert(kvs.end(), extra.begin(), extra.end());
    return kvs;
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> Build() const {
    TANDEM_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, SerializeGguf(KVs(), {}));
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::FromBytes(bytes));
    return Tokenizer::FromGguf(*file);
  }
};

std::unique_ptr<Tokenizer> MustBuild(const HandVocab& v) {
  auto t = v.Build();
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

using Ids = std::vector<int32_t>;

TEST(BpeHand, MergesApplyInRankOrder) {
  HandVocab v;
  const int32_t ab = v.Add("ab"), bc = v.Add("bc"), abc = v.Add("abc");
  // "b c" ranks first: a|b|c -> a|bc -> abc (via "a bc"); "a b" never gets its turn.
  v.merges = {"b c", "a b", "a bc"};
  auto t = MustBuild(v);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("abc", kPlain), (Ids{abc}));
  EXPECT_EQ(t->Encode("ab", kPlain), (Ids{ab}));
  // With "a b" first: a|b|c -> ab|c, and there is no "ab c".
  v.merges = {"a b", "b c", "a bc"};
  t = MustBuild(v);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("abc", kPlain), (Ids{ab, 'c'}));
  EXPECT_EQ(t->Encode("bcd", kPlain), (Ids{bc, 'd'}));
}

TEST(BpeHand, EqualPairsMergeLeftFirstAndWordsDoNotMergeAcross) {
  HandVocab v;
  const int32_t aa = v.Add("aa");
  const int32_t sp_a = v.Add(ByteText(' ') + "a");  // "Ġa"
  v.merges = {"a a", ByteText(' ') + " a"};
  auto t = MustBuild(v);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("aaa", kPlain), (Ids{aa, 'a'}));
  EXPECT_EQ(t->Encode("aaaa", kPlain), (Ids{aa, aa}));
  // GPT-2's split gives "a" and " a": the space joins the following word, never the previous one.
  EXPECT_EQ(t->Encode("a a", kPlain), (Ids{'a', sp_a}));
  // Two spaces before a word: the first stays alone (\s+(?!\S)), the second leads the word. Byte ' ' is id 32.
  EXPECT_EQ(t->Encode("a  a", kPlain), (Ids{'a', ' ', sp_a}));
}

TEST(BpeHand, SpecialTokensSplitByType) {
  HandVocab v;
  const int32_t ctl = v.Add("<|eot|>", 3);
  const int32_t user = v.Add("<u>", 4);
  auto t = MustBuild(v);
  ASSERT_NE(t, nullptr);
  // Control text is a token only with parse_special; user-defined text always.
  EXPECT_EQ(t->Encode("x<|eot|>y", kSpecial), (Ids{'x', ctl, 'y'}));
  EXPECT_EQ(t->Encode("x<|eot|>y", kPlain), (Ids{'x', '<', '|', 'e', 'o', 't', '|', '>', 'y'}));
  EXPECT_EQ(t->Encode("x<u>y", kPlain), (Ids{'x', user, 'y'}));
  EXPECT_EQ(t->Piece(ctl), "");
  EXPECT_EQ(t->Piece(ctl, true), "<|eot|>");
  EXPECT_EQ(t->Piece(user), "<u>");
  EXPECT_EQ(t->Decode({'x', user, ctl, 'y'}), "x<u>y");
}

TEST(BpeHand, BytesAndPartialUtf8Decode) {
  HandVocab v;
  // "é" is C3 A9; GPT-2 writes those bytes as "Ã" (U+00C3) and "©" (U+00A9).
  const int32_t e_acute = v.Add(ByteText(0xC3) + ByteText(0xA9));
  v.merges = {ByteText(0xC3) + " " + ByteText(0xA9)};
  auto t = MustBuild(v);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("\xC3\xA9", kPlain), (Ids{e_acute}));
  EXPECT_EQ(t->Piece(e_acute), "\xC3\xA9");
  // Half a character per token: each piece is one byte, not valid UTF-8 alone; the join is.
  EXPECT_EQ(t->Piece(0xC3), "\xC3");
  EXPECT_EQ(t->Piece(0xA9), "\xA9");
  EXPECT_EQ(t->Decode({0xC3, 0xA9}), "\xC3\xA9");
  // "ì" (C3 AC) has no merge: two byte tokens.
  EXPECT_EQ(t->Encode("\xC3\xAC", kPlain), (Ids{0xC3, 0xAC}));
  // Control bytes and space map above U+00FF and back.
  EXPECT_EQ(t->Piece(0), std::string(1, '\0'));
  EXPECT_EQ(t->Piece(' '), " ");
  EXPECT_EQ(t->Encode(std::string("\0\n", 2), kPlain), (Ids{0, '\n'}));
}

TEST(BpeHand, Llama3TakesWholeWordsAndAddsBos) {
  HandVocab v;
  const int32_t ab = v.Add("ab");
  const int32_t abc = v.Add("abc");  // reachable by no merge
  const int32_t bos = v.Add("<|begin_of_text|>", 3);
  const int32_t eot = v.Add("<|eot_id|>", 1);  // mistyped as normal: llama.cpp makes it control
  v.merges = {"a b"};
  v.extra = {{"tokenizer.ggml.bos_token_id", GgufU32(static_cast<uint32_t>(bos))}};
  auto gpt2 = MustBuild(v);
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ(gpt2->Encode("abc", kPlain), (Ids{ab, 'c'}));
  EXPECT_FALSE(gpt2->add_bos());

  v.pre = "llama-bpe";  // ignore_merges: a word that is a token is taken whole; BOS by default
  auto l3 = MustBuild(v);
  ASSERT_NE(l3, nullptr);
  EXPECT_EQ(l3->Encode("abc", kPlain), (Ids{abc}));
  EXPECT_EQ(l3->Encode("abc", {}), (Ids{bos, abc}));
  EXPECT_TRUE(l3->IsEog(eot));
  EXPECT_FALSE(l3->IsEog(bos));
  EXPECT_EQ(l3->Piece(eot), "");
  EXPECT_EQ(l3->Encode("<|eot_id|>", kSpecial), (Ids{eot}));
  // Digits go in threes for Llama 3.
  EXPECT_EQ(l3->Encode("1234", kPlain), (Ids{'1', '2', '3', '4'}));

  v.extra.push_back({"tokenizer.ggml.add_bos_token", GgufBool(false)});
  v.extra.push_back({"tokenizer.ggml.eos_token_id", GgufU32(static_cast<uint32_t>(eot))});
  v.extra.push_back({"tokenizer.ggml.add_eos_token", GgufBool(true)});
  auto flags = MustBuild(v);
  ASSERT_NE(flags, nullptr);
  EXPECT_EQ(flags->Encode("abc", {}), (Ids{abc, eot}));
  EXPECT_EQ(flags->Encode("abc", kPlain), (Ids{abc}));

  v.pre = "qwen2";  // Qwen: no BOS by default
  v.extra.clear();
  auto qwen = MustBuild(v);
  ASSERT_NE(qwen, nullptr);
  EXPECT_FALSE(qwen->add_bos());
  EXPECT_EQ(qwen->Encode("ab", {}), (Ids{ab}));
}

TEST(BpeHand, GptOssEndIsNotEog) {
  HandVocab v;
  const int32_t end = v.Add("<|end|>", 3), ret = v.Add("<|return|>", 3), call = v.Add("<|call|>", 3);
  v.pre = "gpt-4o";
  auto t = MustBuild(v);
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->IsEog(ret));
  EXPECT_TRUE(t->IsEog(call));
  EXPECT_FALSE(t->IsEog(end));
  EXPECT_EQ(t->Encode("<|end|>", kPlain), (Ids{end}));  // now user-defined: split even without parse_special
}

TEST(BpeHand, BadMetadataIsAClearError) {
  HandVocab good;
  good.Add("ab");
  good.merges = {"a b"};
  ASSERT_TRUE(good.Build().ok());

  HandVocab v = good;
  v.pre = "no-such-pre";
  auto st = v.Build();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("no-such-pre"), std::string::npos) << st.status();
  EXPECT_NE(st.status().message().find("llama-bpe"), std::string::npos) << st.status();
  EXPECT_NE(st.status().message().find("qwen2"), std::string::npos) << st.status();

  v = good;
  v.merges = {"a q"};  // "q" exists (a byte) but "aq" does not
  EXPECT_FALSE(v.Build().ok());
  v.merges = {"a \xC3\xA9"};  // names a token that is not there
  st = v.Build();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("merge 0"), std::string::npos) << st.status();
  for (const char* bad : {"ab", "", "a", "a "}) {
    v.merges = {bad};
    EXPECT_FALSE(v.Build().ok()) << "'" << bad << "'";
  }
  v = good;
  v.merges.clear();
  v.extra = {};
  std::vector<GgufKV> kvs = v.KVs();
  std::erase_if(kvs, [](const GgufKV& kv) { return kv.key == "tokenizer.ggml.merges"; });
  auto bytes = SerializeGguf(kvs, {});
  ASSERT_TRUE(bytes.ok());
  auto file = GgufFile::FromBytes(*bytes);
  ASSERT_TRUE(file.ok());
  EXPECT_FALSE(Tokenizer::FromGguf(**file).ok()) << "no merges";

  v = good;
  v.extra = {{"tokenizer.ggml.bos_token_id", GgufU32(100000)}};
  EXPECT_FALSE(v.Build().ok()) << "BOS out of range";
  v = good;
  v.types[5] = 6;  // a byte token must be one byte's code point
  v.types[256] = 6;
  EXPECT_FALSE(v.Build().ok()) << "byte token 'ab'";
}

// ---- round trips and hostile input, on every upstream vocab ----

const char* const kAllVocabs[] = {"gpt-2", "deepseek-llm", "deepseek-coder", "falcon",
                                  "starcoder", "refact", "mpt", "gpt-neox"};

// About `bytes` of mixed-script text from a fixed-seed generator: words in many scripts, emoji with ZWJ and
// modifiers, digits, code punctuation, and runs of spaces, tabs and newlines.
std::string MixedText(size_t bytes) {
  static const char* const kParts[] = {
      "Hello", "world", "naïve", "café", "Ångström", "Zürich", "façade", "ÆØÅ", "straße",
      "Привет", "мир", "ЁЖИК", "Καλημέρα", "κόσμε", "ΣΊΣΥΦΟΣ", "مرحبا", "بالعالم", "שלום", "עולם",
      "漢字", "日本語のテキスト", "中文分词测试", "한국어", "안녕하세요", "हिन्दी", "नमस्ते", "ไทย",
      "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷", "e\xCC\x81", "ﬁ", "…", "—", "“quoted”",
      "0", "42", "3.14159", "1,000,000", "２０２６", "٣٤٥",
      "{", "}", "();", "=>", "!=", "&&", "||", "<<=", "#include", "x->y", "a[i]", "'s", "'LL", "don't",
      "\t", "\n", "\r\n", "  ", "    ", "\n\n\n", " \t ", "\u00A0", "\u3000"};
  constexpr size_t kN = sizeof(kParts) / sizeof(kParts[0]);
  std::string s;
  s.reserve(bytes + 64);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  while (s.size() < bytes) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    s += kParts[(x >> 33) % kN];
    if ((x >> 20) % 3 != 0) s += ' ';
  }
  return s;
}

TEST(BpeRoundTrip, MixedScriptMegabyteOnEveryVocab) {
  const std::string text = MixedText(1 << 20);
  for (const char* name : kAllVocabs) {
    auto tok = LoadVocab(name);
    ASSERT_NE(tok, nullptr);
    const std::vector<int32_t> ids = tok->Encode(text, kPlain);
    EXPECT_GT(ids.size(), text.size() / 16) << name;
    EXPECT_LT(ids.size(), text.size()) << name;
    EXPECT_TRUE(tok->Decode(ids) == text) << name << ": decode differs from the input";
    std::string pieces;
    for (int32_t id : ids) pieces += tok->Piece(id);
    EXPECT_TRUE(pieces == text) << name;
  }
}

TEST(BpeHostile, InvalidUtf8NulAndLongRunsRoundTrip) {
  std::vector<std::string> inputs;
  std::string random;
  uint64_t x = 12345;
  for (int i = 0; i < 1 << 16; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    random.push_back(static_cast<char>(x >> 56));
  }
  inputs.push_back(random);
  inputs.push_back("\x80\x80\xBF abc \xBF\xC3 d\xE2\x82 \xF0\x9F\x98 e\xFF\xFE\xC0\xAF \xED\xA0\x80 end\xC3");
  inputs.push_back(std::string("a\0b\0\0 c\0", 9));
  inputs.push_back(std::string(1 << 20, ' ') + "x");
  inputs.push_back(std::string(1 << 20, ' ') + "1");
  inputs.push_back(std::string(1 << 20, ' ') + "\xE4\xB8\xAD");  // CJK after the run (deepseek's own class)
  inputs.push_back(std::string(1 << 20, ' '));
  std::string mixed_ws;
  for (int i = 0; i < 1 << 17; ++i) mixed_ws += " \t\n\r"[i % 4];
  inputs.push_back(mixed_ws + "word");
  inputs.push_back(std::string(1 << 18, '\n') + "x");
  inputs.push_back(std::string(1 << 18, 'a'));
  inputs.push_back(std::string(1 << 18, '\''));
  std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>> toks;
  for (const char* name : kAllVocabs) toks.emplace_back(name, LoadVocab(name));
  // Every pre-tokenizer's regexes, on a vocab of bytes alone.
  for (const char* pre : {"llama-bpe", "qwen2", "gpt-4o", "default"}) {
    HandVocab v;
    v.pre = pre;
    toks.emplace_back(pre, MustBuild(v));
  }
  for (const auto& [name, tok] : toks) {
    ASSERT_NE(tok, nullptr) << name;
    // Some vocabs have no token for a few bytes (falcon: some control bytes; most: C0, C1, F5..FF, which valid
    // UTF-8 never holds). Those read as U+FFFD, as llama.cpp reads malformed UTF-8; every other byte comes back.
    bool has_byte[256] = {};
    for (int32_t id = 0; id < tok->n_vocab(); ++id) {
      const std::string p = tok->Piece(id);
      if (p.size() == 1) has_byte[static_cast<uint8_t>(p[0])] = true;
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::string want;
      for (char c : inputs[i]) {
        if (has_byte[static_cast<uint8_t>(c)]) {
          want.push_back(c);
        } else {
          want += "\xEF\xBF\xBD";
        }
      }
      const std::vector<int32_t> ids = tok->Encode(inputs[i], kPlain);
      EXPECT_TRUE(tok->Decode(ids) == want) << name << " input " << i;
      EXPECT_EQ(tok->Encode(inputs[i], kPlain), ids) << name << " input " << i << " is not deterministic";
    }
  }
}

}  // namespace
}  // namespace tandem

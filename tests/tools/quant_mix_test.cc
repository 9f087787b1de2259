// The Q4_K_M / Q5_K_M mixes on real model shapes, against counts worked out by hand from llama.cpp's rule
// (src/llama-quant.cpp): the head is Q6_K; attn_v and ffn_down are Q6_K in the layers that get more bits (the first
// and last eighth and every third between); with 8 experts attn_v and attn_k are Q8_0 and, for Q4_K_M,
// attn_output Q5_K. For 32 layers: 0-3, 6, 9, ..., 27, 28-31 (16 layers); for 48: 0-5, 8, 11, ..., 41, 42-47 (24).
#include "tools/quant_mix.h"

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/gguf.h"
#include "gtest/gtest.h"

namespace tandem::cli {
namespace {

struct Shape {
  std::string arch = "llama";
  int n_layer, n_expert, n_head, n_head_kv;
  int64_t n_embd, n_ff, head_dim;
  bool tied = false;
};

// Every tensor of a Llama-family file, as `tandem synth` writes them: name, row length and dimensions.
struct Named {
  std::string name;
  int layer;
  int64_t row;
  int dims;
};
std::vector<Named> Tensors(const Shape& s) {
  std::vector<Named> out = {{"token_embd.weight", -1, s.n_embd, 2}, {"output_norm.weight", -1, s.n_embd, 1}};
  if (!s.tied) out.push_back({"output.weight", -1, s.n_embd, 2});
  const bool moe = s.n_expert > 0;
  const int dims = moe ? 3 : 2;
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string b = absl::StrCat("blk.", l, ".");
    out.push_back({b + "attn_norm.weight", l, s.n_embd, 1});
    out.push_back({b + "attn_q.weight", l, s.n_embd, 2});
    out.push_back({b + "attn_k.weight", l, s.n_embd, 2});
    out.push_back({b + "attn_v.weight", l, s.n_embd, 2});
    out.push_back({b + "attn_output.weight", l, s.n_head * s.head_dim, 2});
    out.push_back({b + "ffn_norm.weight", l, s.n_embd, 1});
    if (moe) out.push_back({b + "ffn_gate_inp.weight", l, s.n_embd, 2});
    const std::string e = moe ? "_exps" : "";
    out.push_back({b + "ffn_gate" + e + ".weight", l, s.n_embd, dims});
    out.push_back({b + "ffn_up" + e + ".weight", l, s.n_embd, dims});
    out.push_back({b + "ffn_down" + e + ".weight", l, s.n_ff, dims});
  }
  return out;
}

QuantMixTensor View(const Shape& s, const Named& n) {
  return QuantMixTensor{.name = n.name, .layer = n.layer, .n_layer = s.n_layer, .n_expert = s.n_expert,
                        .n_head = s.n_head, .n_head_kv = s.n_head_kv, .row_elems = n.row, .n_dims = n.dims,
                        .arch = s.arch, .tied_output = s.tied};
}

// Tensors per type name, and per "role:type" for the roles the rule singles out.
std::map<std::string, int> Count(QuantMix mix, const Shape& s) {
  std::map<std::string, int> c;
  for (const Named& n : Tensors(s)) {
    const std::string type(DTypeName(QuantMixType(mix, View(s, n))));
    ++c[type];
    for (std::string role : {"attn_v", "attn_k", "attn_output", "ffn_down"}) {
      if (n.name.find(role + (role == "ffn_down" ? "" : ".")) != std::string::npos) ++c[role + "." + type];
    }
  }
  return c;
}

const Shape kLlama31_8B{.n_layer = 32, .n_expert = 0, .n_head = 32, .n_head_kv = 8, .n_embd = 4096, .n_ff = 14336,
                        .head_dim = 128};
const Shape kMixtral8x7B{.n_layer = 32, .n_expert = 8, .n_head = 32, .n_head_kv = 8, .n_embd = 4096,
                         .n_ff = 14336, .head_dim = 128};
const Shape kQwen3_30B_A3B{.arch = "qwen3moe", .n_layer = 48, .n_expert = 128, .n_head = 32, .n_head_kv = 4,
                           .n_embd = 2048, .n_ff = 768, .head_dim = 128};

TEST(QuantMix, Names) {
  EXPECT_EQ(QuantMixFromName("q4_k_m"), QuantMix::kQ4_K_M);
  EXPECT_EQ(QuantMixFromName("Q5_K_M"), QuantMix::kQ5_K_M);
  EXPECT_EQ(QuantMixFromName("Q4_K"), std::nullopt);
  EXPECT_EQ(QuantMixFileType(QuantMix::kQ4_K_M), 15u);
  EXPECT_EQ(QuantMixFileType(QuantMix::kQ5_K_M), 17u);
  EXPECT_EQ(QuantMixName(QuantMix::kQ5_K_M), "Q5_K_M");
}

TEST(QuantMix, LayersWithMoreBits) {
  std::vector<int> q6;
  for (const Named& n : Tensors(kLlama31_8B)) {
    if (n.name.find("ffn_down") != std::string::npos &&
        QuantMixType(QuantMix::kQ4_K_M, View(kLlama31_8B, n)) == DType::kQ6_K) {
      q6.push_back(n.layer);
    }
  }
  EXPECT_EQ(q6, (std::vector<int>{0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}));
}

// 32 layers of 7 matrices and 2 norms, token_embd, output_norm, output: Q6_K 16 attn_v + 16 ffn_down + the head;
// the base type the other 192 matrices and token_embd (llama.cpp's own Q4_K_M of this model reports q4_K 193,
// q6_K 33; tandem's synth writes no rope_freqs here).
TEST(QuantMix, Llama31_8B) {
  const auto q4 = Count(QuantMix::kQ4_K_M, kLlama31_8B);
  EXPECT_EQ(q4, (std::map<std::string, int>{{"Q4_K", 193}, {"Q6_K", 33}, {"F32", 65},
                                            {"attn_v.Q6_K", 16}, {"attn_v.Q4_K", 16}, {"attn_k.Q4_K", 32},
                                            {"attn_output.Q4_K", 32}, {"ffn_down.Q6_K", 16},
                                            {"ffn_down.Q4_K", 16}}));
  const auto q5 = Count(QuantMix::kQ5_K_M, kLlama31_8B);
  EXPECT_EQ(q5.at("Q5_K"), 193);
  EXPECT_EQ(q5.at("Q6_K"), 33);
  EXPECT_EQ(q5.at("ffn_down.Q6_K"), 16);
}

// 8 experts: attn_v and attn_k Q8_0 in every layer, attn_output Q5_K (Q4_K_M only), ffn_down_exps as dense.
TEST(QuantMix, Mixtral8x7B) {
  const auto q4 = Count(QuantMix::kQ4_K_M, kMixtral8x7B);
  EXPECT_EQ(q4, (std::map<std::string, int>{{"Q4_K", 113}, {"Q5_K", 32}, {"Q6_K", 17}, {"Q8_0", 64}, {"F32", 97},
                                            {"attn_v.Q8_0", 32}, {"attn_k.Q8_0", 32}, {"attn_output.Q5_K", 32},
                                            {"ffn_down.Q6_K", 16}, {"ffn_down.Q4_K", 16}}));
  const auto q5 = Count(QuantMix::kQ5_K_M, kMixtral8x7B);
  EXPECT_EQ(q5.at("attn_output.Q5_K"), 32);  // the base type: no bump
  EXPECT_EQ(q5.at("Q8_0"), 64);
  EXPECT_EQ(q5.at("Q6_K"), 17);
}

// 128 experts is not 8: no Q8_0; 48 layers give 24 layers more bits.
TEST(QuantMix, Qwen3_30B_A3B) {
  const auto q4 = Count(QuantMix::kQ4_K_M, kQwen3_30B_A3B);
  EXPECT_EQ(q4, (std::map<std::string, int>{{"Q4_K", 289}, {"Q6_K", 49}, {"F32", 145},
                                            {"attn_v.Q6_K", 24}, {"attn_v.Q4_K", 24}, {"attn_k.Q4_K", 48},
                                            {"attn_output.Q4_K", 48}, {"ffn_down.Q6_K", 24},
                                            {"ffn_down.Q4_K", 24}}));
}

TEST(QuantMix, TiedHeadAndSeventyB) {
  Shape tied = kLlama31_8B;
  tied.tied = true;
  EXPECT_EQ(QuantMixType(QuantMix::kQ4_K_M, View(tied, {"token_embd.weight", -1, 4096, 2})), DType::kQ6_K);
  EXPECT_EQ(QuantMixType(QuantMix::kQ4_K_M, View(kLlama31_8B, {"token_embd.weight", -1, 4096, 2})), DType::kQ4_K);
  // A Llama-3-70B (80 layers, GQA): attn_v outside the more-bits layers is Q5_K, not Q4_K; without GQA (65B) not.
  Shape big = kLlama31_8B;
  big.n_layer = 80;
  big.n_head = 64;
  EXPECT_EQ(QuantMixType(QuantMix::kQ4_K_M, View(big, {"blk.11.attn_v.weight", 11, 8192, 2})), DType::kQ5_K);
  EXPECT_EQ(QuantMixType(QuantMix::kQ4_K_M, View(big, {"blk.12.attn_v.weight", 12, 8192, 2})), DType::kQ6_K);
  big.n_head_kv = 64;
  EXPECT_EQ(QuantMixType(QuantMix::kQ4_K_M, View(big, {"blk.11.attn_v.weight", 11, 8192, 2})), DType::kQ4_K);
}

// Rows a super-block does not divide: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0 (the head straight to Q8_0), and
// F16 where 32 does not divide either. Norms and the router keep their type.
TEST(QuantMix, Fallbacks) {
  const Shape& s = kLlama31_8B;
  EXPECT_EQ(QuantMixType(QuantMix::kQ4_K_M, View(s, {"blk.5.attn_q.weight", 5, 2880, 2})), DType::kQ5_0);
  EXPECT_EQ(QuantMixType(QuantMix::kQ5_K_M, View(s, {"blk.5.attn_q.weight", 5, 2880, 2})), DType::kQ5_1);
  EXPECT_EQ(QuantMixType(QuantMix::kQ4_K_M, View(s, {"blk.0.ffn_down.weight", 0, 2880, 2})), DType::kQ8_0);
  EXPECT_EQ(QuantMixType(QuantMix::kQ4_K_M, View(s, {"output.weight", -1, 2880, 2})), DType::kQ8_0);
  EXPECT_EQ(QuantMixType(QuantMix::kQ4_K_M, View(s, {"blk.5.attn_q.weight", 5, 100, 2})), DType::kF16);
  EXPECT_EQ(QuantMixType(QuantMix::kQ4_K_M, View(s, {"blk.5.attn_norm.weight", 5, 4096, 1})), DType::kF32);
  const Named gate_inp{"blk.5.ffn_gate_inp.weight", 5, 4096, 2};  // outlives the view of its name
  QuantMixTensor router = View(kMixtral8x7B, gate_inp);
  router.source = DType::kF16;
  EXPECT_EQ(QuantMixType(QuantMix::kQ4_K_M, router), DType::kF16);
}

// Files that llama.cpp's own llama-quantize wrote from F16 files of `tandem synth`, listed as
// TANDEM_QUANT_MIX_FILES="Q4_K_M=a.gguf,Q5_K_M=b.gguf": every tensor has the type the rule gives it, and the
// file type is the mix's. Skipped without the variable (CI has no llama.cpp build).
TEST(QuantMix, MatchesLlamaQuantizeFiles) {
  const char* env = std::getenv("TANDEM_QUANT_MIX_FILES");
  if (env == nullptr) GTEST_SKIP() << "set TANDEM_QUANT_MIX_FILES to files llama-quantize wrote";
  std::stringstream list(env);
  std::string entry;
  while (std::getline(list, entry, ',')) {
    const size_t eq = entry.find('=');
    ASSERT_NE(eq, std::string::npos) << entry;
    const std::optional<QuantMix> mix = QuantMixFromName(entry.substr(0, eq));
    ASSERT_TRUE(mix.has_value()) << entry;
    auto file = GgufFile::Open(entry.substr(eq + 1));
    ASSERT_TRUE(file.ok()) << file.status();
    const GgufFile& f = **file;
    auto get = [&](const std::string& key) {
      const GgufValue* v = f.Find(key);
      return v == nullptr ? 0 : static_cast<int>(v->AsInt().value_or(0));
    };
    const std::string arch = *f.Find("general.architecture")->AsString();
    EXPECT_EQ(get("general.file_type"), static_cast<int>(QuantMixFileType(*mix))) << entry;
    int checked = 0;
    for (const GgufTensorInfo& t : f.tensors()) {
      int layer = -1;
      if (t.name.starts_with("blk.")) layer = std::atoi(t.name.c_str() + 4);
      const QuantMixTensor view{.name = t.name, .layer = layer, .n_layer = get(arch + ".block_count"),
                                .n_expert = get(arch + ".expert_count"), .n_head = get(arch + ".attention.head_count"),
                                .n_head_kv = get(arch + ".attention.head_count_kv"), .row_elems = t.ne[0],
                                .n_dims = t.n_dims, .arch = arch,
                                .tied_output = f.FindTensor("output.weight") == nullptr, .source = t.type};
      EXPECT_EQ(DTypeName(QuantMixType(*mix, view)), DTypeName(t.type)) << entry << ": " << t.name;
      ++checked;
    }
    std::printf("  %s: %d tensors as llama-quantize typed them\n", entry.c_str(), checked);
  }
}

}  // namespace
}  // namespace tandem::cli

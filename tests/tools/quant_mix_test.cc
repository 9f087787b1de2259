// The Q4_K_M / Q5_K_M mixes on real model shapes, against counts worked out by hand from llama.cpp's rule
// (src/llama-quant.cpp): the head is Q6_K; attn_v and ffn_down are Q6_K in the layers that get more bits (the first
// and last eighth and every third between); with 8 experts attn_v and attn_k are Q8_0 and, for Q4_K_M,
// attn_output Q5_K. For 32 layers: 0-3, 6, 9, ..., 27, 28-31 (16 layers); for 48: 0-5, 8, 11, ..., 41, 42-47 (24).
#include "tools/quant_mix.h"

#include <algorithm>
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
  // synth's --type keeps its meaning: Q4_0 and Q4_K are plain types there, not llama-quantize's file types.
  EXPECT_EQ(QuantMixFromName("Q4_0"), std::nullopt);
}

// llama-quantize's TYPE words: names (any case), its aliases Q4_K and Q5_K for the _M mixes, and ftype numbers.
TEST(QuantMix, QuantizeTypeNames) {
  EXPECT_EQ(QuantizeTypeFromName("q4_0"), QuantMix::kQ4_0);
  EXPECT_EQ(QuantizeTypeFromName("Q8_0"), QuantMix::kQ8_0);
  EXPECT_EQ(QuantizeTypeFromName("q6_K"), QuantMix::kQ6_K);
  EXPECT_EQ(QuantizeTypeFromName("Q4_K_M"), QuantMix::kQ4_K_M);
  EXPECT_EQ(QuantizeTypeFromName("q4_k"), QuantMix::kQ4_K_M);
  EXPECT_EQ(QuantizeTypeFromName("Q5_K"), QuantMix::kQ5_K_M);
  EXPECT_EQ(QuantizeTypeFromName("15"), QuantMix::kQ4_K_M);
  EXPECT_EQ(QuantizeTypeFromName("7"), QuantMix::kQ8_0);
  EXPECT_EQ(QuantizeTypeFromName("2"), QuantMix::kQ4_0);
  EXPECT_EQ(QuantizeTypeFromName("18"), QuantMix::kQ6_K);
  EXPECT_EQ(QuantizeTypeFromName("17"), QuantMix::kQ5_K_M);
  for (const char* no : {"MXFP4", "Q4_K_S", "Q4_1", "F16", "3", "", "Q4_K_MM"}) {
    EXPECT_EQ(QuantizeTypeFromName(no), std::nullopt) << no;
  }
  EXPECT_EQ(QuantMixFileType(QuantMix::kQ4_0), 2u);
  EXPECT_EQ(QuantMixFileType(QuantMix::kQ8_0), 7u);
  EXPECT_EQ(QuantMixFileType(QuantMix::kQ6_K), 18u);
  EXPECT_EQ(QuantMixName(QuantMix::kQ6_K), "Q6_K");
}

// llama.cpp's MXFP4_MOE (gpt-oss's downloads): expert stacks MXFP4, every other matrix Q8_0 (the head and the
// token embeddings too), what is never quantized left alone. Checked against llama-quantize's output for a
// 2-layer gpt-oss file written by `tandem synth` (llama.cpp d32676d77, by hand).
TEST(QuantMix, Mxfp4Moe) {
  EXPECT_EQ(QuantMixFromName("mxfp4_moe"), QuantMix::kMXFP4_MOE);
  EXPECT_EQ(QuantizeTypeFromName("MXFP4_MOE"), QuantMix::kMXFP4_MOE);
  EXPECT_EQ(QuantizeTypeFromName("38"), QuantMix::kMXFP4_MOE);
  EXPECT_EQ(QuantMixFileType(QuantMix::kMXFP4_MOE), 38u);
  const auto type = [](std::string_view name, int dims, int64_t row = 2880) {
    return QuantMixType(QuantMix::kMXFP4_MOE, {.name = name, .layer = 0, .n_layer = 24, .n_expert = 32,
                                               .n_head = 64, .n_head_kv = 8, .row_elems = row, .n_dims = dims,
                                               .arch = "gpt-oss"});
  };
  for (const char* e : {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight"}) {
    EXPECT_EQ(type(e, 3), DType::kMXFP4) << e;
  }
  for (const char* m : {"token_embd.weight", "output.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight",
                        "blk.0.attn_v.weight", "blk.0.attn_output.weight"}) {
    EXPECT_EQ(type(m, 2), DType::kQ8_0) << m;
  }
  EXPECT_EQ(type("blk.0.ffn_gate_inp.weight", 2), DType::kF32);  // the router
  EXPECT_EQ(type("blk.0.attn_sinks.weight", 1), DType::kF32);
  EXPECT_EQ(type("blk.0.ffn_gate_exps.bias", 2), DType::kF32);
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

// The plain types have rules too: Q4_0's head is Q6_K (Q8_0's and Q6_K's stay their type), and with 8 experts
// attn_k and attn_v are Q8_0 whatever the type; nothing else moves without an importance matrix.
TEST(QuantMix, PlainTypes) {
  EXPECT_EQ(Count(QuantMix::kQ4_0, kLlama31_8B),
            (std::map<std::string, int>{{"Q4_0", 225}, {"Q6_K", 1}, {"F32", 65}, {"attn_v.Q4_0", 32},
                                        {"attn_k.Q4_0", 32}, {"attn_output.Q4_0", 32}, {"ffn_down.Q4_0", 32}}));
  EXPECT_EQ(Count(QuantMix::kQ8_0, kLlama31_8B).at("Q8_0"), 226);
  EXPECT_EQ(Count(QuantMix::kQ6_K, kLlama31_8B).at("Q6_K"), 226);
  const auto q4 = Count(QuantMix::kQ4_0, kMixtral8x7B);
  EXPECT_EQ(q4.at("attn_v.Q8_0"), 32);
  EXPECT_EQ(q4.at("attn_k.Q8_0"), 32);
  EXPECT_EQ(q4.at("attn_output.Q4_0"), 32);  // the Q5_K bump is Q4_K_M's (and other K mixes'), not Q4_0's
  EXPECT_EQ(q4.at("Q6_K"), 1);
  const auto q6 = Count(QuantMix::kQ6_K, kMixtral8x7B);
  EXPECT_EQ(q6.at("Q8_0"), 64);
  EXPECT_EQ(q6.at("Q6_K"), 162);
  Shape tied = kLlama31_8B;
  tied.tied = true;
  EXPECT_EQ(QuantMixType(QuantMix::kQ4_0, View(tied, {"token_embd.weight", -1, 4096, 2})), DType::kQ6_K);
  EXPECT_EQ(QuantMixType(QuantMix::kQ8_0, View(tied, {"token_embd.weight", -1, 4096, 2})), DType::kQ8_0);
}

// Where llama.cpp stops: Q8_0 and Q4_0 have no fallback, so a row 32 does not divide is an error there (the
// choice says so); the K types fall back and end at F16.
TEST(QuantMix, PlainFallbacks) {
  const Shape& s = kLlama31_8B;
  const QuantMixChoice head = QuantMixChoose(QuantMix::kQ4_0, View(s, {"output.weight", -1, 2880, 2}));
  EXPECT_EQ(head.wanted, DType::kQ6_K);  // 32 divides 2880, so the head wants Q6_K, whose 256 does not
  EXPECT_EQ(head.type, DType::kQ8_0);
  EXPECT_TRUE(head.fell_back());
  EXPECT_EQ(QuantMixType(QuantMix::kQ6_K, View(s, {"blk.1.attn_q.weight", 1, 2880, 2})), DType::kQ8_0);
  EXPECT_EQ(QuantMixType(QuantMix::kQ6_K, View(s, {"blk.1.attn_q.weight", 1, 100, 2})), DType::kF16);
  EXPECT_FALSE(QuantMixChoose(QuantMix::kQ6_K, View(s, {"blk.1.attn_q.weight", 1, 100, 2})).no_fallback);
  EXPECT_TRUE(QuantMixChoose(QuantMix::kQ8_0, View(s, {"blk.1.attn_q.weight", 1, 100, 2})).no_fallback);
  EXPECT_TRUE(QuantMixChoose(QuantMix::kQ4_0, View(s, {"blk.1.attn_q.weight", 1, 100, 2})).no_fallback);
  EXPECT_TRUE(QuantMixChoose(QuantMix::kQ4_0, View(s, {"output.weight", -1, 100, 2})).no_fallback);
  // The Q8_0 of 8 experts' attn_v has no fallback either.
  EXPECT_TRUE(QuantMixChoose(QuantMix::kQ4_K_M, View(kMixtral8x7B, {"blk.1.attn_v.weight", 1, 100, 2})).no_fallback);
  const QuantMixChoice norm = QuantMixChoose(QuantMix::kQ8_0, View(s, {"blk.1.attn_norm.weight", 1, 100, 1}));
  EXPECT_FALSE(norm.quantized);
  EXPECT_FALSE(norm.no_fallback);
  EXPECT_EQ(norm.type, DType::kF32);
}

// The tensors llama.cpp never quantizes, whatever their shape.
TEST(QuantMix, NeverQuantized) {
  for (const char* name : {"blk.0.ffn_gate_inp.weight", "blk.0.attn_q_norm.weight", "position_embd.weight",
                           "token_types.weight", "blk.0.ssm_conv1d.weight", "blk.0.time_mix_w1.weight",
                           "v.patch_embd.weight", "blk.0.attn_rel_b.weight", "blk.0.attn_q.bias"}) {
    const Named named{name, 0, 4096, 2};  // outlives the view of its name
    QuantMixTensor t = View(kLlama31_8B, named);
    t.source = DType::kF16;
    EXPECT_EQ(QuantMixType(QuantMix::kQ8_0, t), DType::kF16) << name;
  }
}

std::vector<QuantMixFileTensor> FileOf(const std::vector<Named>& named) {
  std::vector<QuantMixFileTensor> out;
  for (const Named& n : named) {
    QuantMixFileTensor t{.name = n.name, .type = DType::kF32};  // as View's source
    t.ne[0] = n.row;
    t.ne[1] = n.dims >= 2 ? 64 : 1;
    t.ne[2] = n.dims >= 3 ? 8 : 1;
    out.push_back(t);
  }
  return out;
}

// A whole file: the counters run in llama.cpp's order (by layer, then name) whatever the file's order; a head is
// tied when there is no output.weight; trailing dimensions of 1 do not make a matrix.
TEST(QuantMix, ChooseFileCountsAsLlamaCpp) {
  const QuantMixModel llama{.arch = "llama", .n_layer = 32, .n_head = 32, .n_head_kv = 8};
  std::vector<Named> named = Tensors(kLlama31_8B);
  std::reverse(named.begin(), named.end());
  const std::vector<QuantMixFileTensor> file = FileOf(named);
  auto choices = QuantMixChooseFile(QuantMix::kQ4_K_M, llama, file);
  ASSERT_TRUE(choices.ok()) << choices.status();
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_EQ(DTypeName((*choices)[i].type), DTypeName(QuantMixType(QuantMix::kQ4_K_M, View(kLlama31_8B, named[i]))))
        << named[i].name;
  }

  // Attention in every other layer of 8 (a hybrid model): attn_v is numbered 0..3 of 4, so the more-bits ones are
  // the third and fourth (layers 4 and 6), not layers 0 and 6 as their layer numbers of 8 would give.
  std::vector<Named> hybrid;
  for (int l = 0; l < 8; ++l) {
    const std::string b = absl::StrCat("blk.", l, ".");
    if (l % 2 == 0) hybrid.push_back({b + "attn_v.weight", l, 256, 2});
    hybrid.push_back({b + "ffn_down.weight", l, 512, 2});
  }
  hybrid.push_back({"token_embd.weight", -1, 256, 2});  // no output.weight: tied
  const QuantMixModel model{.arch = "llama", .n_layer = 8, .n_head = 8, .n_head_kv = 8};
  auto h = QuantMixChooseFile(QuantMix::kQ4_K_M, model, FileOf(hybrid));
  ASSERT_TRUE(h.ok()) << h.status();
  std::vector<std::string> q6;
  for (size_t i = 0; i < hybrid.size(); ++i) {
    if ((*h)[i].type == DType::kQ6_K) q6.push_back(hybrid[i].name);
  }
  EXPECT_EQ(q6, (std::vector<std::string>{"blk.0.ffn_down.weight", "blk.3.ffn_down.weight", "blk.4.attn_v.weight",
                                          "blk.6.attn_v.weight", "blk.6.ffn_down.weight", "blk.7.ffn_down.weight",
                                          "token_embd.weight"}));

  // [4096, 1]: one row is a vector to ggml_n_dims, kept as it is.
  std::vector<QuantMixFileTensor> flat = {{.name = "blk.0.attn_q.weight", .ne = {4096, 1, 1, 1}, .type = DType::kF16}};
  auto f = QuantMixChooseFile(QuantMix::kQ4_0, llama, flat);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)[0].type, DType::kF16);
  EXPECT_FALSE((*f)[0].quantized);
}

// An MoE's FFN tensors are typed by the layer in their name; one without is an error, as in llama.cpp.
TEST(QuantMix, ChooseFileNeedsMoeLayers) {
  const QuantMixModel moe{.arch = "llama", .n_layer = 2, .n_expert = 4, .n_head = 8, .n_head_kv = 8};
  std::vector<QuantMixFileTensor> bad = {{.name = "ffn_down_exps.weight", .ne = {256, 256, 4, 1}}};
  EXPECT_FALSE(QuantMixChooseFile(QuantMix::kQ4_K_M, moe, bad).ok());
  bad[0].name = "blk.2.ffn_up_exps.weight";  // layer 2 of 2
  EXPECT_FALSE(QuantMixChooseFile(QuantMix::kQ4_K_M, moe, bad).ok());
  bad[0].name = "blk.1.ffn_down_exps.weight";
  auto ok = QuantMixChooseFile(QuantMix::kQ4_K_M, moe, bad);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)[0].type, DType::kQ6_K);  // the last layer of 2 gets more bits
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
    const std::optional<QuantMix> mix = QuantizeTypeFromName(entry.substr(0, eq));
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

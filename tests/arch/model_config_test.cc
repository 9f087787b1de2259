// LoadModelConfig on the shared models (values from tests/data/README.md) and on tiny models built by the writer,
// both valid variants (defaults, any integer key type, tied output, legacy experts) and broken ones.
#include "arch/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "arch/arch.h"
#include "arch/summary.h"
#include "core/status.h"
#include "tests/core/tiny_gguf.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using test::MakeTinyModel;
using test::TinyModel;
using test::TinySpec;

absl::StatusOr<ModelConfig> LoadFromPath(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::Open(path));
  return LoadModelConfig(*f);
}

absl::StatusOr<ModelConfig> LoadTiny(const TinyModel& m) {
  absl::StatusOr<std::vector<uint8_t>> bytes = SerializeGguf(m.metadata, m.WriteList());
  if (!bytes.ok()) return bytes.status();
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::FromBytes(*bytes));
  return LoadModelConfig(*f);
}

TEST(ModelConfig, SharedModels) {
  struct Want {
    std::string path;
    int n_layer, n_embd, n_ff, n_expert, n_expert_used;
    float freq_base;
  };
  const std::vector<Want> wants = {
      {test::ModelPath("stories260K.gguf"), 5, 64, 172, 0, 0, 10000.0f},
      {test::ModelPath("stories260K-moe4.gguf"), 5, 64, 172, 4, 2, 10000.0f},
      {test::DataPath("models/tiny-llama-F16.gguf"), 4, 256, 512, 0, 0, 1e6f},
      {test::DataPath("models/tiny-llama-Q8_0.gguf"), 4, 256, 512, 0, 0, 1e6f},
      {test::DataPath("models/tiny-llama-Q4_0.gguf"), 4, 256, 512, 0, 0, 1e6f},
      {test::DataPath("models/tiny-llama-Q4_K_M.gguf"), 4, 256, 512, 0, 0, 1e6f},
      {test::DataPath("models/tiny-mixtral-Q4_0.gguf"), 4, 256, 256, 8, 2, 1e6f},
      {test::DataPath("models/tiny-mixtral-Q4_K_M.gguf"), 4, 256, 256, 8, 2, 1e6f},
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(w.path);
    absl::StatusOr<ModelConfig> c = LoadFromPath(w.path);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->arch, "llama");
    EXPECT_EQ(c->n_layer, w.n_layer);
    EXPECT_EQ(c->n_embd, w.n_embd);
    EXPECT_EQ(c->n_ff, w.n_ff);
    EXPECT_EQ(c->n_head, 8);
    EXPECT_EQ(c->n_head_kv, 4);
    EXPECT_EQ(c->head_dim, w.n_embd / 8);
    EXPECT_EQ(c->n_rot, w.n_embd / 8);
    EXPECT_EQ(c->n_ctx_train, 2048);
    EXPECT_EQ(c->n_vocab, 512);
    EXPECT_EQ(c->n_expert, w.n_expert);
    EXPECT_EQ(c->n_expert_used, w.n_expert_used);
    EXPECT_EQ(c->is_moe(), w.n_expert > 0);
    EXPECT_FLOAT_EQ(c->rms_eps, 1e-5f);
    EXPECT_EQ(c->rope_freq_base, w.freq_base);
    EXPECT_EQ(c->rope_freq_scale, 1.0f);
    EXPECT_FALSE(c->tied_output);
    EXPECT_FALSE(c->legacy_experts);
    EXPECT_EQ(c->bos_id, 1);
    EXPECT_EQ(c->eos_id, 2);
    EXPECT_EQ(c->n_embd_kv(), 4 * (w.n_embd / 8));
  }
  absl::StatusOr<ModelConfig> c = LoadFromPath(test::ModelPath("stories260K.gguf"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->name, "llama");
  // The vocab-only file has no tensors to check the hyperparameters against, and is refused as what it is.
  absl::StatusOr<ModelConfig> v = LoadFromPath(test::DataPath("tokenizer/ggml-vocab-llama-spm.gguf"));
  ASSERT_FALSE(v.ok());
  EXPECT_NE(Message(v.status()).find("vocab-only"), std::string::npos) << Message(v.status());
}

TEST(ModelConfig, TinyVariantsLoad) {
  {  // defaults: no head_count_kv, no rope.dimension_count, no freq_base; keys stored as other integer types
    TinyModel m = MakeTinyModel();
    m.EraseKey("llama.rope.dimension_count");
    m.SetKey("llama.block_count", GgufValue{GgufType::kUint8, uint64_t{2}});
    m.SetKey("llama.embedding_length", GgufValue{GgufType::kInt64, int64_t{32}});
    m.SetKey("llama.feed_forward_length", GgufValue{GgufType::kUint16, uint64_t{64}});
    m.SetKey("llama.context_length", GgufValue{GgufType::kInt32, int64_t{128}});
    m.SetKey("llama.attention.head_count_kv", GgufValue{GgufType::kUint64, uint64_t{4}});
    m.SetKey("llama.rope.scale_linear", GgufF32(4.0f));
    m.SetKey("llama.attention.layer_norm_rms_epsilon", GgufValue{GgufType::kFloat64, 1e-6});
    m.SetTensor("blk.0.attn_k.weight", DType::kF32, {32, 32});
    m.SetTensor("blk.0.attn_v.weight", DType::kF32, {32, 32});
    m.SetTensor("blk.1.attn_k.weight", DType::kF32, {32, 32});
    m.SetTensor("blk.1.attn_v.weight", DType::kF32, {32, 32});
    absl::StatusOr<ModelConfig> c = LoadTiny(m);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->n_layer, 2);
    EXPECT_EQ(c->n_ctx_train, 128);
    EXPECT_EQ(c->n_head_kv, 4);
    EXPECT_EQ(c->head_dim, 8);
    EXPECT_EQ(c->n_rot, 8);  // defaults to head_dim
    EXPECT_EQ(c->rope_freq_base, 10000.0f);
    EXPECT_EQ(c->rope_freq_scale, 0.25f);
    EXPECT_FLOAT_EQ(c->rms_eps, 1e-6f);
    EXPECT_EQ(c->name, "tiny-test");
  }
  {  // head_count_kv absent defaults to head_count
    TinyModel m = MakeTinyModel();
    m.EraseKey("llama.attention.head_count_kv");
    for (int l = 0; l < 2; ++l) {
      m.SetTensor("blk." + std::to_string(l) + ".attn_k.weight", DType::kF32, {32, 32});
      m.SetTensor("blk." + std::to_string(l) + ".attn_v.weight", DType::kF32, {32, 32});
    }
    absl::StatusOr<ModelConfig> c = LoadTiny(m);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->n_head_kv, 4);
  }
  {  // tied output, no vocab metadata, quantized weights
    TinySpec s;
    s.tied_output = true;
    s.with_vocab = false;
    s.weight_type = DType::kQ8_0;
    absl::StatusOr<ModelConfig> c = LoadTiny(MakeTinyModel(s));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->tied_output);
    EXPECT_EQ(c->bos_id, -1);
    EXPECT_EQ(c->eos_id, -1);
    EXPECT_EQ(c->n_vocab, 40);
  }
  {  // rope.scaling.type = linear with a factor; "none" changes nothing
    TinyModel m = MakeTinyModel();
    m.SetKey("llama.rope.scaling.type", GgufStr("linear"));
    m.SetKey("llama.rope.scaling.factor", GgufF32(8.0f));
    absl::StatusOr<ModelConfig> c = LoadTiny(m);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->rope_freq_scale, 0.125f);
    m.SetKey("llama.rope.scaling.type", GgufStr("none"));
    c = LoadTiny(m);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->rope_freq_scale, 1.0f);
    EXPECT_EQ(c->rope_ext_factor, 0.0f);
    // No type: a factor is linear scaling, as llama.cpp reads it.
    m.EraseKey("llama.rope.scaling.type");
    c = LoadTiny(m);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->rope_freq_scale, 0.125f);
    EXPECT_EQ(c->rope_ext_factor, 0.0f);
  }
  {  // YaRN: the factor, full extrapolation mix, and the original context (n_ctx_train when absent)
    TinyModel m = MakeTinyModel();
    m.SetKey("llama.rope.scaling.type", GgufStr("yarn"));
    m.SetKey("llama.rope.scaling.factor", GgufF32(32.0f));
    absl::StatusOr<ModelConfig> c = LoadTiny(m);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->rope_freq_scale, 1.0f / 32);
    EXPECT_EQ(c->rope_ext_factor, 1.0f);
    EXPECT_EQ(c->rope_n_ctx_orig, c->n_ctx_train);
    // llama.cpp's magnitude for a factor above 1 is 1 + 0.1 ln 32, which the kernel's own correction already is.
    EXPECT_NEAR(c->rope_attn_factor, 1.0f, 1e-6f);
    m.SetKey("llama.rope.scaling.original_context_length", GgufU32(4096));
    m.SetKey("llama.rope.scaling.attn_factor", GgufF32(0.5f));
    c = LoadTiny(m);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->rope_n_ctx_orig, 4096);
    EXPECT_NEAR(c->rope_attn_factor, 0.5f, 1e-6f);
    // A factor below 1 keeps magnitude 1: the ratio cancels the kernel's correction.
    m.SetKey("llama.rope.scaling.factor", GgufF32(0.5f));
    m.EraseKey("llama.rope.scaling.attn_factor");
    c = LoadTiny(m);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_NEAR(c->rope_attn_factor * (1.0f + 0.1f * std::log(0.5f)), 1.0f, 1e-6f);
  }
  for (bool legacy : {false, true}) {
    TinySpec s;
    s.n_expert = 4;
    s.n_expert_used = 2;
    s.legacy_experts = legacy;
    const TinyModel m = MakeTinyModel(s);
    absl::StatusOr<ModelConfig> c = LoadTiny(m);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->is_moe());
    EXPECT_EQ(c->n_expert, 4);
    EXPECT_EQ(c->n_expert_used, 2);
    EXPECT_EQ(c->legacy_experts, legacy);

    // The summary puts every expert byte, the router and ffn_norm in "experts", and agrees across layouts.
    absl::StatusOr<std::vector<uint8_t>> bytes = SerializeGguf(m.metadata, m.WriteList());
    ASSERT_TRUE(bytes.ok());
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(*bytes);
    ASSERT_TRUE(f.ok());
    const ModelSummary sum = SummarizeModel(**f, &*c);
    ASSERT_EQ(sum.layers.size(), 2u);
    // By hand: 3 matrices of 32x64 F32 per expert, 4 experts; router 32x4 F32; ffn_norm 32 F32.
    const uint64_t per_expert = 3 * 32 * 64 * 4;
    EXPECT_EQ(sum.layers[1].bytes_per_expert(), per_expert);
    EXPECT_EQ(sum.layers[1].router_bytes, 32u * 4 * 4);
    EXPECT_EQ(sum.layers[1].groups[TensorGroup::kExperts], 4 * per_expert + 32 * 4 * 4 + 32 * 4);
    EXPECT_EQ(sum.layers[1].groups[TensorGroup::kDenseFfn], 0u);
    // attention: q, o 32x32; k, v 32x16; attn_norm 32 (F32).
    EXPECT_EQ(sum.layers[0].groups[TensorGroup::kAttention], (2 * 32 * 32 + 2 * 32 * 16 + 32) * 4u);
    EXPECT_EQ(sum.totals[TensorGroup::kEmbeddings], 32u * 40 * 4);
    EXPECT_EQ(sum.totals[TensorGroup::kOutput], 32u * 40 * 4 + 32 * 4);
    EXPECT_EQ(sum.totals.total(), sum.total_bytes);
  }
}

TEST(ModelConfig, BrokenModelsAreRejectedWithTheKeyOrTensorNamed) {
  struct Case {
    std::string name;
    std::function<void(TinyModel&)> mutate;
    std::string expect;  // substring of the error
    TinySpec spec = {};
  };
  TinySpec moe;
  moe.n_expert = 4;
  moe.n_expert_used = 2;
  const std::vector<Case> cases = {
      {"arch", [](TinyModel& m) { m.SetKey("general.architecture", GgufStr("gpt2")); }, "general.architecture"},
      {"arch_type", [](TinyModel& m) { m.SetKey("general.architecture", GgufU32(1)); }, "expected STRING"},
      {"no_arch", [](TinyModel& m) { m.EraseKey("general.architecture"); }, "general.architecture"},
      {"missing_block_count", [](TinyModel& m) { m.EraseKey("llama.block_count"); },
       "missing required key 'llama.block_count'"},
      {"missing_eps", [](TinyModel& m) { m.EraseKey("llama.attention.layer_norm_rms_epsilon"); },
       "layer_norm_rms_epsilon"},
      {"missing_ctx", [](TinyModel& m) { m.EraseKey("llama.context_length"); }, "llama.context_length"},
      {"string_int", [](TinyModel& m) { m.SetKey("llama.block_count", GgufStr("2")); },
       "'llama.block_count': type STRING, expected an integer"},
      {"negative", [](TinyModel& m) { m.SetKey("llama.embedding_length", GgufI32(-32)); }, "llama.embedding_length"},
      {"zero_layers", [](TinyModel& m) { m.SetKey("llama.block_count", GgufU32(0)); }, "llama.block_count"},
      {"huge_ff", [](TinyModel& m) { m.SetKey("llama.feed_forward_length", GgufU32(1u << 30)); },
       "llama.feed_forward_length"},
      {"heads_not_dividing", [](TinyModel& m) { m.SetKey("llama.attention.head_count", GgufU32(5)); },
       "llama.attention.head_count"},
      {"kv_heads_not_dividing", [](TinyModel& m) { m.SetKey("llama.attention.head_count_kv", GgufU32(3)); },
       "llama.attention.head_count_kv"},
      {"odd_rot", [](TinyModel& m) { m.SetKey("llama.rope.dimension_count", GgufU32(7)); },
       "llama.rope.dimension_count"},
      {"rot_too_big", [](TinyModel& m) { m.SetKey("llama.rope.dimension_count", GgufU32(16)); },
       "llama.rope.dimension_count"},
      {"eps_zero", [](TinyModel& m) { m.SetKey("llama.attention.layer_norm_rms_epsilon", GgufF32(0.0f)); },
       "layer_norm_rms_epsilon"},
      {"rope_longrope", [](TinyModel& m) { m.SetKey("llama.rope.scaling.type", GgufStr("longrope")); },
       "RoPE scaling 'longrope' is not supported"},
      {"yarn_orig_ctx_zero", [](TinyModel& m) {
         m.SetKey("llama.rope.scaling.type", GgufStr("yarn"));
         m.SetKey("llama.rope.scaling.original_context_length", GgufU32(0));
       }, "llama.rope.scaling.original_context_length"},
      {"yarn_orig_ctx_string", [](TinyModel& m) {
         m.SetKey("llama.rope.scaling.type", GgufStr("yarn"));
         m.SetKey("llama.rope.scaling.original_context_length", GgufStr("4096"));
       }, "llama.rope.scaling.original_context_length"},
      {"yarn_factor_negative", [](TinyModel& m) {
         m.SetKey("llama.rope.scaling.type", GgufStr("yarn"));
         m.SetKey("llama.rope.scaling.factor", GgufF32(-4.0f));
       }, "llama.rope.scaling.factor"},
      {"freq_base_nan", [](TinyModel& m) { m.SetKey("llama.rope.freq_base", GgufF32(NAN)); }, "llama.rope.freq_base"},
      {"expert_used_gt_count", [](TinyModel& m) { m.SetKey("llama.expert_used_count", GgufU32(5)); },
       "llama.expert_used_count", moe},
      {"expert_used_zero", [](TinyModel& m) { m.SetKey("llama.expert_used_count", GgufU32(0)); },
       "llama.expert_used_count", moe},
      {"bos_out_of_range", [](TinyModel& m) { m.SetKey("tokenizer.ggml.bos_token_id", GgufU32(40)); },
       "tokenizer.ggml.bos_token_id"},
      {"eos_negative", [](TinyModel& m) { m.SetKey("tokenizer.ggml.eos_token_id", GgufI32(-1)); },
       "tokenizer.ggml.eos_token_id"},
      {"vocab_len", [](TinyModel& m) { m.SetKey("tokenizer.ggml.tokens", GgufArr(GgufType::kString, {GgufStr("a")})); },
       "tokenizer.ggml.tokens"},
      {"vocab_type", [](TinyModel& m) { m.SetKey("tokenizer.ggml.tokens", GgufU32(3)); }, "tokenizer.ggml.tokens"},
      {"vocab_size_key", [](TinyModel& m) { m.SetKey("llama.vocab_size", GgufU32(41)); }, "llama.vocab_size"},
      {"missing_tensor", [](TinyModel& m) { m.EraseTensor("blk.1.ffn_down.weight"); },
       "missing tensor 'blk.1.ffn_down.weight'"},
      {"missing_embd", [](TinyModel& m) { m.EraseTensor("token_embd.weight"); }, "token_embd.weight"},
      {"missing_output_norm", [](TinyModel& m) { m.EraseTensor("output_norm.weight"); }, "output_norm.weight"},
      {"wrong_shape",
       [](TinyModel& m) {
         m.SetTensor("blk.0.attn_k.weight", DType::kF32, {32, 32});
       },
       "tensor 'blk.0.attn_k.weight': shape [32, 32], expected [32, 16]"},
      {"wrong_output_shape",
       [](TinyModel& m) {
         m.SetTensor("output.weight", DType::kF32, {32, 41});
       },
       "output.weight"},
      {"norm_not_f32", [](TinyModel& m) { m.SetTensor("blk.1.ffn_norm.weight", DType::kF16, {32}); },
       "tensor 'blk.1.ffn_norm.weight': type F16, expected F32"},
      {"router_not_f32",
       [](TinyModel& m) {
         m.SetTensor("blk.0.ffn_gate_inp.weight", DType::kF16, {32, 4});
       },
       "blk.0.ffn_gate_inp.weight", moe},
      {"expert_shape",
       [](TinyModel& m) {
         m.SetTensor("blk.0.ffn_up_exps.weight", DType::kF32, {32, 64, 3});
       },
       "blk.0.ffn_up_exps.weight", moe},
      {"extra_layer", [](TinyModel& m) { m.SetTensor("blk.2.attn_norm.weight", DType::kF32, {32}); },
       "unexpected tensor 'blk.2.attn_norm.weight'"},
      {"dense_tensor_in_moe",
       [](TinyModel& m) {
         m.SetTensor("blk.0.ffn_gate.weight", DType::kF32, {32, 64});
       },
       "unexpected tensor 'blk.0.ffn_gate.weight'", moe},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TinyModel m = MakeTinyModel(c.spec);
    ASSERT_TRUE(LoadTiny(m).ok()) << "the unmutated model must load";
    c.mutate(m);
    absl::StatusOr<ModelConfig> cfg = LoadTiny(m);
    ASSERT_FALSE(cfg.ok());
    EXPECT_NE(Message(cfg.status()).find(c.expect), std::string::npos) << cfg.status();
    EXPECT_EQ(Message(cfg.status()).find('\n'), std::string::npos);
  }
}

TEST(ModelConfig, MixedExpertLayoutsAreRejected) {
  TinySpec s;
  s.n_expert = 2;
  s.n_expert_used = 1;
  s.legacy_experts = true;
  TinyModel m = MakeTinyModel(s);
  for (const char* w : {"gate", "up", "down"}) {
    for (int e = 0; e < 2; ++e) m.EraseTensor("blk.1.ffn_" + std::string(w) + "." + std::to_string(e) + ".weight");
  }
  m.SetTensor("blk.1.ffn_gate_exps.weight", DType::kF32, {32, 64, 2});
  m.SetTensor("blk.1.ffn_up_exps.weight", DType::kF32, {32, 64, 2});
  m.SetTensor("blk.1.ffn_down_exps.weight", DType::kF32, {64, 32, 2});
  absl::StatusOr<ModelConfig> c = LoadTiny(m);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(Message(c.status()).find("mixes"), std::string::npos) << c.status();
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// A family tandem has no module for is refused in one line that lists the ones it has, with their models.
TEST(ModelConfig, UnsupportedFamilyListsTheSupportedOnes) {
  TinyModel m = MakeTinyModel();
  m.SetKey("general.architecture", GgufStr("gemma3"));
  absl::StatusOr<ModelConfig> cfg = LoadTiny(m);
  ASSERT_FALSE(cfg.ok());
  const std::string msg = Message(cfg.status());
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  EXPECT_NE(msg.find("'gemma3' is not supported"), std::string::npos) << msg;
  for (const Architecture* a : Architectures()) {
    EXPECT_NE(msg.find(Cat("'", a->name(), "' (", a->family(), ")")), std::string::npos) << msg;
  }
  for (const char* family : {"'llama'", "'qwen2'", "'qwen3'", "'qwen3moe'", "'qwen2moe'", "'gpt-oss'"}) {
    EXPECT_NE(msg.find(family), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace tandem

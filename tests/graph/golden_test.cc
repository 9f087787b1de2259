// Whole-model goldens: prompt tokens, per-position logits, MoE routing and greedy continuations against
// llama.cpp's outputs (tests/data/goldens, made as described in shared/testdata/README.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/sampler.h"
#include "cpu_backend/kernels.h"
#include "cpu_backend/onednn_matmul.h"
#include "graph/engine.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using test::DataPath;
using test::ModelPath;

struct GoldenCase {
  std::string golden;  // file stem in tests/data/goldens
  std::string model;   // model path
  // Logits NMSE bound over all prompt positions. The goldens' README ("exact math vs llama.cpp") measures how far
  // exact float64 math sits from llama.cpp: F32 2.5e-14, F16 6.2e-7, Q8_0 6.1e-4, Q4_0 4.8e-4, Q4_K_M 9.8e-4,
  // mixtral Q4_0 2.9e-2, mixtral Q4_K_M 5.0e-3. We round activations as llama.cpp does, so we must sit at least
  // that close; the bounds below are tighter still (the test prints our values; docs/correctness.md records
  // them), leaving room only for a rounding-boundary crossing or two.
  double nmse_tol;
  // Greedy tokens that must match: as many as the README says float64 math matches, with or without llama.cpp's
  // activation rounding, whichever is fewer (a near-tie step ends the agreement either way).
  int min_greedy;
  // The README's exact-math NMSE. The slower kernel paths (TANDEM_ISA=scalar|avx2) sum in another float order,
  // and on quantized models a last-bit difference can flip one activation's rounding level and cascade; they
  // are held to exact math's distance, the bound, instead of the tighter one above.
  double exact_math_nmse;
};

// The model file of a case: as given, or, when its golden names `tandem synth` flags, written now.
std::string ModelOf(const GoldenCase& c) {
  if (!c.model.empty()) return c.model;
  return test::SynthGoldenModel(test::ReadJson(DataPath("goldens/" + c.golden + ".json")));
}

std::ostream& operator<<(std::ostream& os, const GoldenCase& c) { return os << c.golden; }

// Whether this run holds a model to exact math's distance instead of the tighter bound: the slower kernel paths
// (TANDEM_ISA), and quantized prefill through oneDNN's bf16 route (cpu_backend/onednn_matmul.h), which rounds the
// activations to bf16 instead of to llama.cpp's 8-bit blocks. Asked after the engine opened (its profile's
// settings are applied then).
bool HeldToExactMath() {
  if (std::getenv("TANDEM_ISA") != nullptr) return true;
  for (DType t : {DType::kQ4_0, DType::kQ8_0, DType::kMXFP4, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    if (cpu::OneDnnEnabled() && cpu::OneDnnQuantMinTokens(t) > 0) return true;
  }
  return false;
}

// The context llama.cpp ran the golden with: 256, or more for a long prompt.
int ContextOf(const nlohmann::json& g) {
  return std::max(256, g["settings"].value("n_ctx", 256));
}

const GoldenCase kCases[] = {
    {"stories260K", ModelPath("stories260K.gguf"), 1e-10, 32, 2.54e-14},
    {"stories260K-moe4", ModelPath("stories260K-moe4.gguf"), 1e-10, 32, 2.35e-14},
    {"tiny-llama-F16", DataPath("models/tiny-llama-F16.gguf"), 1e-6, 32, 6.19e-7},
    {"tiny-llama-Q8_0", DataPath("models/tiny-llama-Q8_0.gguf"), 3e-4, 5, 6.05e-4},
    {"tiny-llama-Q4_0", DataPath("models/tiny-llama-Q4_0.gguf"), 1e-4, 1, 4.83e-4},
    {"tiny-llama-Q4_K_M", DataPath("models/tiny-llama-Q4_K_M.gguf"), 3e-4, 6, 9.79e-4},
    {"tiny-mixtral-Q4_0", DataPath("models/tiny-mixtral-Q4_0.gguf"), 1e-3, 8, 2.91e-2},
    {"tiny-mixtral-Q4_K_M", DataPath("models/tiny-mixtral-Q4_K_M.gguf"), 5e-4, 2, 5.00e-3},
    // F32 weights with Llama 3.1's RoPE frequency factors (rope_freqs.weight), written by `tandem synth` as its
    // golden's JSON says; without the factors the logits sit 1.3e-5 from llama.cpp's. Exact math was not measured
    // for it: the bound stands in.
    {"synth-llama3-rope", "", 1e-10, 32, 1e-10},
    // The other families, as `tandem synth` writes them with their real vocabularies (the prompt's tokens are
    // checked against llama.cpp's too): Llama 3.1 (rope_freqs, BPE), Qwen2.5 (q/k/v biases), Qwen3 (per-head q/k
    // norms), Qwen3-MoE (128 experts, top-8 renormalised), each at F32 and in the Q4_K_M mix. Logits of the last
    // prompt position only. Exact math was not measured: the bounds stand in.
    {"synth-llama3", "", 1e-10, 32, 1e-10},
    {"synth-qwen2", "", 1e-10, 32, 1e-10},
    {"synth-qwen3", "", 1e-10, 32, 1e-10},
    {"synth-qwen3moe", "", 1e-10, 32, 1e-10},
    {"synth-llama3-Q4_K_M", "", 3e-4, 4, 1e-3},
    {"synth-qwen2-Q4_K_M", "", 3e-4, 4, 1e-3},
    {"synth-qwen3-Q4_K_M", "", 3e-4, 4, 1e-3},
    {"synth-qwen3moe-Q4_K_M", "", 5e-4, 2, 5e-3},
    // Qwen1.5/Qwen2-MoE: Qwen2's attention, 60 experts top-4 whose softmax weights are not renormalised, and a
    // shared expert of its own width behind a per-token sigmoid gate. Qwen2.5 with YaRN RoPE scaling (factor 8 over
    // 4096 original positions): without it the same weights' greedy text differs from the first token.
    {"synth-qwen2moe", "", 1e-10, 32, 1e-10},
    {"synth-qwen2moe-Q4_K_M", "", 5e-4, 2, 5e-3},
    {"synth-qwen2-yarn", "", 1e-10, 32, 1e-10},
    // gpt-oss: q/k/v/o biases, a sink per head, an 8-key window on layer 0 (the real models' 128 reduced so the
    // 27-token prompt crosses it) and full attention on layer 1, YaRN (factor 32 over 4096), a top-k-by-logit
    // router with a bias and a softmax over the chosen, biased experts with the clamped SwiGLU; harmony vocab.
    {"synth-gpt-oss", "", 1e-10, 32, 1e-10},
    // gpt-oss as it ships: MXFP4 experts, Q8_0 for every other matrix (llama.cpp's MXFP4_MOE), the real 128-key
    // window, and a 315-token prompt, so that layer 0 drops keys.
    {"synth-gpt-oss-MXFP4", "", 5e-4, 2, 5e-3},
};

class GoldenTest : public ::testing::TestWithParam<GoldenCase> {};

// The golden's top1 - top2 logit margin of greedy step k.
double GreedyMargin(const nlohmann::json& g, size_t k) {
  const nlohmann::json& top = k == 0 ? g["top16_per_position"].back() : g["greedy_step_top8"][k - 1];
  return top[0][1].get<double>() - top[1][1].get<double>();
}

TEST_P(GoldenTest, MatchesLlamaCpp) {
  const GoldenCase& c = GetParam();
  const nlohmann::json g = test::ReadJson(DataPath("goldens/" + c.golden + ".json"));
  const std::vector<float> want_logits = test::ReadF32(DataPath("goldens/" + c.golden + ".logits.f32.bin"));

  std::map<int, std::vector<float>> router_logits;  // layer -> [n_tok][n_expert] of the prompt batch
  bool capture = true;
  EngineOptions eo{.model_path = ModelOf(c), .n_ctx = ContextOf(g), .n_batch = ContextOf(g),
                   .kv_type = DType::kF32};
  eo.dump = [&](std::string_view name, int layer, std::span<const float> data) {
    if (capture && name == "ffn_gate_inp") router_logits[layer].assign(data.begin(), data.end());
  };
  auto engine = Engine::Open(eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  Engine& e = **engine;
  const ModelConfig& cfg = e.config();

  // Prompt tokens.
  const std::vector<int32_t> prompt = e.tokenizer().Encode(g["prompt"].get<std::string>());
  ASSERT_EQ(prompt, g["prompt_tokens"].get<std::vector<int32_t>>());

  // Logits of every prompt position, in one prompt pass.
  const int n_vocab = cfg.n_vocab;
  std::vector<float> logits(prompt.size() * n_vocab);
  test::Poison(logits);
  ASSERT_TRUE(e.Prefill(prompt, 0, /*all_logits=*/true, logits.data()).ok());
  // Goldens of real-size vocabularies keep the logits of the last positions only (logits_positions).
  const std::vector<float> all_logits = logits;
  logits.clear();
  for (int64_t p : g["logits_positions"].get<std::vector<int64_t>>()) {
    ASSERT_LT(p, static_cast<int64_t>(prompt.size()));
    logits.insert(logits.end(), all_logits.begin() + p * n_vocab, all_logits.begin() + (p + 1) * n_vocab);
  }
  ASSERT_EQ(logits.size(), want_logits.size());
  const bool slower_path = HeldToExactMath();
  const double nmse = test::Nmse(logits, want_logits);
  const double max_abs = test::MaxAbsDiff(logits, want_logits);
  EXPECT_LT(nmse, slower_path ? std::max(c.nmse_tol, c.exact_math_nmse) : c.nmse_tol) << "max abs diff " << max_abs;
  RecordProperty("logits_nmse", std::to_string(nmse));
  std::printf("[ %s ] logits NMSE %.3g, max abs diff %.3g\n", c.golden.c_str(), nmse,
              test::MaxAbsDiff(logits, want_logits));

  // MoE routing: our top-k set equals llama.cpp's wherever its k-th and (k+1)-th probabilities are not a
  // near-tie (a tie may legitimately go either way under float rounding).
  if (cfg.is_moe()) {
    constexpr double kNearTie = 1e-3;
    const int k = cfg.n_expert_used;
    int compared = 0, flips = 0;
    for (const nlohmann::json& layer : g["moe_routing"]["layers"]) {
      const int il = layer["layer"].get<int>();
      ASSERT_EQ(router_logits[il].size(), prompt.size() * cfg.n_expert);
      std::vector<int32_t> ids(prompt.size() * k);
      std::vector<float> w(prompt.size() * k);
      cpu::MoeRouteRef(router_logits[il].data(), prompt.size(), MoeRouteParams{.n_expert = cfg.n_expert, .k = k},
                       ids.data(), w.data());
      for (size_t t = 0; t < prompt.size(); ++t) {
        std::vector<double> probs = layer["probs"][t].get<std::vector<double>>();
        std::sort(probs.rbegin(), probs.rend());
        if (probs[k - 1] - probs[k] < kNearTie) continue;
        std::vector<int32_t> want = layer["topk"][t].get<std::vector<int32_t>>();
        std::vector<int32_t> got(ids.begin() + t * k, ids.begin() + (t + 1) * k);
        std::sort(want.begin(), want.end());
        std::sort(got.begin(), got.end());
        ++compared;
        if (want != got) ++flips;
        EXPECT_EQ(got, want) << "layer " << il << " token " << t;
      }
    }
    std::printf("[ %s ] routing: %d (token, layer) pairs compared, %d flips\n", c.golden.c_str(), compared, flips);
    EXPECT_GT(compared, 0);
  }
  capture = false;

  // Greedy continuation, one token at a time, argmax with ties to the lowest id.
  const std::vector<int32_t> want_greedy = g["greedy_tokens"].get<std::vector<int32_t>>();
  std::vector<float> last(logits.end() - n_vocab, logits.end());
  int matched = 0;
  for (size_t step = 0; step < want_greedy.size(); ++step) {
    const int32_t id = Argmax(last);
    if (id != want_greedy[step]) break;
    ++matched;
    test::Poison(last);
    ASSERT_TRUE(e.executor().Forward(std::span<const int32_t>(&id, 1), prompt.size() + step, 1, last.data()).ok());
  }
  std::printf("[ %s ] greedy: %d of %zu tokens match (first margin below 1e-3 at step ", c.golden.c_str(), matched,
              want_greedy.size());
  size_t first_tight = want_greedy.size();
  for (size_t k = 0; k < want_greedy.size(); ++k) {
    if (GreedyMargin(g, k) < 1e-3) {
      first_tight = k;
      break;
    }
  }
  std::printf("%zu)\n", first_tight);
  int must_match = c.min_greedy;
  if (slower_path) {  // only the steps whose golden margin exceeds twice our logits' distance are decided
    int decided = 0;
    while (decided < static_cast<int>(want_greedy.size()) && GreedyMargin(g, decided) > 2 * max_abs) ++decided;
    must_match = std::min(must_match, decided);
  }
  EXPECT_GE(matched, must_match);
}

INSTANTIATE_TEST_SUITE_P(AllModels, GoldenTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) {
                           std::string s = info.param.golden;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// A prompt evaluated for its last logits only, in chunks of 3 tokens: the chunks before the last ask for no logits
// and the last asks for one row, so the last layer computes queries, attention and its FFN for that row alone
// (all rows still enter the KV cache). The logits must equal the last row of the full evaluation above, and the
// dumps must show the skipped work was skipped.
TEST_P(GoldenTest, LastRowOnlyMatchesFullPrefill) {
  const GoldenCase& c = GetParam();
  const nlohmann::json g = test::ReadJson(DataPath("goldens/" + c.golden + ".json"));
  const std::vector<float> want_logits = test::ReadF32(DataPath("goldens/" + c.golden + ".logits.f32.bin"));
  std::vector<int64_t> last_layer_rows;  // per chunk: rows the last layer's FFN saw (-1: it did not run)
  int n_embd = 0, n_layer = 0;
  EngineOptions eo{.model_path = ModelOf(c), .n_ctx = ContextOf(g), .n_batch = 3, .kv_type = DType::kF32};
  eo.dump = [&](std::string_view name, int layer, std::span<const float> data) {
    if (name == "attn_norm" && layer == n_layer - 1) last_layer_rows.push_back(-1);
    if (name == "l_out" && layer == n_layer - 1) last_layer_rows.back() = static_cast<int64_t>(data.size()) / n_embd;
  };
  auto engine = Engine::Open(eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  Engine& e = **engine;
  n_embd = e.config().n_embd;
  n_layer = e.config().n_layer;
  const std::vector<int32_t> prompt = g["prompt_tokens"].get<std::vector<int32_t>>();
  ASSERT_GT(prompt.size(), 3u);
  const int n_vocab = e.config().n_vocab;
  std::vector<float> last(n_vocab);
  test::Poison(last);
  ASSERT_TRUE(e.Prefill(prompt, 0, /*all_logits=*/false, last.data()).ok());

  const size_t chunks = (prompt.size() + 2) / 3;
  std::vector<int64_t> want_rows(chunks, -1);
  want_rows.back() = 1;
  EXPECT_EQ(last_layer_rows, want_rows);
  const std::vector<float> want_last(want_logits.end() - n_vocab, want_logits.end());
  const bool slower_path = HeldToExactMath();
  EXPECT_LT(test::Nmse(last, want_last), slower_path ? std::max(c.nmse_tol, c.exact_math_nmse) : c.nmse_tol);

  // Against our own full evaluation: every CPU kernel of ours computes a token's row the same way whatever the
  // batch, so on every kernel path the row is bit-identical. oneDNN's float products (on by default) are not: the
  // one-row product is ours, the whole batch oneDNN's, in another order of f32 sums (F32 models 2.6e-13 to 3.8e-13
  // apart; F16 3.1e-7, as a last-bit difference moves the next product's f16-rounded activations). So then the
  // two are held to the golden's bound of each other, or to exact math's distance where quantized prefill takes
  // oneDNN's bf16 route (the chunks of 3 tokens do not: they are decode-sized).
  auto full_engine = Engine::Open(EngineOptions{.model_path = ModelOf(c), .n_ctx = ContextOf(g),
                                                .n_batch = ContextOf(g), .kv_type = DType::kF32});
  ASSERT_TRUE(full_engine.ok()) << full_engine.status();
  std::vector<float> all(prompt.size() * n_vocab);
  test::Poison(all);
  ASSERT_TRUE((*full_engine)->Prefill(prompt, 0, /*all_logits=*/true, all.data()).ok());
  const std::vector<float> full_last(all.end() - n_vocab, all.end());
  if (cpu::OneDnnEnabled()) {
    EXPECT_LT(test::Nmse(last, full_last), slower_path ? std::max(c.nmse_tol, c.exact_math_nmse) : c.nmse_tol);
  } else {
    EXPECT_EQ(last, full_last) << "NMSE " << test::Nmse(last, full_last);
  }
}

// Greedy 64 tokens from BOS alone: llama.cpp's exact ids, dense and MoE.
class BosGreedyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BosGreedyTest, SixtyFourTokensFromBos) {
  const std::string stem = GetParam();
  const nlohmann::json g = test::ReadJson(DataPath("goldens/" + stem + ".bos.json"));
  auto engine = Engine::Open(EngineOptions{.model_path = ModelPath(stem + ".gguf"), .n_ctx = 256, .n_batch = 256,
                                           .kv_type = DType::kF32});
  ASSERT_TRUE(engine.ok()) << engine.status();
  Engine& e = **engine;
  const std::vector<int32_t> prompt = e.tokenizer().Encode("");
  ASSERT_EQ(prompt, g["prompt_tokens"].get<std::vector<int32_t>>());
  std::vector<float> logits(e.config().n_vocab);
  ASSERT_TRUE(e.Prefill(prompt, 0, false, logits.data()).ok());
  const std::vector<float> want_bos = test::ReadF32(DataPath("goldens/" + stem + ".bos.logits.f32.bin"));
  EXPECT_LT(test::Nmse(logits, want_bos), 1e-10);
  std::vector<int32_t> got;
  for (int step = 0; step < 64; ++step) {
    const int32_t id = Argmax(logits);
    got.push_back(id);
    ASSERT_TRUE(e.executor().Forward(std::span<const int32_t>(&id, 1), 1 + step, 1, logits.data()).ok());
  }
  EXPECT_EQ(got, g["greedy_tokens"].get<std::vector<int32_t>>());
  EXPECT_EQ(e.tokenizer().Decode(got), g["greedy_text"].get<std::string>());
}

INSTANTIATE_TEST_SUITE_P(RealModels, BosGreedyTest, ::testing::Values("stories260K", "stories260K-moe4"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// gpt-oss's windowed layer keeps a ring of window + batch - 1 rows: with 4-token batches an 11-row ring for the
// 8-key window, which the 27-token prompt and 32 greedy steps wrap five times. The logits and the greedy text are
// llama.cpp's all the same; the plan counts the ring's bytes, not a full context's.
TEST(GoldenRing, GptOssDecodesThroughItsWindowRing) {
  const nlohmann::json g = test::ReadJson(DataPath("goldens/synth-gpt-oss.json"));
  const std::vector<float> want_logits = test::ReadF32(DataPath("goldens/synth-gpt-oss.logits.f32.bin"));
  EngineOptions eo{.model_path = test::SynthGoldenModel(g), .n_ctx = 256, .n_batch = 4, .kv_type = DType::kF32};
  auto engine = Engine::Open(eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  Engine& e = **engine;
  const ModelConfig& cfg = e.config();
  ASSERT_TRUE(cfg.is_swa(0));
  ASSERT_FALSE(cfg.is_swa(1));
  uint64_t kv0 = 0, kv1 = 0;
  for (const UnitPlan& u : e.plan().units) {
    if (u.kind == UnitKind::kAttn) (u.layer == 0 ? kv0 : kv1) = u.kv_bytes;
  }
  EXPECT_EQ(kv0, 2ull * (cfg.n_swa + 4 - 1) * cfg.n_embd_kv() * 4);
  EXPECT_EQ(kv1, 2ull * 256 * cfg.n_embd_kv() * 4);

  const std::vector<int32_t> prompt = g["prompt_tokens"].get<std::vector<int32_t>>();
  std::vector<float> last(cfg.n_vocab);
  test::Poison(last);
  ASSERT_TRUE(e.Prefill(prompt, 0, /*all_logits=*/false, last.data()).ok());
  EXPECT_LT(test::Nmse(last, want_logits), 1e-10);
  const std::vector<int32_t> want_greedy = g["greedy_tokens"].get<std::vector<int32_t>>();
  for (size_t step = 0; step < want_greedy.size(); ++step) {
    const int32_t id = Argmax(last);
    ASSERT_EQ(id, want_greedy[step]) << "step " << step;
    test::Poison(last);
    ASSERT_TRUE(e.executor().Forward(std::span<const int32_t>(&id, 1), prompt.size() + step, 1, last.data()).ok());
  }
}

}  // namespace
}  // namespace tandem

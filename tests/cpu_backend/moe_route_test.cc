// MoE routing with the options of runtime/ops.h's MoeRouteParams (softmax, sigmoid and softmax-of-the-top-k gating,
// normalization, scale, a selection bias) against MoeRouteRef on a grid, and hand-worked cases for both.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "cpu_backend/kernels.h"
#include "tests/testutil.h"

namespace tandem::cpu {
namespace {

using test::Nmse;
using test::Poison;
using test::RandomNormal;

// Float against double on weights of O(1): measured at most 4.7e-15 over this grid.
constexpr double kTolF32 = 1e-12;

using RouteCase = std::tuple<MoeGating, bool /*normalize*/, float /*scale*/, bool /*bias*/, std::pair<int, int>>;

std::string RouteCaseName(const testing::TestParamInfo<RouteCase>& info) {
  const auto& [gating, normalize, scale, bias, shape] = info.param;
  return Cat(MoeGatingName(gating), normalize ? "_norm" : "", scale != 1.0f ? "_scaled" : "", bias ? "_bias" : "", "_",
             shape.first, "x", shape.second);
}

class MoeRouteOptionsTest : public testing::TestWithParam<RouteCase> {};

TEST_P(MoeRouteOptionsTest, MatchesReference) {
  const auto& [gating, normalize, scale, with_bias, shape] = GetParam();
  const auto [n_expert, k] = shape;
  const int64_t n_tok = 37;
  const auto logits = RandomNormal(static_cast<size_t>(n_tok * n_expert), 51, 2.0f);
  // A bias of the size of the gaps between probabilities, so that it changes some choices.
  const float bias_scale = gating == MoeGating::kSoftmax ? 0.5f / static_cast<float>(n_expert) : 0.3f;
  const auto bias = RandomNormal(static_cast<size_t>(n_expert), 52, bias_scale);
  const MoeRouteParams p{.n_expert = n_expert, .k = k, .gating = gating, .normalize = normalize, .scale = scale,
                         .selection_bias = with_bias ? bias.data() : nullptr};
  std::vector<int32_t> ids(static_cast<size_t>(n_tok * k), -1), ref_ids(ids.size(), -2);
  std::vector<float> w(ids.size()), ref_w(ids.size());
  Poison(w);
  Poison(ref_w);
  MoeRoute(logits.data(), n_tok, p, ids.data(), w.data());
  MoeRouteRef(logits.data(), n_tok, p, ref_ids.data(), ref_w.data());
  EXPECT_EQ(ids, ref_ids);
  if (with_bias && k < n_expert) {  // the bias really moves choices here (so the grid tests it)
    std::vector<int32_t> unbiased(ids.size());
    std::vector<float> unbiased_w(ids.size());
    MoeRouteParams no_bias = p;
    no_bias.selection_bias = nullptr;
    MoeRoute(logits.data(), n_tok, no_bias, unbiased.data(), unbiased_w.data());
    EXPECT_NE(ids, unbiased);
  }
  const double nmse = Nmse(w, ref_w);
  EXPECT_LT(nmse, kTolF32);
  std::printf("  NMSE %.3g\n", nmse);
  for (int64_t t = 0; t < n_tok; ++t) {
    const int32_t* it = ids.data() + t * k;
    std::vector<int32_t> sorted(it, it + k);
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "token " << t << " repeats an expert";
    EXPECT_GE(sorted.front(), 0);
    EXPECT_LT(sorted.back(), n_expert);
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += w[t * k + j];
    // Normalized weights, and softmax over the chosen, sum to the scale.
    if (normalize || gating == MoeGating::kSoftmaxTopK) {
      EXPECT_NEAR(sum, scale, 1e-5 * scale) << "token " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grid, MoeRouteOptionsTest,
    testing::Combine(testing::Values(MoeGating::kSoftmax, MoeGating::kSigmoid, MoeGating::kSoftmaxTopK),
                     testing::Bool(), testing::Values(1.0f, 2.5f), testing::Bool(),
                     testing::Values(std::pair{8, 2}, std::pair{60, 4}, std::pair{128, 8}, std::pair{5, 5})),
    RouteCaseName);

// ---------------------------------------------------------------- hand-worked cases, kernel and reference

struct HandCase {
  const char* what;
  MoeRouteParams p;  // n_expert and k filled from the case
  std::vector<float> logits;
  std::vector<float> bias;  // empty: none
  int k;
  std::vector<int32_t> ids;
  std::vector<double> weights;  // worked out in Python, float64
};

TEST(MoeRouteHand, KnownRoutings) {
  const float ln2 = std::log(2.0f), ln3 = std::log(3.0f);
  const std::vector<HandCase> cases = {
      {"sigmoid: top 2 of sigmoid(0, 1, -1, 2)", {.gating = MoeGating::kSigmoid, .normalize = false},
       {0, 1, -1, 2}, {}, 2, {3, 1}, {0.8807970779778823, 0.7310585786300049}},
      // The bias lifts expert 2 (0.269 + 1) above expert 1 (0.731), so it is chosen; its weight stays its own
      // sigmoid(-1).
      {"sigmoid, biased choice", {.gating = MoeGating::kSigmoid, .normalize = false},
       {0, 1, -1, 2}, {0, 0, 1, 0}, 2, {2, 3}, {0.2689414213699951, 0.8807970779778823}},
      {"sigmoid, biased choice, normalized", {.gating = MoeGating::kSigmoid},
       {0, 1, -1, 2}, {0, 0, 1, 0}, 2, {2, 3}, {0.2339152959760298, 0.7660847040239702}},
      // DeepSeek V3's form: sigmoid, normalized, scaled by 2.5.
      {"sigmoid, normalized, scaled", {.gating = MoeGating::kSigmoid, .scale = 2.5f},
       {1, 2, 3, 0}, {}, 2, {2, 1}, {1.2989378860215386, 1.2010621139784614}},
      // Sigmoids too small to normalize by: the sum (2.08e-9) is clamped to 2^-14, so weights = sigmoid * 16384.
      {"sigmoid, clamped sum", {.gating = MoeGating::kSigmoid},
       {-20, -30, -25}, {}, 2, {0, 2}, {3.37699408804283e-05, 2.2754007228041042e-07}},
      // gpt-oss: the top 2 logits (3, 2), softmax over them alone: e / (e + 1), 1 / (e + 1), whatever the others.
      {"softmax of the top k", {.gating = MoeGating::kSoftmaxTopK, .normalize = false},
       {1, 3, 2, 0}, {}, 2, {1, 2}, {0.7310585786300049, 0.2689414213699951}},
      {"softmax of the top k, other logits moved", {.gating = MoeGating::kSoftmaxTopK, .normalize = false},
       {-7, 3, 2, 1.5f}, {}, 2, {1, 2}, {0.7310585786300049, 0.2689414213699951}},
      // Probabilities 1, 3, 2, 4 tenths: top 2 = experts 3, 1. Unnormalized 0.4, 0.3, then times 2.5.
      {"softmax, unnormalized, scaled", {.normalize = false, .scale = 2.5f},
       {0, ln3, ln2, 2 * ln2}, {}, 2, {3, 1}, {1.0, 0.75}},
      {"softmax, normalized, scaled", {.scale = 2.5f},
       {0, ln3, ln2, 2 * ln2}, {}, 2, {3, 1}, {2.5 * 4 / 7, 2.5 * 3 / 7}},
      // A bias that ties two experts: the lower id goes first.
      {"sigmoid, tie by bias", {.gating = MoeGating::kSigmoid, .normalize = false},
       {0, 0, 0}, {0, 0.25f, 0.25f}, 1, {1}, {0.5}},
  };
  for (const HandCase& c : cases) {
    MoeRouteParams p = c.p;
    p.n_expert = static_cast<int>(c.logits.size());
    p.k = c.k;
    p.selection_bias = c.bias.empty() ? nullptr : c.bias.data();
    for (bool ref : {false, true}) {
      SCOPED_TRACE(Cat(c.what, ref ? " (reference)" : ""));
      std::vector<int32_t> ids(static_cast<size_t>(c.k), -1);
      std::vector<float> w(static_cast<size_t>(c.k));
      Poison(w);
      if (ref) {
        MoeRouteRef(c.logits.data(), 1, p, ids.data(), w.data());
      } else {
        MoeRoute(c.logits.data(), 1, p, ids.data(), w.data());
      }
      EXPECT_EQ(ids, c.ids);
      for (int i = 0; i < c.k; ++i) EXPECT_NEAR(w[i], c.weights[i], 1e-6 * std::abs(c.weights[i])) << i;
    }
  }
}

}  // namespace
}  // namespace tandem::cpu

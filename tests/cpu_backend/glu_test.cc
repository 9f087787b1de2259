// Gated activations (runtime/ops.h's GluParams: SiLU, GELU's tanh form, gpt-oss's clamped SwiGLU) against GluRef
// on every ISA path, hand values, and AddBias.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/status.h"
#include "cpu_backend/kernels.h"
#include "tests/testutil.h"

namespace tandem::cpu {
namespace {

using test::Nmse;
using test::Poison;
using test::RandomNormal;

// NMSE bound of float against double on O(1) values (measured: at most 1.3e-14 over this grid).
constexpr double kTolF32 = 1e-12;

struct GluCase {
  Activation act;
  bool with_u;
};

class GluTest : public testing::TestWithParam<GluCase> {};

TEST_P(GluTest, MatchesReferenceOnEveryIsa) {
  const GluCase c = GetParam();
  const GluParams p{.act = c.act};
  // gpt-oss's inputs spread past +-limit (7) often, so the clamps are exercised.
  const float spread = c.act == Activation::kSwigluOai ? 6.0f : 4.0f;
  const Isa saved = ActiveIsa();
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(DetectedIsa())) continue;
    SetIsa(isa);
    for (int64_t n : {1, 17, 1000, 70000}) {  // 70000: the threaded loops
      SCOPED_TRACE(Cat("isa ", static_cast<int>(isa), " n ", n));
      const auto g = RandomNormal(static_cast<size_t>(n), 31, spread);
      const auto u = RandomNormal(static_cast<size_t>(n), 32, c.act == Activation::kSwigluOai ? 6.0f : 1.0f);
      const float* up = c.with_u ? u.data() : nullptr;
      std::vector<float> y(g.size()), ref(g.size());
      Poison(y);
      Poison(ref);
      Glu(g.data(), up, n, p, y.data());
      GluRef(g.data(), up, n, p, ref.data());
      const double nmse = Nmse(y, ref);
      EXPECT_LT(nmse, kTolF32);
      // Per element: a few float ulp of the value (at most 2.3e-7 measured), plus what float rounding of the
      // input to e^x costs. GELU's 1 + tanh(..) cancels for g below about -3 (as in llama.cpp's float GELU), where
      // the value is tiny: there the error is bounded by an ulp of 0.5 g u instead. gpt-oss's e^(-alpha g') gets its
      // argument rounded by the float product, a relative error of up to 2^-24 |alpha g'| in the result (measured
      // 1.9e-6 at |alpha g'| near 35).
      double worst = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double gu = std::abs(g[i]) * (up != nullptr ? std::abs(u[i]) : 1.0);
        const double scale = std::abs(ref[i]) + (c.act == Activation::kGelu ? 0.5 * gu : 0.0);
        const double exp_cond =
            c.act == Activation::kSwigluOai ? 6e-8 * std::abs(p.alpha * std::min(g[i], p.limit)) : 0.0;
        if (scale > 1e-30) worst = std::max(worst, std::abs(y[i] - ref[i]) / scale - exp_cond);
      }
      EXPECT_LT(worst, 5e-7);
      if (n == 70000) {
        std::printf("  %s isa %d: NMSE %.3g, worst relative %.3g\n", ActivationName(c.act), static_cast<int>(isa), nmse,
                    worst);
      }
    }
  }
  SetIsa(saved);
}

INSTANTIATE_TEST_SUITE_P(Acts, GluTest,
                         testing::Values(GluCase{Activation::kSilu, true}, GluCase{Activation::kSilu, false},
                                         GluCase{Activation::kGelu, true}, GluCase{Activation::kGelu, false},
                                         GluCase{Activation::kSwigluOai, true}),
                         [](const testing::TestParamInfo<GluCase>& info) {
                           return Cat(ActivationName(info.param.act), info.param.with_u ? "_gated" : "_alone");
                         });

// Values worked out independently (Python, float64), for the kernel and the reference alike, on every ISA. The
// default alpha is the float 1.702f = 1.7020000219345093, which is what the math is given.
TEST(GluHand, KnownValues) {
  struct Case {
    GluParams p;
    float g;
    float u;  // NaN: no u
    double want;
  };
  const float none = std::nanf("");
  const std::vector<Case> cases = {
      // gpt-oss: g = 8 clamps to 7 and u = -9 to -7: 7 sigmoid(1.702 * 7) (-7 + 1).
      {GluParams{.act = Activation::kSwigluOai}, 8.0f, -9.0f, -41.99971876986308},
      // g has no lower clamp; u = 9 clamps to 7: -8 sigmoid(-1.702 * 8) (7 + 1).
      {GluParams{.act = Activation::kSwigluOai}, -8.0f, 9.0f, -7.81314172156642e-05},
      // Inside the limits: 1 sigmoid(1.702) 1.5.
      {GluParams{.act = Activation::kSwigluOai}, 1.0f, 0.5f, 1.268693653190454},
      // Another alpha and limit: g = 3 -> 2, u = -5 -> -2 with alpha 1, limit 2: 2 sigmoid(2) (-1).
      {GluParams{.act = Activation::kSwigluOai, .alpha = 1.0f, .limit = 2.0f}, 3.0f, -5.0f, -1.7615941559557649},
      {GluParams{}, 2.0f, 3.0f, 5.284782467867294},       // silu(2) 3
      {GluParams{}, -1.0f, none, -0.2689414213699951},    // silu(-1)
      {GluParams{}, 0.0f, 5.0f, 0.0},
      {GluParams{.act = Activation::kGelu}, 1.0f, none, 0.8411919906082768},
      {GluParams{.act = Activation::kGelu}, -1.0f, none, -0.15880800939172324},
      {GluParams{.act = Activation::kGelu}, 3.0f, none, 2.996362607918227},
      {GluParams{.act = Activation::kGelu}, 0.5f, 2.0f, 0.6914280196502879},  // gelu(0.5) 2
  };
  const Isa saved = ActiveIsa();
  for (Isa isa : {Isa::kScalar, Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(DetectedIsa())) continue;
    SetIsa(isa);
    for (const Case& c : cases) {
      const float* u = std::isnan(c.u) ? nullptr : &c.u;
      float y = std::nanf(""), ref = std::nanf("");
      Glu(&c.g, u, 1, c.p, &y);
      GluRef(&c.g, u, 1, c.p, &ref);
      SCOPED_TRACE(Cat(ActivationName(c.p.act), " g ", c.g, " u ", c.u, " isa ", static_cast<int>(isa)));
      EXPECT_NEAR(y, c.want, 4e-7 * std::abs(c.want) + 1e-12);
      EXPECT_NEAR(ref, c.want, 1e-7 * std::abs(c.want) + 1e-12);
    }
  }
  SetIsa(saved);
}

TEST(GluHand, OaiClampsAreExact) {
  // Beyond the limits the result no longer depends on how far beyond: g = 7, 8, 1e6 and u = +-7, +-100 alike.
  const GluParams p{.act = Activation::kSwigluOai};
  const float g[4] = {7.0f, 8.0f, 1e6f, 7.0f};
  const float u[4] = {-7.0f, -100.0f, -7.5f, -1e30f};
  float y[4];
  Glu(g, u, 4, p, y);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(y[i], y[0]) << i;
}

// ---------------------------------------------------------------- AddBias

TEST(AddBias, RowsPlusBiasInPlaceAndNot) {
  for (auto [n_tok, n] : {std::pair<int64_t, int64_t>{1, 1}, {7, 33}, {3, 1000}, {300, 1000}}) {  // the last threads
    const auto x = RandomNormal(static_cast<size_t>(n_tok * n), 41);
    const auto b = RandomNormal(static_cast<size_t>(n), 42);
    std::vector<float> y(x.size());
    Poison(y);
    AddBias(x.data(), b.data(), n_tok, n, y.data());
    for (int64_t t = 0; t < n_tok; ++t) {
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[t * n + i], x[t * n + i] + b[i]) << t << " " << i;  // one add
    }
    std::vector<float> in_place = x;
    AddBias(in_place.data(), b.data(), n_tok, n, in_place.data());
    EXPECT_EQ(std::memcmp(in_place.data(), y.data(), y.size() * sizeof(float)), 0);
  }
}

// ---------------------------------------------------------------- ScaleRows

TEST(ScaleRows, EachRowTimesItsFactorOrItsSigmoid) {
  for (auto [n_tok, n] : {std::pair<int64_t, int64_t>{1, 1}, {7, 33}, {300, 1000}}) {  // the last threads
    const auto x = RandomNormal(static_cast<size_t>(n_tok * n), 43);
    const auto s = RandomNormal(static_cast<size_t>(n_tok), 44, 4.0f);
    for (RowScale f : {RowScale::kLinear, RowScale::kSigmoid}) {
      std::vector<float> y(x.size());
      Poison(y);
      ScaleRows(x.data(), s.data(), n_tok, n, f, y.data());
      for (int64_t t = 0; t < n_tok; ++t) {
        // The sigmoid in double: the float kernel is within a few ulps of it.
        const double g = f == RowScale::kSigmoid ? 1.0 / (1.0 + std::exp(-static_cast<double>(s[t]))) : s[t];
        for (int64_t i = 0; i < n; ++i) {
          const double want = x[t * n + i] * g;
          ASSERT_NEAR(y[t * n + i], want, 4e-7 * std::abs(want) + 1e-30) << t << " " << i;
        }
      }
      std::vector<float> in_place = x;
      ScaleRows(in_place.data(), s.data(), n_tok, n, f, in_place.data());
      EXPECT_EQ(std::memcmp(in_place.data(), y.data(), y.size() * sizeof(float)), 0);
    }
  }
  // Hand values: sigmoid(0) = 1/2; far out the gate saturates to 0 and 1 without NaN.
  const float x[3] = {2.0f, 2.0f, 2.0f}, s[3] = {0.0f, -200.0f, 200.0f};
  float y[3];
  ScaleRows(x, s, 3, 1, RowScale::kSigmoid, y);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 2.0f);
}

}  // namespace
}  // namespace tandem::cpu

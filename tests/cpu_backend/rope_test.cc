// RoPE with the options of runtime/ops.h's RopeParams (NEOX pairs, frequency factors, YaRN), the fast kernel against
// its float64 reference on a grid of them, the reference itself against angles worked out by hand, and Llama 3.1's
// frequency factors (runtime/rope_scaling.h).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "cpu_backend/kernels.h"
#include "runtime/rope_scaling.h"
#include "tests/testutil.h"

namespace tandem::cpu {
namespace {

using test::Nmse;
using test::RandomNormal;

bool SameBits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

// ---------------------------------------------------------------- Rope against RopeRef

// The kernel builds its angles as llama.cpp does, by repeated float multiplies, so its error grows with the
// position. The NMSE bound is per largest position; measured over this grid (printed): 3e-14 below 32, 5e-13
// below 256, 1e-11 at 700, 1.2e-9 at 4095.
double RopeTol(int32_t max_pos) {
  if (max_pos < 32) return 1e-12;
  if (max_pos < 256) return 1e-11;
  if (max_pos < 1024) return 1e-10;
  return 1e-8;
}

enum class Yarn { kOff, kFull, kPartial };

struct RopeShape {
  int n_head;
  int head_dim;
  int n_rot;
  float freq_base;
  int32_t max_pos;
};

using RopeCase = std::tuple<RopeMode, bool /*freq_factors*/, Yarn, RopeShape>;

std::string RopeCaseName(const testing::TestParamInfo<RopeCase>& info) {
  const auto& [mode, factors, yarn, s] = info.param;
  const char* yarn_name = yarn == Yarn::kOff ? "noyarn" : yarn == Yarn::kFull ? "yarn" : "yarnhalf";
  return Cat(RopeModeName(mode), factors ? "_ff_" : "_", yarn_name, "_h", s.n_head, "d",
             s.head_dim, "rot", s.n_rot, "pos", s.max_pos);
}

class RopeOptionsTest : public testing::TestWithParam<RopeCase> {};

TEST_P(RopeOptionsTest, MatchesReference) {
  const auto& [mode, with_factors, yarn, s] = GetParam();
  // Factors between 1 and 8, as Llama 3's are.
  std::vector<float> factors(static_cast<size_t>(s.n_rot / 2));
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(1.0f, 8.0f);
  for (float& f : factors) f = dist(rng);
  RopeParams p{.n_head = s.n_head, .head_dim = s.head_dim, .n_rot = s.n_rot, .mode = mode, .freq_base = s.freq_base,
               .freq_factors = with_factors ? factors.data() : nullptr};
  if (yarn != Yarn::kOff) {
    p.freq_scale = 0.25f;
    p.ext_factor = yarn == Yarn::kFull ? 1.0f : 0.5f;
    p.attn_factor = yarn == Yarn::kFull ? 1.0f : 0.9f;
    p.n_ctx_orig = 4096;
  }
  const int64_t n_tok = 16, row = static_cast<int64_t>(s.n_head) * s.head_dim;
  const std::vector<float> x = RandomNormal(static_cast<size_t>(n_tok * row), 3);
  // Position 0 (no turn), then spread up to max_pos, which the last token takes.
  std::vector<int32_t> pos(static_cast<size_t>(n_tok));
  for (int64_t t = 0; t < n_tok; ++t) pos[t] = static_cast<int32_t>((t * 7919) % (s.max_pos + 1));
  pos.back() = s.max_pos;
  std::vector<float> fast = x, ref = x;  // in place: the input is the output's only fill
  Rope(fast.data(), n_tok, pos.data(), p);
  RopeRef(ref.data(), n_tok, pos.data(), p);
  const double nmse = Nmse(fast, ref);
  EXPECT_LT(nmse, RopeTol(s.max_pos));
  std::printf("  NMSE %.3g\n", nmse);
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int h = 0; h < s.n_head; ++h) {
      for (int d = 0; d < s.head_dim; ++d) {
        const int64_t i = t * row + static_cast<int64_t>(h) * s.head_dim + d;
        ASSERT_FALSE(std::isnan(fast[i]));
        if (d >= s.n_rot) {
          ASSERT_TRUE(SameBits(fast[i], x[i])) << "dim " << d << " past n_rot changed";
        }
      }
    }
  }
  // Position 0 turns nothing: each pair only scales by YaRN's magnitude.
  if (yarn == Yarn::kOff) {
    for (int64_t i = 0; i < row; ++i) ASSERT_TRUE(SameBits(fast[i], x[i])) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grid, RopeOptionsTest,
    testing::Combine(testing::Values(RopeMode::kNorm, RopeMode::kNeox), testing::Bool(),
                     testing::Values(Yarn::kOff, Yarn::kFull, Yarn::kPartial),
                     testing::Values(RopeShape{4, 64, 64, 10000.0f, 31},        // whole heads
                                     RopeShape{2, 96, 64, 1e6f, 255},           // n_rot < head_dim
                                     RopeShape{3, 10, 6, 500000.0f, 700},       // odd pair count, partial
                                     RopeShape{8, 128, 128, 500000.0f, 4095})),  // Llama 3 heads, deep
    RopeCaseName);

// ---------------------------------------------------------------- hand-computed angles

// Both the kernel and the reference, against values worked out independently.
void ExpectBoth(const std::vector<float>& x, const std::vector<int32_t>& pos, const RopeParams& p,
                const std::vector<double>& want, double tol) {
  for (bool ref : {false, true}) {
    std::vector<float> y = x;
    const auto n_tok = static_cast<int64_t>(pos.size());
    if (ref) {
      RopeRef(y.data(), n_tok, pos.data(), p);
    } else {
      Rope(y.data(), n_tok, pos.data(), p);
    }
    ASSERT_EQ(y.size(), want.size());
    for (size_t i = 0; i < y.size(); ++i) {
      EXPECT_NEAR(y[i], want[i], tol) << (ref ? "RopeRef" : "Rope") << " [" << i << "]";
    }
  }
}

TEST(RopeHand, NeoxTurnsHalfApartPairs) {
  // head_dim 8 = n_rot, base 10000: theta_i = pos * 10000^(-2i/8) = pos * 10^-i; at pos 3: 3, 0.3, 0.03, 0.003.
  // NEOX pairs dims (i, i + 4). Head 0 holds e_1: pair 1 = (1, 5) turns it to (cos 0.3, sin 0.3) in dims 1 and 5.
  // Head 1 holds e_4, the second of pair 0 = (0, 4): it becomes (-sin 3, cos 3) in dims 0 and 4. (NORM would
  // have paired dims 0-1 and 4-5 instead.)
  std::vector<float> x(16, 0.0f);
  x[1] = 1.0f;
  x[8 + 4] = 1.0f;
  std::vector<double> want(16, 0.0);
  want[1] = std::cos(0.3);
  want[5] = std::sin(0.3);
  want[8 + 0] = -std::sin(3.0);
  want[8 + 4] = std::cos(3.0);
  ExpectBoth(x, {3}, RopeParams{.n_head = 2, .head_dim = 8, .n_rot = 8, .mode = RopeMode::kNeox}, want, 1e-6);
}

TEST(RopeHand, NeoxPartialRotation) {
  // head_dim 6, n_rot 4, base 100, pos 2: pairs (0, 2) by theta_0 = 2 and (1, 3) by theta_1 = 2 * 100^(-1/2) = 0.2;
  // dims 4 and 5 stay.
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const std::vector<double> want = {1 * std::cos(2.0) - 3 * std::sin(2.0), 2 * std::cos(0.2) - 4 * std::sin(0.2),
                                    1 * std::sin(2.0) + 3 * std::cos(2.0), 2 * std::sin(0.2) + 4 * std::cos(0.2),
                                    5, 6};
  ExpectBoth(x, {2},
             RopeParams{.n_head = 1, .head_dim = 6, .n_rot = 4, .mode = RopeMode::kNeox, .freq_base = 100.0f}, want,
             1e-6);
}

TEST(RopeHand, FreqFactorsDivideTheAngle) {
  // head_dim 4 = n_rot, base 10000, factors (2, 4), pos 8: theta_0 = 8 / 2 = 4, theta_1 = 8 * 0.01 / 4 = 0.02.
  const float factors[2] = {2.0f, 4.0f};
  const std::vector<float> x = {1, 0, 0, 1};
  const std::vector<double> want = {std::cos(4.0), std::sin(4.0), -std::sin(0.02), std::cos(0.02)};
  ExpectBoth(x, {8}, RopeParams{.n_head = 1, .head_dim = 4, .n_rot = 4, .freq_factors = factors}, want, 1e-6);
}

TEST(RopeHand, YarnRampEndpoints) {
  // n_rot 16, base 10000, n_ctx_orig 4096, beta_fast 32, beta_slow 1. d(b) = 16 ln(4096 / (2 pi b)) / (2 ln 10000):
  // d(32) = 0.8686 * ln 20.37 = 2.62 -> lo = floor = 2; d(1) = 0.8686 * ln 651.9 = 5.63 -> hi = ceil = 6.
  // So the ramp 1 - clamp((i - 2) / 4, 0, 1) is 1, 1, 1, 0.75, 0.5, 0.25, 0, 0 over the 8 pairs: pairs 0..2 keep
  // the extrapolated angle e_i = pos * 10000^(-i/8), pairs 6 and 7 take the interpolated 0.25 e_i, between they
  // mix: theta_i = e_i (0.25 (1 - r_i) + r_i), r_i = ext_factor * ramp_i. The magnitude is m = 1 + 0.1 ln 4.
  const double ramp[8] = {1, 1, 1, 0.75, 0.5, 0.25, 0, 0};
  const int32_t pos = 5;
  for (float ext : {1.0f, 0.5f}) {
    SCOPED_TRACE(Cat("ext_factor ", ext));
    const RopeParams p{.n_head = 1, .head_dim = 16, .n_rot = 16, .freq_scale = 0.25f, .ext_factor = ext,
                       .n_ctx_orig = 4096};
    std::vector<float> x(16, 0.0f);
    std::vector<double> want(16);
    const double m = 1.0 + 0.1 * std::log(4.0);
    for (int i = 0; i < 8; ++i) {
      x[2 * i] = 1.0f;  // (1, 0) in each pair: the output is (m cos theta, m sin theta)
      const double e = pos * std::pow(10.0, -i / 2.0);  // 10000^(-i/8)
      const double r = ext * ramp[i];
      const double theta = e * (0.25 * (1 - r) + r);
      want[2 * i] = m * std::cos(theta);
      want[2 * i + 1] = m * std::sin(theta);
    }
    // Pair 4 at full ext: e = 5 * 0.01 = 0.05, theta = 0.625 * 0.05 = 0.03125.
    if (ext == 1.0f) {
      EXPECT_NEAR(want[9], m * std::sin(0.03125), 1e-15);
    }
    ExpectBoth(x, {pos}, p, want, 2e-6);
  }
}

// ---------------------------------------------------------------- Llama3RopeFreqFactors

// An independent computation: wavelengths from the log of the base, the blend written as factor / ((1 - s) +
// s factor), which is the same function as 1 / ((1 - s) / factor + s).
std::vector<double> Llama3FactorsDouble(int n_rot, double base, double factor, double low, double high, double orig) {
  std::vector<double> out;
  for (int i = 0; i < n_rot / 2; ++i) {
    const double wavelen = 2.0 * std::numbers::pi * std::exp(2.0 * i / n_rot * std::log(base));
    const double ratio = orig / wavelen;  // > high: short wavelength, < low: long
    if (ratio > high) {
      out.push_back(1.0);
    } else if (ratio < low) {
      out.push_back(factor);
    } else {
      const double s = (ratio - low) / (high - low);
      out.push_back(factor / ((1.0 - s) + s * factor));
    }
  }
  return out;
}

TEST(Llama3RopeFreqFactors, MatchesIndependentComputation) {
  struct Case {
    int n_rot;
    float base, factor, low, high;
    int orig;
  };
  for (const Case& c : {Case{128, 500000.0f, 8.0f, 1.0f, 4.0f, 8192},    // Llama 3.1
                        Case{64, 500000.0f, 32.0f, 1.0f, 4.0f, 8192},    // Llama 3.2 1B (head_dim 64)
                        Case{128, 500000.0f, 32.0f, 1.0f, 4.0f, 8192},   // Llama 3.2 3B
                        Case{64, 10000.0f, 4.0f, 2.0f, 8.0f, 2048}}) {   // made up: another range
    SCOPED_TRACE(Cat("n_rot ", c.n_rot, " factor ", c.factor));
    const std::vector<float> got = Llama3RopeFreqFactors(c.n_rot, c.base, c.factor, c.low, c.high, c.orig);
    const std::vector<double> want = Llama3FactorsDouble(c.n_rot, c.base, c.factor, c.low, c.high, c.orig);
    ASSERT_EQ(got.size(), want.size());
    int blended = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], want[i] * 2e-7) << i;  // one float rounding
      if (i > 0) {
        EXPECT_GE(got[i], got[i - 1]) << "factors grow with the wavelength";
      }
      EXPECT_GE(got[i], 1.0f);
      EXPECT_LE(got[i], c.factor);
      blended += got[i] > 1.0f && got[i] < c.factor;
    }
    EXPECT_GT(blended, 0) << "no pair in the blended band";
    EXPECT_EQ(got.front(), 1.0f);
    EXPECT_EQ(got.back(), c.factor);
  }
}

TEST(Llama3RopeFreqFactors, Llama31HandChecked) {
  // factor 8, low 1, high 4, original context 8192, base 500000, n_rot 128: freq_i = 500000^(-i/64), wavelength
  // 2 pi / freq_i. Below 8192 / 4 = 2048 the factor is 1, above 8192 / 1 the factor is 8.
  //   i = 28: wavelength 2 pi 500000^(28/64) = 1956.5 < 2048              -> 1
  //   i = 29: 2401.74, smooth = (8192 / 2401.74 - 1) / 3 = 0.803621        -> 1 / (0.196379 / 8 + 0.803621) = 1.20748
  //   i = 32: freq = 1/sqrt(500000), wavelength 4442.88, smooth 0.281283  -> 1 / (0.718717 / 8 + 0.281283) = 2.69453
  //   i = 34: 6695.11, smooth = 0.074527                                   -> 1 / (0.925473 / 8 + 0.074527) = 5.25733
  //   i = 35: 8218.7 > 8192                                                -> 8
  const std::vector<float> f = Llama3RopeFreqFactors(128, 500000.0f, 8.0f, 1.0f, 4.0f, 8192);
  ASSERT_EQ(f.size(), 64u);
  for (int i = 0; i <= 28; ++i) EXPECT_EQ(f[i], 1.0f) << i;
  EXPECT_NEAR(f[29], 1.20748, 1e-5);
  EXPECT_NEAR(f[32], 2.69453, 1e-5);
  EXPECT_NEAR(f[34], 5.25733, 1e-5);
  for (int i = 35; i < 64; ++i) EXPECT_EQ(f[i], 8.0f) << i;
}

}  // namespace
}  // namespace tandem::cpu

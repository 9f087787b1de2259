// The CPU kernels other than matmul, each held against its float64 reference (or a float64 computation written
// here) on assorted shapes, plus checks on hand-built inputs whose answers are known in closed form.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "cpu_backend/f16_fast.h"
#include "cpu_backend/kernels.h"
#include "tests/testutil.h"

namespace tandem::cpu {
namespace {

using test::MaxAbsDiff;
using test::Nmse;
using test::Poison;
using test::RandomNormal;

// NMSE bounds of the fast kernels against their float64 references. Float32 rounding of O(1) values gives
// NMSE around 1e-14 (measured 0 to 2.7e-14 for every F32 case here). RoPE builds its angles by repeated float
// multiplies, as llama.cpp does, so its error grows with the position: the bound is per case (measured 3e-15 at
// positions < 32, 9e-13 at < 256, 2e-9 at < 2048). With an F16 cache, float and double occasionally round a
// probability to different fp16 neighbours (measured up to 4e-9).
constexpr double kTolF32 = 1e-12;
constexpr double kTolAttentionF16 = 1e-7;

bool SameBits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

// ---------------------------------------------------------------- fp16 helpers

TEST(F16Fast, HalfToFloatMatchesCoreOnEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float fast = HalfToFloat(static_cast<f16_t>(h));
    const float core = F16ToF32(static_cast<f16_t>(h));
    if (std::isnan(core)) {
      EXPECT_TRUE(std::isnan(fast)) << h;
    } else {
      ASSERT_TRUE(SameBits(fast, core)) << "half bits " << h << ": " << fast << " vs " << core;
    }
  }
}

TEST(F16Fast, RoundThroughHalfMatchesCore) {
  std::vector<float> values = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.996f, 65520.0f, -65520.0f, 1e10f,
                               std::ldexp(1.0f, -14), std::ldexp(1.0f, -24), std::ldexp(1.0f, -25),
                               std::ldexp(3.0f, -26), std::ldexp(1.0f, -26), std::ldexp(1023.5f, -24),
                               std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()};
  // A prime stride through all bit patterns reaches every exponent with assorted mantissas.
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 1021) values.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  for (float x : values) {
    const float fast = RoundThroughHalf(x);
    const float core = F16ToF32(F32ToF16(x));
    if (std::isnan(core)) {
      EXPECT_TRUE(std::isnan(fast)) << x;
    } else {
      ASSERT_TRUE(SameBits(fast, core)) << "x = " << x << " bits " << std::bit_cast<uint32_t>(x) << ": " << fast
                                        << " vs " << core;
    }
  }
}

// ---------------------------------------------------------------- RmsNorm

struct RmsCase {
  int64_t n_tok;
  int64_t n;
  bool with_weight;
};

class RmsNormTest : public testing::TestWithParam<RmsCase> {};

TEST_P(RmsNormTest, MatchesReference) {
  const RmsCase c = GetParam();
  const auto x = RandomNormal(static_cast<size_t>(c.n_tok * c.n), 1, 3.0f);
  const auto w = RandomNormal(static_cast<size_t>(c.n), 2);
  const float* wp = c.with_weight ? w.data() : nullptr;
  std::vector<float> fast(x.size()), ref(x.size());
  Poison(fast);
  Poison(ref);
  RmsNorm(x.data(), wp, c.n_tok, c.n, 1e-5f, fast.data());
  RmsNormRef(x.data(), wp, c.n_tok, c.n, 1e-5f, ref.data());
  EXPECT_LT(Nmse(fast, ref), kTolF32);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormTest,
                         testing::Values(RmsCase{1, 64, true}, RmsCase{7, 173, true}, RmsCase{3, 1, true},
                                         RmsCase{40, 4096, false}, RmsCase{2, 5120, true}));

TEST(RmsNorm, HandComputed) {
  // x = (3, 4): mean(x^2) = 12.5, so y = x / sqrt(12.5) * w.
  const float x[2] = {3.0f, 4.0f};
  const float w[2] = {2.0f, -1.0f};
  float y[2];
  RmsNorm(x, w, 1, 2, 0.0f, y);
  EXPECT_NEAR(y[0], 6.0 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y[1], -4.0 / std::sqrt(12.5), 1e-6);
}

// ---------------------------------------------------------------- RoPE

struct RopeCase {
  int n_head;
  int head_dim;
  int n_rot;
  float freq_base;
  float freq_scale;
  int64_t n_tok;
  int32_t max_pos;
  double tol;  // NMSE bound, see above
};

class RopeTest : public testing::TestWithParam<RopeCase> {};

TEST_P(RopeTest, MatchesReferenceAndLeavesTailDims) {
  const RopeCase c = GetParam();
  const RopeParams p{.n_head = c.n_head, .head_dim = c.head_dim, .n_rot = c.n_rot, .freq_base = c.freq_base,
                     .freq_scale = c.freq_scale};
  const int64_t row = static_cast<int64_t>(c.n_head) * c.head_dim;
  const auto x = RandomNormal(static_cast<size_t>(c.n_tok * row), 3);
  std::vector<int32_t> pos(static_cast<size_t>(c.n_tok));
  for (int64_t t = 0; t < c.n_tok; ++t) pos[t] = static_cast<int32_t>((t * 7919) % (c.max_pos + 1));
  std::vector<float> fast = x, ref = x;
  Rope(fast.data(), c.n_tok, pos.data(), p);
  RopeRef(ref.data(), c.n_tok, pos.data(), p);
  EXPECT_LT(Nmse(fast, ref), c.tol);
  for (int64_t t = 0; t < c.n_tok; ++t) {
    for (int h = 0; h < c.n_head; ++h) {
      for (int d = c.n_rot; d < c.head_dim; ++d) {
        const int64_t i = t * row + static_cast<int64_t>(h) * c.head_dim + d;
        ASSERT_TRUE(SameBits(fast[i], x[i])) << "dim " << d << " past n_rot changed";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeTest,
                         testing::Values(RopeCase{8, 8, 8, 10000.0f, 1.0f, 32, 31, 1e-12},     // stories260K
                                         RopeCase{8, 32, 32, 1e6f, 1.0f, 9, 255, 1e-11},       // tiny-llama
                                         RopeCase{4, 64, 32, 10000.0f, 1.0f, 5, 100, 1e-11},   // n_rot < head_dim
                                         RopeCase{3, 10, 6, 500000.0f, 0.25f, 17, 500, 1e-11}, // odd pair count
                                         RopeCase{32, 128, 128, 10000.0f, 1.0f, 64, 2047, 1e-8}));

TEST(Rope, UnitVectorAtPositionOne) {
  // Pair 1 of a 4-dim head: theta = 1 * 10000^(-2/4) = 0.01, and with freq_scale 0.5 it is 0.005.
  for (float freq_scale : {1.0f, 0.5f}) {
    float x[4] = {0.0f, 0.0f, 1.0f, 0.0f};
    const int32_t pos = 1;
    Rope(x, 1, &pos,
         RopeParams{.n_head = 1, .head_dim = 4, .n_rot = 4, .freq_base = 10000.0f, .freq_scale = freq_scale});
    const double theta = 0.01 * freq_scale;
    EXPECT_NEAR(x[2], std::cos(theta), 1e-7);
    EXPECT_NEAR(x[3], std::sin(theta), 1e-7);
    EXPECT_EQ(x[0], 0.0f);
    EXPECT_EQ(x[1], 0.0f);
  }
  // Pair 0 turns by pos radians: (0, 1) at pos 2 becomes (-sin 2, cos 2).
  float y[2] = {0.0f, 1.0f};
  const int32_t pos = 2;
  Rope(y, 1, &pos, RopeParams{.n_head = 1, .head_dim = 2, .n_rot = 2, .freq_base = 10000.0f, .freq_scale = 1.0f});
  EXPECT_NEAR(y[0], -std::sin(2.0), 1e-7);
  EXPECT_NEAR(y[1], std::cos(2.0), 1e-7);
}

// ---------------------------------------------------------------- KV cache and attention

// A layer cache in host vectors; rows past what a test stores are NaN, so reading them shows up.
struct TestCache {
  TestCache(DType type, int64_t n_ctx, int64_t row_elems) {
    const size_t n = static_cast<size_t>(n_ctx * row_elems);
    const size_t elem = type == DType::kF16 ? 2 : 4;
    k.resize(n * elem);
    v.resize(n * elem);
    if (type == DType::kF16) {
      for (size_t i = 0; i < n; ++i) {
        const f16_t nan = 0x7e00;
        std::memcpy(&k[i * 2], &nan, 2);
        std::memcpy(&v[i * 2], &nan, 2);
      }
    } else {
      Poison({reinterpret_cast<float*>(k.data()), n});
      Poison({reinterpret_cast<float*>(v.data()), n});
    }
    layer = KvLayer{type, k.data(), v.data(), n_ctx, row_elems};
  }
  float K(int64_t i) const { return Value(k, i); }
  float V(int64_t i) const { return Value(v, i); }
  float Value(const std::vector<uint8_t>& buf, int64_t i) const {
    if (layer.type == DType::kF16) {
      f16_t h;
      std::memcpy(&h, &buf[static_cast<size_t>(i) * 2], 2);
      return F16ToF32(h);
    }
    float f;
    std::memcpy(&f, &buf[static_cast<size_t>(i) * 4], 4);
    return f;
  }
  std::vector<uint8_t> k, v;
  KvLayer layer;
};

TEST(KvStore, WritesRowsInCacheType) {
  for (DType type : {DType::kF32, DType::kF16}) {
    const int64_t n_ctx = 10, row = 12, n_tok = 3, pos0 = 4;
    TestCache cache(type, n_ctx, row);
    const auto k = RandomNormal(static_cast<size_t>(n_tok * row), 5);
    const auto v = RandomNormal(static_cast<size_t>(n_tok * row), 6);
    KvStore(cache.layer, k.data(), v.data(), n_tok, pos0);
    for (int64_t i = 0; i < n_ctx * row; ++i) {
      const int64_t r = i / row;
      if (r < pos0 || r >= pos0 + n_tok) {
        ASSERT_TRUE(std::isnan(cache.K(i)) && std::isnan(cache.V(i))) << "row " << r << " outside the write changed";
        continue;
      }
      const int64_t src = i - pos0 * row;
      const float want_k = type == DType::kF16 ? F16ToF32(F32ToF16(k[src])) : k[src];
      const float want_v = type == DType::kF16 ? F16ToF32(F32ToF16(v[src])) : v[src];
      ASSERT_TRUE(SameBits(cache.K(i), want_k));
      ASSERT_TRUE(SameBits(cache.V(i), want_v));
    }
  }
}

struct AttnCase {
  int n_head;
  int n_head_kv;
  int head_dim;
  int64_t n_tok;
  int64_t pos0;
  int64_t n_ctx;
  DType cache_type;
};

std::string AttnName(const testing::TestParamInfo<AttnCase>& info) {
  const AttnCase& c = info.param;
  return Cat("h", c.n_head, "kv", c.n_head_kv, "d", c.head_dim, "tok", c.n_tok, "pos", c.pos0, "ctx", c.n_ctx, "_",
             DTypeName(c.cache_type));
}

class AttentionTest : public testing::TestWithParam<AttnCase> {};

TEST_P(AttentionTest, MatchesReference) {
  const AttnCase c = GetParam();
  const AttentionParams p{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  const int64_t kv_row = static_cast<int64_t>(c.n_head_kv) * c.head_dim;
  const int64_t q_row = static_cast<int64_t>(c.n_head) * c.head_dim;
  TestCache cache(c.cache_type, c.n_ctx, kv_row);
  // Earlier tokens, then this batch's; rows past pos0 + n_tok stay NaN.
  const int64_t n_filled = c.pos0 + c.n_tok;
  const auto k = RandomNormal(static_cast<size_t>(n_filled * kv_row), 7, 2.0f);
  const auto v = RandomNormal(static_cast<size_t>(n_filled * kv_row), 8);
  if (c.pos0 > 0) KvStore(cache.layer, k.data(), v.data(), c.pos0, 0);
  KvStore(cache.layer, k.data() + c.pos0 * kv_row, v.data() + c.pos0 * kv_row, c.n_tok, c.pos0);

  const auto q = RandomNormal(static_cast<size_t>(c.n_tok * q_row), 9, 2.0f);
  std::vector<float> ref(q.size());
  Poison(ref);
  AttentionRef(q.data(), cache.layer, c.n_tok, c.pos0, p, ref.data());
  const double tol = c.cache_type == DType::kF16 ? kTolAttentionF16 : kTolF32;
  std::vector<uint8_t> scratch(AttentionScratchBytes(c.n_ctx, c.n_head, 0));

  // Every kernel path this CPU has (portable, AVX2, and on AVX-512 the grouped fp16 loops), all against the same
  // reference, and bit-identical to each other: quantized models turn last-bit differences into rounding flips.
  const Isa saved = ActiveIsa();
  std::vector<float> portable;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(DetectedIsa())) continue;
    SetIsa(isa);
    std::vector<float> fast(q.size());
    Poison(fast);
    Attention(q.data(), cache.layer, c.n_tok, c.pos0, p, fast.data(), scratch.data());
    EXPECT_LT(Nmse(fast, ref), tol) << "isa " << static_cast<int>(isa) << ", max abs diff " << MaxAbsDiff(fast, ref);
    if (isa == Isa::kScalar) portable = fast;
    EXPECT_EQ(std::memcmp(portable.data(), fast.data(), fast.size() * sizeof(float)), 0)
        << "isa " << static_cast<int>(isa) << " differs from the portable path";

    // Work is split over (token, head) or (token, KV head), and each item's arithmetic is fixed, so thread count
    // changes nothing.
    std::vector<float> one_thread(q.size());
    Poison(one_thread);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    Attention(q.data(), cache.layer, c.n_tok, c.pos0, p, one_thread.data(), scratch.data());
    omp_set_num_threads(threads);
    EXPECT_EQ(std::memcmp(one_thread.data(), fast.data(), fast.size() * sizeof(float)), 0);
  }
  SetIsa(saved);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    testing::Values(AttnCase{8, 8, 64, 1, 0, 16, DType::kF32},     // decode of the first token
                    AttnCase{8, 4, 8, 32, 0, 256, DType::kF32},    // stories260K prompt
                    AttnCase{8, 4, 32, 7, 5, 32, DType::kF32},     // GQA 2, cache partly filled
                    AttnCase{8, 2, 16, 5, 11, 40, DType::kF16},    // GQA 4
                    AttnCase{4, 4, 24, 1, 30, 48, DType::kF16},    // decode deep in the cache
                    AttnCase{6, 3, 7, 13, 0, 13, DType::kF32},     // odd head_dim, cache exactly full
                    AttnCase{6, 6, 7, 3, 9, 20, DType::kF16},
                    AttnCase{32, 8, 128, 17, 100, 160, DType::kF16},
                    AttnCase{32, 8, 128, 17, 100, 160, DType::kF32}),
    AttnName);

TEST(Attention, OneCachedRowReturnsItsValue) {
  // A single visible row gets probability exactly 1, so the output is that row's (cached) value.
  for (DType type : {DType::kF32, DType::kF16}) {
    const int n_head = 4, n_head_kv = 2, hd = 6;
    TestCache cache(type, 8, n_head_kv * hd);
    const auto k = RandomNormal(n_head_kv * hd, 11);
    const auto v = RandomNormal(n_head_kv * hd, 12);
    KvStore(cache.layer, k.data(), v.data(), 1, 0);
    const auto q = RandomNormal(n_head * hd, 13);
    std::vector<float> out(q.size());
    Poison(out);
    std::vector<uint8_t> scratch(AttentionScratchBytes(8, n_head, 0));
    Attention(q.data(), cache.layer, 1, 0, AttentionParams{n_head, n_head_kv, hd, 0.5f}, out.data(), scratch.data());
    for (int h = 0; h < n_head; ++h) {
      for (int d = 0; d < hd; ++d) {
        EXPECT_TRUE(SameBits(out[h * hd + d], cache.V((h / 2) * hd + d))) << DTypeName(type) << " head " << h;
      }
    }
  }
}

TEST(Attention, ZeroQueryAveragesVisibleValues) {
  // q = 0 makes every score 0, so the output is the mean of the visible rows: token t sees rows 0..t.
  const int hd = 2;
  TestCache cache(DType::kF32, 4, hd);
  const float k[6] = {5, -1, 2, 7, -3, 0.5};
  const float v[6] = {1, 10, 2, 20, 6, 60};
  KvStore(cache.layer, k, v, 3, 0);
  const float q[6] = {};
  float out[6];
  std::vector<uint8_t> scratch(AttentionScratchBytes(4, 1, 0));
  Attention(q, cache.layer, 3, 0, AttentionParams{1, 1, hd, 1.0f}, out, scratch.data());
  const float want[6] = {1, 10, 1.5, 15, 3, 30};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(out[i], want[i], 1e-5) << i;
}

TEST(Attention, CausalMaskIgnoresLaterRows) {
  for (DType type : {DType::kF32, DType::kF16}) {
    const int n_head = 2, hd = 8;
    const int64_t n_tok = 4, n_ctx = 4;
    TestCache cache(type, n_ctx, n_head * hd);
    const auto k = RandomNormal(n_tok * n_head * hd, 21);
    const auto v = RandomNormal(n_tok * n_head * hd, 22);
    KvStore(cache.layer, k.data(), v.data(), n_tok, 0);
    const auto q = RandomNormal(n_tok * n_head * hd, 23);
    const AttentionParams p{n_head, n_head, hd, 0.35f};
    std::vector<uint8_t> scratch(AttentionScratchBytes(n_ctx, n_head, 0));
    std::vector<float> before(q.size()), after(q.size());
    Attention(q.data(), cache.layer, n_tok, 0, p, before.data(), scratch.data());
    // Change the last row: only the last token can see it.
    auto k2 = k, v2 = v;
    for (int64_t i = (n_tok - 1) * n_head * hd; i < n_tok * n_head * hd; ++i) {
      k2[i] += 3.0f;
      v2[i] -= 5.0f;
    }
    KvStore(cache.layer, k2.data() + (n_tok - 1) * n_head * hd, v2.data() + (n_tok - 1) * n_head * hd, 1, n_tok - 1);
    Attention(q.data(), cache.layer, n_tok, 0, p, after.data(), scratch.data());
    const size_t earlier = static_cast<size_t>((n_tok - 1) * n_head * hd);
    EXPECT_EQ(std::memcmp(before.data(), after.data(), earlier * sizeof(float)), 0) << DTypeName(type);
    EXPECT_GT(MaxAbsDiff(std::span(before).subspan(earlier), std::span(after).subspan(earlier)), 0.1);
  }
}

// ---------------------------------------------------------------- SwiGLU (Glu's default) and Add

// Every ISA path (the AVX-512 one has its own e^x) against the double formula: NMSE and, per element, a few ulp.
TEST(SwiGlu, MatchesDoubleFormula) {
  const Isa saved = ActiveIsa();
  for (Isa isa : {Isa::kScalar, Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(DetectedIsa())) continue;
    SetIsa(isa);
    for (int64_t n : {1, 17, 172, 70000}) {
      const auto g = RandomNormal(static_cast<size_t>(n), 31, 4.0f);
      const auto u = RandomNormal(static_cast<size_t>(n), 32);
      std::vector<float> y(g.size()), ref(g.size());
      Poison(y);
      Glu(g.data(), u.data(), n, GluParams{}, y.data());
      double worst_rel = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        const double want = g[i] / (1.0 + std::exp(-double{g[i]})) * u[i];
        ref[i] = static_cast<float>(want);
        if (std::abs(want) > 1e-30) worst_rel = std::max(worst_rel, std::abs(y[i] - want) / std::abs(want));
      }
      EXPECT_LT(Nmse(y, ref), kTolF32) << n << " isa " << static_cast<int>(isa);
      EXPECT_LT(worst_rel, 4e-7) << n << " isa " << static_cast<int>(isa);  // about 4 ulp of float
    }
    // silu(0) = 0, silu(x) -> x for large x, -> 0 for very negative x; NaN stays NaN, silu(+inf) = inf.
    const float g[5] = {0.0f, 30.0f, -100.0f, std::nanf(""), std::numeric_limits<float>::infinity()};
    const float u[5] = {5.0f, 2.0f, 1.0f, 1.0f, 1.0f};
    float y[5];
    Glu(g, u, 5, GluParams{}, y);
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_NEAR(y[1], 60.0f, 1e-4);
    EXPECT_NEAR(y[2], 0.0f, 1e-30);
    EXPECT_TRUE(std::isnan(y[3]));
    EXPECT_EQ(y[4], std::numeric_limits<float>::infinity());
  }
  SetIsa(saved);
}

TEST(Add, ElementwiseAndInPlace) {
  for (int64_t n : {1, 33, 300000}) {
    auto a = RandomNormal(static_cast<size_t>(n), 41);
    const auto b = RandomNormal(static_cast<size_t>(n), 42);
    std::vector<float> y(a.size());
    Poison(y);
    Add(a.data(), b.data(), n, y.data());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(y[i], a[i] + b[i]);  // one float add is exact math rounded once
    Add(a.data(), b.data(), n, a.data());  // y aliasing a
    EXPECT_EQ(std::memcmp(a.data(), y.data(), y.size() * sizeof(float)), 0);
  }
}

// ---------------------------------------------------------------- MoeRoute

TEST(MoeRoute, MatchesReferenceOnRandomLogits) {
  for (auto [n_expert, k] : {std::pair{4, 2}, {8, 2}, {8, 1}, {60, 4}, {5, 5}}) {
    const int64_t n_tok = 37;
    const auto logits = RandomNormal(static_cast<size_t>(n_tok * n_expert), 51, 2.0f);
    std::vector<int32_t> ids(static_cast<size_t>(n_tok * k), -1), ref_ids(ids.size(), -2);
    std::vector<float> w(ids.size()), ref_w(ids.size());
    Poison(w);
    const MoeRouteParams p{.n_expert = n_expert, .k = k};  // softmax, normalized: Mixtral's
    MoeRoute(logits.data(), n_tok, p, ids.data(), w.data());
    MoeRouteRef(logits.data(), n_tok, p, ref_ids.data(), ref_w.data());
    EXPECT_EQ(ids, ref_ids) << n_expert << " experts, top " << k;
    EXPECT_LT(Nmse(w, ref_w), kTolF32);
  }
}

TEST(MoeRoute, HandPickedLogits) {
  struct Case {
    std::vector<float> logits;
    int k;
    std::vector<int32_t> ids;
    std::vector<float> weights;
  };
  const float ln2 = std::numbers::ln2_v<float>;
  const std::vector<Case> cases = {
      // Probabilities proportional to 1, 3, 2, 4: top 2 = experts 3, 1 with weights 4/7, 3/7.
      {{0.0f, std::log(3.0f), ln2, 2 * ln2}, 2, {3, 1}, {4.0f / 7, 3.0f / 7}},
      // A tie for first place goes to the lower id; the tied pair shares the weight evenly.
      {{1.0f, 3.0f, 3.0f, 0.0f}, 2, {1, 2}, {0.5f, 0.5f}},
      // All equal: the lowest ids, each 1/3.
      {{0.7f, 0.7f, 0.7f, 0.7f}, 3, {0, 1, 2}, {1.0f / 3, 1.0f / 3, 1.0f / 3}},
      // k = 1 always renormalizes to weight 1.
      {{-2.0f, 5.0f, 4.0f}, 1, {1}, {1.0f}},
      // A tie for second place, behind a clear winner.
      {{0.0f, ln2, 0.0f, -9.0f, 2 * ln2}, 3, {4, 1, 0}, {4.0f / 7, 2.0f / 7, 1.0f / 7}},
  };
  for (const Case& c : cases) {
    const int n_expert = static_cast<int>(c.logits.size());
    std::vector<int32_t> ids(static_cast<size_t>(c.k), -1);
    std::vector<float> w(static_cast<size_t>(c.k));
    Poison(w);
    const MoeRouteParams p{.n_expert = n_expert, .k = c.k};
    MoeRoute(c.logits.data(), 1, p, ids.data(), w.data());
    EXPECT_EQ(ids, c.ids);
    for (int i = 0; i < c.k; ++i) EXPECT_NEAR(w[i], c.weights[i], 1e-6) << i;
    MoeRouteRef(c.logits.data(), 1, p, ids.data(), w.data());
    EXPECT_EQ(ids, c.ids) << "reference";
    for (int i = 0; i < c.k; ++i) EXPECT_NEAR(w[i], c.weights[i], 1e-6) << "reference " << i;
  }
}

TEST(MoeRoute, NanLogitsStillGiveDistinctIds) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float logits[4] = {nan, 1.0f, nan, 0.0f};
  int32_t ids[3];
  float w[3];
  MoeRoute(logits, 1, MoeRouteParams{.n_expert = 4, .k = 3}, ids, w);
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_NE(ids[1], ids[2]);
  EXPECT_NE(ids[0], ids[2]);
}

// ---------------------------------------------------------------- GetRows

TEST(GetRows, FloatTables) {
  const int64_t rows = 6, cols = 5;
  const auto table = RandomNormal(static_cast<size_t>(rows * cols), 61);
  std::vector<f16_t> table16(table.size());
  for (size_t i = 0; i < table.size(); ++i) table16[i] = F32ToF16(table[i]);
  const int32_t ids[4] = {5, 0, 5, 2};
  for (DType type : {DType::kF32, DType::kF16}) {
    const void* data = type == DType::kF32 ? static_cast<const void*>(table.data()) : table16.data();
    const WeightMatrix w{type, data, rows, cols, RowBytes(type, cols)};
    std::vector<float> y(4 * cols);
    Poison(y);
    GetRows(w, ids, 4, y.data());
    for (int t = 0; t < 4; ++t) {
      for (int c = 0; c < cols; ++c) {
        const float src = table[ids[t] * cols + c];
        const float want = type == DType::kF16 ? F16ToF32(F32ToF16(src)) : src;
        ASSERT_TRUE(SameBits(y[t * cols + c], want)) << DTypeName(type) << " token " << t;
      }
    }
  }
}

TEST(GetRows, HandBuiltQuantBlocks) {
  // Q8_0 rows: x = d * q. Q4_0 rows: x = d * (nibble - 8), low nibbles first, then high nibbles.
  BlockQ8_0 q8[2];
  BlockQ4_0 q4[2];
  for (int r = 0; r < 2; ++r) {
    q8[r].d = F32ToF16(r == 0 ? 0.5f : -0.25f);
    q4[r].d = F32ToF16(r == 0 ? 0.25f : 2.0f);
    for (int i = 0; i < 32; ++i) q8[r].qs[i] = static_cast<int8_t>(i - 16 + r);
    for (int i = 0; i < 16; ++i) q4[r].qs[i] = static_cast<uint8_t>((i & 15) | ((15 - i) << 4));
  }
  const int32_t ids[3] = {1, 0, 1};
  std::vector<float> y(3 * 32);
  Poison(y);
  GetRows(WeightMatrix{DType::kQ8_0, q8, 2, 32, sizeof(BlockQ8_0)}, ids, 3, y.data());
  for (int t = 0; t < 3; ++t) {
    const int r = ids[t];
    for (int i = 0; i < 32; ++i) ASSERT_EQ(y[t * 32 + i], (r == 0 ? 0.5f : -0.25f) * (i - 16 + r));
  }
  Poison(y);
  GetRows(WeightMatrix{DType::kQ4_0, q4, 2, 32, sizeof(BlockQ4_0)}, ids, 3, y.data());
  for (int t = 0; t < 3; ++t) {
    const float d = ids[t] == 0 ? 0.25f : 2.0f;
    for (int i = 0; i < 16; ++i) {
      ASSERT_EQ(y[t * 32 + i], d * (i - 8));
      ASSERT_EQ(y[t * 32 + 16 + i], d * ((15 - i) - 8));
    }
  }
  // MXFP4 rows (17-byte blocks, so the second row starts at an odd address): x = 2^(e - 128) * the doubled E2M1
  // value of each nibble.
  BlockMXFP4 fp4[2];
  for (int r = 0; r < 2; ++r) {
    fp4[r].e = static_cast<uint8_t>(r == 0 ? 126 : 130);  // d = 1/4, 4
    for (int i = 0; i < 16; ++i) fp4[r].qs[i] = static_cast<uint8_t>(i | (15 - i) << 4);
  }
  Poison(y);
  GetRows(WeightMatrix{DType::kMXFP4, fp4, 2, 32, sizeof(BlockMXFP4)}, ids, 3, y.data());
  for (int t = 0; t < 3; ++t) {
    const float d = ids[t] == 0 ? 0.25f : 4.0f;
    for (int i = 0; i < 16; ++i) {
      ASSERT_EQ(y[t * 32 + i], d * kMxfp4Values[i]);
      ASSERT_EQ(y[t * 32 + 16 + i], d * kMxfp4Values[15 - i]);
    }
  }
}

}  // namespace
}  // namespace tandem::cpu

// Attention with the options of runtime/ops.h's AttentionParams: a sliding window, sinks and logit soft-capping,
// alone and together, over F32 and F16 caches, grouped-query heads and every ISA path, against the float64
// reference; hand-worked cases that check the reference's reading of each option; and the default path, which
// must give the same bits as before the options existed.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "cpu_backend/kernels.h"
#include "tests/testutil.h"

namespace tandem::cpu {
namespace {

using test::MaxAbsDiff;
using test::Nmse;
using test::Poison;
using test::RandomNormal;

// NMSE bounds, as ops_test.cc's: float against double on O(1) values; with an F16 cache float and double
// occasionally round a probability to different fp16 neighbours. Measured over this grid (each case prints its
// NMSE): at most 2.3e-14 with F32, 3.7e-9 with F16.
constexpr double kTolF32 = 1e-12;
constexpr double kTolF16 = 1e-7;

// A layer cache in host memory; rows past what a test stores are NaN, so reading them shows up.
struct Cache {
  Cache(DType type, int64_t n_ctx, int64_t row_elems) {
    const size_t n = static_cast<size_t>(n_ctx * row_elems);
    if (type == DType::kF16) {
      k16.assign(n, 0x7e00);  // fp16 NaN
      v16.assign(n, 0x7e00);
      layer = KvLayer{type, k16.data(), v16.data(), n_ctx, row_elems};
    } else {
      k32.resize(n);
      v32.resize(n);
      Poison(k32);
      Poison(v32);
      layer = KvLayer{type, k32.data(), v32.data(), n_ctx, row_elems};
    }
  }
  // Element i of the V cache as the kernels read it.
  float V(int64_t i) const { return layer.type == DType::kF16 ? F16ToF32(v16[i]) : v32[i]; }
  std::vector<float> k32, v32;
  std::vector<f16_t> k16, v16;
  KvLayer layer;
};

std::vector<Isa> IsasHere() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(DetectedIsa())) isas.push_back(isa);
  }
  return isas;
}

// ---------------------------------------------------------------- the grid against AttentionRef

struct Options {
  int window;     // 0: none
  bool sinks;
  float softcap;  // 0: none
};
using AttnCase = std::tuple<Options, DType, int /*group*/, int /*head_dim*/>;

std::string AttnCaseName(const testing::TestParamInfo<AttnCase>& info) {
  const auto& [o, type, group, head_dim] = info.param;
  return Cat("w", o.window, o.sinks ? "_sinks" : "", o.softcap > 0 ? "_cap" : "", "_", DTypeName(type), "_g", group,
             "_d", head_dim);
}

class AttentionOptionsTest : public testing::TestWithParam<AttnCase> {};

TEST_P(AttentionOptionsTest, MatchesReferenceOnEveryIsa) {
  const auto& [o, type, group, head_dim] = GetParam();
  const int n_head = 4, n_head_kv = n_head / group;
  const int64_t n_tok = 9, pos0 = 7, n_ctx = 20;  // rows 16..19 stay NaN
  const int64_t kv_row = static_cast<int64_t>(n_head_kv) * head_dim, q_row = static_cast<int64_t>(n_head) * head_dim;
  Cache cache(type, n_ctx, kv_row);
  const auto k = RandomNormal(static_cast<size_t>((pos0 + n_tok) * kv_row), 7, 2.0f);
  const auto v = RandomNormal(static_cast<size_t>((pos0 + n_tok) * kv_row), 8);
  KvStore(cache.layer, k.data(), v.data(), pos0 + n_tok, 0);
  const auto q = RandomNormal(static_cast<size_t>(n_tok * q_row), 9, 2.0f);
  // Sink logits of the size of the scaled scores, so that they take a real share.
  const auto sinks = RandomNormal(n_head, 10, 2.0f);
  const AttentionParams p{.n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim,
                          .scale = 1.0f / std::sqrt(static_cast<float>(head_dim)), .window = o.window,
                          .sinks = o.sinks ? sinks.data() : nullptr, .softcap = o.softcap};

  std::vector<float> ref(q.size());
  Poison(ref);
  AttentionRef(q.data(), cache.layer, n_tok, pos0, p, ref.data());
  const double tol = type == DType::kF16 ? kTolF16 : kTolF32;
  std::vector<uint8_t> scratch(AttentionScratchBytes(n_ctx, n_head, 0));
  const Isa saved = ActiveIsa();
  std::vector<float> first;
  for (Isa isa : IsasHere()) {
    SetIsa(isa);
    std::vector<float> fast(q.size());
    Poison(fast);
    Attention(q.data(), cache.layer, n_tok, pos0, p, fast.data(), scratch.data());
    const double nmse = Nmse(fast, ref);
    EXPECT_LT(nmse, tol) << "isa " << static_cast<int>(isa) << ", max abs diff " << MaxAbsDiff(fast, ref);
    std::printf("  isa %d: NMSE %.3g\n", static_cast<int>(isa), nmse);
    // Every path keeps the same float operations, options included (the AVX-512 grouped fp16 loops too).
    if (first.empty()) first = fast;
    EXPECT_EQ(std::memcmp(first.data(), fast.data(), fast.size() * sizeof(float)), 0)
        << "isa " << static_cast<int>(isa) << " differs from the portable path";
    std::vector<float> one_thread(q.size());
    Poison(one_thread);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    Attention(q.data(), cache.layer, n_tok, pos0, p, one_thread.data(), scratch.data());
    omp_set_num_threads(threads);
    EXPECT_EQ(std::memcmp(one_thread.data(), fast.data(), fast.size() * sizeof(float)), 0);
  }
  SetIsa(saved);
}

// Windows of 1 (each query sees itself), 3 and 8 (partial), and 1000 (past the context: no effect); 0 is none.
INSTANTIATE_TEST_SUITE_P(
    Grid, AttentionOptionsTest,
    testing::Combine(testing::Values(Options{0, false, 0}, Options{1, false, 0}, Options{3, false, 0},
                                     Options{8, false, 0}, Options{1000, false, 0}, Options{0, true, 0},
                                     Options{0, false, 15.0f}, Options{3, true, 0}, Options{8, true, 15.0f},
                                     Options{1, true, 15.0f}, Options{1000, true, 15.0f}),
                     testing::Values(DType::kF32, DType::kF16), testing::Values(1, 2, 4),
                     testing::Values(64, 24)),  // 64: the grouped AVX-512 fp16 path; 24: the per-head one
    AttnCaseName);

// Deeper decode: one query far into the cache, window smaller than the context, every ISA, a larger head.
TEST(AttentionOptions, DecodeDeepInTheCache) {
  const int n_head = 8, n_head_kv = 2, head_dim = 128;
  const int64_t pos0 = 299, n_ctx = 320, kv_row = n_head_kv * head_dim;
  for (DType type : {DType::kF32, DType::kF16}) {
    Cache cache(type, n_ctx, kv_row);
    const auto k = RandomNormal(static_cast<size_t>((pos0 + 1) * kv_row), 17, 2.0f);
    const auto v = RandomNormal(static_cast<size_t>((pos0 + 1) * kv_row), 18);
    KvStore(cache.layer, k.data(), v.data(), pos0 + 1, 0);
    const auto q = RandomNormal(static_cast<size_t>(n_head * head_dim), 19, 2.0f);
    const auto sinks = RandomNormal(n_head, 20, 2.0f);
    for (int window : {0, 128}) {
      const AttentionParams p{.n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim, .scale = 0.088f,
                              .window = window, .sinks = sinks.data(), .softcap = 30.0f};
      std::vector<float> ref(q.size());
      AttentionRef(q.data(), cache.layer, 1, pos0, p, ref.data());
      std::vector<uint8_t> scratch(AttentionScratchBytes(n_ctx, n_head, 0));
      const Isa saved = ActiveIsa();
      for (Isa isa : IsasHere()) {
        SetIsa(isa);
        std::vector<float> fast(q.size());
        Poison(fast);
        Attention(q.data(), cache.layer, 1, pos0, p, fast.data(), scratch.data());
        EXPECT_LT(Nmse(fast, ref), type == DType::kF16 ? kTolF16 : kTolF32)
            << DTypeName(type) << " window " << window << " isa " << static_cast<int>(isa);
      }
      SetIsa(saved);
    }
  }
}

// ---------------------------------------------------------------- the default path

// Default params (no window, no sinks, no cap) against params spelled out field by field, and options that cannot
// change anything: a window past the context, sinks of -inf (e^-inf adds exactly 0). All must be the same bits, on
// every path: the whole-model goldens pin the default path's values, so the options must leave it alone.
TEST(AttentionOptions, NeutralOptionsGiveTheDefaultBits) {
  for (DType type : {DType::kF32, DType::kF16}) {
    const int n_head = 8, n_head_kv = 2, head_dim = 64;
    const int64_t n_tok = 6, pos0 = 10, n_ctx = 16, kv_row = n_head_kv * head_dim;
    Cache cache(type, n_ctx, kv_row);
    const auto k = RandomNormal(static_cast<size_t>((pos0 + n_tok) * kv_row), 27, 2.0f);
    const auto v = RandomNormal(static_cast<size_t>((pos0 + n_tok) * kv_row), 28);
    KvStore(cache.layer, k.data(), v.data(), pos0 + n_tok, 0);
    const auto q = RandomNormal(static_cast<size_t>(n_tok * n_head * head_dim), 29, 2.0f);
    AttentionParams defaults;
    defaults.n_head = n_head;
    defaults.n_head_kv = n_head_kv;
    defaults.head_dim = head_dim;
    defaults.scale = 0.125f;
    AttentionParams spelled = defaults;
    spelled.window = 0;
    spelled.sinks = nullptr;
    spelled.softcap = 0.0f;
    AttentionParams wide = defaults;
    wide.window = static_cast<int>(n_ctx);  // >= every position + 1
    const std::vector<float> no_sink(n_head, -std::numeric_limits<float>::infinity());
    AttentionParams dead_sinks = defaults;
    dead_sinks.sinks = no_sink.data();
    std::vector<uint8_t> scratch(AttentionScratchBytes(n_ctx, n_head, 0));
    const Isa saved = ActiveIsa();
    for (Isa isa : IsasHere()) {
      SetIsa(isa);
      std::vector<float> want(q.size());
      Attention(q.data(), cache.layer, n_tok, pos0, defaults, want.data(), scratch.data());
      for (const AttentionParams* p : {&spelled, &wide, &dead_sinks}) {
        std::vector<float> got(q.size());
        Poison(got);
        Attention(q.data(), cache.layer, n_tok, pos0, *p, got.data(), scratch.data());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
            << DTypeName(type) << " isa " << static_cast<int>(isa) << " window " << p->window << " sinks "
            << (p->sinks != nullptr);
      }
    }
    SetIsa(saved);
  }
}

// ---------------------------------------------------------------- hand-worked cases, kernel and reference

using AttentionFn = void (*)(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0,
                             const AttentionParams& p, float* out);
void FastAttention(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
                   float* out) {
  std::vector<uint8_t> scratch(AttentionScratchBytes(kv.n_ctx, p.n_head, 0));
  Attention(q, kv, n_tok, pos0, p, out, scratch.data());
}
const std::pair<const char*, AttentionFn> kBoth[] = {{"Attention", FastAttention}, {"AttentionRef", AttentionRef}};

// A windowed layer's ring cache (KvLayer::ring) holds only window + batch - 1 rows: position p at row p % n_ctx.
// Fed the same batches as a cache of every position, it gives the same bits on every ISA path, as the rows wrap
// mid-batch and mid-window, over F32 and F16 caches (head_dim 64: the AVX-512 grouped path's too).
TEST(AttentionOptions, RingCacheGivesTheFullCachesBits) {
  const int window = 8, max_batch = 5, n_head = 8, head_dim = 64;
  const int64_t ring_rows = window + max_batch - 1, n_total = 61;
  const int batches[] = {1, 3, 5, 2, 1, 4, 5};
  for (DType type : {DType::kF32, DType::kF16}) {
    for (int n_head_kv : {2, 8}) {
      SCOPED_TRACE(Cat(DTypeName(type), " kv heads ", n_head_kv));
      const int64_t kv_row = static_cast<int64_t>(n_head_kv) * head_dim, q_row = int64_t{n_head} * head_dim;
      const AttentionParams p{.n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim,
                              .scale = 1.0f / std::sqrt(static_cast<float>(head_dim)), .window = window};
      for (Isa isa : IsasHere()) {
        SetIsa(isa);
        Cache full(type, n_total, kv_row), ring(type, ring_rows, kv_row);
        ring.layer.ring = true;
        std::vector<uint8_t> scratch(AttentionScratchBytes(n_total, n_head, 0));
        int64_t pos = 0;
        for (int b = 0; pos < n_total; ++b) {
          const int64_t n = std::min<int64_t>(batches[b % 7], n_total - pos);
          const auto k = RandomNormal(static_cast<size_t>(n * kv_row), 100 + pos, 2.0f);
          const auto v = RandomNormal(static_cast<size_t>(n * kv_row), 200 + pos);
          const auto q = RandomNormal(static_cast<size_t>(n * q_row), 300 + pos, 2.0f);
          KvStore(full.layer, k.data(), v.data(), n, pos);
          KvStore(ring.layer, k.data(), v.data(), n, pos);
          std::vector<float> want(q.size()), got(q.size()), ref(q.size());
          Poison(want);
          Poison(got);
          Poison(ref);
          Attention(q.data(), full.layer, n, pos, p, want.data(), scratch.data());
          Attention(q.data(), ring.layer, n, pos, p, got.data(), scratch.data());
          ASSERT_EQ(std::memcmp(want.data(), got.data(), got.size() * sizeof(float)), 0)
              << "isa " << static_cast<int>(isa) << " at position " << pos;
          AttentionRef(q.data(), ring.layer, n, pos, p, ref.data());
          EXPECT_LT(Nmse(got, ref), type == DType::kF16 ? kTolF16 : kTolF32) << "at position " << pos;
          pos += n;
        }
      }
      SetIsa(DetectedIsa());
    }
  }
  // A ring too small for its batch and window is refused before any row is read.
  Cache small(DType::kF32, 4, 64);
  small.layer.ring = true;
  EXPECT_TRUE(small.layer.HoldsAttention(100, 1, 4));
  EXPECT_FALSE(small.layer.HoldsAttention(100, 2, 4));
  EXPECT_FALSE(small.layer.HoldsAttention(100, 1, 0));  // a ring needs a window
  EXPECT_TRUE(small.layer.HoldsStore(1000, 4));
  EXPECT_FALSE(small.layer.HoldsStore(1000, 5));
}

TEST(AttentionHand, WindowOfOneReturnsTheOwnValue) {
  // With window 1 a query sees only its own row, which gets probability 1: the output is that row's cached value.
  for (DType type : {DType::kF32, DType::kF16}) {
    const int n_head = 4, n_head_kv = 2, hd = 16;
    const int64_t n_tok = 5, n_ctx = 8, kv_row = n_head_kv * hd;
    Cache cache(type, n_ctx, kv_row);
    const auto k = RandomNormal(static_cast<size_t>(n_tok * kv_row), 31);
    const auto v = RandomNormal(static_cast<size_t>(n_tok * kv_row), 32);
    KvStore(cache.layer, k.data(), v.data(), n_tok, 0);
    const auto q = RandomNormal(static_cast<size_t>(n_tok * n_head * hd), 33);
    const AttentionParams p{.n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd, .scale = 0.25f, .window = 1};
    for (const auto& [name, fn] : kBoth) {
      std::vector<float> out(q.size());
      Poison(out);
      fn(q.data(), cache.layer, n_tok, 0, p, out.data());
      for (int64_t t = 0; t < n_tok; ++t) {
        for (int h = 0; h < n_head; ++h) {
          for (int d = 0; d < hd; ++d) {
            EXPECT_EQ(out[(t * n_head + h) * hd + d], cache.V(t * kv_row + (h / 2) * hd + d))
                << name << " " << DTypeName(type) << " token " << t << " head " << h;
          }
        }
      }
    }
  }
}

TEST(AttentionHand, WindowAveragesTheLastRows) {
  // q = 0: every visible score is 0, so the output is the mean of the visible values. Window 2 at positions 0..3
  // sees rows {0}, {0, 1}, {1, 2}, {2, 3}.
  const float k[4] = {5, -1, 2, 7};
  const float v[4] = {1, 3, 10, 30};
  const float q[4] = {};
  const float want[4] = {1, 2, 6.5f, 20};
  for (const auto& [name, fn] : kBoth) {
    Cache cache(DType::kF32, 4, 1);
    KvStore(cache.layer, k, v, 4, 0);
    float out[4];
    fn(q, cache.layer, 4, 0, AttentionParams{.n_head = 1, .n_head_kv = 1, .head_dim = 1, .scale = 1, .window = 2},
       out);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], want[i], 1e-6) << name << " " << i;
  }
}

TEST(AttentionHand, SinkTakesProbabilityAndGivesNoValue) {
  // q = 0 over 3 visible rows: scores 0, 0, 0 and a sink of ln 3, so the denominator is 3 + 3 = 6 and each row
  // gets 1/6: out = sum(v) / 6. A second head with sink ln 1 = 0: 1/4 each. The sink logit is not scaled.
  const float k[6] = {4, 4, -2, -2, 9, 9};  // 3 rows of 2 dims, shared by both heads
  const float v[6] = {6, 12, 0, 6, 12, 0};
  const float q[4] = {};
  const float sinks[2] = {std::log(3.0f), 0.0f};
  for (const auto& [name, fn] : kBoth) {
    Cache cache(DType::kF32, 3, 2);
    KvStore(cache.layer, k, v, 3, 0);
    float out[4];
    fn(q, cache.layer, 1, 2,
       AttentionParams{.n_head = 2, .n_head_kv = 1, .head_dim = 2, .scale = 0.5f, .sinks = sinks}, out);
    EXPECT_NEAR(out[0], 18.0 / 6, 1e-6) << name;
    EXPECT_NEAR(out[1], 18.0 / 6, 1e-6) << name;
    EXPECT_NEAR(out[2], 18.0 / 4, 1e-6) << name;
    EXPECT_NEAR(out[3], 18.0 / 4, 1e-6) << name;
  }
}

TEST(AttentionHand, SoftcapBeforeScale) {
  // One head of 2 dims, q = (1, 0), rows k0 = (10, 0), k1 = (0, 0), v0 = (1, 0), v1 = (0, 1). Cap 5, scale 0.5:
  // s0 = 0.5 * 5 tanh(10 / 5) = 2.5 tanh 2, s1 = 0, so out = (p0, 1 - p0), p0 = 1 / (1 + e^-s0). Without the cap
  // s0 = 5; capping after the scale would give 5 tanh(1) instead.
  const float k[4] = {10, 0, 0, 0};
  const float v[4] = {1, 0, 0, 1};
  const float q[2] = {1, 0};
  for (float cap : {5.0f, 0.0f}) {
    const double s0 = cap > 0 ? 2.5 * std::tanh(2.0) : 5.0;
    const double p0 = 1.0 / (1.0 + std::exp(-s0));
    for (const auto& [name, fn] : kBoth) {
      Cache cache(DType::kF32, 2, 2);
      KvStore(cache.layer, k, v, 2, 0);
      float out[2];
      fn(q, cache.layer, 1, 1,
         AttentionParams{.n_head = 1, .n_head_kv = 1, .head_dim = 2, .scale = 0.5f, .softcap = cap}, out);
      EXPECT_NEAR(out[0], p0, 1e-6) << name << " cap " << cap;
      EXPECT_NEAR(out[1], 1 - p0, 1e-6) << name << " cap " << cap;
    }
  }
}

}  // namespace
}  // namespace tandem::cpu

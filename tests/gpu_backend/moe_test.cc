// MoE routing and token grouping on the GPU: MoeRoute against cpu::MoeRouteRef (ids exactly, weights to float
// rounding), and GatherRows / ScatterAddRows against plain host loops. Index arrays are host memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu_backend/kernels.h"
#include "tests/gpu_backend/gpu_test_util.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

class GpuMoeTest : public test::CudaTest {};

// Ids must match exactly, except where two experts' probabilities are a genuine near-tie (equal to 1e-6 in
// double precision): float rounding may order those either way. Weights of matching picks agree to 1e-6.
void ExpectSameRouting(const std::vector<float>& logits, int n_expert, int k, int64_t n_tok,
                       const std::vector<int32_t>& ids, const std::vector<float>& w,
                       const std::vector<int32_t>& ref_ids, const std::vector<float>& ref_w) {
  int mismatches = 0;
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* row = logits.data() + t * n_expert;
    for (int j = 0; j < k; ++j) {
      const size_t i = static_cast<size_t>(t * k + j);
      if (ids[i] == ref_ids[i]) {
        EXPECT_NEAR(w[i], ref_w[i], 1e-6) << "token " << t << " slot " << j;
        continue;
      }
      ASSERT_GE(ids[i], 0);
      ASSERT_LT(ids[i], n_expert);
      const double gap = std::fabs(static_cast<double>(row[ids[i]]) - row[ref_ids[i]]);
      EXPECT_LT(gap, 1e-6) << "token " << t << " slot " << j << ": expert " << ids[i] << " instead of "
                           << ref_ids[i];
      ++mismatches;
    }
  }
  EXPECT_LE(mismatches, 2);
}

TEST_F(GpuMoeTest, RouteMatchesReference) {
  struct Shape {
    int n_expert, k;
    int64_t n_tok;
  };
  // 5000 tokens with k = 8 take several device slices of the router's output buffer.
  const Shape shapes[] = {{4, 2, 1}, {8, 2, 37}, {64, 6, 100}, {256, 8, 5000}, {8, 8, 3}};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << s.n_expert << " experts, top " << s.k << ", " << s.n_tok << " tokens");
    const std::vector<float> logits = test::RandomNormal(static_cast<size_t>(s.n_tok * s.n_expert), s.n_expert, 2.0f);
    const size_t n_out = static_cast<size_t>(s.n_tok * s.k);
    std::vector<int32_t> ref_ids(n_out), ids(n_out, -1);
    std::vector<float> ref_w(n_out), w(n_out, -1.0f);
    cpu::MoeRouteRef(logits.data(), s.n_tok, s.n_expert, s.k, ref_ids.data(), ref_w.data());
    gpu().MoeRoute(Upload(logits), s.n_tok, s.n_expert, s.k, ids.data(), w.data());
    ASSERT_TRUE(Error().ok());
    ExpectSameRouting(logits, s.n_expert, s.k, s.n_tok, ids, w, ref_ids, ref_w);
  }
}

// All-equal logits: every probability ties, so the lowest ids win, in order, with equal weights.
TEST_F(GpuMoeTest, TiesGoToTheLowerId) {
  const std::vector<float> logits(2 * 8, 0.25f);
  std::vector<int32_t> ids(2 * 3);
  std::vector<float> w(2 * 3);
  gpu().MoeRoute(Upload(logits), 2, 8, 3, ids.data(), w.data());
  ASSERT_TRUE(Error().ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  for (float x : w) EXPECT_NEAR(x, 1.0f / 3.0f, 1e-7f);
}

TEST_F(GpuMoeTest, RouteRejectsTooManyExperts) {
  const std::vector<float> logits(300, 0.0f);
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  gpu().MoeRoute(Upload(logits), 1, 300, 2, ids.data(), w.data());
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(GpuMoeTest, GatherAndScatterAddMatchHostLoops) {
  const int64_t n_rows = 600, n = 96;
  // More indices than one kernel-parameter chunk holds, with repeats (a token routed twice).
  std::vector<int32_t> idx(1000);
  std::vector<float> s(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) {
    idx[i] = static_cast<int32_t>((i * 7919) % n_rows);
    s[i] = 0.001f * static_cast<float>(i % 97) - 0.03f;
  }
  const std::vector<float> x = test::RandomNormal(static_cast<size_t>(n_rows * n), 1);

  std::vector<float> gathered(idx.size() * n);
  for (size_t i = 0; i < idx.size(); ++i) {
    for (int64_t c = 0; c < n; ++c) gathered[i * n + c] = x[idx[i] * n + c];
  }
  float* dx = Upload(x);
  float* dg = PoisonedFloats(gathered.size());
  gpu().GatherRows(dx, idx.data(), static_cast<int64_t>(idx.size()), n, dg);
  EXPECT_EQ(test::MaxAbsDiff(Download(dg, gathered.size()), gathered), 0.0);

  std::vector<float> y = test::RandomNormal(static_cast<size_t>(n_rows * n), 2);
  float* dy = Upload(y);
  for (size_t i = 0; i < idx.size(); ++i) {
    for (int64_t c = 0; c < n; ++c) y[idx[i] * n + c] += s[i] * gathered[i * n + c];
  }
  gpu().ScatterAddRows(dg, idx.data(), s.data(), static_cast<int64_t>(idx.size()), n, dy);
  // Repeated rows are summed in a different order than the host loop: float rounding only.
  EXPECT_LT(test::MaxAbsDiff(Download(dy, y.size()), y), 1e-5);
  ASSERT_TRUE(Error().ok());
}

TEST_F(GpuMoeTest, NegativeIndexIsAnError) {
  const std::vector<float> x(64, 1.0f);
  const std::vector<int32_t> idx = {0, -1};
  gpu().GatherRows(Upload(x), idx.data(), 2, 32, PoisonedFloats(64));
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem

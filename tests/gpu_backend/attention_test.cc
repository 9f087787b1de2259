// GPU attention against cpu::AttentionRef (double precision): decode and prefill, causal masking, grouped
// query heads, F32 and F16 caches, short and long contexts (long decode contexts take the split-key path), and
// the options of AttentionParams (sliding window, sinks, soft-capping) on each of those paths.
// The cache is filled by the GPU's own KvStore from the same rows the CPU cache gets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu_backend/kernels.h"
#include "tests/gpu_backend/gpu_test_util.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

struct Heads {
  int n_head, n_head_kv, head_dim;
};

// AttentionParams' options beyond the heads and the scale.
struct Extras {
  int window = 0;
  bool sinks = false;
  float softcap = 0.0f;
};

// F32 caches: the GPU is float with exact rounding, the reference double. F16 caches: the reference also
// rounds q and the probabilities through fp16 (llama.cpp's operand rounding), the GPU does not.
double Tolerance(DType cache) { return cache == DType::kF32 ? 1e-9 : 1e-5; }

class GpuAttentionTest : public test::CudaTest {
 protected:
  // Fills rows 0..pos0+n_tok-1 of a cache on both sides, then attends n_tok queries at pos0.
  void Check(const Heads& h, DType cache, int64_t n_ctx, int64_t pos0, int64_t n_tok, const Extras& o = {}) {
    SCOPED_TRACE(::testing::Message() << "heads " << h.n_head << "/" << h.n_head_kv << " head_dim " << h.head_dim
                                      << " " << DTypeName(cache) << " pos0 " << pos0 << " n_tok " << n_tok
                                      << " window " << o.window << (o.sinks ? " sinks" : "") << " softcap "
                                      << o.softcap);
    const int64_t row = static_cast<int64_t>(h.n_head_kv) * h.head_dim;
    const int64_t filled = pos0 + n_tok;
    const size_t elem = cache == DType::kF32 ? 4 : 2;
    const std::vector<float> k = test::RandomNormal(static_cast<size_t>(filled * row), 100 + pos0, 1.5f);
    const std::vector<float> v = test::RandomNormal(static_cast<size_t>(filled * row), 200 + pos0);
    const std::vector<float> q =
        test::RandomNormal(static_cast<size_t>(n_tok * h.n_head * h.head_dim), 300 + n_tok, 1.5f);
    AttentionParams p{h.n_head, h.n_head_kv, h.head_dim, 1.0f / std::sqrt(static_cast<float>(h.head_dim))};
    p.window = o.window;
    p.softcap = o.softcap;
    // Sinks about as large as the scores, so they take a real share of the probability.
    const std::vector<float> sinks = test::RandomNormal(static_cast<size_t>(h.n_head), 400 + h.n_head, 2.0f);
    if (o.sinks) p.sinks = sinks.data();

    std::vector<uint8_t> host_k(static_cast<size_t>(n_ctx * row) * elem), host_v(host_k.size());
    KvLayer host{cache, host_k.data(), host_v.data(), n_ctx, row};
    cpu::KvStore(host, k.data(), v.data(), filled, 0);
    std::vector<float> ref(q.size());
    cpu::AttentionRef(q.data(), host, n_tok, pos0, p, ref.data());

    KvLayer dev{cache, AllocBytes(host_k.size()), AllocBytes(host_v.size()), n_ctx, row};
    // Earlier rows in one call, the batch's own rows in a second, as an executor would.
    const float* dk = Upload(k);
    const float* dv = Upload(v);
    gpu().KvStore(dev, dk, dv, pos0, 0);
    gpu().KvStore(dev, dk + pos0 * row, dv + pos0 * row, n_tok, pos0);
    float* out = PoisonedFloats(q.size());
    AttentionParams dev_p = p;
    if (o.sinks) dev_p.sinks = Upload(sinks);
    gpu().Attention(Upload(q), dev, n_tok, pos0, dev_p, out);
    const std::vector<float> got = Download(out, q.size());
    ASSERT_TRUE(Error().ok());
    EXPECT_LT(test::Nmse(got, ref), Tolerance(cache));
  }
};

const Heads kShapes[] = {
    {8, 4, 8},     // stories260K
    {8, 4, 32},    // the synthetic models
    {32, 8, 128},  // Llama-3-8B
    {16, 16, 64},  // no grouping
    {4, 1, 256},   // one KV head, widest head
    {6, 2, 80},    // head_dim that is no power of two
};

// A windowed layer's ring cache (KvLayer::ring): batches stored and attended through a ring of window + batch - 1
// rows give what the CPU gives over a cache of every position, as the ring wraps mid-batch.
TEST_F(GpuAttentionTest, RingCacheMatchesTheCpusFullCache) {
  const Heads h{8, 2, 64};
  const int window = 8, max_batch = 5;
  const int64_t row = static_cast<int64_t>(h.n_head_kv) * h.head_dim, q_row = int64_t{h.n_head} * h.head_dim;
  const int64_t ring_rows = window + max_batch - 1, n_total = 41;
  for (DType cache : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(DTypeName(cache));
    const size_t elem = cache == DType::kF32 ? 4 : 2;
    std::vector<uint8_t> host_k(static_cast<size_t>(n_total * row) * elem), host_v(host_k.size());
    KvLayer host{cache, host_k.data(), host_v.data(), n_total, row};
    KvLayer dev{cache, AllocBytes(static_cast<size_t>(ring_rows * row) * elem),
                AllocBytes(static_cast<size_t>(ring_rows * row) * elem), ring_rows, row, /*ring=*/true};
    AttentionParams p{h.n_head, h.n_head_kv, h.head_dim, 1.0f / std::sqrt(static_cast<float>(h.head_dim))};
    p.window = window;
    for (int64_t pos = 0, b = 0; pos < n_total; ++b) {
      const int64_t n = std::min<int64_t>((b * 3) % max_batch + 1, n_total - pos);
      const std::vector<float> k = test::RandomNormal(static_cast<size_t>(n * row), 10 + pos, 1.5f);
      const std::vector<float> v = test::RandomNormal(static_cast<size_t>(n * row), 20 + pos);
      const std::vector<float> q = test::RandomNormal(static_cast<size_t>(n * q_row), 30 + pos, 1.5f);
      cpu::KvStore(host, k.data(), v.data(), n, pos);
      std::vector<float> ref(q.size());
      cpu::AttentionRef(q.data(), host, n, pos, p, ref.data());
      gpu().KvStore(dev, Upload(k), Upload(v), n, pos);
      float* out = PoisonedFloats(q.size());
      gpu().Attention(Upload(q), dev, n, pos, p, out);
      ASSERT_TRUE(Error().ok());
      EXPECT_LT(test::Nmse(Download(out, q.size()), ref), Tolerance(cache)) << "at position " << pos;
      pos += n;
    }
  }
  // A batch longer than the ring leaves room for is an error, not a read of overwritten rows.
  KvLayer small{DType::kF32, AllocBytes(4 * 64 * 4), AllocBytes(4 * 64 * 4), 4, 64, /*ring=*/true};
  AttentionParams p{1, 1, 64, 0.125f};
  p.window = 4;
  gpu().Attention(PoisonedFloats(2 * 64), small, 2, 10, p, PoisonedFloats(2 * 64));
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(GpuAttentionTest, DecodeShortContext) {
  for (DType cache : {DType::kF32, DType::kF16}) {
    for (const Heads& h : kShapes) {
      for (int64_t pos0 : {0, 1, 37}) Check(h, cache, 64, pos0, 1);
    }
  }
}

TEST_F(GpuAttentionTest, DecodeLongContextSplitsKeys) {
  for (DType cache : {DType::kF32, DType::kF16}) {
    for (const Heads& h : {kShapes[0], kShapes[2], kShapes[4]}) {
      for (int64_t pos0 : {700, 3000}) Check(h, cache, 4096, pos0, 1);
    }
    Check(kShapes[1], cache, 4096, 2000, 3);  // a short batch late in the context splits too
  }
}

TEST_F(GpuAttentionTest, PrefillIsCausal) {
  for (DType cache : {DType::kF32, DType::kF16}) {
    for (const Heads& h : kShapes) {
      Check(h, cache, 256, 0, 19);   // the first batch of a prompt
      Check(h, cache, 256, 33, 40);  // a later batch continuing the cache
    }
  }
}

// Each option alone and together, on the three paths: decode with few keys (one block per head), decode over a
// long context (split keys, whose partial states meet the sink only in the merge; a window of 700 or 1000 keys
// still splits, one of 128 does not), a short batch late in the context (split too) and prefill (causal within
// the batch, the window sliding along it).
TEST_F(GpuAttentionTest, WindowSinksAndSoftcap) {
  const Extras options[] = {{.window = 128},
                            {.window = 700},
                            {.sinks = true},
                            {.softcap = 5.0f},
                            {.window = 1000, .sinks = true, .softcap = 5.0f},
                            {.window = 1, .sinks = true}};
  for (DType cache : {DType::kF32, DType::kF16}) {
    for (const Extras& o : options) {
      for (const Heads& h : {kShapes[1], kShapes[2], kShapes[5]}) {
        Check(h, cache, 64, 37, 1, o);
        Check(h, cache, 4096, 3000, 1, o);
        Check(h, cache, 256, 33, 40, o);
      }
      Check(kShapes[0], cache, 4096, 2000, 3, o);
    }
  }
}

TEST_F(GpuAttentionTest, BadShapesAreErrors) {
  KvLayer kv{DType::kF16, AllocBytes(1024), AllocBytes(1024), 8, 64};
  float* q = PoisonedFloats(256);
  gpu().Attention(q, kv, 1, 8, {2, 1, 64, 0.125f}, q);  // position 8 is past an 8-row cache
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
  gpu().Attention(q, kv, 1, 0, {3, 2, 32, 0.125f}, q);  // 3 heads do not group over 2
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
  gpu().Attention(q, kv, 1, 0, {2, 1, 512, 0.125f}, q);  // head_dim too wide
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem

// The GPU's small ops against the CPU kernels and references: embedding lookup (every type; ids on the device,
// in pinned memory and in ordinary host memory), RMSNorm, RoPE, SwiGLU, Add, Scale, AddScaled and KvStore.
// Outputs are poisoned (NaN) before every kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/quant.h"
#include "cpu_backend/kernels.h"
#include "tests/gpu_backend/gpu_test_util.h"
#include "tests/gpu_backend/random_weights.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using cpu::WeightMatrix;

class GpuOpsTest : public test::CudaTest {};

// ---- GetRows ----

TEST_F(GpuOpsTest, GetRowsEveryTypeMatchesCpu) {
  const int64_t rows = 50, cols = 512;
  const std::vector<int32_t> ids = {0, 49, 7, 7, 23, 1, 48, 30, 2};
  const auto n_tok = static_cast<int64_t>(ids.size());
  for (DType t : test::AllWeightTypes()) {
    SCOPED_TRACE(DTypeName(t));
    const std::vector<uint8_t> table = test::RandomWeightRows(t, rows, cols, 11 + static_cast<uint64_t>(t));
    WeightMatrix w{t, table.data(), rows, cols, RowBytes(t, cols)};
    std::vector<float> ref(static_cast<size_t>(n_tok * cols));
    cpu::GetRows(w, ids.data(), n_tok, ref.data());

    w.data = Upload(table);
    // Host ids (passed by value to the kernel) and device ids (read by the kernel).
    for (bool device_ids : {false, true}) {
      float* y = PoisonedFloats(ref.size());
      gpu().GetRows(w, device_ids ? Upload(ids) : ids.data(), n_tok, y);
      const std::vector<float> got = Download(y, ref.size());
      ASSERT_TRUE(Error().ok());
      EXPECT_LT(test::Nmse(got, ref), 1e-12) << (device_ids ? "device ids" : "host ids");
    }
  }
}

TEST_F(GpuOpsTest, GetRowsPinnedIdsAndLongBatches) {
  const int64_t rows = 300, cols = 64;
  const std::vector<uint8_t> table = test::RandomWeightRows(DType::kF32, rows, cols, 2);
  // More ids than one kernel-parameter chunk holds.
  std::vector<int32_t> ids(1000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37) % rows);
  WeightMatrix w{DType::kF32, table.data(), rows, cols, RowBytes(DType::kF32, cols)};
  std::vector<float> ref(ids.size() * cols);
  cpu::GetRows(w, ids.data(), static_cast<int64_t>(ids.size()), ref.data());
  w.data = Upload(table);

  absl::StatusOr<void*> pinned = gpu().AllocHostPinned(ids.size() * sizeof(int32_t));
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  std::memcpy(*pinned, ids.data(), ids.size() * sizeof(int32_t));
  for (const int32_t* id_ptr : {static_cast<const int32_t*>(*pinned), static_cast<const int32_t*>(ids.data())}) {
    float* y = PoisonedFloats(ref.size());
    gpu().GetRows(w, id_ptr, static_cast<int64_t>(ids.size()), y);
    EXPECT_EQ(test::MaxAbsDiff(Download(y, ref.size()), ref), 0.0);
  }
  ASSERT_TRUE(Error().ok());
  gpu().FreeHostPinned(*pinned);
}

TEST_F(GpuOpsTest, GetRowsBadIdIsAnErrorNotACrash) {
  const int64_t rows = 10, cols = 32;
  const std::vector<uint8_t> table = test::RandomWeightRows(DType::kQ8_0, rows, cols, 1);
  WeightMatrix w{DType::kQ8_0, Upload(table), rows, cols, RowBytes(DType::kQ8_0, cols)};
  const std::vector<int32_t> ids = {3, 10};  // 10 is one past the end
  float* y = PoisonedFloats(2 * cols);
  gpu().GetRows(w, ids.data(), 2, y);  // host ids: rejected before launch
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
  gpu().GetRows(w, Upload(ids), 2, y);  // device ids: the kernel flags it
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<float> got = Download(y, 2 * cols);
  EXPECT_TRUE(std::isnan(got[cols]));  // the bad row is NaN, not stale data
  // The backend stays usable.
  gpu().GetRows(w, Upload(std::vector<int32_t>{9}), 1, y);
  EXPECT_TRUE(Error().ok());
}

// ---- RmsNorm ----

TEST_F(GpuOpsTest, RmsNormMatchesReference) {
  for (int64_t n : {64, 172, 4096}) {
    for (int64_t n_tok : {1, 7}) {
      for (bool with_weight : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " n_tok " << n_tok << " weight " << with_weight);
        const std::vector<float> x = test::RandomNormal(static_cast<size_t>(n * n_tok), 21, 3.0f);
        std::vector<float> w = test::RandomNormal(static_cast<size_t>(n), 22);
        for (float& v : w) v = 1.0f + 0.1f * v;
        std::vector<float> ref(x.size());
        cpu::RmsNormRef(x.data(), with_weight ? w.data() : nullptr, n_tok, n, 1e-5f, ref.data());
        float* y = PoisonedFloats(x.size());
        gpu().RmsNorm(Upload(x), with_weight ? Upload(w) : nullptr, n_tok, n, 1e-5f, y);
        EXPECT_LT(test::Nmse(Download(y, x.size()), ref), 1e-12);
      }
    }
  }
  ASSERT_TRUE(Error().ok());
}

TEST_F(GpuOpsTest, RmsNormInPlace) {
  const int64_t n = 256, n_tok = 3;
  const std::vector<float> x = test::RandomNormal(static_cast<size_t>(n * n_tok), 5);
  const std::vector<float> w(static_cast<size_t>(n), 2.0f);
  std::vector<float> ref(x.size());
  cpu::RmsNormRef(x.data(), w.data(), n_tok, n, 1e-6f, ref.data());
  float* xy = Upload(x);
  gpu().RmsNorm(xy, Upload(w), n_tok, n, 1e-6f, xy);
  EXPECT_LT(test::Nmse(Download(xy, x.size()), ref), 1e-12);
  ASSERT_TRUE(Error().ok());
}

// ---- Rope ----

TEST_F(GpuOpsTest, RopeMatchesReference) {
  struct Shape {
    int n_head, head_dim, n_rot;
    float base, scale;
  };
  const Shape shapes[] = {{8, 8, 8, 10000.0f, 1.0f},      // stories260K
                          {8, 32, 32, 1e6f, 1.0f},        // the synthetic models
                          {4, 128, 64, 500000.0f, 0.25f}}; // partial rotation, scaled positions
  for (const Shape& s : shapes) {
    for (bool device_pos : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "head_dim " << s.head_dim << " n_rot " << s.n_rot << " device pos "
                                        << device_pos);
      const std::vector<int32_t> pos = {0, 1, 2, 17, 255, 1000, 4095};
      const auto n_tok = static_cast<int64_t>(pos.size());
      const cpu::RopeParams p{s.n_head, s.head_dim, s.n_rot, s.base, s.scale};
      std::vector<float> x = test::RandomNormal(static_cast<size_t>(n_tok * s.n_head * s.head_dim), 8);
      float* dev = Upload(x);
      cpu::RopeRef(x.data(), n_tok, pos.data(), p);
      gpu().Rope(dev, n_tok, device_pos ? Upload(pos) : pos.data(), p);
      const std::vector<float> got = Download(dev, x.size());
      EXPECT_LT(test::Nmse(got, x), 1e-12);
      EXPECT_LT(test::MaxAbsDiff(got, x), 1e-5);
    }
  }
  ASSERT_TRUE(Error().ok());
}

TEST_F(GpuOpsTest, RopeRejectsOddRotation) {
  const std::vector<float> x(64, 1.0f);
  const std::vector<int32_t> pos = {0};
  gpu().Rope(Upload(x), 1, pos.data(), cpu::RopeParams{2, 32, 31, 10000.0f, 1.0f});
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
}

// ---- Elementwise ----

TEST_F(GpuOpsTest, ElementwiseOpsMatchCpu) {
  const int64_t n = 100003;  // not a multiple of any block size
  const std::vector<float> a = test::RandomNormal(n, 1, 4.0f);
  const std::vector<float> b = test::RandomNormal(n, 2);
  const float* da = Upload(a);
  const float* db = Upload(b);

  std::vector<float> ref(n);
  cpu::SwiGlu(a.data(), b.data(), n, ref.data());
  float* y = PoisonedFloats(n);
  gpu().SwiGlu(da, db, n, y);
  EXPECT_LT(test::Nmse(Download(y, n), ref), 1e-12) << "SwiGlu";

  cpu::Add(a.data(), b.data(), n, ref.data());
  y = PoisonedFloats(n);
  gpu().Add(da, db, n, y);
  EXPECT_EQ(test::MaxAbsDiff(Download(y, n), ref), 0.0) << "Add";

  for (int64_t i = 0; i < n; ++i) ref[i] = -0.75f * a[i];
  y = PoisonedFloats(n);
  gpu().Scale(da, -0.75f, n, y);
  EXPECT_EQ(test::MaxAbsDiff(Download(y, n), ref), 0.0) << "Scale";

  std::vector<float> acc = b;
  for (int64_t i = 0; i < n; ++i) acc[i] += 0.5f * a[i];
  float* dacc = Upload(b);
  gpu().AddScaled(da, 0.5f, n, dacc);
  EXPECT_LT(test::MaxAbsDiff(Download(dacc, n), acc), 1e-6) << "AddScaled";
  ASSERT_TRUE(Error().ok());
}

TEST_F(GpuOpsTest, AddInPlaceAndEmpty) {
  const std::vector<float> a = {1, 2, 3};
  const std::vector<float> b = {10, 20, 30};
  float* da = Upload(a);
  gpu().Add(da, Upload(b), 3, da);
  EXPECT_EQ(Download(da, 3), (std::vector<float>{11, 22, 33}));
  gpu().Add(da, da, 0, da);  // nothing to do, not an error
  ASSERT_TRUE(Error().ok());
}

// ---- KvStore ----

TEST_F(GpuOpsTest, KvStoreWritesTheSameCacheBytesAsCpu) {
  const int64_t n_ctx = 64, row = 96, n_tok = 5, pos0 = 17;
  const std::vector<float> k = test::RandomNormal(static_cast<size_t>(n_tok * row), 3);
  const std::vector<float> v = test::RandomNormal(static_cast<size_t>(n_tok * row), 4);
  for (DType t : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(DTypeName(t));
    const size_t bytes = static_cast<size_t>(n_ctx * row) * (t == DType::kF32 ? 4 : 2);
    std::vector<uint8_t> host_k(bytes, 0xAB), host_v(bytes, 0xCD);
    cpu::KvLayer host{t, host_k.data(), host_v.data(), n_ctx, row};
    cpu::KvLayer dev{t, Upload(host_k), Upload(host_v), n_ctx, row};
    cpu::KvStore(host, k.data(), v.data(), n_tok, pos0);
    gpu().KvStore(dev, Upload(k), Upload(v), n_tok, pos0);
    EXPECT_EQ(Download(static_cast<const uint8_t*>(dev.k), bytes), host_k);
    EXPECT_EQ(Download(static_cast<const uint8_t*>(dev.v), bytes), host_v);
  }
  ASSERT_TRUE(Error().ok());
}

TEST_F(GpuOpsTest, KvStorePastTheEndIsAnError) {
  const std::vector<float> k(8, 1.0f);
  cpu::KvLayer kv{DType::kF32, AllocBytes(4 * 8 * 4), AllocBytes(4 * 8 * 4), 4, 8};
  gpu().KvStore(kv, Upload(k), Upload(k), 1, 4);
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem

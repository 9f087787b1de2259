// The CUDA backend object: what happens without a device (runs everywhere), and with one: the memory pool's
// budget and peak, copies in both directions on both streams, events ordering the streams, and argument
// errors that become statuses while the backend stays usable.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_backend/cuda_backend.h"
#include "tests/gpu_backend/gpu_test_util.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

TEST(CudaNoDevice, FactoryFailsWithOneLine) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCudaBackend({});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string msg(b.status().message());
  EXPECT_EQ(msg.rfind("cuda: ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  std::printf("the CLI's error line: %s\n", msg.c_str());
}

TEST(CudaDevices, CountIsStable) {
  // Never throws or aborts, with or without a driver, and answers the same twice.
  const int n = CudaDeviceCount();
  EXPECT_GE(n, 0);
  EXPECT_EQ(CudaDeviceCount(), n);
}

TEST(CudaDevices, MissingDeviceIndexIsAnError) {
  const int n = CudaDeviceCount();
  if (n == 0) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCudaBackend({.device = n});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaDevices, BudgetBeyondTheCardIsAnError) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCudaBackend({.vram_budget = uint64_t{1} << 50});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
}

class CudaBudgetTest : public test::CudaTest {
 protected:
  static constexpr size_t kBudget = size_t{64} << 20;
  CudaOptions Options() const override { return {.vram_budget = kBudget}; }
  WorkspaceSpec Workspace() const override { return WorkspaceSpec{}; }  // decode-only: no cuBLAS scratch
};

// The Backend shows capacity and peak only; what is in use shows in what still fits.
TEST_F(CudaBudgetTest, HardCapacityAndPeak) {
  EXPECT_EQ(gpu().capacity(), kBudget);
  EXPECT_NE(gpu().name().find("cuda:0"), std::string_view::npos);
  EXPECT_FALSE(gpu().host_memory());
  const size_t base = gpu().peak_bytes();  // the backend's own small workspace, all still allocated
  EXPECT_LT(base, size_t{1} << 20);

  absl::StatusOr<void*> a = gpu().Alloc(size_t{20} << 20, "a");
  absl::StatusOr<void*> b = gpu().Alloc(size_t{20} << 20, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(gpu().peak_bytes(), base + (size_t{40} << 20));
  absl::StatusOr<void*> c = gpu().Alloc(size_t{30} << 20, "c");  // would pass 64 MiB
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(c.status().message()).find("c"), std::string::npos);

  gpu().Free(*a);
  EXPECT_EQ(gpu().peak_bytes(), base + (size_t{40} << 20));
  absl::StatusOr<void*> d = gpu().Alloc(size_t{30} << 20, "d");  // fits now
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(gpu().peak_bytes(), base + (size_t{50} << 20));
  gpu().Free(*b);
  gpu().Free(*d);
  // Everything given back: the largest block the budget allows beside the workspace fits again.
  absl::StatusOr<void*> e = gpu().Alloc(kBudget - base, "e");
  ASSERT_TRUE(e.ok()) << e.status();
  gpu().Free(*e);
  EXPECT_EQ(gpu().peak_bytes(), kBudget);
  EXPECT_TRUE(Error().ok());
}

TEST_F(CudaBudgetTest, FreeOfAForeignPointerIsAnError) {
  int on_stack = 0;
  gpu().Free(&on_stack);
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
  gpu().FreeHostPinned(&on_stack);
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaBudgetTest, WorkspaceCountsAgainstTheBudget) {
  const size_t before = gpu().peak_bytes();
  WorkspaceSpec spec;
  spec.max_tokens = 512;
  spec.max_cols = 4096;
  spec.max_rows = 1024;
  spec.n_head = 32;
  spec.n_expert = 128;
  spec.n_expert_used = 8;
  // 32 MiB cuBLAS workspace + 4 MiB f16 activations + 8 MiB weight tile + 2 MiB attention partials + the MoE
  // grouping's 4096 pairs.
  ASSERT_TRUE(gpu().ReserveWorkspace(spec).ok());
  EXPECT_GT(gpu().peak_bytes(), before + (size_t{32} << 20));  // cuBLAS workspace, f16 scratch, tiles
  // A second reservation replaces the first rather than adding to it: the peak stays.
  const size_t after = gpu().peak_bytes();
  ASSERT_TRUE(gpu().ReserveWorkspace(spec).ok());
  EXPECT_EQ(gpu().peak_bytes(), after);
  // One that cannot fit is an error.
  spec.max_tokens = 1 << 20;
  spec.max_rows = 1 << 20;
  EXPECT_EQ(gpu().ReserveWorkspace(spec).code(), absl::StatusCode::kResourceExhausted);
}

class CudaBackendTest : public test::CudaTest {};

TEST_F(CudaBackendTest, CopiesRoundTripOnBothStreams) {
  const size_t n = 1 << 20;
  std::vector<uint8_t> src(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  absl::StatusOr<void*> pinned = gpu().AllocHostPinned(n);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  void* dev = AllocBytes(n);
  for (Stream s : {Stream::kCompute, Stream::kCopy}) {
    for (bool use_pinned : {false, true}) {
      std::vector<uint8_t> back(n, 0);
      const void* from = src.data();
      if (use_pinned) {
        std::memcpy(*pinned, src.data(), n);
        from = *pinned;
      }
      ASSERT_TRUE(gpu().CopyHostToDevice(dev, from, n, s).ok());
      if (use_pinned) {
        ASSERT_TRUE(gpu().Synchronize(s).ok());
        std::memset(*pinned, 0, n);
        ASSERT_TRUE(gpu().CopyDeviceToHost(*pinned, dev, n, s).ok());
        ASSERT_TRUE(gpu().Synchronize(s).ok());
        std::memcpy(back.data(), *pinned, n);
      } else {
        ASSERT_TRUE(gpu().CopyDeviceToHost(back.data(), dev, n, s).ok());
        ASSERT_TRUE(gpu().Synchronize(s).ok());
      }
      EXPECT_EQ(back, src);
    }
  }
  gpu().FreeHostPinned(*pinned);
  EXPECT_TRUE(Error().ok());
}

// The copy stream fills a buffer, an event hands it to the compute stream, a kernel reads it: without the
// wait the kernel could run first. Repeated so a missing wait would show.
TEST_F(CudaBackendTest, EventsOrderCopyBeforeCompute) {
  const int64_t n = 1 << 22;
  absl::StatusOr<void*> pinned = gpu().AllocHostPinned(n * sizeof(float));
  ASSERT_TRUE(pinned.ok());
  auto* host = static_cast<float*>(*pinned);
  float* in = static_cast<float*>(AllocBytes(n * sizeof(float)));
  float* out = PoisonedFloats(n);
  absl::StatusOr<int> ev = gpu().CreateEvent();
  ASSERT_TRUE(ev.ok());
  for (int round = 1; round <= 3; ++round) {
    for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(round * 1000 + i % 1000);
    ASSERT_TRUE(gpu().CopyHostToDevice(in, host, n * sizeof(float), Stream::kCopy).ok());
    ASSERT_TRUE(gpu().RecordEvent(*ev, Stream::kCopy).ok());
    ASSERT_TRUE(gpu().WaitEvent(*ev, Stream::kCompute).ok());
    gpu().Add(in, in, n, out);  // 2 * in, exactly
    const std::vector<float> got = Download(out, n);
    ASSERT_TRUE(gpu().Synchronize(Stream::kCopy).ok());  // before the host buffer is rewritten
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += got[i] != 2.0f * static_cast<float>(round * 1000 + i % 1000);
    EXPECT_EQ(wrong, 0) << "round " << round;
  }
  EXPECT_FALSE(gpu().RecordEvent(*ev + 1, Stream::kCopy).ok());  // never created
  gpu().FreeHostPinned(*pinned);
  EXPECT_TRUE(Error().ok());
}

TEST_F(CudaBackendTest, SupportsEveryWeightType) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                  DType::kQ8_0, DType::kQ8_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                  DType::kQ8_K, DType::kMXFP4}) {
    EXPECT_TRUE(gpu().Supports(Op::kMatMul, t)) << DTypeName(t);
    EXPECT_TRUE(gpu().Supports(Op::kGetRows, t)) << DTypeName(t);
    EXPECT_TRUE(gpu().Supports(Op::kMoeExperts, t)) << DTypeName(t);
  }
  for (Op op : {Op::kAddBias, Op::kRope, Op::kKvStore, Op::kAttention, Op::kGlu, Op::kAdd, Op::kMoeRoute}) {
    EXPECT_TRUE(gpu().Supports(op, DType::kF32)) << OpName(op);
  }
  EXPECT_FALSE(gpu().Supports(Op::kMatMul, static_cast<DType>(99)));
}

TEST_F(CudaBackendTest, BadArgumentsBecomeStatusesAndTheBackendStaysUsable) {
  float* y = PoisonedFloats(64);
  const std::vector<float> x(64, 1.0f);
  const float* dx = Upload(x);
  // Unsupported type id, odd block count, misaligned rows: each an error, none a crash.
  gpu().MatMul({static_cast<DType>(99), dx, 1, 64, 256}, dx, 1, y);
  EXPECT_EQ(Error().code(), absl::StatusCode::kUnimplemented);
  gpu().MatMul({DType::kQ4_0, dx, 1, 48, 27}, dx, 1, y);
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
  gpu().MatMul({DType::kF32, reinterpret_cast<const uint8_t*>(dx) + 1, 1, 8, 32}, dx, 1, y);
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
  gpu().Add(nullptr, dx, 64, y);
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
  // Only the first error is kept until it is taken.
  gpu().Add(nullptr, dx, 64, y);
  gpu().MatMul({static_cast<DType>(99), dx, 1, 64, 256}, dx, 1, y);
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Error().ok());
  // Still works: an F32 matvec of one 64-wide row of ones.
  gpu().MatMul({DType::kF32, dx, 1, 64, 256}, dx, 1, y);
  EXPECT_EQ(Download(y, 1)[0], 64.0f);
  EXPECT_TRUE(Error().ok());
}

}  // namespace
}  // namespace tandem

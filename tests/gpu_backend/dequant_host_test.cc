// The GPU block decoders (gpu_backend/dequant.h) are plain host/device functions, so their bit layout is
// checked here on the CPU against the core reference dequantizers: these tests run without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/quant.h"
#include "gpu_backend/dequant.h"
#include "tests/gpu_backend/random_weights.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using gpu::BlockInfo;
using gpu::kPiecesPerBlock;

// One row decoded piece by piece, the way the kernels walk it.
template <DType T>
void DecodeRowByPieces(const uint8_t* row, int64_t cols, float* out) {
  constexpr int kP = kPiecesPerBlock<T>;
  for (int64_t b = 0; b < cols / BlockInfo<T>::kElems; ++b) {
    for (int piece = 0; piece < kP; ++piece) {
      float v[8];
      gpu::Dequant8<T>(row + b * BlockInfo<T>::kBytes, piece, v);
      for (int i = 0; i < 8; ++i) out[b * BlockInfo<T>::kElems + piece * 8 + i] = v[i];
    }
  }
}

void DecodeRow(DType t, const uint8_t* row, int64_t cols, float* out) {
  if (gpu::IsPlainFloat(t)) {
    for (int64_t c = 0; c < cols; ++c) {
      out[c] = t == DType::kF32    ? gpu::LoadElem<DType::kF32>(row, c)
               : t == DType::kF16  ? gpu::LoadElem<DType::kF16>(row, c)
                                   : gpu::LoadElem<DType::kBF16>(row, c);
    }
    return;
  }
  const bool known = gpu::DispatchQuantized(t, [&](auto tag) { DecodeRowByPieces<decltype(tag)::value>(row, cols, out); });
  ASSERT_TRUE(known) << DTypeName(t);
}

// Decodes `rows` rows both ways; the float math is the same expression, so the results agree to rounding.
void ExpectSameAsReference(DType t, const std::vector<uint8_t>& data, int64_t rows, int64_t cols) {
  const size_t stride = RowBytes(t, cols);
  std::vector<float> ref(static_cast<size_t>(rows * cols));
  std::vector<float> got(ref.size());
  test::Poison(got);
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(t, data.data() + r * stride, ref.data() + r * cols, cols);
    DecodeRow(t, data.data() + r * stride, cols, got.data() + r * cols);
  }
  double max_ref = 0;
  for (float v : ref) max_ref = std::max(max_ref, static_cast<double>(std::fabs(v)));
  ASSERT_GT(max_ref, 0.0) << DTypeName(t);
  EXPECT_LE(test::MaxAbsDiff(got, ref), 1e-6 * max_ref) << DTypeName(t);
  EXPECT_LT(test::Nmse(got, ref), 1e-12) << DTypeName(t);
}

class DequantHostTest : public ::testing::TestWithParam<DType> {};

TEST_P(DequantHostTest, RandomBlocksMatchCoreDequantizer) {
  const DType t = GetParam();
  const int64_t cols = 512;  // two super-blocks, sixteen 32-blocks
  const int64_t rows = 24;
  ExpectSameAsReference(t, test::RandomWeightRows(t, rows, cols, 1234 + static_cast<uint64_t>(t)), rows, cols);
}

// Blocks as the core quantizers write them from normal data: the realistic bit patterns.
TEST(DequantHost, QuantizedNormalDataMatchesCoreDequantizer) {
  const int64_t cols = 768;
  const int64_t rows = 8;
  const std::vector<float> x = test::RandomNormal(static_cast<size_t>(rows * cols), 99);
  int tested = 0;
  for (DType t : test::AllWeightTypes()) {
    if (!CanQuantize(t)) continue;
    const size_t stride = RowBytes(t, cols);
    std::vector<uint8_t> data(stride * rows);
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(QuantizeRow(t, x.data() + r * cols, data.data() + r * stride, cols).ok()) << DTypeName(t);
    }
    ExpectSameAsReference(t, data, rows, cols);
    ++tested;
  }
  EXPECT_GE(tested, 4);  // F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K at the time of writing
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantHostTest, ::testing::ValuesIn(test::AllWeightTypes()),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// Hand-built Q4_0 block: d = 0.5, element j holds (j % 16); element 0 is (0 - 8) * 0.5 = -4, element 31 is
// (15 - 8) * 0.5 = 3.5.
TEST(DequantHost, HandBuiltQ4_0) {
  BlockQ4_0 block{};
  block.d = F32ToF16(0.5f);
  for (int j = 0; j < 16; ++j) block.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
  const auto* bytes = reinterpret_cast<const uint8_t*>(&block);
  float v[8];
  gpu::Dequant8<DType::kQ4_0>(bytes, 0, v);
  EXPECT_EQ(v[0], -4.0f);
  EXPECT_EQ(v[7], -0.5f);  // (7 - 8) * 0.5
  gpu::Dequant8<DType::kQ4_0>(bytes, 3, v);
  EXPECT_EQ(v[7], -4.0f);  // element 31: high nibble of qs[15] = 0
  gpu::Dequant8<DType::kQ4_0>(bytes, 2, v);
  EXPECT_EQ(v[0], 3.5f);   // element 16: high nibble of qs[0] = 15
}

// Hand-built MXFP4 block at an odd address (its blocks are 17 bytes): e = 126 (d = 1/4), element j < 16 holds
// nibble j, element 16 + j nibble 15 - j; values 1/4 times the doubled E2M1 values. The device's value words are
// core's table.
TEST(DequantHost, HandBuiltMxfp4) {
  for (int q = 0; q < 16; ++q) EXPECT_EQ(gpu::Mxfp4Value(q), kMxfp4Values[q]) << q;
  uint8_t bytes[1 + sizeof(BlockMXFP4)];
  uint8_t* b = bytes + 1;
  b[0] = 126;
  for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  for (int piece = 0; piece < 4; ++piece) {
    float v[8];
    gpu::Dequant8<DType::kMXFP4>(b, piece, v);
    for (int i = 0; i < 8; ++i) {
      const int e = 8 * piece + i;
      EXPECT_EQ(v[i], 0.25f * kMxfp4Values[e < 16 ? e : 31 - e]) << "element " << e;
    }
  }
  EXPECT_EQ(gpu::E8M0Half(0), E8M0HalfToF32(0));
  EXPECT_EQ(gpu::E8M0Half(255), E8M0HalfToF32(255));
  EXPECT_EQ(gpu::RowAlignment(DType::kMXFP4), 1u);
}

}  // namespace
}  // namespace tandem

// Packed rows back to values (cpu_backend/packed_dequant.h) against core/quant.cc's DequantizeRow of the GGUF rows
// they were packed from: the reference bit for bit in f32, the fast path bit for bit in bf16, for every packed type,
// over groups taken from the middle of a matrix into a tile wider than they are. Outputs are poisoned first.
#include "cpu_backend/packed_dequant.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/quant.h"
#include "cpu_backend/repack.h"
#include "gtest/gtest.h"
#include "tests/testutil.h"

namespace tandem::cpu {
namespace {

using test::RandomNormal;

struct Packed {
  std::vector<uint8_t> gguf, packed;
  WeightMatrix w;  // the packed view
  std::vector<float> want;  // DequantizeRow of each GGUF row, [rows][cols]
};

Packed Make(DType type, int64_t rows, int64_t cols) {
  Packed p;
  const size_t stride = RowBytes(type, cols);
  p.gguf.resize(stride * static_cast<size_t>(rows));
  std::vector<float> f = RandomNormal(static_cast<size_t>(rows * cols), 17);
  for (size_t i = 0; i < f.size(); i += 97) f[i] *= 30;  // outliers, so scales and mins vary between blocks
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(QuantizeRow(type, f.data() + r * cols, p.gguf.data() + r * stride, cols).ok());
  }
  const WeightMatrix g{.type = type, .data = p.gguf.data(), .rows = rows, .cols = cols, .row_stride = stride};
  p.packed.resize(PackedBytes(g));
  p.w = Repack(g, p.packed.data());
  p.want.resize(f.size());
  for (int64_t r = 0; r < rows; ++r) DequantizeRow(type, p.gguf.data() + r * stride, p.want.data() + r * cols, cols);
  return p;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

class PackedDequantTest : public ::testing::TestWithParam<DType> {};

TEST_P(PackedDequantTest, EqualsTheGgufRowsDequantized) {
  const DType type = GetParam();
  const int64_t cols = 3 * Traits(type).block_elems, rows = 5 * kPackRows;
  const Packed p = Make(type, rows, cols);
  ASSERT_TRUE(CanDequantizePacked(p.w));
  constexpr int64_t kG0 = 1, kGroups = 3, kLd = kGroups * kPackRows + 8;  // a tile wider than its groups
  std::vector<float> ref(static_cast<size_t>(cols * kLd), std::nanf(""));
  internal::DequantizePackedRef(p.w, kG0, kGroups, ref.data(), kLd);
  for (bool fast : {false, true}) {
    SCOPED_TRACE(fast ? "active ISA" : "scalar");
    if (!fast) SetIsa(Isa::kScalar);
    std::vector<bf16_t> got(ref.size(), 0x7fc1);  // a NaN no value rounds to
    DequantizePacked(p.w, kG0, kGroups, got.data(), kLd);
    SetIsa(DetectedIsa());
    int bad = 0;
    for (int64_t c = 0; c < cols; ++c) {
      for (int64_t r = 0; r < kGroups * kPackRows; ++r) {
        const float want = p.want[static_cast<size_t>((kPackRows * kG0 + r) * cols + c)];
        const size_t at = static_cast<size_t>(c * kLd + r);
        if (!fast && Bits(ref[at]) != Bits(want) && ++bad < 5) ADD_FAILURE() << "ref row " << r << " col " << c;
        if (got[at] != F32ToBf16(want) && ++bad < 5) {
          ADD_FAILURE() << "row " << r << " col " << c << ": " << Bf16ToF32(got[at]) << " want " << want;
        }
      }
      for (int64_t r = kGroups * kPackRows; r < kLd; ++r) {  // past the groups: untouched
        if (got[static_cast<size_t>(c * kLd + r)] != 0x7fc1 && ++bad < 5) ADD_FAILURE() << "wrote past at " << r;
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, PackedDequantTest,
                         ::testing::Values(DType::kQ4_0, DType::kQ8_0, DType::kMXFP4, DType::kQ4_K, DType::kQ5_K,
                                           DType::kQ6_K),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(PackedDequant, TakesOnlyPackedMatrices) {
  const Packed p = Make(DType::kQ4_0, kPackRows, 32);
  EXPECT_TRUE(CanDequantizePacked(p.w));
  WeightMatrix gguf = p.w;
  gguf.layout = kGgufLayout;
  EXPECT_FALSE(CanDequantizePacked(gguf));
}

}  // namespace
}  // namespace tandem::cpu

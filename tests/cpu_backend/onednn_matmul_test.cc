// oneDNN's float-weight products against the naive reference (MatMulRef: the same activation rounding, double
// sums), over shapes whose rows and columns are not multiples of any blocking, strided rows, batches of exactly
// max_tokens (the fixed-size primitive) and of other sizes (runtime M); and through the CPU backend, which must
// route prefill batches there and leave decode batches to its own kernels. Quantized weights on the AMX route
// (packed, dequantized to bf16 tiles) against the GGUF rows' dequantized values and the activations, both rounded
// to bf16, summed in double.
#include "cpu_backend/onednn_matmul.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/quant.h"
#include "cpu_backend/cpu_backend.h"
#include "cpu_backend/kernels.h"
#include "cpu_backend/repack.h"
#include "gtest/gtest.h"
#include "tests/testutil.h"

namespace tandem::cpu {
namespace {

using test::Nmse;
using test::Poison;
using test::RandomNormal;

// F32: float sums in oneDNN's order against double ones, ~1e-14 here at these widths. BF16 and F16: the same
// rounded operands on both sides, so again only the order of the f32 sums; a wrong layout, stride or tile gives
// NMSE ~1.
constexpr double kTol = 1e-10;
// F16 as three bf16 products (OneDnnF16::kBf16Split) drops W_lo x_lo, under 2^-16 of each product: an NMSE of
// 9e-12 at worst over these shapes on a Zen (F16SplitMatchesReference prints it), against ~5e-6 for a missing
// cross term and ~1 for a wrong segment.
constexpr double kF16SplitTol = 1e-9;

// The file's rows of `type`, each row_stride bytes (row_stride >= the row's bytes; the gap is garbage).
std::vector<uint8_t> Rows(DType type, int64_t rows, int64_t cols, size_t row_stride, uint64_t seed) {
  const std::vector<float> w = RandomNormal(static_cast<size_t>(rows * cols), seed);
  std::vector<uint8_t> bytes(row_stride * static_cast<size_t>(rows), 0xa5);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = bytes.data() + static_cast<size_t>(r) * row_stride;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = w[static_cast<size_t>(r * cols + c)];
      if (type == DType::kBF16 || type == DType::kF16) {
        const uint16_t h = type == DType::kBF16 ? F32ToBf16(v) : F32ToF16(v);
        std::memcpy(row + 2 * c, &h, 2);
      } else {
        std::memcpy(row + 4 * c, &v, 4);
      }
    }
  }
  return bytes;
}

// (type, rows, cols, extra bytes per row)
using Case = std::tuple<DType, int64_t, int64_t, size_t>;
class OneDnnMatMulTest : public ::testing::TestWithParam<Case> {};

// The worst NMSE over the batch sizes.
double ExpectMatchesReference(DType type, int64_t rows, int64_t cols, size_t extra, const OneDnnOptions& options = {},
                              double tol = kTol) {
  const size_t stride = RowBytes(type, cols) + extra;
  const std::vector<uint8_t> bytes = Rows(type, rows, cols, stride, 7);
  const WeightMatrix w{.type = type, .data = bytes.data(), .rows = rows, .cols = cols, .row_stride = stride};
  constexpr int64_t kMaxTokens = 37;
  OneDnnMatMuls mm(options);
  double worst = 0;
  EXPECT_TRUE(mm.SetMaxTokens(kMaxTokens).ok());
  const absl::StatusOr<bool> taken = mm.Prepare(w);
  EXPECT_TRUE(taken.ok()) << taken.status();
  if (!taken.ok() || !*taken) {
    std::printf("oneDNN has only its reference %s matmul on this CPU\n", std::string(DTypeName(type)).c_str());
    return 0;
  }
  std::vector<uint8_t> scratch(mm.ScratchBytes(kMaxTokens));
  for (int64_t n_tok : {int64_t{9}, int64_t{16}, kMaxTokens, int64_t{31}}) {
    SCOPED_TRACE(n_tok);
    EXPECT_TRUE(mm.Takes(w, n_tok));
    EXPECT_LE(mm.ScratchFor(w, n_tok), scratch.size());
    if (!mm.Takes(w, n_tok) || mm.ScratchFor(w, n_tok) > scratch.size()) return 1;
    const std::vector<float> x = RandomNormal(static_cast<size_t>(n_tok * cols), 11 + n_tok);
    std::vector<float> y(static_cast<size_t>(n_tok * rows)), want(y.size());
    Poison(y);
    EXPECT_TRUE(mm.MatMul(w, x.data(), n_tok, y.data(), scratch.data()).ok());
    MatMulRef(w, x.data(), n_tok, want.data());
    const double nmse = Nmse(y, want);
    EXPECT_LT(nmse, tol) << mm.ImplOf(w);
    worst = std::max(worst, nmse);
  }
  EXPECT_FALSE(mm.Takes(w, kOneDnnMaxDecodeTokens));  // decode stays on the bandwidth-bound kernels
  return worst;
}

TEST_P(OneDnnMatMulTest, MatchesReference) {
  const auto [type, rows, cols, extra] = GetParam();
  ExpectMatchesReference(type, rows, cols, extra);
}

INSTANTIATE_TEST_SUITE_P(Shapes, OneDnnMatMulTest,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                                            ::testing::Values(kOneDnnMinRows, int64_t{517}, int64_t{1000}),
                                            ::testing::Values(int64_t{8}, int64_t{40}, int64_t{333}),
                                            ::testing::Values(size_t{0}, size_t{64})));

// F16 tiles (here of 1 MiB: 64 rows of 4160 f32) that hold fewer rows than the matrix: whole tiles and a shorter
// last one.
TEST(OneDnnMatMul, F16TilesAndTheirTail) {
  for (size_t extra : {size_t{0}, size_t{64}}) {
    ExpectMatchesReference(DType::kF16, 517, 4160, extra, {.f16 = OneDnnF16::kF32, .f16_tile_bytes = 1 << 20});
  }
}

// F16 as three bf16 products, the route for AMX, forced: it runs wherever oneDNN has a bf16 matmul. 1 MiB tiles
// hold 64 rows of 4160 columns (three bf16 segments each): whole tiles and a shorter last one.
TEST(OneDnnMatMul, F16SplitMatchesReference) {
  double worst = 0;
  for (int64_t rows : {kOneDnnMinRows, int64_t{517}, int64_t{1000}}) {
    for (int64_t cols : {int64_t{8}, int64_t{333}, int64_t{4160}}) {
      for (size_t extra : {size_t{0}, size_t{64}}) {
        SCOPED_TRACE(testing::Message() << rows << " x " << cols << " +" << extra);
        worst = std::max(worst, ExpectMatchesReference(DType::kF16, rows, cols, extra,
                                                       {.f16 = OneDnnF16::kBf16Split, .f16_tile_bytes = 1 << 20},
                                                       kF16SplitTol));
      }
    }
  }
  std::printf("F16 as three bf16 products: worst NMSE %.2e\n", worst);
}

// Packed rows of `type` (repack.h) and the reference for them: y[t][r] = sum_c bf16(W[r][c]) bf16(x[t][c]) in
// double, W the GGUF rows' DequantizeRow values.
struct QuantCase {
  std::vector<uint8_t> gguf, packed;
  WeightMatrix w;
  std::vector<float> w_bf16;  // [rows][cols]
};

QuantCase MakeQuant(DType type, int64_t rows, int64_t cols) {
  QuantCase q;
  const size_t stride = RowBytes(type, cols);
  q.gguf.resize(stride * static_cast<size_t>(rows));
  const std::vector<float> f = RandomNormal(static_cast<size_t>(rows * cols), 23);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(QuantizeRow(type, f.data() + r * cols, q.gguf.data() + r * stride, cols, QuantizeEffort::kFast).ok());
  }
  const WeightMatrix g{.type = type, .data = q.gguf.data(), .rows = rows, .cols = cols, .row_stride = stride};
  q.packed.resize(PackedBytes(g));
  q.w = Repack(g, q.packed.data());
  q.w_bf16.resize(f.size());
  for (int64_t r = 0; r < rows; ++r) DequantizeRow(type, q.gguf.data() + r * stride, q.w_bf16.data() + r * cols, cols);
  for (float& v : q.w_bf16) v = Bf16ToF32(F32ToBf16(v));
  return q;
}

std::vector<float> QuantRef(const QuantCase& q, const std::vector<float>& x, int64_t n_tok) {
  const int64_t rows = q.w.rows, cols = q.w.cols;
  std::vector<float> y(static_cast<size_t>(n_tok * rows));
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < cols; ++c) {
        sum += static_cast<double>(q.w_bf16[static_cast<size_t>(r * cols + c)]) *
               Bf16ToF32(F32ToBf16(x[static_cast<size_t>(t * cols + c)]));
      }
      y[static_cast<size_t>(t * rows + r)] = static_cast<float>(sum);
    }
  }
  return y;
}

// (type, rows, columns in blocks)
using QuantShape = std::tuple<DType, int64_t, int64_t>;
class OneDnnQuantTest : public ::testing::TestWithParam<QuantShape> {};

// Tiles of 128 KiB (of 64 rows at these widths, or fewer rows than the matrix): whole tiles and a shorter last one.
TEST_P(OneDnnQuantTest, MatchesReference) {
  const auto [type, rows, blocks] = GetParam();
  const QuantCase q = MakeQuant(type, rows, blocks * Traits(type).block_elems);
  constexpr int64_t kMaxTokens = 37;
  OneDnnMatMuls mm({.quant = OneDnnQuant::kAll, .quant_tile_bytes = 1 << 17});
  ASSERT_TRUE(mm.SetMaxTokens(kMaxTokens).ok());
  const absl::StatusOr<bool> taken = mm.Prepare(q.w);
  ASSERT_TRUE(taken.ok()) << taken.status();
  if (!*taken) GTEST_SKIP() << "oneDNN has only its reference bf16 matmul on this CPU";
  std::vector<uint8_t> scratch(mm.ScratchBytes(kMaxTokens));
  for (int64_t n_tok : {int64_t{9}, kMaxTokens, int64_t{31}}) {
    SCOPED_TRACE(n_tok);
    ASSERT_TRUE(mm.Takes(q.w, n_tok));
    ASSERT_LE(mm.ScratchFor(q.w, n_tok), scratch.size());
    const std::vector<float> x = RandomNormal(static_cast<size_t>(n_tok * q.w.cols), 31 + n_tok);
    std::vector<float> y(static_cast<size_t>(n_tok * rows));
    Poison(y);
    ASSERT_TRUE(mm.MatMul(q.w, x.data(), n_tok, y.data(), scratch.data()).ok());
    EXPECT_LT(Nmse(y, QuantRef(q, x, n_tok)), kTol) << mm.ImplOf(q.w);
  }
  EXPECT_FALSE(mm.Takes(q.w, kOneDnnMaxDecodeTokens));
}

INSTANTIATE_TEST_SUITE_P(Shapes, OneDnnQuantTest,
                         ::testing::Combine(::testing::Values(DType::kQ4_0, DType::kQ8_0, DType::kMXFP4, DType::kQ4_K,
                                                              DType::kQ5_K, DType::kQ6_K),
                                            ::testing::Values(kOneDnnMinRows, int64_t{528}, int64_t{1040}),
                                            ::testing::Values(int64_t{1}, int64_t{3})));

// The route's settings: off by default, on from the batch calibration found (SetOneDnnQuantMinTokens), and the
// matrices Prepare saw only while on.
TEST(OneDnnMatMul, QuantRouteFollowsItsSettings) {
  if (std::getenv("TANDEM_ONEDNN_QUANT") != nullptr) GTEST_SKIP() << "TANDEM_ONEDNN_QUANT overrides the settings";
  const QuantCase q = MakeQuant(DType::kQ4_K, kOneDnnMinRows, 256);
  SetOneDnnQuantMinTokens({});
  EXPECT_EQ(OneDnnQuantMinTokens(DType::kQ4_K), 0);
  OneDnnMatMuls off;
  EXPECT_FALSE(*off.Prepare(q.w));
  const OneDnnQuantSetting on[] = {{DType::kQ4_K, 20}};
  SetOneDnnQuantMinTokens(on);
  EXPECT_EQ(OneDnnQuantMinTokens(DType::kQ4_K), 20);
  EXPECT_EQ(OneDnnQuantMinTokens(DType::kQ6_K), 0);
  OneDnnMatMuls mm;
  ASSERT_TRUE(mm.SetMaxTokens(32).ok());
  if (!*mm.Prepare(q.w)) GTEST_SKIP() << "oneDNN has only its reference bf16 matmul on this CPU";
  EXPECT_FALSE(mm.Takes(q.w, 19));
  EXPECT_TRUE(mm.Takes(q.w, 20));
  const QuantCase gguf_rows = MakeQuant(DType::kQ4_K, kOneDnnMinRows, 256);
  WeightMatrix file = gguf_rows.w;
  file.data = gguf_rows.gguf.data();
  file.layout = kGgufLayout;
  EXPECT_FALSE(*mm.Prepare(file));  // quantized rows only packed
  SetOneDnnQuantMinTokens({});
}

TEST(OneDnnMatMul, TakesOnlyFloatWeightsOfTheFileLayout) {
  OneDnnMatMuls mm;
  std::vector<uint8_t> bytes(RowBytes(DType::kQ8_0, 64) * 16);
  const WeightMatrix q{.type = DType::kQ8_0, .data = bytes.data(), .rows = 16, .cols = 64};
  EXPECT_FALSE(*mm.Prepare(q));
  EXPECT_FALSE(mm.Takes(q, 64));
  std::vector<uint8_t> f(RowBytes(DType::kF32, 64) * 16);
  WeightMatrix packed{.type = DType::kF32, .data = f.data(), .rows = 16, .cols = 64, .layout = kPackedLayout};
  EXPECT_FALSE(*mm.Prepare(packed));
  const WeightMatrix router{.type = DType::kF32, .data = f.data(), .rows = 16, .cols = 64};
  EXPECT_FALSE(*mm.Prepare(router));  // too few rows (kOneDnnMinRows)
  std::vector<uint8_t> big(RowBytes(DType::kF32, 64) * kOneDnnMinRows);
  const WeightMatrix unseen{.type = DType::kF32, .data = big.data(), .rows = kOneDnnMinRows, .cols = 64};
  EXPECT_FALSE(mm.Takes(unseen, 64));  // a shape Prepare never saw: MatMul's kernels
}

// Through the backend: a prefill batch of a prepared F32/BF16/F16 matrix equals the reference, with TANDEM_ONEDNN
// either way (ctest runs this binary under both).
TEST(OneDnnMatMul, BackendPrefillMatchesReference) {
  for (DType type : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(type));
    constexpr int64_t kRows = kOneDnnMinRows + 16, kCols = 160, kTok = 24;
    const std::vector<uint8_t> bytes = Rows(type, kRows, kCols, RowBytes(type, kCols), 3);
    const WeightMatrix w{.type = type, .data = bytes.data(), .rows = kRows, .cols = kCols};
    auto be = CreateCpuBackend({});
    const absl::StatusOr<WeightMatrix> prepared = be->PrepareMatMulWeights(w, "w");
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    EXPECT_EQ(prepared->data, w.data);  // read in place: no copy
    ASSERT_TRUE(be->ReserveWorkspace({.max_tokens = kTok, .max_cols = kCols, .max_rows = kRows, .n_ctx = 16,
                                      .n_head = 1}).ok());
    for (int64_t n_tok : {int64_t{1}, int64_t{8}, int64_t{9}, kTok}) {
      const std::vector<float> x = RandomNormal(static_cast<size_t>(n_tok * kCols), 5);
      std::vector<float> y(static_cast<size_t>(n_tok * kRows)), want(y.size());
      Poison(y);
      be->MatMul(*prepared, x.data(), n_tok, y.data());
      ASSERT_TRUE(be->TakeError().ok());
      MatMulRef(w, x.data(), n_tok, want.data());
      EXPECT_LT(Nmse(y, want), kTol) << n_tok << " tokens";
    }
  }
}

// Through the backend, with the route on from 16 tokens: decode batches and those below stay on MatMul's kernels
// (equal to MatMulRef), the others take the route, alone (MatMul) or among others (MatMuls).
TEST(OneDnnMatMul, BackendQuantPrefillTakesTheRoute) {
  if (std::getenv("TANDEM_ONEDNN_QUANT") != nullptr || !OneDnnEnabled()) GTEST_SKIP() << "settings overridden";
  const QuantCase q = MakeQuant(DType::kQ6_K, kOneDnnMinRows + 16, 256);
  const WeightMatrix gguf{.type = DType::kQ6_K, .data = q.gguf.data(), .rows = q.w.rows, .cols = q.w.cols};
  const OneDnnQuantSetting on[] = {{DType::kQ6_K, 16}};
  SetOneDnnQuantMinTokens(on);
  auto be = CreateCpuBackend({});
  const absl::StatusOr<WeightMatrix> prepared = be->PrepareMatMulWeights(gguf, "w");
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_TRUE(IsPacked(*prepared));
  constexpr int64_t kTok = 24;
  ASSERT_TRUE(be->ReserveWorkspace({.max_tokens = kTok, .max_cols = gguf.cols, .max_rows = gguf.rows, .n_ctx = 16,
                                    .n_head = 1}).ok());
  OneDnnMatMuls probe({.quant = OneDnnQuant::kAll});
  const bool routed = *probe.Prepare(*prepared);  // oneDNN has more than its reference bf16 matmul here
  for (int64_t n_tok : {int64_t{1}, int64_t{15}, int64_t{16}, kTok}) {
    SCOPED_TRACE(n_tok);
    const std::vector<float> x = RandomNormal(static_cast<size_t>(n_tok * gguf.cols), 5);
    const bool via_route = routed && n_tok >= 16;
    std::vector<float> want(static_cast<size_t>(n_tok * gguf.rows));
    if (via_route) {
      want = QuantRef(q, x, n_tok);
    } else {
      MatMulRef(gguf, x.data(), n_tok, want.data());
    }
    for (bool batched : {false, true}) {
      std::vector<float> y(want.size()), other(want.size());
      Poison(y);
      if (batched) {
        const MatMulOutput outs[] = {{&*prepared, y.data()}, {&*prepared, other.data()}};
        be->MatMuls(outs, x.data(), n_tok);
      } else {
        be->MatMul(*prepared, x.data(), n_tok, y.data());
      }
      ASSERT_TRUE(be->TakeError().ok());
      EXPECT_LT(Nmse(y, want), via_route ? kTol : 1e-8) << (batched ? "MatMuls" : "MatMul");
    }
  }
  SetOneDnnQuantMinTokens({});
  std::vector<float> x = RandomNormal(static_cast<size_t>(kTok * gguf.cols), 5), y(kTok * gguf.rows);
  std::vector<float> want(y.size());
  be->MatMul(*prepared, x.data(), kTok, y.data());  // the route off again: MatMul's kernels
  MatMulRef(gguf, x.data(), kTok, want.data());
  EXPECT_LT(Nmse(y, want), 1e-8);
}

}  // namespace
}  // namespace tandem::cpu

// GPU MatMul against the CPU: every weight type, decode-sized batches (register-dequantizing matvec) and
// prefill batches (dequantized f16 tiles through cuBLAS), each held against two references:
//  - exact: dequantized weights (core::DequantizeRow) times the f32 activations, summed in double;
//  - cpu::MatMulRef, which also rounds activations to the CPU's vec-dot type (Q8_0/Q8_1/Q8_K/F16/BF16).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/quant.h"
#include "cpu_backend/kernels.h"
#include "gpu_backend/dequant.h"
#include "tests/gpu_backend/gpu_test_util.h"
#include "tests/gpu_backend/random_weights.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

std::vector<float> ExactMatMul(const WeightMatrix& w, const std::vector<float>& x, int64_t n_tok) {
  std::vector<float> y(static_cast<size_t>(n_tok * w.rows));
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeRow(w.type, static_cast<const uint8_t*>(w.data) + r * w.row_stride, row.data(), w.cols);
    for (int64_t t = 0; t < n_tok; ++t) {
      double s = 0;
      for (int64_t c = 0; c < w.cols; ++c) s += static_cast<double>(row[c]) * x[t * w.cols + c];
      y[t * w.rows + r] = static_cast<float>(s);
    }
  }
  return y;
}

// Against cpu::MatMulRef, whose activations are rounded to the vec-dot type: the GPU keeps f32 activations
// (matvec) or rounds them to f16 (cuBLAS), so the bound is the size of the CPU's activation rounding.
double RefTolerance(DType t) {
  switch (t) {
    case DType::kF32:
      return 1e-9;
    case DType::kF16:
      return 1e-5;
    case DType::kBF16:
      return 1e-4;
    default:
      return 1e-3;
  }
}

// Against exact math. The matvec is f32 throughout; cuBLAS sees f16 (or bf16) operands.
double ExactTolerance(DType t, bool gemm) {
  if (!gemm || t == DType::kF32) return 1e-9;
  return t == DType::kBF16 ? 1e-4 : 2e-6;
}

struct Case {
  int64_t rows = 67;  // not a multiple of the 4 rows a matvec block takes
  int64_t cols = 512;
  int64_t n_tok = 1;
  size_t row_padding = 0;  // bytes between packed rows
  bool misalign_x = false; // x one float off 16-byte alignment: the matvec's scalar activation loads
};

class MatMulTest : public test::CudaTest, public ::testing::WithParamInterface<DType> {
 protected:
  // The batch size above which each kind of weight goes through cuBLAS, as configured by Options().
  virtual int64_t GemmAbove(DType t) const { return gpu::IsQuantized(t) ? 32 : 8; }

  void Run(const Case& c) {
    const DType t = GetParam();
    SCOPED_TRACE(::testing::Message() << DTypeName(t) << " rows " << c.rows << " cols " << c.cols << " n_tok "
                                      << c.n_tok << " padding " << c.row_padding
                                      << (c.misalign_x ? " misaligned x" : ""));
    const size_t stride = RowBytes(t, c.cols) + c.row_padding;
    const std::vector<uint8_t> weights =
        test::RandomWeightRows(t, c.rows, c.cols, 77 + static_cast<uint64_t>(t) * 31 + c.cols, stride);
    const std::vector<float> x = test::RandomNormal(static_cast<size_t>(c.n_tok * c.cols), 5 + c.n_tok);

    WeightMatrix host_w{t, weights.data(), c.rows, c.cols, stride};
    const std::vector<float> exact = ExactMatMul(host_w, x, c.n_tok);
    std::vector<float> ref(exact.size());
    cpu::MatMulRef(host_w, x.data(), c.n_tok, ref.data());

    WeightMatrix dev_w = host_w;
    dev_w.data = Upload(weights);
    std::vector<float> x_padded(x.size() + 1);
    std::copy(x.begin(), x.end(), x_padded.begin() + (c.misalign_x ? 1 : 0));
    const float* dev_x = Upload(x_padded) + (c.misalign_x ? 1 : 0);
    float* dev_y = PoisonedFloats(exact.size());
    gpu().MatMul(dev_w, dev_x, c.n_tok, dev_y);
    const std::vector<float> got = Download(dev_y, exact.size());
    ASSERT_TRUE(Error().ok());

    const bool gemm = c.n_tok > GemmAbove(t);
    EXPECT_LT(test::Nmse(got, exact), ExactTolerance(t, gemm)) << (gemm ? "cuBLAS path" : "matvec path");
    EXPECT_LT(test::Nmse(got, ref), RefTolerance(t)) << (gemm ? "cuBLAS path" : "matvec path");
  }

  // Column counts this type can take: 256-multiples always; 32-block and plain types also shorter rows, and
  // plain types rows that are no multiple of 4 (scalar weight loads).
  std::vector<int64_t> ColumnCounts() const {
    const DType t = GetParam();
    std::vector<int64_t> cols = {512};
    if (Traits(t).block_elems <= 32) cols.push_back(96);
    if (gpu::IsPlainFloat(t)) cols.push_back(50);
    return cols;
  }
};

TEST_P(MatMulTest, DecodeBatchesTakeTheMatVec) {
  for (int64_t cols : ColumnCounts()) {
    for (int64_t n_tok : {1, 2, 3, 8}) Run({.cols = cols, .n_tok = n_tok});
  }
}

TEST_P(MatMulTest, PrefillBatches) {
  for (int64_t cols : ColumnCounts()) {
    for (int64_t n_tok : {13, 40}) Run({.cols = cols, .n_tok = n_tok});
  }
}

TEST_P(MatMulTest, PaddedRowsAndMisalignedActivations) {
  Run({.n_tok = 1, .row_padding = 64});
  Run({.n_tok = 40, .row_padding = 64});
  Run({.n_tok = 3, .misalign_x = true});
  Run({.n_tok = 40, .misalign_x = true});
  // A type that loads bytes (MXFP4, whose 17-byte blocks fall at any address) takes rows at odd addresses too.
  if (gpu::RowAlignment(GetParam()) == 1) {
    Run({.n_tok = 1, .row_padding = 1});
    Run({.n_tok = 40, .row_padding = 1});
  }
}

// Every batch size through cuBLAS, single tokens included.
class MatMulGemmOnlyTest : public MatMulTest {
 protected:
  CudaOptions Options() const override { return {.matvec_max_tokens = -1}; }
  int64_t GemmAbove(DType) const override { return 0; }
};

TEST_P(MatMulGemmOnlyTest, AllBatchesThroughCublas) {
  for (int64_t n_tok : {1, 5, 40}) Run({.n_tok = n_tok});
}

// Every batch size through the matvec, in slices of at most 8 tokens.
class MatMulMatVecOnlyTest : public MatMulTest {
 protected:
  CudaOptions Options() const override { return {.matvec_max_tokens = 1000}; }
  int64_t GemmAbove(DType) const override { return 1000; }
};

TEST_P(MatMulMatVecOnlyTest, LargeBatchesInMatVecSlices) {
  for (int64_t n_tok : {9, 40}) Run({.n_tok = n_tok});
}

std::string TypeName(const ::testing::TestParamInfo<DType>& info) { return std::string(DTypeName(info.param)); }

INSTANTIATE_TEST_SUITE_P(AllTypes, MatMulTest, ::testing::ValuesIn(test::AllWeightTypes()), TypeName);
INSTANTIATE_TEST_SUITE_P(AllTypes, MatMulGemmOnlyTest, ::testing::ValuesIn(test::AllWeightTypes()), TypeName);
INSTANTIATE_TEST_SUITE_P(AllTypes, MatMulMatVecOnlyTest, ::testing::ValuesIn(test::AllWeightTypes()), TypeName);

// The workspace bounds the cuBLAS path's scratch; a batch wider than the reserved activation scratch still
// computes correctly (in token slices).
class MatMulSmallWorkspaceTest : public test::CudaTest {
 protected:
  WorkspaceSpec Workspace() const override {
    WorkspaceSpec spec;
    spec.max_tokens = 40;
    spec.max_cols = 256;  // the test's rows are 512 wide: 20 tokens per activation slice
    spec.max_rows = 16;   // a 16 x 256 tile: 8 of the test's rows per cuBLAS call
    return spec;
  }
};

TEST_F(MatMulSmallWorkspaceTest, SlicesTokensAndRows) {
  const DType t = DType::kQ4_K;
  const int64_t rows = 67, cols = 512, n_tok = 40;
  const std::vector<uint8_t> weights = test::RandomWeightRows(t, rows, cols, 3);
  const std::vector<float> x = test::RandomNormal(static_cast<size_t>(n_tok * cols), 4);
  WeightMatrix w{t, weights.data(), rows, cols, RowBytes(t, cols)};
  const std::vector<float> exact = ExactMatMul(w, x, n_tok);
  w.data = Upload(weights);
  float* y = PoisonedFloats(exact.size());
  gpu().MatMul(w, Upload(x), n_tok, y);
  const std::vector<float> got = Download(y, exact.size());
  ASSERT_TRUE(Error().ok());
  EXPECT_LT(test::Nmse(got, exact), 2e-6);
}

}  // namespace
}  // namespace tandem

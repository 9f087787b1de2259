#include "gpu_backend/matmul.h"

#include <cublas_api.h>

#include <algorithm>
#include <climits>

#include "core/status.h"
#include "gpu_backend/cuda_status.h"
#include "gpu_backend/dequant.h"
#include "gpu_backend/launch.h"

namespace tandem::gpu {
namespace {

absl::Status MatVecSlices(const MatMulContext& ctx, const WeightMatrix& w, const float* x, int64_t n_tok,
                          float* y) {
  for (int64_t t0 = 0; t0 < n_tok; t0 += kMatVecMaxTokens) {
    const int64_t nt = std::min<int64_t>(kMatVecMaxTokens, n_tok - t0);
    TANDEM_CUDA_RETURN_IF_ERROR(LaunchMatVec(w, x + t0 * w.cols, nt, y + t0 * w.rows, ctx.stream), "matvec launch");
  }
  return absl::OkStatus();
}

// In row-major terms y[t][r] = sum_c A[r][c] * B[t][c], for `m` weight rows A (lda elements apart) and nt
// activation rows B of k elements; y rows are ldc apart. cuBLAS is column-major, so A is passed transposed.
absl::Status Gemm(const MatMulContext& ctx, int64_t m, int64_t nt, int64_t k, const void* a, cudaDataType a_type,
                  int64_t lda, const void* b, cudaDataType b_type, float* c, int64_t ldc) {
  const float one = 1.0f;
  const float zero = 0.0f;
  return CublasStatus(ctx.cublas_api->gemm_ex(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m),
                                              static_cast<int>(nt), static_cast<int>(k), &one, a, a_type,
                                              static_cast<int>(lda), b, b_type, static_cast<int>(k), &zero, c,
                                              CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
                                              CUBLAS_GEMM_DEFAULT),
                      "cublasGemmEx");
}

}  // namespace

bool UsesGemm(const MatMulContext& ctx, DType wtype, int64_t n_tok) {
  const int limit = IsQuantized(wtype) ? ctx.quant_matvec_max_tokens : ctx.float_matvec_max_tokens;
  if (n_tok <= limit || ctx.cublas == nullptr) return false;
  return true;
}

absl::Status RunMatMul(const MatMulContext& ctx, const WeightMatrix& w, const float* x, int64_t n_tok,
                       float* y) {
  if (n_tok <= 0 || w.rows <= 0) return absl::OkStatus();
  const bool fits_int = w.rows <= INT_MAX && w.cols <= INT_MAX && n_tok <= INT_MAX;
  if (!UsesGemm(ctx, w.type, n_tok) || !fits_int) return MatVecSlices(ctx, w, x, n_tok, y);

  if (w.type == DType::kF32) {
    if (w.row_stride % 4 != 0) return MatVecSlices(ctx, w, x, n_tok, y);
    return Gemm(ctx, w.rows, n_tok, w.cols, w.data, CUDA_R_32F, static_cast<int64_t>(w.row_stride / 4), x,
                CUDA_R_32F, y, w.rows);
  }

  // 16-bit paths: activations are rounded to the weights' 16-bit type (f16 for quantized weights) in slices of
  // tokens that fit the x16 scratch.
  const bool plain16 = w.type == DType::kF16 || w.type == DType::kBF16;
  const int64_t tok_cap = ctx.x16 == nullptr ? 0 : static_cast<int64_t>(ctx.x16_elems) / w.cols;
  const int64_t row_cap = ctx.tile == nullptr ? 0 : static_cast<int64_t>(ctx.tile_elems) / w.cols;
  if (tok_cap == 0 || (!plain16 && row_cap == 0) || (plain16 && w.row_stride % 2 != 0)) {
    return MatVecSlices(ctx, w, x, n_tok, y);
  }
  const DType x_type = w.type == DType::kBF16 ? DType::kBF16 : DType::kF16;
  const cudaDataType cuda_type = w.type == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  for (int64_t t0 = 0; t0 < n_tok; t0 += tok_cap) {
    const int64_t nt = std::min(tok_cap, n_tok - t0);
    TANDEM_CUDA_RETURN_IF_ERROR(LaunchConvertF32(x + t0 * w.cols, nt * w.cols, x_type, ctx.x16, ctx.stream),
                                "activation conversion launch");
    float* yt = y + t0 * w.rows;
    if (plain16) {
      TANDEM_RETURN_IF_ERROR(Gemm(ctx, w.rows, nt, w.cols, w.data, cuda_type,
                                  static_cast<int64_t>(w.row_stride / 2), ctx.x16, cuda_type, yt, w.rows));
      continue;
    }
    for (int64_t r0 = 0; r0 < w.rows; r0 += row_cap) {
      const int64_t nr = std::min(row_cap, w.rows - r0);
      TANDEM_CUDA_RETURN_IF_ERROR(LaunchDequantizeRowsF16(w, r0, nr, ctx.tile, ctx.stream), "dequantize launch");
      TANDEM_RETURN_IF_ERROR(Gemm(ctx, nr, nt, w.cols, ctx.tile, CUDA_R_16F, w.cols, ctx.x16, CUDA_R_16F, yt + r0,
                                  w.rows));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::gpu

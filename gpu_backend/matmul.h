// MatMul on the GPU: picks the register-dequantizing matvec (small batches) or cuBLAS (prefill), and runs it.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "gpu_backend/cublas_loader.h"
#include "runtime/tensor.h"

namespace tandem::gpu {

struct MatMulContext {
  cudaStream_t stream = nullptr;
  const CublasApi* cublas_api = nullptr;  // the loaded library (cublas_loader.h)
  cublasHandle_t cublas = nullptr;  // bound to `stream`, with its workspace set
  void* x16 = nullptr;              // activations rounded to f16/bf16 for cuBLAS
  size_t x16_elems = 0;
  void* tile = nullptr;             // dequantized f16 weight rows for cuBLAS
  size_t tile_elems = 0;
  int quant_matvec_max_tokens = 32;  // batches up to this size take the matvec for quantized weights
  int float_matvec_max_tokens = 8;   // likewise for F32/F16/BF16 weights
};

// Whether a batch of n_tok on this weight type goes through cuBLAS.
bool UsesGemm(const MatMulContext& ctx, DType wtype, int64_t n_tok);

// y[t][r] = dot(W[r], x[t]); arguments already validated. Falls back to the matvec in slices when the
// scratch is too small for the cuBLAS path.
absl::Status RunMatMul(const MatMulContext& ctx, const WeightMatrix& w, const float* x, int64_t n_tok, float* y);

}  // namespace tandem::gpu

// Feeds the cuBLAS path: dequantizes a range of weight rows to a packed f16 tile, and rounds f32 activations
// to f16/bf16 for cublasGemmEx.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "gpu_backend/cuda_common.cuh"
#include "gpu_backend/dequant.h"
#include "gpu_backend/launch.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 256;

// One thread per 8-element piece; the 8 halves go out as one 16-byte store (tile rows are multiples of 32
// elements, so every piece is 16-byte aligned in the tile).
template <DType T>
__global__ void DequantRowsKernel(const uint8_t* w, size_t row_stride, int64_t row0, int64_t n_rows, int64_t cols,
                                  __half* out) {
  constexpr int kP = kPiecesPerBlock<T>;
  constexpr int kQK = BlockInfo<T>::kElems;
  const int64_t per_row = cols / kQK * kP;
  const int64_t total = n_rows * per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row;
    const int64_t pc = i % per_row;
    const int64_t blk = pc / kP;
    const int piece = static_cast<int>(pc % kP);
    float v[8];
    Dequant8<T>(w + (row0 + r) * row_stride + blk * BlockInfo<T>::kBytes, piece, v);
    union {
      __half2 h[4];
      uint4 u;
    } packed;
#pragma unroll
    for (int j = 0; j < 4; ++j) packed.h[j] = __floats2half2_rn(v[2 * j], v[2 * j + 1]);
    *reinterpret_cast<uint4*>(out + r * cols + blk * kQK + piece * 8) = packed.u;
  }
}

__global__ void ToHalfKernel(const float* x, int64_t n, __half* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2half_rn(x[i]);
  }
}

__global__ void ToBf16Kernel(const float* x, int64_t n, __nv_bfloat16* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16_rn(x[i]);
  }
}

}  // namespace

cudaError_t LaunchDequantizeRowsF16(const WeightMatrix& w, int64_t row0, int64_t n_rows, void* out,
                                    cudaStream_t s) {
  if (n_rows <= 0 || w.cols <= 0) return cudaSuccess;
  const auto* data = static_cast<const uint8_t*>(w.data);
  const bool known = DispatchQuantized(w.type, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    const int64_t total = n_rows * (w.cols / BlockInfo<T>::kElems) * kPiecesPerBlock<T>;
    DequantRowsKernel<T><<<GridFor(total, kThreads, 1 << 20), kThreads, 0, s>>>(data, w.row_stride, row0, n_rows,
                                                                              w.cols, static_cast<__half*>(out));
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t LaunchConvertF32(const float* x, int64_t n, DType to, void* out, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (to == DType::kF16) {
    ToHalfKernel<<<GridFor(n, kThreads), kThreads, 0, s>>>(x, n, static_cast<__half*>(out));
  } else if (to == DType::kBF16) {
    ToBf16Kernel<<<GridFor(n, kThreads), kThreads, 0, s>>>(x, n, static_cast<__nv_bfloat16*>(out));
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace tandem::gpu

// Matrix-vector products for decode-sized batches: y[t][r] = dot(W[r], x[t]) for up to kMatVecMaxTokens tokens.
// One warp per weight row; each lane takes 8-element pieces of the row in turn, dequantizes them in registers
// (gpu_backend/dequant.h) and multiplies them against every token of the batch, so the weights are read from
// memory once per launch. Accumulation is f32; activations stay f32 (no activation quantization).
#include <type_traits>

#include "gpu_backend/cuda_common.cuh"
#include "gpu_backend/dequant.h"
#include "gpu_backend/launch.h"

namespace tandem::gpu {
namespace {

constexpr int kRowsPerBlock = 4;

__device__ __forceinline__ float Dot8(const float v[8], const float* x, bool x_vec4) {
  if (x_vec4) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(x));
    const float4 b = __ldg(reinterpret_cast<const float4*>(x + 4));
    return v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y + v[6] * b.z + v[7] * b.w;
  }
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s += v[i] * __ldg(x + i);
  return s;
}

// x_vec4: x is 16-byte aligned (cols is a multiple of 32 for every quantized type, so every piece stays aligned).
template <DType T, int NT>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    MatVecQuantKernel(const uint8_t* __restrict__ w, size_t row_stride, int64_t rows, int64_t cols,
                      const float* __restrict__ x, bool x_vec4, float* __restrict__ y) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  constexpr int kP = kPiecesPerBlock<T>;
  constexpr int kQK = BlockInfo<T>::kElems;
  constexpr int kBB = BlockInfo<T>::kBytes;
  const uint8_t* wr = w + row * row_stride;
  const uint64_t n_pieces = static_cast<uint64_t>(cols / kQK) * kP;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  for (uint64_t pc = lane; pc < n_pieces; pc += 32) {
    const uint64_t blk = pc / kP;
    const int piece = static_cast<int>(pc % kP);
    float v[8];
    Dequant8<T>(wr + blk * kBB, piece, v);
    const int64_t e0 = static_cast<int64_t>(blk) * kQK + piece * 8;
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] += Dot8(v, x + t * cols + e0, x_vec4);
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = WarpSum(acc[t]);
  if (lane == 0) {
#pragma unroll
    for (int t = 0; t < NT; ++t) y[t * rows + row] = acc[t];
  }
}

// Four consecutive weights of a plain float row; `c` a multiple of 4 and the row aligned for the wide load.
template <DType T>
__device__ __forceinline__ void Load4(const uint8_t* row, int64_t c, float w[4]) {
  if constexpr (T == DType::kF32) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(row) + c / 4);
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
  } else {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(row) + c / 4);
    const uint16_t h[4] = {static_cast<uint16_t>(v.x & 0xffff), static_cast<uint16_t>(v.x >> 16),
                           static_cast<uint16_t>(v.y & 0xffff), static_cast<uint16_t>(v.y >> 16)};
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = T == DType::kF16 ? HalfToFloat(h[i]) : Bf16BitsToFloat(h[i]);
  }
}

// vec4: cols % 4 == 0, rows 16-byte (F32) or 8-byte (F16/BF16) aligned, x 16-byte aligned.
template <DType T, int NT>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    MatVecFloatKernel(const uint8_t* __restrict__ w, size_t row_stride, int64_t rows, int64_t cols,
                      const float* __restrict__ x, bool vec4, float* __restrict__ y) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const uint8_t* wr = w + row * row_stride;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  if (vec4) {
    for (int64_t c = 4 * lane; c < cols; c += 128) {
      float wv[4];
      Load4<T>(wr, c, wv);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const float4 xv = __ldg(reinterpret_cast<const float4*>(x + t * cols + c));
        acc[t] += wv[0] * xv.x + wv[1] * xv.y + wv[2] * xv.z + wv[3] * xv.w;
      }
    }
  } else {
    for (int64_t c = lane; c < cols; c += 32) {
      const float wv = LoadElem<T>(wr, c);
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[t] += wv * __ldg(x + t * cols + c);
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = WarpSum(acc[t]);
  if (lane == 0) {
#pragma unroll
    for (int t = 0; t < NT; ++t) y[t * rows + row] = acc[t];
  }
}

bool Aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

template <int NT>
cudaError_t LaunchNt(const WeightMatrix& w, const float* x, float* y, cudaStream_t s) {
  const dim3 block(32, kRowsPerBlock);
  const unsigned grid = static_cast<unsigned>((w.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  const auto* data = static_cast<const uint8_t*>(w.data);
  if (IsPlainFloat(w.type)) {
    const size_t wide = w.type == DType::kF32 ? 16 : 8;
    const bool vec4 = w.cols % 4 == 0 && Aligned(data, wide) && w.row_stride % wide == 0 && Aligned(x, 16);
    switch (w.type) {
      case DType::kF32:
        MatVecFloatKernel<DType::kF32, NT><<<grid, block, 0, s>>>(data, w.row_stride, w.rows, w.cols, x, vec4, y);
        break;
      case DType::kF16:
        MatVecFloatKernel<DType::kF16, NT><<<grid, block, 0, s>>>(data, w.row_stride, w.rows, w.cols, x, vec4, y);
        break;
      default:
        MatVecFloatKernel<DType::kBF16, NT><<<grid, block, 0, s>>>(data, w.row_stride, w.rows, w.cols, x, vec4, y);
        break;
    }
    return cudaGetLastError();
  }
  const bool x_vec4 = Aligned(x, 16);
  const bool known = DispatchQuantized(w.type, [&](auto tag) {
    MatVecQuantKernel<decltype(tag)::value, NT><<<grid, block, 0, s>>>(data, w.row_stride, w.rows, w.cols, x,
                                                                        x_vec4, y);
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchMatVec(const WeightMatrix& w, const float* x, int64_t n_tok, float* y, cudaStream_t s) {
  if (n_tok <= 0 || w.rows <= 0) return cudaSuccess;
  switch (n_tok) {
    case 1:
      return LaunchNt<1>(w, x, y, s);
    case 2:
      return LaunchNt<2>(w, x, y, s);
    case 3:
      return LaunchNt<3>(w, x, y, s);
    case 4:
      return LaunchNt<4>(w, x, y, s);
    case 5:
      return LaunchNt<5>(w, x, y, s);
    case 6:
      return LaunchNt<6>(w, x, y, s);
    case 7:
      return LaunchNt<7>(w, x, y, s);
    case 8:
      return LaunchNt<8>(w, x, y, s);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace tandem::gpu

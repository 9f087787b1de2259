// Embedding lookup: y[t] = dequantized row ids[t] of the table, one block per token.
#include <cmath>
#include <type_traits>

#include "gpu_backend/cuda_common.cuh"
#include "gpu_backend/dequant.h"
#include "gpu_backend/launch.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 128;

// Returns the row of token t, or null (after flagging the error and poisoning y's row) for a bad id.
__device__ __forceinline__ const uint8_t* RowOf(const uint8_t* table, size_t row_stride, int64_t rows,
                                                const int32_t* ids_dev, const IndexChunk& chunk, int64_t t,
                                                int64_t cols, float* yr, int* error_word) {
  const int32_t id = ids_dev != nullptr ? ids_dev[t] : chunk.idx[t];
  if (id < 0 || id >= rows) {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = nanf("");
    if (threadIdx.x == 0) atomicCAS(error_word, kDeviceOk, kDeviceBadTokenId);
    return nullptr;
  }
  return table + static_cast<size_t>(id) * row_stride;
}

template <DType T>
__global__ void GetRowsQuantKernel(const uint8_t* table, size_t row_stride, int64_t rows, int64_t cols,
                                   const int32_t* ids_dev, const IndexChunk chunk, float* y, int* error_word) {
  const int64_t t = blockIdx.x;
  float* yr = y + t * cols;
  const uint8_t* row = RowOf(table, row_stride, rows, ids_dev, chunk, t, cols, yr, error_word);
  if (row == nullptr) return;
  constexpr int kP = kPiecesPerBlock<T>;
  constexpr int kQK = BlockInfo<T>::kElems;
  const int64_t n_pieces = cols / kQK * kP;
  for (int64_t pc = threadIdx.x; pc < n_pieces; pc += blockDim.x) {
    const int64_t blk = pc / kP;
    const int piece = static_cast<int>(pc % kP);
    float v[8];
    Dequant8<T>(row + blk * BlockInfo<T>::kBytes, piece, v);
    float* out = yr + blk * kQK + piece * 8;
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = v[i];
  }
}

template <DType T>
__global__ void GetRowsFloatKernel(const uint8_t* table, size_t row_stride, int64_t rows, int64_t cols,
                                   const int32_t* ids_dev, const IndexChunk chunk, float* y, int* error_word) {
  const int64_t t = blockIdx.x;
  float* yr = y + t * cols;
  const uint8_t* row = RowOf(table, row_stride, rows, ids_dev, chunk, t, cols, yr, error_word);
  if (row == nullptr) return;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = LoadElem<T>(row, c);
}

}  // namespace

cudaError_t LaunchGetRows(const WeightMatrix& table, const int32_t* ids_dev, const IndexChunk& chunk,
                          int64_t n_tok, float* y, int* error_word, cudaStream_t s) {
  if (n_tok <= 0 || table.cols <= 0) return cudaSuccess;
  const auto* data = static_cast<const uint8_t*>(table.data);
  const unsigned grid = static_cast<unsigned>(n_tok);
  switch (table.type) {
    case DType::kF32:
      GetRowsFloatKernel<DType::kF32><<<grid, kThreads, 0, s>>>(data, table.row_stride, table.rows, table.cols,
                                                                ids_dev, chunk, y, error_word);
      return cudaGetLastError();
    case DType::kF16:
      GetRowsFloatKernel<DType::kF16><<<grid, kThreads, 0, s>>>(data, table.row_stride, table.rows, table.cols,
                                                                ids_dev, chunk, y, error_word);
      return cudaGetLastError();
    case DType::kBF16:
      GetRowsFloatKernel<DType::kBF16><<<grid, kThreads, 0, s>>>(data, table.row_stride, table.rows, table.cols,
                                                                 ids_dev, chunk, y, error_word);
      return cudaGetLastError();
    default:
      break;
  }
  const bool known = DispatchQuantized(table.type, [&](auto tag) {
    GetRowsQuantKernel<decltype(tag)::value><<<grid, kThreads, 0, s>>>(data, table.row_stride, table.rows,
                                                                        table.cols, ids_dev, chunk, y, error_word);
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace tandem::gpu

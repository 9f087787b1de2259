// Row gathers and weighted scatters (set or add) for MoE token grouping. The row indices (and weights) arrive by value
// in an IndexChunk, so the caller's host arrays are free as soon as the launch returns.
#include "gpu_backend/cuda_common.cuh"
#include "gpu_backend/launch.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 256;

// blockIdx.y = row of the chunk; x-blocks stride over the row's n floats.
__global__ void GatherRowsKernel(const float* x, const IndexChunk chunk, int64_t n, float* y) {
  const int i = blockIdx.y;
  const float* src = x + static_cast<int64_t>(chunk.idx[i]) * n;
  float* dst = y + static_cast<int64_t>(i) * n;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < n;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[c] = src[c];
  }
}

// y[idx[i]] = w[i] * x[i], or += with kAccumulate (atomicAdd keeps repeated destination rows correct; with
// distinct rows it equals a plain y += w * x).
template <bool kAccumulate>
__global__ void ScatterRowsKernel(const float* x, const IndexChunk chunk, int64_t n, float* y) {
  const int i = blockIdx.y;
  const float* src = x + static_cast<int64_t>(i) * n;
  float* dst = y + static_cast<int64_t>(chunk.idx[i]) * n;
  const float w = chunk.w[i];
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < n;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if constexpr (kAccumulate) {
      atomicAdd(dst + c, w * src[c]);
    } else {
      dst[c] = w * src[c];
    }
  }
}

dim3 RowsGrid(int count, int64_t n) { return dim3(GridFor(n, kThreads, 1024), static_cast<unsigned>(count)); }

}  // namespace

cudaError_t LaunchGatherRows(const float* x, const IndexChunk& chunk, int count, int64_t n, float* y,
                             cudaStream_t s) {
  if (count <= 0 || n <= 0) return cudaSuccess;
  if (count > kIndexChunk) return cudaErrorInvalidValue;
  GatherRowsKernel<<<RowsGrid(count, n), kThreads, 0, s>>>(x, chunk, n, y);
  return cudaGetLastError();
}

cudaError_t LaunchScatterRows(const float* x, const IndexChunk& chunk, int count, int64_t n, float* y,
                              bool accumulate, cudaStream_t s) {
  if (count <= 0 || n <= 0) return cudaSuccess;
  if (count > kIndexChunk) return cudaErrorInvalidValue;
  if (accumulate) {
    ScatterRowsKernel<true><<<RowsGrid(count, n), kThreads, 0, s>>>(x, chunk, n, y);
  } else {
    ScatterRowsKernel<false><<<RowsGrid(count, n), kThreads, 0, s>>>(x, chunk, n, y);
  }
  return cudaGetLastError();
}

}  // namespace tandem::gpu

// Elementwise ops over n floats: SwiGLU, add, scale, scaled accumulate. Outputs may alias inputs.
#include "gpu_backend/cuda_common.cuh"
#include "gpu_backend/launch.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 256;

__global__ void SwiGluKernel(const float* g, const float* u, int64_t n, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gv = g[i];
    y[i] = gv / (1.0f + expf(-gv)) * u[i];
  }
}

__global__ void AddKernel(const float* a, const float* b, int64_t n, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = a[i] + b[i];
  }
}

__global__ void ScaleKernel(const float* x, float scale, int64_t n, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = scale * x[i];
  }
}

__global__ void AddScaledKernel(const float* x, float scale, int64_t n, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += scale * x[i];
  }
}

}  // namespace

cudaError_t LaunchSwiGlu(const float* g, const float* u, int64_t n, float* y, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  SwiGluKernel<<<GridFor(n, kThreads), kThreads, 0, s>>>(g, u, n, y);
  return cudaGetLastError();
}

cudaError_t LaunchAdd(const float* a, const float* b, int64_t n, float* y, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  AddKernel<<<GridFor(n, kThreads), kThreads, 0, s>>>(a, b, n, y);
  return cudaGetLastError();
}

cudaError_t LaunchScale(const float* x, float scale, int64_t n, float* y, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  ScaleKernel<<<GridFor(n, kThreads), kThreads, 0, s>>>(x, scale, n, y);
  return cudaGetLastError();
}

cudaError_t LaunchAddScaled(const float* x, float scale, int64_t n, float* y, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  AddScaledKernel<<<GridFor(n, kThreads), kThreads, 0, s>>>(x, scale, n, y);
  return cudaGetLastError();
}

}  // namespace tandem::gpu

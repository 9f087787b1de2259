// Elementwise ops: a bias added to every row, a factor per row, the gated activations (runtime/ops.h's GluParams) and a sum. Outputs
// may alias inputs: each element is read before it is written, by the same thread.
#include "gpu_backend/activation.cuh"
#include "gpu_backend/cuda_common.cuh"
#include "gpu_backend/launch.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 256;

// x, y [n_tok][n]; b [n].
__global__ void AddBiasKernel(const float* x, const float* b, int64_t total, int64_t n, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = x[i] + b[i % n];
  }
}

// The activation is a template argument so the common SwiGLU loop carries no switch.
template <Activation kAct>
__global__ void GluKernel(const float* g, const float* u, int64_t n, GluParams p, float* y) {
  p.act = kAct;
  const bool has_u = u != nullptr;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = GluOne(p, g[i], has_u ? u[i] : 1.0f, has_u);
  }
}

__global__ void AddKernel(const float* a, const float* b, int64_t n, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = a[i] + b[i];
  }
}

// x, y [n_tok][n]; s [n_tok]. The factor is recomputed per element: a row's n threads read the same s[t].
__global__ void ScaleRowsKernel(const float* x, const float* s, int64_t total, int64_t n, RowScale f, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = s[i / n];
    y[i] = x[i] * (f == RowScale::kSigmoid ? 1.0f / (1.0f + expf(-v)) : v);
  }
}

}  // namespace

cudaError_t LaunchAddBias(const float* x, const float* b, int64_t n_tok, int64_t n, float* y, cudaStream_t s) {
  if (n_tok <= 0 || n <= 0) return cudaSuccess;
  const int64_t total = n_tok * n;
  AddBiasKernel<<<GridFor(total, kThreads), kThreads, 0, s>>>(x, b, total, n, y);
  return cudaGetLastError();
}

cudaError_t LaunchGlu(const float* g, const float* u, int64_t n, const GluParams& p, float* y, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  const unsigned grid = GridFor(n, kThreads);
  switch (p.act) {
    case Activation::kSilu:
      GluKernel<Activation::kSilu><<<grid, kThreads, 0, s>>>(g, u, n, p, y);
      break;
    case Activation::kGelu:
      GluKernel<Activation::kGelu><<<grid, kThreads, 0, s>>>(g, u, n, p, y);
      break;
    case Activation::kSwigluOai:
      if (u == nullptr) return cudaErrorInvalidValue;
      GluKernel<Activation::kSwigluOai><<<grid, kThreads, 0, s>>>(g, u, n, p, y);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchAdd(const float* a, const float* b, int64_t n, float* y, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  AddKernel<<<GridFor(n, kThreads), kThreads, 0, s>>>(a, b, n, y);
  return cudaGetLastError();
}

cudaError_t LaunchScaleRows(const float* x, const float* sc, int64_t n_tok, int64_t n, RowScale f, float* y,
                            cudaStream_t s) {
  if (n_tok <= 0 || n <= 0) return cudaSuccess;
  const int64_t total = n_tok * n;
  ScaleRowsKernel<<<GridFor(total, kThreads), kThreads, 0, s>>>(x, sc, total, n, f, y);
  return cudaGetLastError();
}

}  // namespace tandem::gpu

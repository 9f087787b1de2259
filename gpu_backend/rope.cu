// RoPE in llama.cpp's NORM mode, in place: pairs (2i, 2i+1) of the first n_rot dims of every head rotate by
// theta = pos * freq_scale * freq_base^(-2i / n_rot). The angle is formed in double so large positions keep
// their precision; the rotation itself is float.
#include "gpu_backend/cuda_common.cuh"
#include "gpu_backend/launch.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 256;

__global__ void RopeKernel(float* x, int64_t n_tok, const int32_t* pos_dev, const IndexChunk chunk, int n_head,
                           int head_dim, int n_rot, double freq_base, double freq_scale) {
  const int half = n_rot / 2;
  const int64_t total = n_tok * n_head * half;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int pair = static_cast<int>(i % half);
    const int64_t th = i / half;
    const int h = static_cast<int>(th % n_head);
    const int64_t t = th / n_head;
    const int32_t pos = pos_dev != nullptr ? pos_dev[t] : chunk.idx[t];
    const double theta = static_cast<double>(pos) * freq_scale * pow(freq_base, -2.0 * pair / n_rot);
    double sn, cs;
    sincos(theta, &sn, &cs);
    const float s = static_cast<float>(sn);
    const float c = static_cast<float>(cs);
    float* p = x + t * (static_cast<int64_t>(n_head) * head_dim) + static_cast<int64_t>(h) * head_dim + 2 * pair;
    const float a = p[0];
    const float b = p[1];
    p[0] = a * c - b * s;
    p[1] = a * s + b * c;
  }
}

}  // namespace

cudaError_t LaunchRope(float* x, int64_t n_tok, const int32_t* pos_dev, const IndexChunk& chunk,
                       const cpu::RopeParams& p, cudaStream_t s) {
  const int64_t total = n_tok * p.n_head * (p.n_rot / 2);
  if (total <= 0) return cudaSuccess;
  RopeKernel<<<GridFor(total, kThreads), kThreads, 0, s>>>(x, n_tok, pos_dev, chunk, p.n_head, p.head_dim, p.n_rot,
                                                           p.freq_base, p.freq_scale);
  return cudaGetLastError();
}

}  // namespace tandem::gpu

// MoE router: softmax over each token's expert logits, the k most probable experts (ties to the lower id) in
// descending order, their probabilities renormalized to sum to 1. One thread per token: expert counts are small.
#include <cmath>

#include "gpu_backend/cuda_common.cuh"
#include "gpu_backend/launch.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 64;

__global__ void MoeRouteKernel(const float* logits, int64_t n_tok, int n_expert, int k, int32_t* ids,
                               float* weights) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= n_tok) return;
  const float* lr = logits + t * n_expert;
  float max_logit = -INFINITY;
  for (int e = 0; e < n_expert; ++e) max_logit = fmaxf(max_logit, lr[e]);
  // As the CPU rounds it: e^(x - max) in float, summed in double, scaled by a float 1/sum.
  double sum = 0.0;
  for (int e = 0; e < n_expert; ++e) sum += expf(lr[e] - max_logit);
  const float inv_sum = static_cast<float>(1.0 / sum);
  uint32_t taken[kMoeMaxExperts / 32] = {};
  double chosen_sum = 0.0;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    float best_p = 0.0f;
    for (int e = 0; e < n_expert; ++e) {
      if (taken[e >> 5] & (1u << (e & 31))) continue;
      const float pe = expf(lr[e] - max_logit) * inv_sum;
      if (best < 0 || pe > best_p) {  // strict: an equal probability keeps the lower id
        best = e;
        best_p = pe;
      }
    }
    taken[best >> 5] |= 1u << (best & 31);
    ids[t * k + j] = best;
    weights[t * k + j] = best_p;
    chosen_sum += best_p;
  }
  const float norm = static_cast<float>(chosen_sum);
  for (int j = 0; j < k; ++j) weights[t * k + j] /= norm;
}

}  // namespace

cudaError_t LaunchMoeRoute(const float* logits, int64_t n_tok, int n_expert, int k, int32_t* ids, float* weights,
                           cudaStream_t s) {
  if (n_tok <= 0) return cudaSuccess;
  if (n_expert <= 0 || n_expert > kMoeMaxExperts || k <= 0 || k > n_expert) return cudaErrorInvalidValue;
  MoeRouteKernel<<<GridFor(n_tok, kThreads, int64_t{1} << 30), kThreads, 0, s>>>(logits, n_tok, n_expert, k, ids,
                                                                                  weights);
  return cudaGetLastError();
}

}  // namespace tandem::gpu

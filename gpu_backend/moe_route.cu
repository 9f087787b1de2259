// MoE router (runtime/ops.h's MoeRouteParams): each token's gating scores, its k best experts by score plus selection
// bias (descending, ties to the lower id), their weights, optionally renormalized (the sum floored at 2^-14) and
// scaled. One warp per token: lane l holds experts l, l + 32, ...; each pick is a warp-wide arg-max. Writes device
// arrays only: the routing never comes back to the host.
//
// Rounding follows the CPU kernel (cpu_backend/moe_route.cc): e^(x - max) in float summed in double and scaled by
// a float 1/sum; the chosen weights summed in double.
#include <climits>
#include <cmath>

#include "gpu_backend/cuda_common.cuh"
#include "gpu_backend/launch.h"

namespace tandem::gpu {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kPerLane = kMoeMaxExperts / 32;
constexpr float kMinWeightSum = 6.103515625e-5f;  // 2^-14, as llama.cpp clamps the sum it normalizes by

// Whether candidate (va, a) ranks before (vb, b): higher score, then lower id. A total order (NaN below every
// number, id kNone below everything) so the butterfly reduction leaves the same winner in every lane.
constexpr int kNone = INT_MAX;
__device__ __forceinline__ bool RanksBefore(float va, int a, float vb, int b) {
  if (a == kNone) return false;
  if (b == kNone) return true;
  const bool na = isnan(va), nb = isnan(vb);
  if (na != nb) return nb;
  if (na) return a < b;
  return va > vb || (va == vb && a < b);
}

__device__ __forceinline__ double WarpSumDouble(double v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// logits [n_tok][n_expert] -> ids, weights [n_tok][k].
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    MoeRouteKernel(const float* __restrict__ logits, int64_t n_tok, const MoeRouteParams p, int32_t* __restrict__ ids,
                   float* __restrict__ weights) {
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (t >= n_tok) return;  // the whole warp
  const float* row = logits + t * p.n_expert;

  float score[kPerLane];  // the gating score: what a chosen expert's weight starts from
  float rank[kPerLane];   // score + selection bias: what the choice ranks by
  unsigned taken = 0;     // bit i: expert lane + 32 i is chosen or does not exist
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    score[i] = e < p.n_expert ? row[e] : -INFINITY;
    if (e >= p.n_expert) taken |= 1u << i;
  }
  if (p.gating == MoeGating::kSoftmax) {
    float max_logit = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) max_logit = fmaxf(max_logit, score[i]);
    max_logit = WarpMax(max_logit);
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (!(taken & (1u << i))) sum += expf(score[i] - max_logit);
    }
    const float inv_sum = static_cast<float>(1.0 / WarpSumDouble(sum));
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) score[i] = expf(score[i] - max_logit) * inv_sum;
  } else if (p.gating == MoeGating::kSigmoid) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) score[i] = 1.0f / (1.0f + expf(-score[i]));
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    rank[i] = p.selection_bias != nullptr && e < p.n_expert ? score[i] + p.selection_bias[e] : score[i];
  }

  int32_t* ids_t = ids + t * p.k;
  float* w_t = weights + t * p.k;
  for (int j = 0; j < p.k; ++j) {
    float best_v = 0.0f;
    int best = kNone;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      if (!(taken & (1u << i)) && RanksBefore(rank[i], e, best_v, best)) {
        best_v = rank[i];
        best = e;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other_v = __shfl_xor_sync(kFullMask, best_v, offset);
      const int other = __shfl_xor_sync(kFullMask, best, offset);
      if (RanksBefore(other_v, other, best_v, best)) {
        best_v = other_v;
        best = other;
      }
    }
    // k <= n_expert, so an expert is left to pick.
    const int owner = best & 31;
    const int slot = best >> 5;
    float w = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (i == slot) w = score[i];
    }
    if (lane == owner) taken |= 1u << slot;
    w = __shfl_sync(kFullMask, w, owner);
    if (lane == 0) {
      ids_t[j] = best;
      w_t[j] = w;
    }
  }
  if (lane != 0) return;
  // The chosen weights: lane 0 reads back what it wrote.
  if (p.gating == MoeGating::kSoftmaxTopK) {
    float m = -INFINITY;
    for (int j = 0; j < p.k; ++j) m = fmaxf(m, w_t[j]);
    double sum = 0.0;
    for (int j = 0; j < p.k; ++j) {
      w_t[j] = expf(w_t[j] - m);
      sum += w_t[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int j = 0; j < p.k; ++j) w_t[j] *= inv;
  }
  if (p.normalize) {
    double sum = 0.0;
    for (int j = 0; j < p.k; ++j) sum += w_t[j];
    const float norm = fmaxf(static_cast<float>(sum), kMinWeightSum);
    for (int j = 0; j < p.k; ++j) w_t[j] /= norm;
  }
  if (p.scale != 1.0f) {
    for (int j = 0; j < p.k; ++j) w_t[j] *= p.scale;
  }
}

}  // namespace

cudaError_t LaunchMoeRoute(const float* logits, int64_t n_tok, const MoeRouteParams& p, int32_t* ids, float* weights,
                           cudaStream_t s) {
  if (n_tok <= 0) return cudaSuccess;
  if (p.n_expert <= 0 || p.n_expert > kMoeMaxExperts || p.k <= 0 || p.k > p.n_expert) return cudaErrorInvalidValue;
  const int64_t blocks = (n_tok + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > INT_MAX) return cudaErrorInvalidValue;
  MoeRouteKernel<<<static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, s>>>(logits, n_tok, p, ids, weights);
  return cudaGetLastError();
}

}  // namespace tandem::gpu

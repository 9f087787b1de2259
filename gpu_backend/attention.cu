// Causal attention over a device KV cache (F32 or F16), with grouped-query heads, an optional sliding window, sinks
// and logit soft-capping (runtime/ops.h's AttentionParams). Query t of the batch sits at position p = pos0 + t and
// attends to cache rows p - window + 1 .. p (0 .. p without a window). One block per (head, token, key split);
// inside a block each warp walks every kWarps-th key with an online softmax (running max, running sum, rescaled
// accumulator), and the warps' states are merged at the end. When a batch is too small to fill the device
// (decode), the keys are also split across blocks and a second kernel merges the splits. The sink joins the
// normalisation once, where the states are finally merged: in the block without splits, else in the merge kernel.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "gpu_backend/cuda_common.cuh"
#include "gpu_backend/launch.h"

namespace tandem::gpu {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxSplit = 32;
constexpr int64_t kMinKeysPerSplit = 128;
constexpr int64_t kMaxGridY = 65535;

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }

// A split's weight in the merge: exp(m - M), or 0 for a split (or warp) that saw no key.
__device__ __forceinline__ float MergeWeight(float m, float max_m) { return m == -INFINITY ? 0.0f : expf(m - max_m); }

// The first cache row query position `pos` sees.
__device__ __forceinline__ int64_t FirstVisible(int64_t pos, int window) {
  return window > 0 ? max(int64_t{0}, pos - window + 1) : 0;
}

// The head's sink logit, -inf without sinks (then it weighs nothing in the merge).
__device__ __forceinline__ float SinkOf(const AttentionParams& p, int h) {
  return p.sinks != nullptr ? p.sinks[h] : -INFINITY;
}

template <int kPerLane, typename KvT>
__global__ void __launch_bounds__(32 * kWarps)
    AttentionKernel(const float* __restrict__ q, const KvT* __restrict__ kc, const KvT* __restrict__ vc,
                    int64_t row_elems, int64_t ring_rows, int64_t pos0, const AttentionParams p, int n_split,
                    float* __restrict__ out, float* __restrict__ partials) {
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const int split = blockIdx.z;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int head_dim = p.head_dim;
  const int64_t kv_offset = static_cast<int64_t>(h / (p.n_head / p.n_head_kv)) * head_dim;
  const int64_t pos = pos0 + t;
  const int64_t first = FirstVisible(pos, p.window);
  const int64_t n_keys = pos + 1 - first;
  const int64_t per_split = (n_keys + n_split - 1) / n_split;
  const int64_t j0 = first + split * per_split;
  const int64_t j1 = min(pos + 1, j0 + per_split);
  const int64_t q_stride = static_cast<int64_t>(p.n_head) * head_dim;
  const float* qr = q + t * q_stride + static_cast<int64_t>(h) * head_dim;

  float qv[kPerLane];
  float acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < head_dim ? qr[d] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY;
  float l = 0.0f;
  for (int64_t j = j0 + warp; j < j1; j += kWarps) {
    const int64_t row = ring_rows > 0 ? j % ring_rows : j;  // a windowed layer's ring cache (runtime/tensor.h)
    const KvT* kr = kc + row * row_elems + kv_offset;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < head_dim) dot += qv[i] * ToFloat(kr[d]);
    }
    // The score as the CPU forms it: the cap before the scale.
    dot = WarpSum(dot);
    if (p.softcap > 0.0f) dot = p.softcap * tanhf(dot * (1.0f / p.softcap));  // the reciprocal, as the CPU
    dot *= p.scale;
    const float m_new = fmaxf(m, dot);
    const float correction = expf(m - m_new);  // 0 on the first key (m = -inf)
    const float prob = expf(dot - m_new);
    l = l * correction + prob;
    const KvT* vr = vc + row * row_elems + kv_offset;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      const float vv = d < head_dim ? ToFloat(vr[d]) : 0.0f;
      acc[i] = acc[i] * correction + prob * vv;
    }
    m = m_new;
  }

  __shared__ float s_m[kWarps];
  __shared__ float s_l[kWarps];
  __shared__ float s_acc[kWarps][32 * kPerLane];
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) s_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();

  // Without splits this is the final merge, so the sink joins it; a split's state leaves it to the merge kernel.
  const float sink = n_split == 1 ? SinkOf(p, h) : -INFINITY;
  float max_m = sink;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) max_m = fmaxf(max_m, s_m[w]);
  float weight[kWarps];
  float sum = MergeWeight(sink, max_m);
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = MergeWeight(s_m[w], max_m);
    sum += s_l[w] * weight[w];
  }
  if (n_split == 1) {
    float* o = out + t * q_stride + static_cast<int64_t>(h) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
      float num = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) num += s_acc[w][d] * weight[w];
      o[d] = num / sum;
    }
  } else {
    // Unnormalized state of this split: [max, sum, acc[head_dim]].
    float* part = partials + ((t * p.n_head + h) * n_split + split) * (head_dim + 2);
    if (threadIdx.x == 0) {
      part[0] = max_m;
      part[1] = sum;
    }
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
      float num = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) num += s_acc[w][d] * weight[w];
      part[2 + d] = num;
    }
  }
}

// The splits' states, and the sink once.
__global__ void MergeSplitsKernel(const float* __restrict__ partials, const AttentionParams p, int n_split,
                                  float* __restrict__ out) {
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const int head_dim = p.head_dim;
  const int64_t stride = head_dim + 2;
  const float* base = partials + (t * p.n_head + h) * n_split * stride;
  const float sink = SinkOf(p, h);
  float max_m = sink;
  for (int s = 0; s < n_split; ++s) max_m = fmaxf(max_m, base[s * stride]);
  float sum = MergeWeight(sink, max_m);
  for (int s = 0; s < n_split; ++s) sum += base[s * stride + 1] * MergeWeight(base[s * stride], max_m);
  float* o = out + t * static_cast<int64_t>(p.n_head) * head_dim + static_cast<int64_t>(h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float num = 0.0f;
    for (int s = 0; s < n_split; ++s) num += base[s * stride + 2 + d] * MergeWeight(base[s * stride], max_m);
    o[d] = num / sum;
  }
}

template <int kPerLane, typename KvT>
void Launch(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
            int n_split, float* out, float* partials, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(p.n_head), static_cast<unsigned>(n_tok), static_cast<unsigned>(n_split));
  AttentionKernel<kPerLane, KvT><<<grid, 32 * kWarps, 0, s>>>(
      q, static_cast<const KvT*>(kv.k), static_cast<const KvT*>(kv.v), kv.row_elems, kv.ring ? kv.n_ctx : 0, pos0, p,
      n_split, out, partials);
}

template <typename KvT>
void LaunchForHeadDim(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0,
                      const AttentionParams& p, int n_split, float* out, float* partials, cudaStream_t s) {
  if (p.head_dim <= 32) {
    Launch<1, KvT>(q, kv, n_tok, pos0, p, n_split, out, partials, s);
  } else if (p.head_dim <= 64) {
    Launch<2, KvT>(q, kv, n_tok, pos0, p, n_split, out, partials, s);
  } else if (p.head_dim <= 128) {
    Launch<4, KvT>(q, kv, n_tok, pos0, p, n_split, out, partials, s);
  } else {
    Launch<8, KvT>(q, kv, n_tok, pos0, p, n_split, out, partials, s);
  }
}

// How many key splits: enough blocks for about two per multiprocessor, at least kMinKeysPerSplit keys each,
// and only as many as the scratch holds.
int ChooseSplits(int64_t n_tok, int64_t pos0, const AttentionParams& p, const AttentionWork& work) {
  if (work.partials == nullptr || work.partial_floats == 0) return 1;
  const int64_t blocks = n_tok * p.n_head;
  const int64_t max_keys = p.window > 0 ? std::min<int64_t>(p.window, pos0 + n_tok) : pos0 + n_tok;
  int64_t want = (2 * static_cast<int64_t>(work.sm_count) + blocks - 1) / blocks;
  want = std::min<int64_t>(want, max_keys / kMinKeysPerSplit);
  want = std::min<int64_t>(want, kMaxSplit);
  while (want > 1 && static_cast<size_t>(blocks * want * (p.head_dim + 2)) > work.partial_floats) --want;
  return want > 1 ? static_cast<int>(want) : 1;
}

}  // namespace

cudaError_t LaunchAttention(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0,
                            const AttentionParams& p, float* out, const AttentionWork& work, cudaStream_t s) {
  if (n_tok <= 0) return cudaSuccess;
  if (p.head_dim <= 0 || p.head_dim > kAttentionMaxHeadDim || p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0) {
    return cudaErrorInvalidValue;
  }
  if (!kv.HoldsAttention(pos0, n_tok, p.window)) return cudaErrorInvalidValue;
  const int64_t q_stride = static_cast<int64_t>(p.n_head) * p.head_dim;
  // The grid's y dimension holds the batch; longer batches go in slices, each a causal continuation.
  for (int64_t t0 = 0; t0 < n_tok; t0 += kMaxGridY) {
    const int64_t nt = std::min(kMaxGridY, n_tok - t0);
    const int n_split = ChooseSplits(nt, pos0 + t0, p, work);
    const float* qs = q + t0 * q_stride;
    float* os = out + t0 * q_stride;
    if (kv.type == DType::kF16) {
      LaunchForHeadDim<__half>(qs, kv, nt, pos0 + t0, p, n_split, os, work.partials, s);
    } else {
      LaunchForHeadDim<float>(qs, kv, nt, pos0 + t0, p, n_split, os, work.partials, s);
    }
    if (n_split > 1) {
      const cudaError_t err = cudaGetLastError();
      if (err != cudaSuccess) return err;
      const dim3 grid(static_cast<unsigned>(p.n_head), static_cast<unsigned>(nt));
      MergeSplitsKernel<<<grid, 128, 0, s>>>(work.partials, p, n_split, os);
    }
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace tandem::gpu

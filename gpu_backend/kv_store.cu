// Writes new K and V rows into a layer's device cache, converting to the cache type (F32 or F16, round to
// nearest even).
#include <cuda_fp16.h>

#include "gpu_backend/cuda_common.cuh"
#include "gpu_backend/launch.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 256;

template <typename CacheT>
__device__ __forceinline__ CacheT FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

// Element i of the batch's rows goes to the cache row of position pos0 + i / row_elems: that position, or in a
// ring of ring_rows rows (runtime/tensor.h), the position modulo ring_rows.
template <typename CacheT>
__global__ void KvStoreKernel(CacheT* kc, CacheT* vc, const float* k, const float* v, int64_t n, int64_t pos0,
                              int64_t row_elems, int64_t ring_rows) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t pos = pos0 + i / row_elems;
    const int64_t at = (ring_rows > 0 ? pos % ring_rows : pos) * row_elems + i % row_elems;
    kc[at] = FromFloat<CacheT>(k[i]);
    vc[at] = FromFloat<CacheT>(v[i]);
  }
}

}  // namespace

cudaError_t LaunchKvStore(const KvLayer& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0,
                          cudaStream_t s) {
  const int64_t n = n_tok * kv.row_elems;
  if (n <= 0) return cudaSuccess;
  const int64_t ring_rows = kv.ring ? kv.n_ctx : 0;
  if (kv.type == DType::kF16) {
    KvStoreKernel<__half><<<GridFor(n, kThreads), kThreads, 0, s>>>(
        static_cast<__half*>(kv.k), static_cast<__half*>(kv.v), k, v, n, pos0, kv.row_elems, ring_rows);
  } else {
    KvStoreKernel<float><<<GridFor(n, kThreads), kThreads, 0, s>>>(
        static_cast<float*>(kv.k), static_cast<float*>(kv.v), k, v, n, pos0, kv.row_elems, ring_rows);
  }
  return cudaGetLastError();
}

}  // namespace tandem::gpu

// Host-side launchers of the CUDA kernels, one .cu file each. Plain C++ declarations, so the backend (.cc) is
// compiled by the host compiler. Each launcher checks nothing but its launch: arguments were validated by the
// backend. Each returns cudaGetLastError() after the launch (cudaSuccess and no launch for empty work).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cpu_backend/kernels.h"
#include "core/dtype.h"

namespace tandem::gpu {

// Host index arrays travel by value in the kernel parameters (4 KiB at most on every architecture), so the
// host array may be reused as soon as the launch returns and no staging buffer or synchronization is needed.
constexpr int kIndexChunk = 448;
struct IndexChunk {
  int32_t idx[kIndexChunk];
  float w[kIndexChunk];
};

// Codes a kernel writes into the device error word; the backend reports them from TakeError().
enum DeviceErrorCode : int { kDeviceOk = 0, kDeviceBadTokenId = 1 };

// Largest token batch of one MatVec launch; larger batches are split by the caller.
constexpr int kMatVecMaxTokens = 8;

// ---- get_rows.cu: y[t] = dequantized row ids[t] of the table. ids come from ids_dev when non-null, else from
// chunk.idx (then n_tok <= kIndexChunk). An id out of range writes a NaN row and sets *error_word. ----
cudaError_t LaunchGetRows(const cpu::WeightMatrix& table, const int32_t* ids_dev, const IndexChunk& chunk,
                          int64_t n_tok, float* y, int* error_word, cudaStream_t s);

// ---- rms_norm.cu ----
cudaError_t LaunchRmsNorm(const float* x, const float* w, int64_t n_tok, int64_t n, float eps, float* y,
                          cudaStream_t s);

// ---- rope.cu: positions from pos_dev when non-null, else from chunk.idx (then n_tok <= kIndexChunk) ----
cudaError_t LaunchRope(float* x, int64_t n_tok, const int32_t* pos_dev, const IndexChunk& chunk,
                       const cpu::RopeParams& p, cudaStream_t s);

// ---- kv_store.cu: rows pos0 .. pos0+n_tok-1 of the cache (F32 or F16) ----
cudaError_t LaunchKvStore(const cpu::KvLayer& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0,
                          cudaStream_t s);

// ---- attention.cu: causal attention over a device KV cache (F32 or F16), GQA. For short batches over long
// contexts the keys are split across blocks (partial softmax states in `partials`, then combined). ----
struct AttentionWork {
  float* partials = nullptr;  // scratch for split-key partial results
  size_t partial_floats = 0;  // its capacity; 0 disables splitting
  int sm_count = 1;           // multiprocessors, to decide how far to split
};
// head_dim <= kAttentionMaxHeadDim.
constexpr int kAttentionMaxHeadDim = 256;
cudaError_t LaunchAttention(const float* q, const cpu::KvLayer& kv, int64_t n_tok, int64_t pos0,
                            const cpu::AttentionParams& p, float* out, const AttentionWork& work, cudaStream_t s);

// ---- elementwise.cu ----
cudaError_t LaunchSwiGlu(const float* g, const float* u, int64_t n, float* y, cudaStream_t s);
cudaError_t LaunchAdd(const float* a, const float* b, int64_t n, float* y, cudaStream_t s);
cudaError_t LaunchScale(const float* x, float scale, int64_t n, float* y, cudaStream_t s);
cudaError_t LaunchAddScaled(const float* x, float scale, int64_t n, float* y, cudaStream_t s);

// ---- moe_route.cu: softmax + top-k per token into device arrays [n_tok][k]; n_expert <= kMoeMaxExperts ----
constexpr int kMoeMaxExperts = 256;
cudaError_t LaunchMoeRoute(const float* logits, int64_t n_tok, int n_expert, int k, int32_t* ids, float* weights,
                           cudaStream_t s);

// ---- gather_scatter.cu: `count` <= kIndexChunk rows of n floats ----
// y[i] = x[chunk.idx[i]]
cudaError_t LaunchGatherRows(const float* x, const IndexChunk& chunk, int count, int64_t n, float* y,
                             cudaStream_t s);
// y[chunk.idx[i]] = chunk.w[i] * x[i], or += when accumulate
cudaError_t LaunchScatterRows(const float* x, const IndexChunk& chunk, int count, int64_t n, float* y,
                              bool accumulate, cudaStream_t s);

// ---- matvec_q.cu: y[t][r] = dot(W[r], x[t]) for n_tok <= kMatVecMaxTokens, any supported weight type,
// dequantized in registers, f32 accumulation ----
cudaError_t LaunchMatVec(const cpu::WeightMatrix& w, const float* x, int64_t n_tok, float* y, cudaStream_t s);

// ---- dequant_rows.cu: for the cuBLAS path ----
// out[r][c] (f16, packed rows of w.cols) = W[row0 + r][c], for a quantized type.
cudaError_t LaunchDequantizeRowsF16(const cpu::WeightMatrix& w, int64_t row0, int64_t n_rows, void* out,
                                    cudaStream_t s);
// out[i] = x[i] rounded to F16 or BF16 (to nearest even).
cudaError_t LaunchConvertF32(const float* x, int64_t n, DType to, void* out, cudaStream_t s);

}  // namespace tandem::gpu

// Host-side launchers of the CUDA kernels, one .cu file each. Plain C++ declarations, so the backend (.cc) is
// compiled by the host compiler. Each launcher checks nothing but its launch: arguments were validated by the
// backend. Each returns cudaGetLastError() after the launch (cudaSuccess and no launch for empty work).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "runtime/ops.h"
#include "core/dtype.h"

namespace tandem::gpu {

// Host index arrays travel by value in the kernel parameters (kept under the 4 KiB every architecture takes), so
// the host array may be reused as soon as the launch returns and no staging buffer or synchronization is needed.
constexpr int kIndexChunk = 896;
struct IndexChunk {
  int32_t idx[kIndexChunk];
};

// Codes a kernel writes into the device error word; the backend reports them from TakeError().
enum DeviceErrorCode : int { kDeviceOk = 0, kDeviceBadTokenId = 1, kDeviceBadExpertId = 2 };

// Largest token batch of one MatVec launch; larger batches are split by the caller.
constexpr int kMatVecMaxTokens = 8;

// ---- get_rows.cu: y[t] = dequantized row ids[t] of the table. ids come from ids_dev when non-null, else from
// chunk.idx (then n_tok <= kIndexChunk). An id out of range writes a NaN row and sets *error_word. ----
cudaError_t LaunchGetRows(const WeightMatrix& table, const int32_t* ids_dev, const IndexChunk& chunk,
                          int64_t n_tok, float* y, int* error_word, cudaStream_t s);

// ---- rms_norm.cu ----
cudaError_t LaunchRmsNorm(const float* x, const float* w, int64_t n_tok, int64_t n, float eps, float* y,
                          cudaStream_t s);

// ---- rope.cu: positions from pos_dev when non-null, else from chunk.idx (then n_tok <= kIndexChunk) ----
cudaError_t LaunchRope(float* x, int64_t n_tok, const int32_t* pos_dev, const IndexChunk& chunk,
                       const RopeParams& p, cudaStream_t s);

// ---- kv_store.cu: rows pos0 .. pos0+n_tok-1 of the cache (F32 or F16) ----
cudaError_t LaunchKvStore(const KvLayer& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0,
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
cudaError_t LaunchAttention(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0,
                            const AttentionParams& p, float* out, const AttentionWork& work, cudaStream_t s);

// ---- elementwise.cu ----
// y[t][i] = x[t][i] + b[i] over n_tok rows of n (y may alias x).
cudaError_t LaunchAddBias(const float* x, const float* b, int64_t n_tok, int64_t n, float* y, cudaStream_t s);
// y = act(g) * u, or act(g) when u is null (runtime/ops.h's GluParams; kSwigluOai needs u). y may alias g or u.
cudaError_t LaunchGlu(const float* g, const float* u, int64_t n, const GluParams& p, float* y, cudaStream_t s);
cudaError_t LaunchAdd(const float* a, const float* b, int64_t n, float* y, cudaStream_t s);
// y[t][i] = x[t][i] * f(s[t]) over n_tok rows of n (runtime/ops.h's RowScale; y may alias x).
cudaError_t LaunchScaleRows(const float* x, const float* s, int64_t n_tok, int64_t n, RowScale f, float* y,
                            cudaStream_t stream);

// ---- moe_route.cu: runtime/ops.h's MoeRouteParams into device arrays ids, weights [n_tok][k]. One warp per
// token; n_expert <= kMoeMaxExperts; selection_bias a device pointer or null. ----
constexpr int kMoeMaxExperts = 256;
cudaError_t LaunchMoeRoute(const float* logits, int64_t n_tok, const MoeRouteParams& p, int32_t* ids, float* weights,
                           cudaStream_t s);

// ---- moe_group.cu: MoeExperts' (token, slot) pairs grouped by expert, on the device ----
// The n_tok * k pairs are sorted by expert (token order within an expert). The experts' products run in passes of
// at most `pass_pairs` consecutive sorted pairs (the rows of the caller's buffers), and within a pass in tiles: up
// to `tile` consecutive pairs of one expert, which a block of the product kernels multiplies by each weight row
// it reads. A tile never crosses a pass, so pass p's tiles are pass_tile[p] .. pass_tile[p + 1] - 1.
struct MoeGroups {
  int32_t* pair_token = nullptr;   // [max_pairs] the token row of each sorted pair
  int32_t* pair_slot = nullptr;    // [max_pairs] its output row, slot * n_tok + token
  float* pair_weight = nullptr;    // [max_pairs] its routing weight (NaN for a pair whose expert id was bad)
  int32_t* tile_expert = nullptr;  // [max_pairs]
  int32_t* tile_begin = nullptr;   // [max_pairs] the tile's first sorted pair
  int32_t* tile_count = nullptr;   // [max_pairs] its pairs, 1 .. tile
  int32_t* pass_tile = nullptr;    // [max_pairs + 1] each pass's first tile, then the number of tiles
};
size_t MoeGroupsBytes(int64_t max_pairs);
MoeGroups CarveMoeGroups(void* block, int64_t max_pairs);
// Tiles a pass of `pairs` sorted pairs may hold: each expert's share splits into ceil(share / tile) tiles.
int64_t MoeMaxTiles(int64_t pairs, int n_expert, int tile);
// One block. An expert id outside [0, n_expert) counts as expert 0 with a NaN weight and sets *error_word.
cudaError_t LaunchMoeGroup(const int32_t* ids, const float* weights, int64_t n_tok, int k, int n_expert, int tile,
                           int pass_pairs, const MoeGroups& g, int* error_word, cudaStream_t s);

// ---- moe_experts.cu: the experts' products over one pass of grouped pairs ----
// Tokens per tile: 1 (a decode step's pairs are one per expert) or kMoeTile.
constexpr int kMoeTile = 8;
// One matrix of every expert; they share type, shape and stride (the backend checks). Travels by value in the
// kernel parameters (CUDA 12.1+ takes up to 32 KB of them on sm_70+), so the host learns nothing of the routing.
// Null data: the call skips that expert (runtime/ops.h's masking), whose tiles the kernels leave alone.
struct MoeMatrices {
  DType type = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_stride = 0;
  const void* data[kMoeMaxExperts] = {};
  const float* bias[kMoeMaxExperts] = {};  // [rows] each, or null
};
struct MoePass {
  MoeGroups groups;
  int pass = 0;
  int64_t first_pair = 0;  // its first sorted pair: row r of the caller's buffers holds pair first_pair + r
  int64_t max_tiles = 0;   // MoeMaxTiles of its pairs: the grid's bound, tiles past the pass's own return early
  int tile = kMoeTile;
};
// h[r] = act(gate x + gate_bias, up x + up_bias) for the pass's pairs (r = pair - first_pair), x the pair's token
// row of `x`, times its routing weight with weight_input. Gate and up of one type run in one kernel; otherwise up
// goes to `u` first ([pass rows][n_ff]).
cudaError_t LaunchMoeGateUp(const MoeMatrices& gate, const MoeMatrices& up, const float* x, bool weight_input,
                            const GluParams& act, const MoePass& pass, float* h, float* u, cudaStream_t s);
// out[slot row] = w * (down h[r] + down_bias) for the pass's pairs; w = 1 with weight_input.
cudaError_t LaunchMoeDown(const MoeMatrices& down, const float* h, bool weight_input, const MoePass& pass, float* out,
                          cudaStream_t s);

// ---- matvec_q.cu: y[t][r] = dot(W[r], x[t]) for n_tok <= kMatVecMaxTokens, any supported weight type,
// dequantized in registers, f32 accumulation ----
cudaError_t LaunchMatVec(const WeightMatrix& w, const float* x, int64_t n_tok, float* y, cudaStream_t s);

// ---- dequant_rows.cu: for the cuBLAS path ----
// out[r][c] (f16, packed rows of w.cols) = W[row0 + r][c], for a quantized type.
cudaError_t LaunchDequantizeRowsF16(const WeightMatrix& w, int64_t row0, int64_t n_rows, void* out,
                                    cudaStream_t s);
// out[i] = x[i] rounded to F16 or BF16 (to nearest even).
cudaError_t LaunchConvertF32(const float* x, int64_t n, DType to, void* out, cudaStream_t s);

}  // namespace tandem::gpu

// MoeExperts' grouping on the device: the n_tok * k routed (token, slot) pairs sorted by expert (a stable counting
// sort, so each expert's pairs stay in token order), then cut into the tiles the product kernels take
// (launch.h's MoeGroups). One block does it all, so the host never sees a count: a decode step's 8 pairs cost one
// small launch, a prefill's thousands one larger block.
//
// The block's warps each own a contiguous range of pairs: they count their pairs per expert, the counts become
// per-(warp, expert) starting places, and each warp places its pairs 32 at a time, lanes routed to the same expert
// taking consecutive places in lane order.
#include <algorithm>
#include <climits>
#include <cmath>

#include "gpu_backend/cuda_common.cuh"
#include "gpu_backend/launch.h"

namespace tandem::gpu {
namespace {

constexpr int kMaxWarps = 32;
constexpr int kPairsPerWarp = 256;  // fewer warps for fewer pairs: a decode step's block is one warp

size_t Align256(size_t n) { return (n + 255) / 256 * 256; }

// A bad id counts as expert 0 (its weight is NaN, so its output is NaN); the error word says what happened.
__device__ __forceinline__ int ExpertOf(int32_t id, int n_expert) { return id >= 0 && id < n_expert ? id : 0; }

// a[0 .. n) becomes its exclusive prefix sum and a[n] the total; n <= 32 * 8. Called by one whole warp.
__device__ void WarpExclusiveScan(int* a, int n) {
  const int lane = threadIdx.x & 31;
  const int per = (n + 31) / 32;
  const int begin = min(n, lane * per), end = min(n, begin + per);
  int local = 0;
  for (int i = begin; i < end; ++i) local += a[i];
  int inclusive = local;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int v = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += v;
  }
  int run = inclusive - local;
  for (int i = begin; i < end; ++i) {
    const int c = a[i];
    a[i] = run;
    run += c;
  }
  if (lane == 31) a[n] = inclusive;
}

// Where expert e's tile after the one starting at sorted pair `pos` starts: `tile` pairs on, or at the end of its
// pairs, or where the next pass begins (a tile never crosses one; tiles restart there).
__device__ __forceinline__ int NextTile(int pos, int end, int tile, int pass_pairs) {
  return min(end, min(pos + tile, (pos / pass_pairs + 1) * pass_pairs));
}

// ids, weights [n_tok][k], pair i = t * k + j.
__global__ void __launch_bounds__(32 * kMaxWarps)
    MoeGroupKernel(const int32_t* __restrict__ ids, const float* __restrict__ weights, int n_tok, int k,
                   int n_expert, int tile, int pass_pairs, const MoeGroups g, int* error_word) {
  __shared__ int s_base[kMaxWarps][kMoeMaxExperts];  // a warp's pairs of each expert: counts, then first places
  __shared__ int s_offset[kMoeMaxExperts + 1];       // expert e's first sorted pair; [n_expert]: all pairs
  __shared__ int s_tiles[kMoeMaxExperts + 1];        // expert e's first tile; [n_expert]: all tiles
  const int n_pairs = n_tok * k;
  const int n_warps = blockDim.x >> 5;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;

  for (int i = threadIdx.x; i < n_warps * kMoeMaxExperts; i += blockDim.x) {
    s_base[i / kMoeMaxExperts][i % kMoeMaxExperts] = 0;
  }
  __syncthreads();
  const int per_warp = (n_pairs + n_warps - 1) / n_warps;
  const int begin = min(n_pairs, warp * per_warp);
  const int end = min(n_pairs, begin + per_warp);
  for (int i = begin + lane; i < end; i += 32) atomicAdd(&s_base[warp][ExpertOf(ids[i], n_expert)], 1);
  __syncthreads();

  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
    int count = 0;
    for (int w = 0; w < n_warps; ++w) count += s_base[w][e];
    s_offset[e] = count;
  }
  __syncthreads();
  if (warp == 0) WarpExclusiveScan(s_offset, n_expert);
  __syncthreads();
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
    int run = s_offset[e];
    for (int w = 0; w < n_warps; ++w) {
      const int c = s_base[w][e];
      s_base[w][e] = run;
      run += c;
    }
  }
  __syncthreads();

  // Placement, in pair order within each warp's range (the loop is uniform over the warp).
  const unsigned below = (1u << lane) - 1;
  for (int i0 = begin; i0 < end; i0 += 32) {
    const int i = i0 + lane;
    const bool valid = i < end;
    int e = -1;
    bool bad = false;
    if (valid) {
      const int32_t id = ids[i];
      bad = id < 0 || id >= n_expert;
      e = ExpertOf(id, n_expert);
    }
    const unsigned same = __match_any_sync(kFullMask, e);
    const int base = valid ? s_base[warp][e] : 0;
    __syncwarp();
    if (valid) {
      const int pos = base + __popc(same & below);
      if ((same & below) == 0) s_base[warp][e] = base + __popc(same);  // the group's first lane moves it on
      const int t = i / k;
      const int j = i - t * k;
      g.pair_token[pos] = t;
      g.pair_slot[pos] = j * n_tok + t;
      g.pair_weight[pos] = bad ? nanf("") : weights[i];
      if (bad) atomicCAS(error_word, kDeviceOk, kDeviceBadExpertId);
    }
    __syncwarp();
  }

  // Tiles, counted per expert, scanned, then written; the tile that starts a pass marks it.
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
    int n = 0;
    for (int pos = s_offset[e]; pos < s_offset[e + 1]; pos = NextTile(pos, s_offset[e + 1], tile, pass_pairs)) ++n;
    s_tiles[e] = n;
  }
  __syncthreads();
  if (warp == 0) WarpExclusiveScan(s_tiles, n_expert);
  __syncthreads();
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
    int at = s_tiles[e];
    const int stop = s_offset[e + 1];
    for (int pos = s_offset[e]; pos < stop; ++at) {
      const int next = NextTile(pos, stop, tile, pass_pairs);
      g.tile_expert[at] = e;
      g.tile_begin[at] = pos;
      g.tile_count[at] = next - pos;
      if (pos % pass_pairs == 0) g.pass_tile[pos / pass_pairs] = at;
      pos = next;
    }
  }
  if (threadIdx.x == 0) g.pass_tile[(n_pairs + pass_pairs - 1) / pass_pairs] = s_tiles[n_expert];
}

}  // namespace

size_t MoeGroupsBytes(int64_t max_pairs) {
  const auto pairs = static_cast<size_t>(std::max<int64_t>(max_pairs, 1));
  return 6 * Align256(pairs * sizeof(int32_t)) + Align256((pairs + 1) * sizeof(int32_t));
}

MoeGroups CarveMoeGroups(void* block, int64_t max_pairs) {
  const auto pairs = static_cast<size_t>(std::max<int64_t>(max_pairs, 1));
  const size_t step = Align256(pairs * sizeof(int32_t));
  auto* p = static_cast<uint8_t*>(block);
  MoeGroups g;
  g.pair_token = reinterpret_cast<int32_t*>(p);
  g.pair_slot = reinterpret_cast<int32_t*>(p + step);
  g.pair_weight = reinterpret_cast<float*>(p + 2 * step);
  g.tile_expert = reinterpret_cast<int32_t*>(p + 3 * step);
  g.tile_begin = reinterpret_cast<int32_t*>(p + 4 * step);
  g.tile_count = reinterpret_cast<int32_t*>(p + 5 * step);
  g.pass_tile = reinterpret_cast<int32_t*>(p + 6 * step);
  return g;
}

int64_t MoeMaxTiles(int64_t pairs, int n_expert, int tile) {
  if (pairs <= 0) return 0;
  return (pairs + std::min<int64_t>(n_expert, pairs) * (tile - 1)) / tile;
}

cudaError_t LaunchMoeGroup(const int32_t* ids, const float* weights, int64_t n_tok, int k, int n_expert, int tile,
                           int pass_pairs, const MoeGroups& g, int* error_word, cudaStream_t s) {
  if (n_tok <= 0) return cudaSuccess;
  if (k <= 0 || n_expert <= 0 || n_expert > kMoeMaxExperts || tile <= 0 || pass_pairs <= 0 ||
      n_tok * k > INT_MAX / 2) {
    return cudaErrorInvalidValue;
  }
  const int64_t n_pairs = n_tok * k;
  const int warps = static_cast<int>(std::clamp<int64_t>((n_pairs + kPairsPerWarp - 1) / kPairsPerWarp, 1, kMaxWarps));
  MoeGroupKernel<<<1, 32 * warps, 0, s>>>(ids, weights, static_cast<int>(n_tok), k, n_expert, tile, pass_pairs, g,
                                          error_word);
  return cudaGetLastError();
}

}  // namespace tandem::gpu

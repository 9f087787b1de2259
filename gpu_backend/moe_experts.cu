// The experts' products of MoeExperts over one pass of grouped pairs (moe_group.cu), without the host knowing
// which experts have work. The grid is (row block, tile slot): a block takes four weight rows of the expert of tile
// pass_tile[pass] + blockIdx.y, or returns at once when the pass has fewer tiles. As in the matvec (matvec_q.cu) a
// warp owns a row, its lanes take 8-element pieces in turn, dequantize them in registers (dequant.h) and multiply
// them by each of the tile's tokens, so an expert's weights are read once per tile of up to kMoeTile tokens.
// Accumulation and activations are f32.
//
// The epilogues fuse what the CPU does between the products: the gate/up biases and the activation (the gate and up
// rows of one type in the same kernel, reading each x piece once for both), and the down bias, the routing weight
// and the scatter to the slot-major output.
#include <type_traits>

#include "gpu_backend/activation.cuh"
#include "gpu_backend/cuda_common.cuh"
#include "gpu_backend/dequant.h"
#include "gpu_backend/launch.h"

namespace tandem::gpu {
namespace {

constexpr int kRowsPerBlock = 4;

enum class Epilogue : int {
  kGluPair,  // y = act(acc + bias, acc2 + bias2): gate and up in one kernel
  kStore,    // y = acc + bias (up, before a gate of another type)
  kGlu,      // y = act(acc + bias, u)
  kScatter,  // out[slot row] = w * (acc + bias)
};

struct KernelArgs {
  MoeGroups groups;
  int pass = 0;
  int64_t first_pair = 0;
  const float* x = nullptr;   // input rows
  bool x_by_token = false;    // true: the pair's token row of x; false: the pair's row of the pass
  bool x_vec4 = false;        // x rows 16-byte aligned, cols % 4 == 0
  bool scale_input = false;   // times the routing weight (weight_input)
  Epilogue epilogue = Epilogue::kStore;
  GluParams act;
  const float* u = nullptr;   // kGlu: [pass rows][rows]
  float* y = nullptr;         // [pass rows][rows]; kScatter: out [k * n_tok][rows]
  bool weight_output = false; // kScatter: times the routing weight
};

template <DType T>
constexpr bool kPlainFloat = T == DType::kF32 || T == DType::kF16 || T == DType::kBF16;

// Weights pc*8 .. pc*8+7 of a row; plain float rows may end inside the piece (zeros past cols).
template <DType T>
__device__ __forceinline__ void LoadPiece(const uint8_t* row, int64_t pc, int64_t cols, float v[8]) {
  if constexpr (kPlainFloat<T>) {
    const int64_t e0 = pc * 8;
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = e0 + i < cols ? LoadElem<T>(row, e0 + i) : 0.0f;
  } else {
    constexpr int kP = kPiecesPerBlock<T>;
    Dequant8<T>(row + (pc / kP) * BlockInfo<T>::kBytes, static_cast<int>(pc % kP), v);
  }
}

// x[e0 .. e0+8) times s (zeros past cols).
__device__ __forceinline__ void LoadX8(const float* x, int64_t e0, int64_t cols, bool vec4, float s, float xv[8]) {
  if (vec4 && e0 + 8 <= cols) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(x + e0));
    const float4 b = __ldg(reinterpret_cast<const float4*>(x + e0 + 4));
    xv[0] = a.x * s;
    xv[1] = a.y * s;
    xv[2] = a.z * s;
    xv[3] = a.w * s;
    xv[4] = b.x * s;
    xv[5] = b.y * s;
    xv[6] = b.z * s;
    xv[7] = b.w * s;
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) xv[i] = e0 + i < cols ? __ldg(x + e0 + i) * s : 0.0f;
}

__device__ __forceinline__ float Dot8(const float v[8], const float xv[8]) {
  return v[0] * xv[0] + v[1] * xv[1] + v[2] * xv[2] + v[3] * xv[3] + v[4] * xv[4] + v[5] * xv[5] + v[6] * xv[6] +
         v[7] * xv[7];
}

// kPair: a second matrix (up) of the same type and shape, multiplied by the same inputs (kGluPair).
template <DType T, int NT, bool kPair>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    MoeMatVecKernel(const MoeMatrices w, const MoeMatrices w2, const KernelArgs a) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  const int tile = a.groups.pass_tile[a.pass] + static_cast<int>(blockIdx.y);
  if (r >= w.rows || tile >= a.groups.pass_tile[a.pass + 1]) return;
  const int lane = threadIdx.x;
  const int e = a.groups.tile_expert[tile];
  // A skipped expert (another device computes it; its slots are zeroed beforehand). The whole block shares the
  // tile, so no warp is left waiting in a shuffle.
  if (w.data[e] == nullptr) return;
  const int begin = a.groups.tile_begin[tile];
  const int n = a.groups.tile_count[tile];
  const int64_t cols = w.cols;

  const float* xr[NT];
  float xs[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int i = begin + min(t, n - 1);
    const int64_t row = a.x_by_token ? a.groups.pair_token[i] : i - a.first_pair;
    xr[t] = a.x + row * cols;
    xs[t] = a.scale_input ? a.groups.pair_weight[i] : 1.0f;
  }
  const uint8_t* wr = static_cast<const uint8_t*>(w.data[e]) + r * w.row_stride;
  const uint8_t* wr2 = kPair ? static_cast<const uint8_t*>(w2.data[e]) + r * w2.row_stride : nullptr;
  float acc[NT];
  float acc2[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = acc2[t] = 0.0f;
  const int64_t n_pieces = (cols + 7) / 8;
  for (int64_t pc = lane; pc < n_pieces; pc += 32) {
    float v[8];
    float v2[8];
    LoadPiece<T>(wr, pc, cols, v);
    if constexpr (kPair) LoadPiece<T>(wr2, pc, cols, v2);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < n) {
        float xv[8];
        LoadX8(xr[t], pc * 8, cols, a.x_vec4, xs[t], xv);
        acc[t] += Dot8(v, xv);
        if constexpr (kPair) acc2[t] += Dot8(v2, xv);
      }
    }
  }
  // Every lane gets every sum; lane t finishes token t of the tile.
  float mine = 0.0f;
  float mine2 = 0.0f;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float s = WarpSum(acc[t]);
    float s2 = 0.0f;
    if constexpr (kPair) s2 = WarpSum(acc2[t]);
    if (t == lane) {
      mine = s;
      mine2 = s2;
    }
  }
  if (lane >= n) return;
  const int i = begin + lane;
  const int64_t out_row = i - a.first_pair;
  const float* bias = w.bias[e];
  const float g = mine + (bias != nullptr ? bias[r] : 0.0f);
  switch (a.epilogue) {
    case Epilogue::kGluPair: {
      const float* bias2 = w2.bias[e];
      const float u = mine2 + (bias2 != nullptr ? bias2[r] : 0.0f);
      a.y[out_row * w.rows + r] = GluOne(a.act, g, u, true);
      break;
    }
    case Epilogue::kStore:
      a.y[out_row * w.rows + r] = g;
      break;
    case Epilogue::kGlu:
      a.y[out_row * w.rows + r] = GluOne(a.act, g, a.u[out_row * w.rows + r], true);
      break;
    case Epilogue::kScatter: {
      const float wt = a.weight_output ? a.groups.pair_weight[i] : 1.0f;
      a.y[static_cast<int64_t>(a.groups.pair_slot[i]) * w.rows + r] = wt * g;
      break;
    }
  }
}

template <int NT, bool kPair>
cudaError_t LaunchNt(const MoeMatrices& w, const MoeMatrices& w2, const KernelArgs& a, const MoePass& pass,
                     cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((w.rows + kRowsPerBlock - 1) / kRowsPerBlock),
                  static_cast<unsigned>(pass.max_tiles));
  const dim3 block(32, kRowsPerBlock);
  switch (w.type) {
    case DType::kF32:
      MoeMatVecKernel<DType::kF32, NT, kPair><<<grid, block, 0, s>>>(w, w2, a);
      return cudaGetLastError();
    case DType::kF16:
      MoeMatVecKernel<DType::kF16, NT, kPair><<<grid, block, 0, s>>>(w, w2, a);
      return cudaGetLastError();
    case DType::kBF16:
      MoeMatVecKernel<DType::kBF16, NT, kPair><<<grid, block, 0, s>>>(w, w2, a);
      return cudaGetLastError();
    default:
      break;
  }
  const bool known = DispatchQuantized(w.type, [&](auto tag) {
    MoeMatVecKernel<decltype(tag)::value, NT, kPair><<<grid, block, 0, s>>>(w, w2, a);
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

template <bool kPair>
cudaError_t Launch(const MoeMatrices& w, const MoeMatrices& w2, const KernelArgs& a, const MoePass& pass,
                   cudaStream_t s) {
  if (pass.max_tiles <= 0 || w.rows <= 0) return cudaSuccess;
  if (pass.max_tiles > 65535) return cudaErrorInvalidValue;
  if (pass.tile == 1) return LaunchNt<1, kPair>(w, w2, a, pass, s);
  if (pass.tile == kMoeTile) return LaunchNt<kMoeTile, kPair>(w, w2, a, pass, s);
  return cudaErrorInvalidValue;
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

KernelArgs ArgsOf(const MoePass& pass) {
  KernelArgs a;
  a.groups = pass.groups;
  a.pass = pass.pass;
  a.first_pair = pass.first_pair;
  return a;
}

}  // namespace

cudaError_t LaunchMoeGateUp(const MoeMatrices& gate, const MoeMatrices& up, const float* x, bool weight_input,
                            const GluParams& act, const MoePass& pass, float* h, float* u, cudaStream_t s) {
  KernelArgs a = ArgsOf(pass);
  a.x = x;
  a.x_by_token = true;
  a.x_vec4 = Aligned16(x) && gate.cols % 4 == 0;
  a.scale_input = weight_input;
  a.act = act;
  if (gate.type == up.type) {
    a.epilogue = Epilogue::kGluPair;
    a.y = h;
    return Launch<true>(gate, up, a, pass, s);
  }
  a.epilogue = Epilogue::kStore;
  a.y = u;
  const cudaError_t err = Launch<false>(up, up, a, pass, s);
  if (err != cudaSuccess) return err;
  a.epilogue = Epilogue::kGlu;
  a.u = u;
  a.y = h;
  return Launch<false>(gate, gate, a, pass, s);
}

cudaError_t LaunchMoeDown(const MoeMatrices& down, const float* h, bool weight_input, const MoePass& pass, float* out,
                          cudaStream_t s) {
  KernelArgs a = ArgsOf(pass);
  a.x = h;
  a.x_vec4 = Aligned16(h) && down.cols % 4 == 0;
  a.epilogue = Epilogue::kScatter;
  a.y = out;
  a.weight_output = !weight_input;
  return Launch<false>(down, down, a, pass, s);
}

}  // namespace tandem::gpu

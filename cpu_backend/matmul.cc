// MatMul driver: converts the activations to the weight type's vec-dot type once, then splits the weight rows
// across OpenMP threads in chunks. Within a chunk, tokens go kTokTile at a time so that each weight block,
// once loaded, serves several tokens, and the chunk is sized to stay in L2 while all token tiles pass over it.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "core/quant.h"
#include "core/status.h"
#include "cpu_backend/kernels.h"
#include "cpu_backend/repack.h"
#include "cpu_backend/vec_dot.h"

namespace tandem::cpu {
namespace internal {

namespace {
// Offset of the weight quants whose activations come in nibble order with a c array (vec_dot.h); 0: none.
int QuantOffset(DType wtype) {
  switch (wtype) {
    case DType::kQ4_0: return 8;
    case DType::kQ5_0: return 16;
    default: return 0;
  }
}
}  // namespace

size_t ActivationRowBytes(DType wtype, int64_t n) {
  const auto un = static_cast<size_t>(n);
  switch (VecDotType(wtype)) {
    case DType::kF32: return 0;
    case DType::kF16: return sizeof(float) * un;
    case DType::kQ8_0:
    case DType::kQ8_1: return un + 2 * sizeof(float) * (un / 32) + (QuantOffset(wtype) ? un / 2 : 0);
    default: return RowBytes(VecDotType(wtype), n);
  }
}

// The row in vec-dot type `vdt`, less the c array.
void ConvertActivationRow(DType vdt, const float* x, void* dst, int64_t n, Isa isa) {
  if (isa >= Isa::kAvx2 && Avx2QuantizeActivationRow(vdt, x, dst, n)) return;
  switch (vdt) {
    case DType::kF16: {
      auto* y = static_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) y[i] = F16ToF32(F32ToF16(x[i]));
      return;
    }
    case DType::kBF16: {
      auto* y = static_cast<bf16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) y[i] = F32ToBf16(x[i]);
      return;
    }
    case DType::kQ8_0:
    case DType::kQ8_1: {
      // Block by block through the core quantizer, then split into quants and widened scales.
      auto* qs = static_cast<int8_t*>(dst);
      auto* d = reinterpret_cast<float*>(qs + n);
      float* s = d + n / 32;
      for (int64_t b = 0; b < n / 32; ++b) {
        if (vdt == DType::kQ8_0) {
          BlockQ8_0 blk;
          QuantizeRowQ8_0(x + 32 * b, &blk, 32);
          std::memcpy(qs + 32 * b, blk.qs, 32);
          d[b] = F16ToF32(blk.d);
          s[b] = 0.0f;
        } else {
          BlockQ8_1 blk;
          QuantizeRowQ8_1(x + 32 * b, &blk, 32);
          std::memcpy(qs + 32 * b, blk.qs, 32);
          d[b] = F16ToF32(blk.d);
          s[b] = F16ToF32(blk.s);
        }
      }
      return;
    }
    case DType::kQ8_K: QuantizeRowQ8_K(x, static_cast<BlockQ8_K*>(dst), n); return;
    default: TANDEM_CHECK(false && "not an activation type");
  }
}

void QuantizeActivationRow(DType wtype, const float* x, void* dst, int64_t n, Isa isa) {
  ConvertActivationRow(VecDotType(wtype), x, dst, n, isa);
  const int offset = QuantOffset(wtype);
  if (offset == 0) return;
  // Nibble order: reorder the quants group by group, then the c array.
  auto* qs = static_cast<int8_t*>(dst);
  const int64_t nb = n / 32;
  for (int64_t first = 0; first < nb; first += 4) {
    int8_t group[128];
    const int64_t g = std::min<int64_t>(4, nb - first);
    std::memcpy(group, qs + 32 * first, static_cast<size_t>(32 * g));
    for (int64_t k = 0; k < g; ++k) {
      for (int h = 0; h < 2; ++h) std::memcpy(qs + NibbleHalfOffset(nb, first + k, h), group + 32 * k + 16 * h, 16);
    }
  }
  const Act32 row = ViewAct32(dst, n);
  auto* c = const_cast<int32_t*>(row.c);  // the view is read-only for the kernels; this is its writer
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* lo = qs + NibbleHalfOffset(nb, b, 0);
    const int8_t* hi = qs + NibbleHalfOffset(nb, b, 1);
    for (int j = 0; j < 4; ++j) {
      int sum = 0;
      for (int e = 4 * j; e < 4 * j + 4; ++e) sum += lo[e] + hi[e];
      c[4 * b + j] = -offset * sum;
    }
  }
}

bool ServesRange(const MatMulAffinity& a, int n_threads, int thread, int range, int pass) {
  auto node_of = [&](int t) {
    return t < static_cast<int>(a.n_thread_nodes) ? a.thread_node[t] : -1;
  };
  const int node = a.ranges[range].node;
  if (pass == 0) return node_of(thread) == node;  // its own node's ranges
  for (int t = 0; t < n_threads; ++t) {          // then ranges no thread is local to
    if (node_of(t) == node) return false;
  }
  return true;
}

VecDotFn PickVecDot(DType wtype, Isa isa) {
  VecDotFn fn = nullptr;
  if (isa == Isa::kAvx512) fn = Avx512VecDot(wtype);
  if (fn == nullptr && isa >= Isa::kAvx2) fn = Avx2VecDot(wtype);
  if (fn == nullptr) fn = ScalarVecDot(wtype);
  return fn;
}

}  // namespace internal

namespace {

constexpr size_t kActRowAlign = 64;  // activation rows start on cache lines

size_t ActRowStride(DType wtype, int64_t cols) {
  const size_t bytes = internal::ActivationRowBytes(wtype, cols);
  return (bytes + kActRowAlign - 1) / kActRowAlign * kActRowAlign;
}

// Weight bytes per row chunk when many tokens pass over it: well inside L2 (1-2 MiB on current x86 cores).
constexpr size_t kChunkBytesPrefill = 256 << 10;
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kMinParallelWork = 1 << 16;

size_t PackedActScratchBytes(DType wtype, int64_t cols, int64_t n_tok) {
  const int64_t tiles = (n_tok + internal::kPackedTokTile - 1) / internal::kPackedTokTile;
  return static_cast<size_t>(tiles) * internal::PackedActTileBytes(wtype, cols, internal::kPackedTokTile);
}

// Packed weights (repack.h): row groups of 16 split across threads in chunks that stay in L2 while the token
// tiles pass over them.
void PackedMatMul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y, void* scratch,
                  const MatMulAffinity* affinity) {
  const Isa isa = ActiveIsa();
  internal::PackedKernelFn kernel = isa == Isa::kAvx512 ? internal::Avx512PackedKernel(w.type) : nullptr;
  if (kernel == nullptr) kernel = internal::ScalarPackedKernel(w.type);
  const internal::PackedDecodeFn decode =
      isa == Isa::kAvx512 && n_tok == 1 ? internal::Avx512PackedDecode(w.type) : nullptr;
  TANDEM_CHECK(kernel != nullptr && scratch != nullptr && w.rows % kPackRows == 0);
  const int64_t nb = w.cols / Traits(w.type).block_elems;
  const size_t group_bytes = static_cast<size_t>(nb) * internal::PackedBlockBytes(w.type);
  const int64_t n_groups = w.rows / kPackRows;
  const int capacity = n_tok == 1 ? 1 : internal::kPackedTokTile;
  const size_t tile_bytes = internal::PackedActTileBytes(w.type, w.cols, capacity);
  // Tiles of equal length: 130 tokens go as 9 tiles of 14 or 15, not 8 of 16 and a tail of 2, which would pay a
  // whole pass over the weights for two tokens.
  const int64_t n_tiles = (n_tok + internal::kPackedTokTile - 1) / internal::kPackedTokTile;
  const int64_t tile_len = (n_tok + n_tiles - 1) / n_tiles;
  const auto* wbase = static_cast<const uint8_t*>(w.data);
  auto* xq = static_cast<uint8_t*>(scratch);

  const int64_t work = w.rows * w.cols * n_tok;
  const int n_threads = work >= kMinParallelWork ? omp_get_max_threads() : 1;
  int64_t chunk = std::max<int64_t>(1, n_groups / (static_cast<int64_t>(n_threads) * 8));
  if (n_tok > 1) chunk = std::min<int64_t>(chunk, std::max<size_t>(1, kChunkBytesPrefill / group_bytes));
  const int64_t n_chunks = (n_groups + chunk - 1) / chunk;

  // Under an affinity, each range keeps a chunk counter (few ranges: one or two per node). Nothing is allocated.
  const bool by_node = affinity != nullptr && n_threads > 1;
  constexpr size_t kMaxRanges = 64;
  TANDEM_CHECK(!by_node || affinity->n_ranges <= kMaxRanges);
  std::atomic<int64_t> next_chunk[kMaxRanges];
  for (auto& n : next_chunk) n.store(0, std::memory_order_relaxed);

#pragma omp parallel num_threads(n_threads)
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < n_tok; ++t) {
      internal::QuantizePackedAct(w.type, x + t * w.cols, w.cols, xq + static_cast<size_t>(t / tile_len) * tile_bytes,
                                  capacity, static_cast<int>(t % tile_len), isa);
    }
    // Row groups [g0, g1): every token tile over each group, tiles outermost so the groups stay in L2.
    auto run_groups = [&](int64_t g0, int64_t g1) {
      if (decode != nullptr) {  // one token: the range as kDecodeStreams runs read side by side
        constexpr int kS = internal::kDecodeStreams;
        const int64_t run = (g1 - g0) / kS;
        for (int64_t i = 0; i < run; ++i) {
          const uint8_t* groups[kS];
          float* ys[kS];
          for (int r = 0; r < kS; ++r) {
            const int64_t g = g0 + r * run + i;
            groups[r] = wbase + static_cast<size_t>(g) * group_bytes;
            ys[r] = y + g * kPackRows;
          }
          decode(groups, nb, xq, ys);
        }
        g0 += kS * run;
      }
      for (int64_t t0 = 0; t0 < n_tok; t0 += tile_len) {
        const int n_x = static_cast<int>(std::min<int64_t>(tile_len, n_tok - t0));
        for (int64_t g = g0; g < g1; ++g) {
          kernel(wbase + static_cast<size_t>(g) * group_bytes, nb, xq + static_cast<size_t>(t0 / tile_len) * tile_bytes,
                 capacity, n_x, y + t0 * w.rows + g * kPackRows, static_cast<size_t>(w.rows));
        }
      }
    };
    if (!by_node) {
#pragma omp for schedule(dynamic, 1)
      for (int64_t c = 0; c < n_chunks; ++c) run_groups(c * chunk, std::min(n_groups, (c + 1) * chunk));
    } else {
      // Chunks of each range are handed out by that range's counter; a thread serves its own node's ranges, then
      // those of nodes without threads. A team smaller than planned (nested in another parallel region) serves all.
      const int tid = omp_get_thread_num();
      const bool full_team = omp_get_num_threads() == n_threads;
      for (int pass = 0; pass < 2; ++pass) {
        for (int r = 0; r < static_cast<int>(affinity->n_ranges); ++r) {
          if (full_team ? !internal::ServesRange(*affinity, n_threads, tid, r, pass) : pass == 1) continue;
          const RowNodeRange& range = affinity->ranges[r];
          for (;;) {
            const int64_t c = next_chunk[r].fetch_add(1, std::memory_order_relaxed);
            const int64_t g0 = range.group_begin + c * chunk;
            if (g0 >= range.group_end) break;
            run_groups(g0, std::min(range.group_end, g0 + chunk));
          }
        }
      }
    }
  }
}

}  // namespace

size_t MatMulScratchBytes(DType wtype, int64_t cols, int64_t n_tok) {
  size_t bytes = ActRowStride(wtype, cols) * static_cast<size_t>(n_tok);
  if (internal::PackedBlockBytes(wtype) > 0) bytes = std::max(bytes, PackedActScratchBytes(wtype, cols, n_tok));
  return bytes;
}

std::vector<std::vector<int>> AffinityRangeOrder(const MatMulAffinity& a, int n_threads) {
  std::vector<std::vector<int>> order(static_cast<size_t>(std::max(n_threads, 1)));
  for (int t = 0; t < n_threads; ++t) {
    for (int pass = 0; pass < 2; ++pass) {
      for (int r = 0; r < static_cast<int>(a.n_ranges); ++r) {
        if (internal::ServesRange(a, n_threads, t, r, pass)) order[static_cast<size_t>(t)].push_back(r);
      }
    }
  }
  return order;
}

void MatMul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y, void* scratch,
            const MatMulAffinity* affinity) {
  const DType vdt = VecDotType(w.type);
  const int64_t block = Traits(w.type).block_elems;
  TANDEM_CHECK(w.cols % block == 0);
  const size_t row_bytes = RowBytes(w.type, w.cols);
  const size_t w_stride = w.row_stride == 0 ? row_bytes : w.row_stride;
  TANDEM_CHECK(w_stride >= row_bytes);
  if (w.rows == 0 || n_tok == 0) return;
  if (w.packed) {
    PackedMatMul(w, x, n_tok, y, scratch, affinity);
    return;
  }

  const Isa isa = ActiveIsa();
  const internal::VecDotFn dot = internal::PickVecDot(w.type, isa);
  TANDEM_CHECK(dot != nullptr);

  const bool in_place = vdt == DType::kF32;
  const size_t x_stride = in_place ? static_cast<size_t>(w.cols) * sizeof(float) : ActRowStride(w.type, w.cols);
  TANDEM_CHECK(in_place || scratch != nullptr);
  const auto* xq = in_place ? reinterpret_cast<const uint8_t*>(x) : static_cast<const uint8_t*>(scratch);
  const auto* wbase = static_cast<const uint8_t*>(w.data);

  const int64_t work = w.rows * w.cols * n_tok;
  const int n_threads = work >= kMinParallelWork ? omp_get_max_threads() : 1;
  // About 8 chunks per thread balances a noisy machine without cutting the prefetch streams too short.
  int64_t chunk_rows = std::max<int64_t>(1, w.rows / (static_cast<int64_t>(n_threads) * 8));
  if (n_tok > internal::kTokTile) {
    chunk_rows = std::min<int64_t>(chunk_rows, std::max<size_t>(1, kChunkBytesPrefill / w_stride));
  }
  const int64_t n_chunks = (w.rows + chunk_rows - 1) / chunk_rows;

#pragma omp parallel num_threads(n_threads)
  {
    if (!in_place) {
#pragma omp for schedule(static)
      for (int64_t t = 0; t < n_tok; ++t) {
        uint8_t* row = static_cast<uint8_t*>(scratch) + static_cast<size_t>(t) * x_stride;
        internal::QuantizeActivationRow(w.type, x + t * w.cols, row, w.cols, isa);
      }
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < n_chunks; ++c) {
      const int64_t r0 = c * chunk_rows;
      const int64_t r1 = std::min(w.rows, r0 + chunk_rows);
      for (int64_t t0 = 0; t0 < n_tok; t0 += internal::kTokTile) {
        const int n_x = static_cast<int>(std::min<int64_t>(internal::kTokTile, n_tok - t0));
        const uint8_t* xt = xq + static_cast<size_t>(t0) * x_stride;
        float* yt = y + t0 * w.rows;
        for (int64_t r = r0; r < r1; ++r) {
          dot(w.cols, wbase + static_cast<size_t>(r) * w_stride, xt, x_stride, n_x, yt + r,
              static_cast<size_t>(w.rows));
        }
      }
    }
  }
}

}  // namespace tandem::cpu

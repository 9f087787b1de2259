// MatMul driver: converts the activations to the weight type's vec-dot type once, then splits the weight rows
// across OpenMP threads in chunks. Within a chunk, tokens go kTokTile at a time so that each weight block,
// once loaded, serves several tokens, and the chunk is sized to stay in L2 while all token tiles pass over it.
#include <immintrin.h>
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
    case DType::kMXFP4: return kMxfp4Offset;
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
  if (node < 0) return pass == 0;                 // a range of no node is anyone's
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

}  // namespace

size_t MatMulScratchBytes(DType wtype, int64_t cols, int64_t n_tok) {
  size_t bytes = ActRowStride(wtype, cols) * static_cast<size_t>(n_tok);
  if (internal::PackedBlockBytes(wtype) > 0) {
    // Any count up to n_tok: one token keeps a tile per thread, which a few tokens' shared tiles may not cover.
    const WeightMatrix w{.type = wtype, .rows = kPackRows, .cols = cols, .layout = kPackedLayout};
    for (int64_t t : {int64_t{1}, n_tok}) {
      const MatMulJob job{.w = &w, .n_tok = t};
      if (t > 0) bytes = std::max(bytes, MatMulBatchScratchBytes(&job, 1));
    }
  }
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
  if (IsPacked(w)) {
    const MatMulJob job{.w = &w, .x = x, .n_tok = n_tok, .y = y,
                        .ranges = affinity == nullptr ? nullptr : affinity->ranges,
                        .n_ranges = affinity == nullptr ? 0 : affinity->n_ranges};
    MatMulBatch(&job, 1, scratch, affinity == nullptr ? nullptr : affinity->thread_node,
                affinity == nullptr ? 0 : affinity->n_thread_nodes);
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
  const int n_threads = work >= internal::kMinParallelWork ? omp_get_max_threads() : 1;
  // About 8 chunks per thread balances a noisy machine without cutting the prefetch streams too short.
  int64_t chunk_rows = std::max<int64_t>(1, w.rows / (static_cast<int64_t>(n_threads) * 8));
  if (n_tok > internal::kTokTile) {
    chunk_rows = std::min<int64_t>(chunk_rows, std::max<size_t>(1, internal::kChunkBytesPrefill / w_stride));
  }
  const int64_t n_chunks = (w.rows + chunk_rows - 1) / chunk_rows;
  // One token streams each row once. Where measured faster, rows are prefetched ahead: by the AVX-512 K-quant
  // kernels themselves, a super-block at a time (DecodePrefetchBytes), and for the other kernels here, a row before
  // each call (RowPrefetchBytes; F16 on one Intel host: 20.0-20.3 GB/s against 16.7-19.9, docs/performance.md).
  const size_t row_prefetch =
      n_tok == 1 && !(isa == Isa::kAvx512 && internal::Avx512VecDotPrefetches(w.type)) ? RowPrefetchBytes() : 0;

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
          if (row_prefetch != 0) {
            const char* pf = reinterpret_cast<const char*>(wbase + static_cast<size_t>(r) * w_stride) + row_prefetch;
            for (size_t l = 0; l < row_bytes; l += 64) _mm_prefetch(pf + l, _MM_HINT_T0);
          }
          dot(w.cols, wbase + static_cast<size_t>(r) * w_stride, xt, x_stride, n_x, yt + r,
              static_cast<size_t>(w.rows));
        }
      }
    }
  }
}

}  // namespace tandem::cpu

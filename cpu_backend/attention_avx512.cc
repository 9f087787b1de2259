// AVX-512 loops of attention over an fp16 cache for the query heads that share one KV head: each cache row is
// widened once for all of them, and the weighted sum keeps its accumulators in registers across the rows. Both
// keep the AVX2 path's float operation order (attention_avx2.cc), so results are bit-identical to it.
// GCC 12's AVX-512 headers build some results from a deliberately uninitialized register; see vec_dot_avx512.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "cpu_backend/attention_rows.h"

namespace tandem::cpu::attention_rows {
namespace {

constexpr int kMaxHeadChunks = 16;  // head_dim up to 256

inline __m512 LoadHalf16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// The AVX2 dot's reduction: its two 8-lane accumulators are this register's halves.
inline float HorizontalSum(__m512 acc) {
  const __m256 v = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace

bool GroupedF16Avx512Supports(int head_dim) { return head_dim % 16 == 0 && head_dim / 16 <= kMaxHeadChunks; }

void DotsF16Avx512(const float* q, int n_q, int head_dim, const uint16_t* k_rows, size_t row_elems, int64_t n_keys,
                   float* scores, size_t score_stride) {
  const int chunks = head_dim / 16;
  for (int64_t j = 0; j < n_keys; ++j) {
    const uint16_t* k = k_rows + static_cast<size_t>(j) * row_elems;
    __m512 kc[kMaxHeadChunks];
    for (int c = 0; c < chunks; ++c) kc[c] = LoadHalf16(k + 16 * c);
    for (int g = 0; g < n_q; ++g) {
      const float* qg = q + static_cast<size_t>(g) * head_dim;
      __m512 acc = _mm512_setzero_ps();
      for (int c = 0; c < chunks; ++c) acc = _mm512_fmadd_ps(_mm512_loadu_ps(qg + 16 * c), kc[c], acc);
      scores[static_cast<size_t>(g) * score_stride + j] = HorizontalSum(acc);
    }
  }
}

void WeightedSumsF16Avx512(const float* p, size_t p_stride, int n_q, int head_dim, const HalfRows& v_rows,
                           float* out) {
  const int64_t n_keys = v_rows.n;
  constexpr int kHeads = 8;  // accumulators per pass over the rows
  for (int c = 0; c < head_dim / 16; ++c) {
    for (int g0 = 0; g0 < n_q; g0 += kHeads) {
      const int ng = n_q - g0 < kHeads ? n_q - g0 : kHeads;
      __m512 acc[kHeads];
      for (int g = 0; g < kHeads; ++g) acc[g] = _mm512_setzero_ps();
      for (int64_t j = 0; j < n_keys; ++j) {
        const __m512 v = LoadHalf16(v_rows.row(j) + 16 * c);
        for (int g = 0; g < ng; ++g) {
          acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(p[static_cast<size_t>(g0 + g) * p_stride + j]), v, acc[g]);
        }
      }
      for (int g = 0; g < ng; ++g) _mm512_storeu_ps(out + static_cast<size_t>(g0 + g) * head_dim + 16 * c, acc[g]);
    }
  }
}

}  // namespace tandem::cpu::attention_rows

// AVX2/FMA/F16C inner loops of attention: fp16 cache rows widen with one vcvtph2ps per 8 values instead of the
// bit manipulation the portable path needs. Only intrinsics and this file's own functions are used here, so no
// inline function compiled with these flags can stand in for a portable copy elsewhere.
#include <immintrin.h>

#include <cmath>

#include "cpu_backend/attention_rows.h"

namespace tandem::cpu::attention_rows {
namespace {

inline __m256 LoadHalf8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace

float DotF32Avx2(const float* q, const float* k, int n) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int d = 0;
  for (; d + 16 <= n; d += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), _mm256_loadu_ps(k + d + 8), acc1);
  }
  if (d + 8 <= n) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), acc0);
    d += 8;
  }
  float sum = HorizontalSum(_mm256_add_ps(acc0, acc1));
  for (; d < n; ++d) sum = std::fma(q[d], k[d], sum);  // fused, as the portable tail
  return sum;
}

float DotF16Avx2(const float* q, const uint16_t* k, int n) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int d = 0;
  for (; d + 16 <= n; d += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), LoadHalf8(k + d), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), LoadHalf8(k + d + 8), acc1);
  }
  if (d + 8 <= n) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), LoadHalf8(k + d), acc0);
    d += 8;
  }
  float sum = HorizontalSum(_mm256_add_ps(acc0, acc1));
  for (; d < n; ++d) sum = std::fma(q[d], _cvtsh_ss(k[d]), sum);
  return sum;
}

void AxpyF32Avx2(float p, const float* v, int n, float* out) {
  const __m256 pv = _mm256_set1_ps(p);
  int d = 0;
  for (; d + 8 <= n; d += 8) {
    _mm256_storeu_ps(out + d, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + d), _mm256_loadu_ps(out + d)));
  }
  for (; d < n; ++d) out[d] = std::fma(p, v[d], out[d]);
}

void AxpyF16Avx2(float p, const uint16_t* v, int n, float* out) {
  const __m256 pv = _mm256_set1_ps(p);
  int d = 0;
  for (; d + 8 <= n; d += 8) {
    _mm256_storeu_ps(out + d, _mm256_fmadd_ps(pv, LoadHalf8(v + d), _mm256_loadu_ps(out + d)));
  }
  for (; d < n; ++d) out[d] = std::fma(p, _cvtsh_ss(v[d]), out[d]);
}

}  // namespace tandem::cpu::attention_rows

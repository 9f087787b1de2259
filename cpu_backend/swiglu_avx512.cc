// SwiGLU on 16 lanes: e^x by range reduction to |r| <= ln2/2 (x = n ln2 + r, ln2 split in two so n ln2 is exact
// enough) and the classic degree-6 minimax polynomial for e^r (Cephes' expf coefficients), then 2^n by vscalefps,
// which also takes care of overflow to inf and underflow to 0.
// GCC 12's AVX-512 headers build some results from a deliberately uninitialized register; see vec_dot_avx512.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "cpu_backend/swiglu_avx512.h"

#include <immintrin.h>

namespace tandem::cpu::internal {
namespace {

inline __m512 Exp(__m512 x) {
  // Beyond +-150 the result is inf or 0 either way; clamping keeps the reduction finite. NaN passes through
  // (min/max return their second operand when either is NaN).
  x = _mm512_max_ps(_mm512_set1_ps(-150.0f), _mm512_min_ps(_mm512_set1_ps(150.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

inline __m512 SwiGlu16(__m512 g, __m512 u) {
  const __m512 sig = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), Exp(_mm512_sub_ps(_mm512_setzero_ps(), g))));
  return _mm512_mul_ps(sig, u);
}

}  // namespace

void SwiGluAvx512(const float* g, const float* u, int64_t n, float* y) {
  const int64_t full = n / 16;
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < full; ++i) {
    _mm512_storeu_ps(y + 16 * i, SwiGlu16(_mm512_loadu_ps(g + 16 * i), _mm512_loadu_ps(u + 16 * i)));
  }
  if (const int64_t tail = n - 16 * full; tail > 0) {
    const __mmask16 m = static_cast<__mmask16>((1u << tail) - 1);
    const __m512 gv = _mm512_maskz_loadu_ps(m, g + 16 * full);
    const __m512 uv = _mm512_maskz_loadu_ps(m, u + 16 * full);
    _mm512_mask_storeu_ps(y + 16 * full, m, SwiGlu16(gv, uv));
  }
}

}  // namespace tandem::cpu::internal

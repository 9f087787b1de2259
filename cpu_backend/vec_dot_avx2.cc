// AVX2 + FMA + F16C dot products (this file is compiled with those flags; MatMul calls it only on CPUs that
// have them). Each kernel loads and unpacks a weight block once and uses it for NX activation rows.
//
// Integer blocks use _mm256_maddubs_epi16 (unsigned x signed bytes -> pairs summed in int16), so one operand
// must be unsigned: Q8_0 weights are made unsigned with the sign moved onto the activation (sign trick); Q4_0,
// Q5_0 and K-quant weights are unsigned already, MXFP4's are looked up offset to unsigned, and their offsets come
// back through activation sums (the c array of the nibble-order activations of vec_dot.h, or the Q8_K bsums).
// The activation conversions at the end are bit-identical to the core quantizers.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "cpu_backend/vec_dot.h"
#include "cpu_backend/vec_dot_simd.h"

namespace tandem::cpu::internal {
namespace {

// Local scalar conversions: the inline ones of core/dtype.h, compiled here with AVX2 flags, could be merged
// with the portable copies by the linker.
float H(f16_t h) { return _cvtsh_ss(h); }
// core's E8M0HalfToF32 (2^(e - 128), subnormal below e = 2), here so that the kernels need no call per block.
float E8M0Half(uint8_t e) {
  const uint32_t u = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float Bf16Value(bf16_t h) { return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(h) << 16))); }
bf16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((u >> 16) | 64);
  return static_cast<bf16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__m256i Load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i Load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// Activation row j of this call.
template <class T>
const T* Row(const void* x, size_t x_stride, int j) {
  return reinterpret_cast<const T*>(static_cast<const uint8_t*>(x) + j * x_stride);
}

// Sum of the 16 int16 products of maddubs, widened to 8 int32.
__m256i WidenPairs(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

// ---- plain floats: 16 elements per step, scalar tail ----
// A source type: how 8 elements load as floats (Get8) and how one does (Get1).
struct SrcF32 {
  using Elem = float;
  static __m256 Get8(const float* p) { return _mm256_loadu_ps(p); }
  static float Get1(float v) { return v; }
};
struct SrcF16 {
  using Elem = f16_t;
  static __m256 Get8(const f16_t* p) { return _mm256_cvtph_ps(Load128(p)); }
  static float Get1(f16_t v) { return H(v); }
};
struct SrcBF16 {  // bf16 is the top half of an f32
  using Elem = bf16_t;
  static __m256 Get8(const bf16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(Load128(p)), 16));
  }
  static float Get1(bf16_t v) { return Bf16Value(v); }
};

// Weights in WSrc's format, activations in XSrc's (F16 activations are floats already rounded to fp16).
template <class WSrc, class XSrc>
struct FloatKernel {
  using W = typename WSrc::Elem;
  using X = typename XSrc::Elem;
  template <int NX>
  static void Run(int64_t n, const void* wv, const void* x, size_t xs, float* out, size_t os) {
    const W* w = static_cast<const W*>(wv);
    __m256 acc[NX][2];
    for (int j = 0; j < NX; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m256 w0 = WSrc::Get8(w + i), w1 = WSrc::Get8(w + i + 8);
      for (int j = 0; j < NX; ++j) {
        const X* xj = Row<X>(x, xs, j);
        acc[j][0] = _mm256_fmadd_ps(w0, XSrc::Get8(xj + i), acc[j][0]);
        acc[j][1] = _mm256_fmadd_ps(w1, XSrc::Get8(xj + i + 8), acc[j][1]);
      }
    }
    for (; i + 8 <= n; i += 8) {
      const __m256 w0 = WSrc::Get8(w + i);
      for (int j = 0; j < NX; ++j) acc[j][0] = _mm256_fmadd_ps(w0, XSrc::Get8(Row<X>(x, xs, j) + i), acc[j][0]);
    }
    for (int j = 0; j < NX; ++j) {
      const X* xj = Row<X>(x, xs, j);
      float s = Hsum(_mm256_add_ps(acc[j][0], acc[j][1]));
      for (int64_t k = i; k < n; ++k) s += WSrc::Get1(w[k]) * XSrc::Get1(xj[k]);
      out[j * os] = s;
    }
  }
};

// ---- 32-element blocks against split Q8_0/Q8_1 rows (vec_dot.h) ----

template <int NX>
void ViewRows(const void* x, size_t xs, int64_t n, Act32* xb) {
  for (int j = 0; j < NX; ++j) xb[j] = ViewAct32(static_cast<const uint8_t*>(x) + j * xs, n);
}

// Signed weights q (32 bytes) of block i with scale wd: acc[j] += wd * xd_j * sum(q * x_j), via
// maddubs(|q|, x_j with q's sign).
template <int NX>
void AccumulateSigned32(__m256i q, float wd, const Act32* xb, int64_t i, __m256* acc) {
  const __m256i aq = _mm256_sign_epi8(q, q);
  for (int j = 0; j < NX; ++j) {
    const __m256i xq = Load256(xb[j].qs + 32 * i);
    const __m256i p = WidenPairs(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(xq, q)));
    acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(wd * xb[j].d[i]), acc[j]);
  }
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles are elements 0..15, high nibbles 16..31.
__m256i Nibbles32(const uint8_t* qs) {
  const __m128i v = Load128(qs);
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

struct Q8_0K {
  template <int NX>
  static void Run(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
    const auto* a = static_cast<const BlockQ8_0*>(w);
    Act32 xb[NX];
    ViewRows<NX>(x, xs, n, xb);
    __m256 acc[NX];
    for (int j = 0; j < NX; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; ++i) AccumulateSigned32<NX>(Load256(a[i].qs), H(a[i].d), xb, i, acc);
    for (int j = 0; j < NX; ++j) out[j * os] = Hsum(acc[j]);
  }
};

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 32 bits (one per element) -> bytes of 0x10 where the bit is set: the 5th bit of Q5_0/Q5_1 quants.
__m256i HighBits32(uint32_t bits) {
  // Byte k of the broadcast word holds bits 8k..8k+7; spread byte k to lanes 8k..8k+7, then test one bit each.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}
__m128i HighBits16(uint32_t bits) { return _mm256_castsi256_si128(HighBits32(bits & 0xFFFF)); }

// Q4_0 / Q5_0 / MXFP4 against nibble-order activations (vec_dot.h): a block's low and high nibbles meet the two
// halves of its x, which sit 16 * g bytes apart in a group of g blocks, and each int32 lane starts from the c
// array, which takes the offset (8, 16, kMxfp4Offset) off. MXFP4's nibbles become their doubled E2M1 values plus
// the offset through one byte shuffle of a 16-entry table. Two blocks per step, one at a time at the end of a 3-
// or 1-block group.
template <class Block>
struct NibbleK {
  static constexpr bool kFive = std::is_same_v<Block, BlockQ5_0>;
  static constexpr bool kFp4 = std::is_same_v<Block, BlockMXFP4>;
  static float Scale(const Block& b) {
    if constexpr (kFp4) {
      return E8M0Half(b.e);
    } else {
      return H(b.d);
    }
  }

  template <int NX>
  static void Run(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
    const auto* a = static_cast<const Block*>(w);
    Act32 xb[NX];
    ViewRows<NX>(x, xs, n, xb);
    __m256 acc[NX];
    __m128 acc1[NX];
    for (int j = 0; j < NX; ++j) {
      acc[j] = _mm256_setzero_ps();
      acc1[j] = _mm_setzero_ps();
    }
    const int64_t nb = n / 32;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4Lut.v)));
    for (int64_t first = 0; first < nb; first += 4) {
      const int64_t g = std::min<int64_t>(4, nb - first);
      int64_t k = 0;
      for (; k + 2 <= g; k += 2) {
        const Block& b0 = a[first + k];
        const Block& b1 = a[first + k + 1];
        const __m256i raw = _mm256_set_m128i(Load128(b1.qs), Load128(b0.qs));
        __m256i lo = _mm256_and_si256(raw, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        if constexpr (kFive) {
          const uint32_t h0 = LoadU32(b0.qh), h1 = LoadU32(b1.qh);
          lo = _mm256_or_si256(lo, HighBits32((h0 & 0xFFFF) | h1 << 16));
          hi = _mm256_or_si256(hi, HighBits32(h0 >> 16 | (h1 >> 16) << 16));
        }
        if constexpr (kFp4) {
          lo = _mm256_shuffle_epi8(lut, lo);
          hi = _mm256_shuffle_epi8(lut, hi);
        }
        const float wd0 = Scale(b0), wd1 = Scale(b1);
        const int64_t lo_at = 32 * first + 16 * k, hi_at = lo_at + 16 * g, blk = first + k;
        for (int j = 0; j < NX; ++j) {
          // Pair sums of both halves fit int16 (at most 2 * (2 * 31 * 127); MXFP4's quants reach 24).
          const __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, Load256(xb[j].qs + lo_at)),
                                               _mm256_maddubs_epi16(hi, Load256(xb[j].qs + hi_at)));
          const __m256i p = _mm256_add_epi32(WidenPairs(p16), Load256(xb[j].c + 4 * blk));
          const __m256 scale = _mm256_set_m128(_mm_set1_ps(wd1 * xb[j].d[blk + 1]), _mm_set1_ps(wd0 * xb[j].d[blk]));
          acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[j]);
        }
      }
      if (k < g) {
        const Block& b0 = a[first + k];
        const __m128i raw = Load128(b0.qs);
        __m128i lo = _mm_and_si128(raw, _mm256_castsi256_si128(low4));
        __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm256_castsi256_si128(low4));
        if constexpr (kFive) {
          const uint32_t h0 = LoadU32(b0.qh);
          lo = _mm_or_si128(lo, HighBits16(h0));
          hi = _mm_or_si128(hi, HighBits16(h0 >> 16));
        }
        if constexpr (kFp4) {
          lo = _mm_shuffle_epi8(_mm256_castsi256_si128(lut), lo);
          hi = _mm_shuffle_epi8(_mm256_castsi256_si128(lut), hi);
        }
        const float wd = Scale(b0);
        const int64_t lo_at = 32 * first + 16 * k, hi_at = lo_at + 16 * g, blk = first + k;
        for (int j = 0; j < NX; ++j) {
          const __m128i p16 = _mm_add_epi16(_mm_maddubs_epi16(lo, Load128(xb[j].qs + lo_at)),
                                            _mm_maddubs_epi16(hi, Load128(xb[j].qs + hi_at)));
          const __m128i p = _mm_add_epi32(_mm_madd_epi16(p16, _mm_set1_epi16(1)), Load128(xb[j].c + 4 * blk));
          acc1[j] = _mm_fmadd_ps(_mm_cvtepi32_ps(p), _mm_set1_ps(wd * xb[j].d[blk]), acc1[j]);
        }
      }
    }
    for (int j = 0; j < NX; ++j) {
      out[j * os] = Hsum(_mm256_add_ps(acc[j], _mm256_insertf128_ps(_mm256_setzero_ps(), acc1[j], 0)));
    }
  }
};

// Q4_1/Q5_1 against Q8_1: weights are unsigned, so maddubs takes them as they are; the min m meets the
// activation's s = xd * sum(qx).
template <class Block, bool kFiveBit>
struct AffineK {
  template <int NX>
  static void Run(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
    const auto* a = static_cast<const Block*>(w);
    Act32 xb[NX];
    ViewRows<NX>(x, xs, n, xb);
    __m256 acc[NX];
    float acc_m[NX];
    for (int j = 0; j < NX; ++j) {
      acc[j] = _mm256_setzero_ps();
      acc_m[j] = 0.0f;
    }
    for (int64_t i = 0; i < n / 32; ++i) {
      __m256i q = Nibbles32(a[i].qs);
      if constexpr (kFiveBit) q = _mm256_or_si256(q, HighBits32(LoadU32(a[i].qh)));
      const float wd = H(a[i].d), wm = H(a[i].m);
      for (int j = 0; j < NX; ++j) {
        const __m256i p = WidenPairs(_mm256_maddubs_epi16(q, Load256(xb[j].qs + 32 * i)));
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(wd * xb[j].d[i]), acc[j]);
        acc_m[j] += wm * xb[j].s[i];
      }
    }
    for (int j = 0; j < NX; ++j) out[j * os] = Hsum(acc[j]) + acc_m[j];
  }
};

// ---- K-quants against Q8_K ----

// Per token: sum over the 16 groups of 16 of coef[g] * bsums[g] (coef as 16 int16), as 8 int32.
__m256i GroupSums(const BlockQ8_K& b, __m256i coef16) { return _mm256_madd_epi16(Load256(b.bsums), coef16); }

// Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scale and min; chunk c (64 elements) is the low (sub-block 2c)
// and high (2c + 1) nibbles of qs[32c..32c+32); Q5_K adds bit k of qh[l] as the 5th bit of sub-block k.
template <class Block, bool kFiveBit>
struct Q45KK {
  template <int NX>
  static void Run(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
    const auto* a = static_cast<const Block*>(w);
    const BlockQ8_K* xb[NX];
    __m256 acc[NX];
    for (int j = 0; j < NX; ++j) {
      xb[j] = Row<BlockQ8_K>(x, xs, j);
      acc[j] = _mm256_setzero_ps();
    }
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int64_t i = 0; i < n / 256; ++i) {
      alignas(16) uint8_t sc[8], mn[16];
      UnpackKScales(a[i].scales, sc, mn);
      // Each min serves two bsums groups of 16: duplicate it to pair with them.
      const __m128i m8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn));
      const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
      __m256i sumi[NX];
      for (int j = 0; j < NX; ++j) sumi[j] = _mm256_setzero_si256();
      __m256i qh;
      if constexpr (kFiveBit) qh = Load256(a[i].qh);
      for (int c = 0; c < 4; ++c) {
        const __m256i raw = Load256(a[i].qs + 32 * c);
        __m256i lo = _mm256_and_si256(raw, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        if constexpr (kFiveBit) {
          // Move bit k (k = 2c, 2c + 1) of each qh byte to bit 4; 16-bit shifts leak nothing into bit 4 here.
          const __m256i b = _mm256_set1_epi8(0x10);
          const int k0 = 2 * c, k1 = 2 * c + 1;
          const __m256i h0 = k0 <= 4 ? _mm256_slli_epi16(qh, 4 - k0) : _mm256_srli_epi16(qh, k0 - 4);
          const __m256i h1 = k1 <= 4 ? _mm256_slli_epi16(qh, 4 - k1) : _mm256_srli_epi16(qh, k1 - 4);
          lo = _mm256_or_si256(lo, _mm256_and_si256(h0, b));
          hi = _mm256_or_si256(hi, _mm256_and_si256(h1, b));
        }
        const __m256i s0 = _mm256_set1_epi16(sc[2 * c]), s1 = _mm256_set1_epi16(sc[2 * c + 1]);
        for (int j = 0; j < NX; ++j) {
          const int8_t* xq = xb[j][i].qs + 64 * c;
          const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, Load256(xq)), s0);
          const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, Load256(xq + 32)), s1);
          sumi[j] = _mm256_add_epi32(sumi[j], _mm256_add_epi32(p0, p1));
        }
      }
      const float wd = H(a[i].d), wmin = H(a[i].dmin);
      for (int j = 0; j < NX; ++j) {
        const float xd = xb[j][i].d;
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[j]), _mm256_set1_ps(wd * xd), acc[j]);
        acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(GroupSums(xb[j][i], mins16)), _mm256_set1_ps(wmin * xd),
                                  acc[j]);
      }
    }
    for (int j = 0; j < NX; ++j) out[j * os] = Hsum(acc[j]);
  }
};

// Q6_K: in half h, with A = ql[64h..+32), B = ql[64h+32..+32), Q = qh[32h..+32), the four 32-element quarters
// are (A & 15, B & 15, A >> 4, B >> 4) with 2 more bits from Q at shifts 0, 2, 4, 6; values are q - 32 with an
// int8 scale per 16. maddubs takes q in 0..63 and the -32 comes back as 32 * sum(scale * bsums).
struct Q6KK {
  template <int NX>
  static void Run(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
    const auto* a = static_cast<const BlockQ6_K*>(w);
    const BlockQ8_K* xb[NX];
    __m256 acc[NX];
    for (int j = 0; j < NX; ++j) {
      xb[j] = Row<BlockQ8_K>(x, xs, j);
      acc[j] = _mm256_setzero_ps();
    }
    const __m256i low4 = _mm256_set1_epi8(0x0F), two_bits = _mm256_set1_epi8(0x30);
    for (int64_t i = 0; i < n / 256; ++i) {
      const __m256i scales16 = _mm256_cvtepi8_epi16(Load128(a[i].scales));
      __m256i sumi[NX];
      for (int j = 0; j < NX; ++j) sumi[j] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        const __m256i A = Load256(a[i].ql + 64 * h), B = Load256(a[i].ql + 64 * h + 32);
        const __m256i Q = Load256(a[i].qh + 32 * h);
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(A, low4), _mm256_and_si256(_mm256_slli_epi16(Q, 4), two_bits)),
            _mm256_or_si256(_mm256_and_si256(B, low4), _mm256_and_si256(_mm256_slli_epi16(Q, 2), two_bits)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 4), low4), _mm256_and_si256(Q, two_bits)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(B, 4), low4),
                            _mm256_and_si256(_mm256_srli_epi16(Q, 2), two_bits)),
        };
        for (int r = 0; r < 4; ++r) {
          const int g = 8 * h + 2 * r;  // the quarter's two scale groups
          const __m256i s = _mm256_set_m128i(_mm_set1_epi16(a[i].scales[g + 1]), _mm_set1_epi16(a[i].scales[g]));
          for (int j = 0; j < NX; ++j) {
            const __m256i xq = Load256(xb[j][i].qs + 128 * h + 32 * r);
            sumi[j] = _mm256_add_epi32(sumi[j], _mm256_madd_epi16(_mm256_maddubs_epi16(q[r], xq), s));
          }
        }
      }
      const float wd = H(a[i].d);
      for (int j = 0; j < NX; ++j) {
        const __m256i offset = _mm256_slli_epi32(GroupSums(xb[j][i], scales16), 5);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[j], offset)),
                                 _mm256_set1_ps(wd * xb[j][i].d), acc[j]);
      }
    }
    for (int j = 0; j < NX; ++j) out[j * os] = Hsum(acc[j]);
  }
};

// Q2_K and Q3_K share a quant layout: in half h, the 2-bit field at shift 2s of qs[32h + l] is element
// 128h + 32s + l. Scales are per 16 elements, so a 32-element quarter spans groups g = 8h + 2s and g + 1.
__m256i QuarterScales(const int8_t* scales, int g) {
  return _mm256_set_m128i(_mm_set1_epi16(scales[g + 1]), _mm_set1_epi16(scales[g]));
}

// Q2_K: x = d * sc * q - dmin * m with 4-bit sc (low nibble) and m (high nibble) per 16 elements.
struct Q2KK {
  template <int NX>
  static void Run(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
    const auto* a = static_cast<const BlockQ2_K*>(w);
    const BlockQ8_K* xb[NX];
    __m256 acc[NX];
    for (int j = 0; j < NX; ++j) {
      xb[j] = Row<BlockQ8_K>(x, xs, j);
      acc[j] = _mm256_setzero_ps();
    }
    const __m256i two_bits = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < n / 256; ++i) {
      const __m128i packed = Load128(a[i].scales);
      alignas(16) int8_t sc[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(sc), _mm_and_si128(packed, _mm_set1_epi8(0x0F)));
      const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F)));
      __m256i sumi[NX];
      for (int j = 0; j < NX; ++j) sumi[j] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        const __m256i raw = Load256(a[i].qs + 32 * h);
        for (int s2 = 0; s2 < 4; ++s2) {
          const __m256i q = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * s2), two_bits);
          const __m256i scale = QuarterScales(sc, 8 * h + 2 * s2);
          for (int j = 0; j < NX; ++j) {
            const __m256i xq = Load256(xb[j][i].qs + 128 * h + 32 * s2);
            sumi[j] = _mm256_add_epi32(sumi[j], _mm256_madd_epi16(_mm256_maddubs_epi16(q, xq), scale));
          }
        }
      }
      const float wd = H(a[i].d), wmin = H(a[i].dmin);
      for (int j = 0; j < NX; ++j) {
        const float xd = xb[j][i].d;
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[j]), _mm256_set1_ps(wd * xd), acc[j]);
        acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(GroupSums(xb[j][i], mins16)), _mm256_set1_ps(wmin * xd),
                                  acc[j]);
      }
    }
    for (int j = 0; j < NX; ++j) out[j * os] = Hsum(acc[j]);
  }
};

// Q3_K's 16 six-bit scales, bias 32 removed, as int8: low 4 bits in the nibbles of bytes 0..7 (scales 0..7 the
// low nibbles, 8..15 the high ones); high 2 bits of scale j at shift 2 * (j / 4) of byte 8 + j % 4.
__m128i Q3Scales(const uint8_t* packed) {
  uint64_t lo_bytes;
  uint32_t hi_bytes;
  std::memcpy(&lo_bytes, packed, 8);
  std::memcpy(&hi_bytes, packed + 8, 4);
  const __m128i v = _mm_cvtsi64_si128(static_cast<int64_t>(lo_bytes));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
  const __m128i shifted = _mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(hi_bytes)), _mm_setr_epi32(0, 2, 4, 6));
  const __m128i high = _mm_and_si128(shifted, _mm_set1_epi8(3));
  return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
}

// Q3_K: x = d * sc * (u - 4) with u = 2-bit field + 4 * (hmask bit), the bit of element 128h + 32s + l being
// bit 4h + s of hmask[l]. maddubs takes u in 0..7 and the -4 comes back as 4 * sum(sc * bsums).
struct Q3KK {
  template <int NX>
  static void Run(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
    const auto* a = static_cast<const BlockQ3_K*>(w);
    const BlockQ8_K* xb[NX];
    __m256 acc[NX];
    for (int j = 0; j < NX; ++j) {
      xb[j] = Row<BlockQ8_K>(x, xs, j);
      acc[j] = _mm256_setzero_ps();
    }
    const __m256i two_bits = _mm256_set1_epi8(3), bit2 = _mm256_set1_epi8(4);
    for (int64_t i = 0; i < n / 256; ++i) {
      alignas(16) int8_t sc[16];
      const __m128i sc8 = Q3Scales(a[i].scales);
      _mm_store_si128(reinterpret_cast<__m128i*>(sc), sc8);
      const __m256i scales16 = _mm256_cvtepi8_epi16(sc8);
      const __m256i hmask = Load256(a[i].hmask);
      __m256i sumi[NX];
      for (int j = 0; j < NX; ++j) sumi[j] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        const __m256i raw = Load256(a[i].qs + 32 * h);
        for (int s2 = 0; s2 < 4; ++s2) {
          // Bit k of each hmask byte to bit 2; 16-bit shifts of at most 5 leak nothing into bit 2 here.
          const int k = 4 * h + s2;
          const __m256i hb = k <= 2 ? _mm256_slli_epi16(hmask, 2 - k) : _mm256_srli_epi16(hmask, k - 2);
          const __m256i u = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 2 * s2), two_bits),
                                            _mm256_and_si256(hb, bit2));
          const __m256i scale = QuarterScales(sc, 8 * h + 2 * s2);
          for (int j = 0; j < NX; ++j) {
            const __m256i xq = Load256(xb[j][i].qs + 128 * h + 32 * s2);
            sumi[j] = _mm256_add_epi32(sumi[j], _mm256_madd_epi16(_mm256_maddubs_epi16(u, xq), scale));
          }
        }
      }
      const float wd = H(a[i].d);
      for (int j = 0; j < NX; ++j) {
        const __m256i offset = _mm256_slli_epi32(GroupSums(xb[j][i], scales16), 2);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[j], offset)),
                                 _mm256_set1_ps(wd * xb[j][i].d), acc[j]);
      }
    }
    for (int j = 0; j < NX; ++j) out[j * os] = Hsum(acc[j]);
  }
};

// ---- activation conversion, bit-identical to the core quantizers (core/quant.cc) ----

__m256i RoundToInt(__m256 v) {
  return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// Four vectors of 8 int32 (each in -128..127) -> 32 int8 in element order.
__m256i PackBytes(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
  // The packs work within 128-bit lanes, leaving the dwords in order 0, 4, 1, 5, 2, 6, 3, 7.
  const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

float HmaxAbs(const float* x, int n) {  // n a multiple of 8
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int k = 0; k < n; k += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

int HsumI32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

float RoundThroughF16(float v) { return _cvtsh_ss(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT)); }

// One Q8_0 block of 32: d = max|x| / 127, q = round-half-even(x * (127 / max|x|)). Returns d (before fp16 rounding);
// the quants' int32 lanes are left in i[4] for callers that sum them.
float Q8Block32(const float* x, int8_t* qs, __m256i i[4]) {
  const float amax = HmaxAbs(x, 32);
  const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  for (int v = 0; v < 4; ++v) i[v] = RoundToInt(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * v), id));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), PackBytes(i[0], i[1], i[2], i[3]));
  return amax / 127.0f;
}

int SumLanes(const __m256i i[4]) {
  return HsumI32(_mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3])));
}

// Q8_0 / Q8_1 per 32; Q8_1 adds s = d * sum(q).
void QuantizeAct32(const float* x, int64_t n, bool with_sum, void* dst) {
  auto* qs = static_cast<int8_t*>(dst);
  auto* d = reinterpret_cast<float*>(qs + n);
  float* s = d + n / 32;
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    __m256i i[4];
    const float db = Q8Block32(x, qs + 32 * b, i);
    d[b] = RoundThroughF16(db);
    s[b] = with_sum ? RoundThroughF16(db * static_cast<float>(SumLanes(i))) : 0.0f;
  }
}

// Q8_K per 256: scale by -127 / (the signed element of largest magnitude, first on ties), clamp at 127.
void QuantizeActQ8_K(const float* x, int64_t n, BlockQ8_K* y) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 256; ++b, x += 256) {
    BlockQ8_K& blk = y[b];
    const float amax = HmaxAbs(x, 256);
    if (amax == 0.0f) {
      std::memset(&blk, 0, sizeof(blk));
      continue;
    }
    int first = 0;
    for (int k = 0; k < 256; k += 8) {
      const __m256 eq = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)), _mm256_set1_ps(amax), _CMP_EQ_OQ);
      const int bits = _mm256_movemask_ps(eq);
      if (bits != 0) {
        first = k + __builtin_ctz(static_cast<unsigned>(bits));
        break;
      }
    }
    const float iscale = -127.0f / x[first];
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i top = _mm256_set1_epi32(127);
    for (int k = 0; k < 256; k += 32) {
      __m256i i[4];
      for (int v = 0; v < 4; ++v) {
        i[v] = _mm256_min_epi32(RoundToInt(_mm256_mul_ps(vs, _mm256_loadu_ps(x + k + 8 * v))), top);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk.qs + k), PackBytes(i[0], i[1], i[2], i[3]));
      // Group sums of 16: lanes of i[0] + i[1], and of i[2] + i[3].
      blk.bsums[k / 16] = static_cast<int16_t>(HsumI32(_mm256_add_epi32(i[0], i[1])));
      blk.bsums[k / 16 + 1] = static_cast<int16_t>(HsumI32(_mm256_add_epi32(i[2], i[3])));
    }
    blk.d = 1.0f / iscale;
  }
}

// Floats rounded through fp16 (round to nearest even), the F16 activation layout.
void RoundF16(const float* x, int64_t n, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) y[i] = RoundThroughF16(x[i]);
}

// Round to nearest even on the top 16 bits; NaN stays NaN (quieted), as core F32ToBf16.
void ConvertBF16(const float* x, int64_t n, bf16_t* y) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(64);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i r[2];
    for (int h = 0; h < 2; ++h) {
      const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i + 8 * h));
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
      const __m256i rounded = _mm256_srli_epi32(
          _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one))), 16);
      const __m256i quieted = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
      r[h] = _mm256_blendv_epi8(rounded, quieted, nan);
    }
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), packed);
  }
  for (; i < n; ++i) y[i] = ToBf16(x[i]);
}

}  // namespace

VecDotFn Avx2VecDot(DType wtype) {
  switch (wtype) {
    case DType::kF32: return DispatchTokens<FloatKernel<SrcF32, SrcF32>>;
    case DType::kF16: return DispatchTokens<FloatKernel<SrcF16, SrcF32>>;
    case DType::kBF16: return DispatchTokens<FloatKernel<SrcBF16, SrcBF16>>;
    case DType::kQ4_0: return DispatchTokens<NibbleK<BlockQ4_0>>;
    case DType::kQ4_1: return DispatchTokens<AffineK<BlockQ4_1, false>>;
    case DType::kQ5_0: return DispatchTokens<NibbleK<BlockQ5_0>>;
    case DType::kQ5_1: return DispatchTokens<AffineK<BlockQ5_1, true>>;
    case DType::kQ8_0: return DispatchTokens<Q8_0K>;
    case DType::kMXFP4: return DispatchTokens<NibbleK<BlockMXFP4>>;
    case DType::kQ4_K: return DispatchTokens<Q45KK<BlockQ4_K, false>>;
    case DType::kQ5_K: return DispatchTokens<Q45KK<BlockQ5_K, true>>;
    case DType::kQ6_K: return DispatchTokens<Q6KK>;
    case DType::kQ2_K: return DispatchTokens<Q2KK>;
    case DType::kQ3_K: return DispatchTokens<Q3KK>;
    default: return nullptr;  // activation-only types
  }
}

bool Avx2QuantizeActivationRow(DType vdt, const float* x, void* dst, int64_t n) {
  switch (vdt) {
    case DType::kQ8_0: QuantizeAct32(x, n, false, dst); return true;
    case DType::kQ8_1: QuantizeAct32(x, n, true, dst); return true;
    case DType::kQ8_K: QuantizeActQ8_K(x, n, static_cast<BlockQ8_K*>(dst)); return true;
    case DType::kF16: RoundF16(x, n, static_cast<float*>(dst)); return true;
    case DType::kBF16: ConvertBF16(x, n, static_cast<bf16_t*>(dst)); return true;
    default: return false;
  }
}

void Avx2QuantizeQ8_0Strided(const float* x, int64_t n, int32_t offset, const Q8_0Strided& out) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    const size_t at = static_cast<size_t>(b) * out.stride;
    __m256i i[4];
    const float d = RoundThroughF16(Q8Block32(x, reinterpret_cast<int8_t*>(out.qs + at), i));
    const int32_t aux = -offset * SumLanes(i);
    std::memcpy(out.d + at, &d, sizeof(d));
    std::memcpy(out.aux + at, &aux, sizeof(aux));
  }
}

}  // namespace tandem::cpu::internal

// AVX-512 (F, BW, VL, DQ, VNNI; BF16 where the CPU has it) dot products. This file is compiled with those flags
// and MatMul calls it only on CPUs that have them. Each kernel unpacks a weight block once and uses it for NX
// activation rows.
//
// Integer blocks: _mm512_dpbusd_epi32 multiplies unsigned by signed bytes and adds groups of 4 into int32 lanes
// without saturation. Q8_0 weights are made unsigned with their sign moved onto the activation; Q4_0/Q5_0 quants
// are unsigned already and MXFP4's are looked up offset to unsigned, and their activations come in nibble order
// with a c array (vec_dot.h) that each dpbusd lane starts from, which makes the sum signed. K-quants go through
// _mm512_maddubs_epi16 and _mm512_dpwssd_epi32, which folds in the sub-block scale in the same step.

// GCC 12's AVX-512 headers build some results from a deliberately uninitialized register (_mm512_undefined_*),
// which -Wuninitialized then reports inside the header after inlining; the values are fully defined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <type_traits>

#include "cpu_backend/vec_dot.h"
#include "cpu_backend/vec_dot_simd.h"

namespace tandem::cpu::internal {
namespace {

float H(f16_t h) { return _cvtsh_ss(h); }

__m512i Load512(const void* p) { return _mm512_loadu_si512(p); }
__m256i Load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i Load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// Two 32-byte halves into one register.
__m512i Join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

float Hsum128(__m128 s) {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
float Hsum256(__m256 v) { return Hsum128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1))); }

template <class T>
const T* Row(const void* x, size_t x_stride, int j) {
  return reinterpret_cast<const T*>(static_cast<const uint8_t*>(x) + j * x_stride);
}

// ---- plain floats: 32 elements per step, then 16, then a masked tail ----
// Weights in WSrc's format, activations in XSrc's (F16 activations are floats already rounded to fp16).
template <class WSrc, class XSrc>
struct FloatKernel {
  using W = typename WSrc::Elem;
  using X = typename XSrc::Elem;
  template <int NX>
  static void Run(int64_t n, const void* wv, const void* x, size_t xs, float* out, size_t os) {
    const W* w = static_cast<const W*>(wv);
    __m512 acc[NX][2];
    for (int j = 0; j < NX; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m512 w0 = WSrc::Load(w + i), w1 = WSrc::Load(w + i + 16);
      for (int j = 0; j < NX; ++j) {
        const X* xj = Row<X>(x, xs, j);
        acc[j][0] = _mm512_fmadd_ps(w0, XSrc::Load(xj + i), acc[j][0]);
        acc[j][1] = _mm512_fmadd_ps(w1, XSrc::Load(xj + i + 16), acc[j][1]);
      }
    }
    for (; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
      const __m512 w0 = WSrc::LoadMasked(m, w + i);
      for (int j = 0; j < NX; ++j) {
        acc[j][0] = _mm512_fmadd_ps(w0, XSrc::LoadMasked(m, Row<X>(x, xs, j) + i), acc[j][0]);
      }
    }
    for (int j = 0; j < NX; ++j) out[j * os] = _mm512_reduce_add_ps(_mm512_add_ps(acc[j][0], acc[j][1]));
  }
};

struct SrcF32 {
  using Elem = float;
  static __m512 Load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 LoadMasked(__mmask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
};
struct SrcF16 {
  using Elem = f16_t;
  static __m512 Load(const f16_t* p) { return _mm512_cvtph_ps(Load256(p)); }
  static __m512 LoadMasked(__mmask16 m, const f16_t* p) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
};
struct SrcBF16 {  // bf16 is the top half of an f32
  using Elem = bf16_t;
  static __m512 Widen(__m256i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)); }
  static __m512 Load(const bf16_t* p) { return Widen(Load256(p)); }
  static __m512 LoadMasked(__mmask16 m, const bf16_t* p) { return Widen(_mm256_maskz_loadu_epi16(m, p)); }
};

// BF16 on CPUs with AVX512_BF16: vdpbf16ps multiplies 32 bf16 pairs and adds pairs of products into 16 floats
// (bf16 products are exact in float; subnormal inputs count as zero, which real weights and activations are not).
struct BF16DotK {
  template <int NX>
  static void Run(int64_t n, const void* wv, const void* x, size_t xs, float* out, size_t os) {
    const auto* w = static_cast<const bf16_t*>(wv);
    __m512 acc[NX];
    for (int j = 0; j < NX; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 32) {
      const __mmask32 m = n - i >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((1u << (n - i)) - 1);
      const __m512bh wb = (__m512bh)_mm512_maskz_loadu_epi16(m, w + i);
      for (int j = 0; j < NX; ++j) {
        const __m512bh xb = (__m512bh)_mm512_maskz_loadu_epi16(m, Row<bf16_t>(x, xs, j) + i);
        acc[j] = _mm512_dpbf16_ps(acc[j], wb, xb);
      }
    }
    for (int j = 0; j < NX; ++j) out[j * os] = _mm512_reduce_add_ps(acc[j]);
  }
};

// ---- 32-element blocks against split Q8_0/Q8_1 rows (vec_dot.h) ----

template <int NX>
void ViewRows(const void* x, size_t xs, int64_t n, Act32* xb) {
  for (int j = 0; j < NX; ++j) xb[j] = ViewAct32(static_cast<const uint8_t*>(x) + j * xs, n);
}

// Two or four fp16 block scales as floats in lanes 0, 1 (, 2, 3).
__m128 TwoScales(f16_t d0, f16_t d1) {
  return _mm_cvtph_ps(_mm_insert_epi16(_mm_cvtsi32_si128(d0), d1, 1));
}
__m128 FourScales(f16_t d0, f16_t d1, f16_t d2, f16_t d3) {
  const __m128i v = _mm_insert_epi16(_mm_insert_epi16(_mm_insert_epi16(_mm_cvtsi32_si128(d0), d1, 1), d2, 2), d3, 3);
  return _mm_cvtph_ps(v);
}
// core's E8M0HalfToF32 for four MXFP4 scale bytes: 2^(e - 128), the exponent field e - 1, or for e < 2 the
// subnormals 2^-128 and 2^-127 (bit 21 shifted by e).
__m128 FourE8M0Half(uint8_t e0, uint8_t e1, uint8_t e2, uint8_t e3) {
  const __m128i e = _mm_setr_epi32(e0, e1, e2, e3);
  const __m128i normal = _mm_slli_epi32(_mm_sub_epi32(e, _mm_set1_epi32(1)), 23);
  const __m128i subnormal = _mm_sllv_epi32(_mm_set1_epi32(0x00200000), e);
  return _mm_castsi128_ps(_mm_mask_blend_epi32(_mm_cmplt_epi32_mask(e, _mm_set1_epi32(2)), normal, subnormal));
}
float E8M0Half(uint8_t e) { return _mm_cvtss_f32(FourE8M0Half(e, 0, 0, 0)); }

// Blocks i, i + 1 of signed weights q (lanes 0..31, 32..63) with scales wd (lanes 0, 1):
// acc[j] += per-block wd * xd * sum(q * x_j). |q| goes in as the unsigned operand, q's sign onto x.
template <int NX>
void Accumulate2Signed(__m512i q, __m128 wd, const Act32* xb, int64_t i, __m512* acc) {
  const __m512i aq = _mm512_abs_epi8(q);
  const __mmask64 neg = _mm512_movepi8_mask(q);
  const __m512i zero = _mm512_setzero_si512();
  // Lanes 0..7 take scale 0, lanes 8..15 scale 1.
  const __m512i spread = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(1), 1);
  for (int j = 0; j < NX; ++j) {
    const __m512i xq = Load512(xb[j].qs + 32 * i);
    const __m512i dot = _mm512_dpbusd_epi32(zero, aq, _mm512_mask_sub_epi8(xq, neg, zero, xq));
    const __m128 xd = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(xb[j].d + i)));
    const __m512 scale = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_mul_ps(wd, xd)));
    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[j]);
  }
}

// One block (an odd last one), 256 bits wide.
template <int NX>
void Accumulate1Signed(__m256i q, float wd, const Act32* xb, int64_t i, __m256* acc) {
  const __m256i aq = _mm256_abs_epi8(q);
  for (int j = 0; j < NX; ++j) {
    const __m256i xq = Load256(xb[j].qs + 32 * i);
    const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), aq, _mm256_sign_epi8(xq, q));
    acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(wd * xb[j].d[i]), acc[j]);
  }
}

// 16 bytes of nibbles -> bytes 0..15 low nibbles, 16..31 high nibbles (the block's element order).
__m256i Nibbles1(const uint8_t* qs) {
  const __m128i v = Load128(qs);
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}
uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Q8_0 against Q8_0, two blocks per step.
struct Q8_0K {
  template <int NX>
  static void Run(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
    const auto* a = static_cast<const BlockQ8_0*>(w);
    Act32 xb[NX];
    ViewRows<NX>(x, xs, n, xb);
    __m512 acc[NX];
    __m256 acc1[NX];
    for (int j = 0; j < NX; ++j) {
      acc[j] = _mm512_setzero_ps();
      acc1[j] = _mm256_setzero_ps();
    }
    const int64_t nb = n / 32;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
      const __m512i q = Join(Load256(a[i].qs), Load256(a[i + 1].qs));
      Accumulate2Signed<NX>(q, TwoScales(a[i].d, a[i + 1].d), xb, i, acc);
    }
    if (i < nb) Accumulate1Signed<NX>(Load256(a[i].qs), H(a[i].d), xb, i, acc1);
    for (int j = 0; j < NX; ++j) out[j * os] = _mm512_reduce_add_ps(acc[j]) + Hsum256(acc1[j]);
  }
};

// Q4_0 / Q5_0 / MXFP4 against nibble-order activations (vec_dot.h). Four blocks per step: one register holds the
// low nibbles of the four (meeting one 64-byte load of x), one the high nibbles (the next 64 bytes), and each
// int32 lane of dpbusd starts from the c array, which takes the offset (8, 16, kMxfp4Offset) off; lanes
// 4k..4k+3 belong to block k. MXFP4's nibbles become their doubled E2M1 values plus the offset through a byte
// shuffle of a 16-entry table (the same in each 128-bit lane). A last group of fewer than 4 blocks goes one block
// at a time, its halves 16 * g bytes apart.
template <class Block>
struct NibbleK {
  static constexpr bool kFive = std::is_same_v<Block, BlockQ5_0>;
  static constexpr bool kFp4 = std::is_same_v<Block, BlockMXFP4>;
  static __m128 Scales(const Block* b) {
    if constexpr (kFp4) {
      return FourE8M0Half(b[0].e, b[1].e, b[2].e, b[3].e);
    } else {
      return FourScales(b[0].d, b[1].d, b[2].d, b[3].d);
    }
  }
  static float Scale(const Block& b) {
    if constexpr (kFp4) {
      return E8M0Half(b.e);
    } else {
      return H(b.d);
    }
  }
  // Software prefetch this far ahead (288 bytes of Q4_0) measured a little faster from DRAM than the hardware
  // prefetcher alone.
  static constexpr int kPrefetchBlocks = 16;

  template <int NX>
  static void Run(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
    const auto* a = static_cast<const Block*>(w);
    Act32 xb[NX];
    ViewRows<NX>(x, xs, n, xb);
    __m512 acc[NX];
    __m128 acc1[NX];
    for (int j = 0; j < NX; ++j) {
      acc[j] = _mm512_setzero_ps();
      acc1[j] = _mm_setzero_ps();
    }
    const int64_t nb = n / 32;
    const __m512i low4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
    const __m512i lut = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4Lut.v)));
    const __m512i spread4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    int64_t first = 0;
    for (; first + 4 <= nb; first += 4) {
      const Block* b = a + first;
      _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchBlocks), _MM_HINT_T0);
      const __m512i raw = Join(_mm256_set_m128i(Load128(b[1].qs), Load128(b[0].qs)),
                               _mm256_set_m128i(Load128(b[3].qs), Load128(b[2].qs)));
      __m512i lo = _mm512_and_si512(raw, low4);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
      if constexpr (kFive) {
        uint64_t lo_bits = 0, hi_bits = 0;
        for (int k = 0; k < 4; ++k) {
          const uint64_t qh = LoadU32(b[k].qh);
          lo_bits |= (qh & 0xFFFF) << (16 * k);
          hi_bits |= (qh >> 16) << (16 * k);
        }
        lo = _mm512_mask_add_epi8(lo, lo_bits, lo, bit4);
        hi = _mm512_mask_add_epi8(hi, hi_bits, hi, bit4);
      }
      if constexpr (kFp4) {
        lo = _mm512_shuffle_epi8(lut, lo);
        hi = _mm512_shuffle_epi8(lut, hi);
      }
      const __m128 wd = Scales(b);
      for (int j = 0; j < NX; ++j) {
        const int8_t* xq = xb[j].qs + 32 * first;
        __m512i dot = _mm512_dpbusd_epi32(Load512(xb[j].c + 4 * first), lo, Load512(xq));
        dot = _mm512_dpbusd_epi32(dot, hi, Load512(xq + 64));
        const __m128 s4 = _mm_mul_ps(wd, _mm_loadu_ps(xb[j].d + first));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(spread4, _mm512_castps128_ps512(s4)),
                                 acc[j]);
      }
    }
    const int64_t g = nb - first;
    for (int64_t k = 0; k < g; ++k) {
      const Block& b0 = a[first + k];
      const __m128i raw = Load128(b0.qs);
      __m128i lo = _mm_and_si128(raw, _mm512_castsi512_si128(low4));
      __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm512_castsi512_si128(low4));
      if constexpr (kFive) {
        const uint32_t qh = LoadU32(b0.qh);
        lo = _mm_mask_add_epi8(lo, static_cast<__mmask16>(qh & 0xFFFF), lo, _mm512_castsi512_si128(bit4));
        hi = _mm_mask_add_epi8(hi, static_cast<__mmask16>(qh >> 16), hi, _mm512_castsi512_si128(bit4));
      }
      if constexpr (kFp4) {
        lo = _mm_shuffle_epi8(_mm512_castsi512_si128(lut), lo);
        hi = _mm_shuffle_epi8(_mm512_castsi512_si128(lut), hi);
      }
      const float wd = Scale(b0);
      const int64_t lo_at = 32 * first + 16 * k, hi_at = lo_at + 16 * g, blk = first + k;
      for (int j = 0; j < NX; ++j) {
        __m128i dot = _mm_dpbusd_epi32(Load128(xb[j].c + 4 * blk), lo, Load128(xb[j].qs + lo_at));
        dot = _mm_dpbusd_epi32(dot, hi, Load128(xb[j].qs + hi_at));
        acc1[j] = _mm_fmadd_ps(_mm_cvtepi32_ps(dot), _mm_set1_ps(wd * xb[j].d[blk]), acc1[j]);
      }
    }
    for (int j = 0; j < NX; ++j) out[j * os] = _mm512_reduce_add_ps(acc[j]) + Hsum128(acc1[j]);
  }
};

// Q4_1/Q5_1 against Q8_1: unsigned weights go straight into dpbusd; the min m meets the activation's
// s = xd * sum(qx).
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
      __m256i q = Nibbles1(a[i].qs);
      if constexpr (kFiveBit) q = _mm256_mask_add_epi8(q, LoadU32(a[i].qh), q, _mm256_set1_epi8(0x10));
      const float wd = H(a[i].d), wm = H(a[i].m);
      for (int j = 0; j < NX; ++j) {
        const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, Load256(xb[j].qs + 32 * i));
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(wd * xb[j].d[i]), acc[j]);
        acc_m[j] += wm * xb[j].s[i];
      }
    }
    for (int j = 0; j < NX; ++j) out[j * os] = Hsum256(acc[j]) + acc_m[j];
  }
};

// ---- K-quants against Q8_K ----

// A one-token call streams its row once. The K-quant kernels prefetch each super-block DecodePrefetchBytes() ahead
// as they reach it: on the Intel host Q6_K and Q5_K read 80-85 and 81 % of the probe (matmul_bench, 14336 x 4096),
// against 70-74 and 63-64 % with the whole row prefetched in one burst before the call (MatMul's way for the other
// kernels). Bytes ahead of a block that is not line-aligned fall to the next block's prefetch.
template <size_t Bytes>
inline void PrefetchBlock(const void* block, size_t ahead) {
  for (size_t l = 0; l < Bytes; l += 64) _mm_prefetch(static_cast<const char*>(block) + ahead + l, _MM_HINT_T0);
}

// int16 lane index vector: lanes 16k..16k+15 pick element first + k (k = 0, 1): the scale of a 64-element chunk
// made of two 32-element sub-blocks, one per maddubs pair lane.
__m512i PairIndex(int first) {
  return _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(first)),
                            _mm256_set1_epi16(static_cast<int16_t>(first + 1)), 1);
}
// Q4_K and Q5_K: chunk c (64 elements) is the low nibbles (sub-block 2c) then the high nibbles (2c + 1) of
// qs[32c..32c+32); Q5_K's 5th bit of sub-block k is bit k of qh[l].
template <class Block, bool kFiveBit>
struct Q45KK {
  template <int NX>
  static void Run(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
    const auto* a = static_cast<const Block*>(w);
    const BlockQ8_K* xb[NX];
    __m512 acc[NX];
    for (int j = 0; j < NX; ++j) {
      xb[j] = Row<BlockQ8_K>(x, xs, j);
      acc[j] = _mm512_setzero_ps();
    }
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i nibble_shift = Join(_mm256_setzero_si256(), _mm256_set1_epi16(4));
    const __m512i idx[4] = {PairIndex(0), PairIndex(2), PairIndex(4), PairIndex(6)};
    const size_t ahead = NX == 1 ? DecodePrefetchBytes() : 0;
    for (int64_t i = 0; i < n / 256; ++i) {
      if (ahead != 0) PrefetchBlock<sizeof(Block)>(a + i, ahead);
      alignas(16) uint8_t sc[16], mn[16];
      UnpackKScales(a[i].scales, sc, mn);
      const __m128i sc8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc));
      const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sc8));
      // Each min serves two bsums groups of 16: duplicate it to pair with them.
      const __m128i m8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn));
      const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
      __m512i qh2;
      if constexpr (kFiveBit) qh2 = _mm512_broadcast_i64x4(Load256(a[i].qh));
      __m512i sumi[NX];
      for (int j = 0; j < NX; ++j) sumi[j] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        // The 32 bytes in both halves, the upper half shifted to its high nibbles.
        const __m512i both = _mm512_broadcast_i64x4(Load256(a[i].qs + 32 * c));
        __m512i q = _mm512_and_si512(_mm512_srlv_epi16(both, nibble_shift), low4);
        if constexpr (kFiveBit) {
          const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * c))),
                                                 _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1))), 1);
          q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh2, bit), q, _mm512_set1_epi8(0x10));
        }
        const __m512i scale = _mm512_permutexvar_epi16(idx[c], sc16);
        for (int j = 0; j < NX; ++j) {
          const __m512i p = _mm512_maddubs_epi16(q, Load512(xb[j][i].qs + 64 * c));
          sumi[j] = _mm512_dpwssd_epi32(sumi[j], p, scale);
        }
      }
      const float wd = H(a[i].d), wmin = H(a[i].dmin);
      for (int j = 0; j < NX; ++j) {
        const float xd = xb[j][i].d;
        const __m512i msum = _mm512_zextsi256_si512(_mm256_madd_epi16(Load256(xb[j][i].bsums), mins16));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[j]), _mm512_set1_ps(wd * xd), acc[j]);
        acc[j] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_set1_ps(wmin * xd), acc[j]);
      }
    }
    for (int j = 0; j < NX; ++j) out[j * os] = _mm512_reduce_add_ps(acc[j]);
  }
};

// Q6_K: in half h, the 64 bytes ql[64h..64h+64) give elements 0..63 of the half (low nibbles) and 64..127 (high
// nibbles); qh[32h..+32) adds bits 4-5 from its shifts 0, 2 (first 64) and 4, 6 (last 64). Values are q - 32
// with an int8 scale per 16; maddubs takes q in 0..63 and the -32 comes back as 32 * sum(scale * bsums).
struct Q6KK {
  template <int NX>
  static void Run(int64_t n, const void* w, const void* x, size_t xs, float* out, size_t os) {
    const auto* a = static_cast<const BlockQ6_K*>(w);
    const BlockQ8_K* xb[NX];
    __m512 acc[NX];
    for (int j = 0; j < NX; ++j) {
      xb[j] = Row<BlockQ8_K>(x, xs, j);
      acc[j] = _mm512_setzero_ps();
    }
    const __m512i low4 = _mm512_set1_epi8(0x0F), two_bits = _mm512_set1_epi8(0x30);
    // Per-16-bit-lane shifts that bring qh bits (0,1) | (2,3) to bits 4,5 (left by 4 | 2), and (4,5) | (6,7)
    // (right by 0 | 2); the 0x30 mask drops what crosses bytes.
    const __m512i shl = Join(_mm256_set1_epi16(4), _mm256_set1_epi16(2));
    const __m512i shr = Join(_mm256_setzero_si256(), _mm256_set1_epi16(2));
    // Scale of each maddubs pair lane: lanes 8k..8k+7 belong to group first + k.
    __m512i idx[4];
    for (int k = 0; k < 4; ++k) {
      alignas(64) int16_t lanes[32];
      for (int l = 0; l < 32; ++l) lanes[l] = static_cast<int16_t>(4 * k + l / 8);
      idx[k] = _mm512_load_si512(lanes);
    }
    const size_t ahead = NX == 1 ? DecodePrefetchBytes() : 0;
    for (int64_t i = 0; i < n / 256; ++i) {
      if (ahead != 0) PrefetchBlock<sizeof(BlockQ6_K)>(a + i, ahead);
      const __m256i sc256 = _mm256_cvtepi8_epi16(Load128(a[i].scales));
      const __m512i sc16 = _mm512_castsi256_si512(sc256);
      __m512i sumi[NX];
      for (int j = 0; j < NX; ++j) sumi[j] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        const __m512i v = Load512(a[i].ql + 64 * h);
        const __m512i qh2 = _mm512_broadcast_i64x4(Load256(a[i].qh + 32 * h));
        const __m512i hi01 = _mm512_and_si512(_mm512_sllv_epi16(qh2, shl), two_bits);
        const __m512i hi23 = _mm512_and_si512(_mm512_srlv_epi16(qh2, shr), two_bits);
        // (a & b) | c in one instruction: truth table 0xEA over (a, b, c).
        const __m512i q[2] = {_mm512_ternarylogic_epi32(v, low4, hi01, 0xEA),
                              _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), low4, hi23, 0xEA)};
        for (int part = 0; part < 2; ++part) {
          const __m512i scale = _mm512_permutexvar_epi16(idx[2 * h + part], sc16);
          for (int j = 0; j < NX; ++j) {
            const __m512i p = _mm512_maddubs_epi16(q[part], Load512(xb[j][i].qs + 128 * h + 64 * part));
            sumi[j] = _mm512_dpwssd_epi32(sumi[j], p, scale);
          }
        }
      }
      const float wd = H(a[i].d);
      for (int j = 0; j < NX; ++j) {
        const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(Load256(xb[j][i].bsums), sc256), 5);
        const __m512i s = _mm512_sub_epi32(sumi[j], _mm512_zextsi256_si512(offset));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(wd * xb[j][i].d), acc[j]);
      }
    }
    for (int j = 0; j < NX; ++j) out[j * os] = _mm512_reduce_add_ps(acc[j]);
  }
};

}  // namespace

bool Avx512VecDotPrefetches(DType wtype) {
  return wtype == DType::kQ4_K || wtype == DType::kQ5_K || wtype == DType::kQ6_K;
}

VecDotFn Avx512VecDot(DType wtype) {
  switch (wtype) {
    case DType::kF32: return DispatchTokens<FloatKernel<SrcF32, SrcF32>>;
    case DType::kF16: return DispatchTokens<FloatKernel<SrcF16, SrcF32>>;
    case DType::kBF16:
      return __builtin_cpu_supports("avx512bf16") ? DispatchTokens<BF16DotK>
                                                  : DispatchTokens<FloatKernel<SrcBF16, SrcBF16>>;
    case DType::kQ4_0: return DispatchTokens<NibbleK<BlockQ4_0>>;
    case DType::kQ5_0: return DispatchTokens<NibbleK<BlockQ5_0>>;
    case DType::kQ8_0: return DispatchTokens<Q8_0K>;
    case DType::kMXFP4: return DispatchTokens<NibbleK<BlockMXFP4>>;
    case DType::kQ4_1: return DispatchTokens<AffineK<BlockQ4_1, false>>;
    case DType::kQ5_1: return DispatchTokens<AffineK<BlockQ5_1, true>>;
    case DType::kQ4_K: return DispatchTokens<Q45KK<BlockQ4_K, false>>;
    case DType::kQ5_K: return DispatchTokens<Q45KK<BlockQ5_K, true>>;
    case DType::kQ6_K: return DispatchTokens<Q6KK>;
    default: return nullptr;  // Q2_K, Q3_K: AVX2 or scalar
  }
}

}  // namespace tandem::cpu::internal

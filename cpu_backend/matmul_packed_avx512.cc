// AVX-512 VNNI kernels over the packed layout (repack.h). One 512-bit register holds 4 quants of 16 rows, so one
// vpdpbusd against a broadcast group of 4 activation bytes advances 16 rows; the unpacked weights of a block
// stay in registers while up to kPackedTokTile tokens pass over them. Integer sums are exact; the float steps
// follow llama.cpp's (per block for Q4_0/Q8_0, per super-block for the K-quants).
// GCC 12's AVX-512 headers build some results from a deliberately uninitialized register; see vec_dot_avx512.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <utility>

#include "cpu_backend/repack.h"
#include "cpu_backend/vec_dot.h"

namespace tandem::cpu::internal {
namespace {

// Offsets of token t's quants, scale and aux words within a unit of a tile (repack.h), as constants, so that one
// address register serves the whole tile.
template <int Q, int A, int C>
struct Unit {
  static constexpr size_t kBytes = C * (Q + 4 + 4 * A);
  const uint8_t* p;
  const int8_t* qs(int t) const { return reinterpret_cast<const int8_t*>(p + t * Q); }
  float d(int t) const { return reinterpret_cast<const float*>(p + C * Q)[t]; }
  const int32_t* aux(int t) const { return reinterpret_cast<const int32_t*>(p + C * (Q + 4)) + A * t; }
};

// 64 bytes of weights, as one load or as two 256-bit halves (kHalves). Q8_0's one-token products read 2-3 % faster
// from DRAM as halves, in the host's 60-67 GB/s regime, when they read one run; with two runs, on one thread,
// 512-bit loads read 78-82 % of the probe and halves 89-92 %. Q4_0's and Q4_K's read 1-2 % slower as halves
// (paired runs, docs/performance.md).
template <bool kHalves>
inline __m512i LoadWeights(const uint8_t* p) {
  if constexpr (kHalves) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  } else {
    return _mm512_loadu_si512(p);
  }
}

inline __m512i Bcast4(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// q[i] holds quants 4i..4i+3 of 16 rows; the sum starts from `init` (the offset correction). With few tokens
// in flight the dependent chain of 8 dot products would set the pace, so it is split in two.
template <int NX>
inline __m512i DotBlock32(const __m512i q[8], const int8_t* xq, __m512i init) {
  if constexpr (NX <= 2) {
    __m512i s0 = init, s1 = _mm512_setzero_si512();
    for (int i = 0; i < 8; i += 2) {
      s0 = _mm512_dpbusd_epi32(s0, q[i], Bcast4(xq + 4 * i));
      s1 = _mm512_dpbusd_epi32(s1, q[i + 1], Bcast4(xq + 4 * i + 4));
    }
    return _mm512_add_epi32(s0, s1);
  } else {
    __m512i s = init;
    for (int i = 0; i < 8; ++i) s = _mm512_dpbusd_epi32(s, q[i], Bcast4(xq + 4 * i));
    return s;
  }
}

// 4-bit registers: q[j] holds the low nibbles, quants 4j.., and q[j + 4] the high nibbles where they sit, which
// is 16 times quants 16 + 4j... Their dot products come out 16 times too large, exactly, and one shift of each
// token's sum puts them right (DotNibbles). Against a shift per register and, for more than two tokens, one chain
// of eight dot products per token: one-token products from L3 7 % (Q4_0) and 3 % (Q4_K) faster, pp512 3.6-4.6 %
// faster (docs/performance.md). With many tokens the shifts per token outnumber the ones saved, so the gain there is
// likely the shorter chains; the two were not measured apart.
inline void MaskNibbles(const uint8_t* qs, __m512i q[8]) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __m512i high = _mm512_set1_epi8(static_cast<char>(0xF0));
  for (int j = 0; j < 4; ++j) {
    const __m512i v = _mm512_loadu_si512(qs + 64 * j);
    q[j] = _mm512_and_si512(v, low);
    q[j + 4] = _mm512_and_si512(v, high);
  }
}

// The sum of a block of MaskNibbles registers against 32 activation quants, from `init`. The two halves are two
// dependent chains, which also keeps a chain short when few tokens are in flight. The high half cannot overflow:
// 16 products of at most 240 * 128 a lane.
inline __m512i DotNibbles(const __m512i q[8], const int8_t* xq, __m512i init) {
  __m512i lo = init, hi = _mm512_setzero_si512();
  for (int i = 0; i < 4; ++i) {
    lo = _mm512_dpbusd_epi32(lo, q[i], Bcast4(xq + 4 * i));
    hi = _mm512_dpbusd_epi32(hi, q[i + 4], Bcast4(xq + 16 + 4 * i));
  }
  return _mm512_add_epi32(lo, _mm512_srai_epi32(hi, 4));
}

// MXFP4's nibbles as kMxfp4Lut's unsigned values, quants 4j.. in q[j] and 16 + 4j.. in q[j + 4], for DotBlock32:
// a table shuffle a register, where Q4_0's high nibbles stay in place (MaskNibbles).
inline void LookUpNibbles(const uint8_t* qs, __m512i q[8]) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __m512i lut = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4Lut.v)));
  for (int j = 0; j < 4; ++j) {
    const __m512i v = _mm512_loadu_si512(qs + 64 * j);
    q[j] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, low));
    q[j + 4] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
  }
}

// core's E8M0HalfToF32 for 16 rows' MXFP4 scale bytes: 2^(e - 128), the exponent field e - 1, or for e < 2 the
// subnormals 2^-128 and 2^-127 (bit 21 shifted by e).
inline __m512 E8M0Half16(const uint8_t* e8) {
  const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e8)));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2)), normal,
                                                     subnormal));
}

template <DType kType>
constexpr int kBlock32Bytes = static_cast<int>(Block32Bytes(kType));

// Software prefetch, to L1, of the lines that hold [p, p + Bytes). Whole-model decode on the Intel host read 99 % of
// the probe with it (Q4_0) against 87-89 % without; on Zen 4, 57-65 % against 88-90 % (docs/performance.md), so
// DecodePrefetchBytes decides by vendor.
template <int Bytes>
inline void PrefetchLines(const uint8_t* p) {
#pragma GCC unroll 16
  for (int l = 0; l < Bytes; l += 64) _mm_prefetch(reinterpret_cast<const char*>(p) + l, _MM_HINT_T0);
}

// One block of one group of 16 rows against NX tokens of a tile of capacity C, into acc[t]. A one-token step
// prefetches the block `prefetch` bytes on (0: none).
template <DType kType, int NX, int C>
inline void Block32Step(const uint8_t* blk, const uint8_t* unit, __m512 acc[NX], size_t prefetch) {
  using U = Unit<32, 1, C>;
  const U a{unit};
  if constexpr (C == 1) {
    if (prefetch != 0) PrefetchLines<kBlock32Bytes<kType>>(blk + prefetch);
  }
  const __m512 dw = kType == DType::kMXFP4
                        ? E8M0Half16(blk)
                        : _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
  constexpr bool kMasked = kType == DType::kQ4_0;  // DotNibbles' registers
  const uint8_t* qs = blk + Block32QuantsAt(kType);
  __m512i q[8];
  if constexpr (kMasked) {
    MaskNibbles(qs, q);
  } else if constexpr (kType == DType::kMXFP4) {
    LookUpNibbles(qs, q);
  } else {
    for (int i = 0; i < 8; ++i) q[i] = LoadWeights<C == 1>(qs + 64 * i);
  }
#pragma GCC unroll 16
  for (int t = 0; t < NX; ++t) {
    const __m512i init = _mm512_set1_epi32(*a.aux(t));
    const __m512i s = kMasked ? DotNibbles(q, a.qs(t), init) : DotBlock32<NX>(q, a.qs(t), init);
    const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(a.d(t)));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[t]);
  }
}

// NX tokens of a tile of capacity C against one group of 16 rows.
template <DType kType, int NX, int C>
void Block32Kernel(const uint8_t* group, int64_t nb, const uint8_t* tile, float* y, size_t y_stride) {
  __m512 acc[NX];
#pragma GCC unroll 16
  for (int t = 0; t < NX; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    Block32Step<kType, NX, C>(group + b * kBlock32Bytes<kType>, tile + b * Unit<32, 1, C>::kBytes, acc, 0);
  }
#pragma GCC unroll 16
  for (int t = 0; t < NX; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// A packed K-quant super-block's bytes (repack.h), and its activation unit's for a tile of capacity C.
template <DType kType>
constexpr int kKBlockBytes = static_cast<int>(KBlockBytes(kType));
static_assert(kKBlockBytes<DType::kQ4_K> == 2368 && kKBlockBytes<DType::kQ6_K> % 64 == 0);
template <DType kType, int C>
using KUnit = Unit<256, kType == DType::kQ6_K ? 16 : 4, C>;

// Bits `from`, from + 1, ... of each byte moved to bit 4 by a 16-bit shift; what crosses a byte the caller masks off.
inline __m512i BitsToFour(__m512i v, int from) {
  if (from < 4) return _mm512_slli_epi16(v, 4 - from);
  if (from > 4) return _mm512_srli_epi16(v, from - 4);
  return v;
}

// Chunk j's 8 registers of 4 quants of 16 rows (repack.h). Q4_K (B = 0): MaskNibbles' registers, for DotNibbles.
// Q5_K, Q6_K: q[i] holds quants 4i..4i+3, each its low 4 bits or-ed with its high bits moved up to bit 4: a shift,
// a mask and one ternary op a register.
template <int B>
inline void UnpackKChunk(const uint8_t* chunk, __m512i q[8]) {
  if constexpr (B == 0) {
    MaskNibbles(chunk, q);
  } else {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i high = _mm512_set1_epi8(static_cast<char>(((1 << B) - 1) << 4));
    __m512i qh[B];
    for (int k = 0; k < B; ++k) qh[k] = _mm512_loadu_si512(chunk + 256 + 64 * k);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(chunk + 64 * c);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const int p = B * (4 * h + c);
        const __m512i bits = _mm512_and_si512(BitsToFour(qh[p / 8], p % 8), high);
        const __m512i nibbles = h == 0 ? v : _mm512_srli_epi16(v, 4);
        // (a & b) | c in one instruction: truth table 0xEA over (a, b, c).
        q[4 * h + c] = _mm512_ternarylogic_epi32(nibbles, low4, bits, 0xEA);
      }
    }
  }
}

// A sub-block of 16 quants, q[i] holding quants 4i..4i+3, from `init`.
inline __m512i Dot16(const __m512i q[4], const int8_t* xq, __m512i init) {
  for (int i = 0; i < 4; ++i) init = _mm512_dpbusd_epi32(init, q[i], Bcast4(xq + 4 * i));
  return init;
}

// One super-block of one group of 16 rows against NX tokens of a tile of capacity C, into acc[t]; one step for
// the K-quants (repack.h). Q4_K and Q5_K: per sub-block of 32 an unsigned sum times its scale, and the mins against
// the activations' sums of 32; Q6_K: per sub-block of 16 a sum from -32 * the activations' sum (the q - 32),
// times its signed scale. A one-token step prefetches the super-block `prefetch` bytes on (0: none), an eighth with
// each chunk: Q4_K's 37 prefetches in one burst read 81-86 % of the probe on the Intel host, spread out 89-92 %
// (docs/performance.md).
template <DType kType, int NX, int C>
inline void KStep(const uint8_t* blk, const uint8_t* unit, __m512 acc[NX], size_t prefetch) {
  constexpr int B = KHighBits(kType);
  constexpr bool kMins = kType != DType::kQ6_K;
  constexpr int kLines = kKBlockBytes<kType> / 64;
  using U = KUnit<kType, C>;
  const U a{unit};
  const uint8_t* sc = blk + 64;
  const uint8_t* m = sc + 128;
  const uint8_t* chunks = blk + kKHeadBytes;
  // The scales of the rows and, Q4_K/Q5_K, their mins (int16 pairs: m of sub-blocks 2p and 2p + 1).
  __m512 dw, dmin;
  __m512i mins[4];
  auto load_scales = [&] {
    dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    if constexpr (kMins) {
      dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
      for (int p = 0; p < 4; ++p) {
        mins[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + 32 * p)));
      }
    }
  };
  // One token reads them first, so that each run is read in address order: read after the quants, one-token
  // Q4_K products in the host's 60-67 GB/s regime ran 7 % slower (paired runs, docs/performance.md). The empty
  // asm keeps the loads here. Many tokens load them last, as their sums fill the registers.
  if constexpr (C == 1) {
    load_scales();
    if constexpr (kMins) {
      asm("" : "+v"(dw), "+v"(dmin), "+v"(mins[0]), "+v"(mins[1]), "+v"(mins[2]), "+v"(mins[3]));
    } else {
      asm("" : "+v"(dw));
    }
  }
  __m512i isum[NX];
#pragma GCC unroll 16
  for (int t = 0; t < NX; ++t) isum[t] = _mm512_setzero_si512();
  for (int j = 0; j < 8; ++j) {
    if constexpr (C == 1) {
      if (prefetch != 0) {
        const char* ahead = reinterpret_cast<const char*>(blk + prefetch);
        for (int l = j * kLines / 8; l < (j + 1) * kLines / 8; ++l) _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
      }
    }
    __m512i q[8];
    UnpackKChunk<B>(chunks + j * KChunkBytes(kType), q);
    if constexpr (kMins) {
      const __m512i scale = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16 * j)));
#pragma GCC unroll 16
      for (int t = 0; t < NX; ++t) {
        const __m512i sub = B == 0 ? DotNibbles(q, a.qs(t) + 32 * j, _mm512_setzero_si512())
                                   : DotBlock32<NX>(q, a.qs(t) + 32 * j, _mm512_setzero_si512());
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(sub, scale));
      }
    } else {
      const auto* sc8 = reinterpret_cast<const __m128i*>(sc + 32 * j);
      const __m512i scale0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(sc8));
      const __m512i scale1 = _mm512_cvtepi8_epi32(_mm_loadu_si128(sc8 + 1));
#pragma GCC unroll 16
      for (int t = 0; t < NX; ++t) {
        const int32_t* offset = a.aux(t) + 2 * j;
        const __m512i lo = Dot16(q, a.qs(t) + 32 * j, _mm512_set1_epi32(offset[0]));
        const __m512i hi = Dot16(q + 4, a.qs(t) + 32 * j + 16, _mm512_set1_epi32(offset[1]));
        isum[t] = _mm512_add_epi32(isum[t],
                                   _mm512_add_epi32(_mm512_mullo_epi32(lo, scale0), _mm512_mullo_epi32(hi, scale1)));
      }
    }
  }
  if constexpr (C > 1) load_scales();
#pragma GCC unroll 16
  for (int t = 0; t < NX; ++t) {
    // As llama.cpp rounds it: the scale products first, then each integer sum against its own.
    const __m512 da = _mm512_set1_ps(a.d(t));
    acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(isum[t]), acc[t]);
    if constexpr (kMins) {
      const int32_t* pairs = a.aux(t);
      __m512i msum = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) msum = _mm512_dpwssd_epi32(msum, mins[p], _mm512_set1_epi32(pairs[p]));
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, da), _mm512_cvtepi32_ps(msum), acc[t]);
    }
  }
}

template <DType kType, int NX, int C>
void KKernel(const uint8_t* group, int64_t nb, const uint8_t* tile, float* y, size_t y_stride) {
  __m512 acc[NX];
#pragma GCC unroll 16
  for (int t = 0; t < NX; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < nb; ++s) {
    KStep<kType, NX, C>(group + s * kKBlockBytes<kType>, tile + s * KUnit<kType, C>::kBytes, acc, 0);
  }
#pragma GCC unroll 16
  for (int t = 0; t < NX; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// Decode: one token against S groups at once, K blocks of a group at a time. One core streaming a single
// sequential run of weights keeps too few cache misses in flight to reach its share of DRAM bandwidth; a few runs
// far apart do (measured: single-thread 76 % -> 100 % of the read probe). Each group's sums are those of the
// one-group kernel, bit for bit: its blocks are still added in order.
template <int S, int K, int BlockBytes, int UnitBytes,
          void (*Step)(const uint8_t*, const uint8_t*, __m512*, size_t)>
void DecodeStreams(const uint8_t* const* groups, int64_t nb, const uint8_t* tile, float* const* y, size_t prefetch) {
  static_assert(S <= kMaxDecodeStreams && K >= 1);
  __m512 acc[S];
#pragma GCC unroll 4
  for (int g = 0; g < S; ++g) acc[g] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + K <= nb; b += K) {
#pragma GCC unroll 4
    for (int g = 0; g < S; ++g) {
#pragma GCC unroll 4
      for (int k = 0; k < K; ++k) {
        Step(groups[g] + (b + k) * BlockBytes, tile + (b + k) * UnitBytes, &acc[g], prefetch);
      }
    }
  }
  for (; b < nb; ++b) {
#pragma GCC unroll 4
    for (int g = 0; g < S; ++g) Step(groups[g] + b * BlockBytes, tile + b * UnitBytes, &acc[g], prefetch);
  }
#pragma GCC unroll 4
  for (int g = 0; g < S; ++g) _mm512_storeu_ps(y[g], acc[g]);
}

// Dispatch on the token count so each tile's accumulators live in registers; a one-token tile is compact.
template <template <int, int> class K, int... N>
void ByTokensImpl(std::integer_sequence<int, N...>, const uint8_t* group, int64_t nb, const uint8_t* tile, int n_x,
                  float* y, size_t y_stride) {
  using Fn = void (*)(const uint8_t*, int64_t, const uint8_t*, float*, size_t);
  static constexpr Fn kTable[] = {K<N + 1, kPackedTokTile>::Run...};
  kTable[n_x - 1](group, nb, tile, y, y_stride);
}
template <template <int, int> class K>
void ByTokens(const uint8_t* group, int64_t nb, const uint8_t* tile, int capacity, int n_x, float* y,
              size_t y_stride) {
  if (capacity == 1) return K<1, 1>::Run(group, nb, tile, y, y_stride);
  ByTokensImpl<K>(std::make_integer_sequence<int, kPackedTokTile>(), group, nb, tile, n_x, y, y_stride);
}

template <DType kType>
struct Tile {
  template <int NX, int C>
  struct Of {
    static void Run(const uint8_t* g, int64_t nb, const uint8_t* tile, float* y, size_t ys) {
      if constexpr (IsPackedKQuant(kType)) {
        KKernel<kType, NX, C>(g, nb, tile, y, ys);
      } else {
        Block32Kernel<kType, NX, C>(g, nb, tile, y, ys);
      }
    }
  };
};

// The K-quants' decode: two runs, one super-block of each at a time (below).
template <DType kType>
PackedDecode KDecode() {
  return {.fn = DecodeStreams<2, 1, kKBlockBytes<kType>, KUnit<kType, 1>::kBytes, KStep<kType, 1, 1>>, .streams = 2};
}

}  // namespace

// How many runs read fastest differs by type; whole-model tg32 in the host's 60-67 GB/s regime, alternating runs
// (docs/performance.md):
// - Q4_0 reads 288 bytes a block: four runs, 85 % of the probe against 82 % with two. Two blocks of a run at a
//   time, not one (with whole calls per chunk, matmul_batch.cc): the matmul regions read 91.7 % of the probe
//   against 85.7 % in the 60-67 GB/s regime, and 4.6-6.6 % faster on one thread (paired runs).
// - Q4_K reads 2368 bytes a super-block: two runs, 84 % against 76 % with four; in paired runs 14 % ahead of four
//   runs with shifted nibbles and 256-bit loads. Q5_K and Q6_K (2880 and 3392 bytes) take Q4_K's two runs, not
//   tuned apart: their one-matrix products read about what Q4_K's do (matmul_bench, 2026-12-01).
// - MXFP4 reads 272 bytes a block: Q4_0's four runs of two blocks, neither tuned nor measured from DRAM apart
//   (a one-token 2880 x 3072 product, partly in cache, ran 2.05x the GGUF-layout kernel; 2026-12-03).
// - Q8_0 reads 544 bytes a block: two runs, four blocks of each at a time. Against one run (the one-group kernel),
//   paired per-token A/B of whole-model decode: 0.973 of the token time in the 57-68 GB/s regime (44 runs), 1.004
//   in the 16-37 GB/s one (37). Two runs of one block at a time measured 1.030 in the fast regime, of two 0.991,
//   of eight 1.010. On huge pages one run had been 11-22 % above four runs of one block.
PackedDecode Avx512PackedDecode(DType wtype) {
  switch (wtype) {
    case DType::kQ4_0:
      return {.fn = DecodeStreams<4, 2, kBlock32Bytes<DType::kQ4_0>, Unit<32, 1, 1>::kBytes,
                                  Block32Step<DType::kQ4_0, 1, 1>>,
              .streams = 4};
    case DType::kMXFP4:
      return {.fn = DecodeStreams<4, 2, kBlock32Bytes<DType::kMXFP4>, Unit<32, 1, 1>::kBytes,
                                  Block32Step<DType::kMXFP4, 1, 1>>,
              .streams = 4};
    case DType::kQ4_K: return KDecode<DType::kQ4_K>();
    case DType::kQ5_K: return KDecode<DType::kQ5_K>();
    case DType::kQ6_K: return KDecode<DType::kQ6_K>();
    case DType::kQ8_0:
      return {.fn = DecodeStreams<2, 4, kBlock32Bytes<DType::kQ8_0>, Unit<32, 1, 1>::kBytes,
                                  Block32Step<DType::kQ8_0, 1, 1>>,
              .streams = 2};
    default: return {};
  }
}

PackedKernelFn Avx512PackedKernel(DType wtype) {
  switch (wtype) {
    case DType::kQ4_0: return ByTokens<Tile<DType::kQ4_0>::Of>;
    case DType::kQ8_0: return ByTokens<Tile<DType::kQ8_0>::Of>;
    case DType::kMXFP4: return ByTokens<Tile<DType::kMXFP4>::Of>;
    case DType::kQ4_K: return ByTokens<Tile<DType::kQ4_K>::Of>;
    case DType::kQ5_K: return ByTokens<Tile<DType::kQ5_K>::Of>;
    case DType::kQ6_K: return ByTokens<Tile<DType::kQ6_K>::Of>;
    default: return nullptr;
  }
}

}  // namespace tandem::cpu::internal

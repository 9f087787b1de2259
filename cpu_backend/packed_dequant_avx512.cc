// Packed quantized rows to bf16 tiles with AVX-512 (layouts: repack.h). A packed register holds 4 consecutive
// quants of each of 16 rows; one in-lane byte shuffle and one dword permute turn it into 4 vectors of 16 rows'
// quant each, which widen to 16 floats against the 16 rows' scales, exactly as the reference computes them
// (this file is built without contracting a * b - c into an FMA), and round to bf16 as F32ToBf16 does.
// GCC 12's intrinsics headers start some conversions from _mm512_undefined_*(), which it then reports as used
// uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "core/status.h"
#include "cpu_backend/packed_dequant.h"
#include "cpu_backend/repack.h"

namespace tandem::cpu::internal {
namespace {

// Bytes [row r][quant i] (r < 16, i < 4) to [quant i][row r]: lane i of the result is quant i of the 16 rows.
inline __m512i Transpose16x4(const uint8_t* p) {
  const __m512i in_lane = _mm512_set4_epi32(0x0f0b0703, 0x0e0a0602, 0x0d090501, 0x0c080400);
  const __m512i dwords = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_epi32(dwords, _mm512_shuffle_epi8(_mm512_loadu_si512(p), in_lane));
}

inline __m128i Lane(__m512i v, int i) {
  switch (i) {
    case 0: return _mm512_castsi512_si128(v);
    case 1: return _mm512_extracti32x4_epi32(v, 1);
    case 2: return _mm512_extracti32x4_epi32(v, 2);
    default: return _mm512_extracti32x4_epi32(v, 3);
  }
}

inline __m512i Nibbles(__m512i v, int shift) {
  return _mm512_and_si512(_mm512_srli_epi16(v, shift), _mm512_set1_epi8(0x0f));
}

// 16 floats to bf16, rounded to nearest even; NaN stays NaN (F32ToBf16).
inline void StoreBf16(bf16_t* out, __m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(64)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(r));
}

inline __m512 Float(__m128i bytes, bool is_signed) {
  return _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes));
}

inline __m512 Halves(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// E8M0HalfToF32 of 16 scale bytes: the exponent field e - 1, or the subnormals 2^-128 and 2^-127 for e < 2.
inline __m512 E8M0Halves(const uint8_t* p) {
  const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(normal, _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), sub));
}

// A block of 32 of 16 rows into columns c0.. of the tile.
void Block32(DType type, const uint8_t* blk, bf16_t* out, int64_t ld) {
  const uint8_t* qs = blk + Block32QuantsAt(type);
  if (type == DType::kQ8_0) {
    const __m512 d = Halves(blk);
    for (int j = 0; j < 8; ++j) {
      const __m512i t = _mm512_xor_si512(Transpose16x4(qs + 64 * j), _mm512_set1_epi8(static_cast<char>(0x80)));
      for (int i = 0; i < 4; ++i) StoreBf16(out + (4 * j + i) * ld, _mm512_mul_ps(d, Float(Lane(t, i), true)));
    }
    return;
  }
  const bool mxfp4 = type == DType::kMXFP4;
  const __m512 d = mxfp4 ? E8M0Halves(blk) : Halves(blk);
  const __m512i values = _mm512_setr_epi32(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);  // kMxfp4Values
  auto value = [&](__m128i q) {
    const __m512i q32 = _mm512_cvtepu8_epi32(q);
    if (mxfp4) return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_permutexvar_epi32(q32, values)), d);
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(q32, _mm512_set1_epi32(8))));
  };
  for (int j = 0; j < 4; ++j) {
    const __m512i t = Transpose16x4(qs + 64 * j);
    const __m512i lo = Nibbles(t, 0), hi = Nibbles(t, 4);
    for (int i = 0; i < 4; ++i) {
      StoreBf16(out + (4 * j + i) * ld, value(Lane(lo, i)));
      StoreBf16(out + (16 + 4 * j + i) * ld, value(Lane(hi, i)));
    }
  }
}

// A K-quant super-block of 16 rows into columns c0.. of the tile. B: the high bits of a quant.
template <int B>
void BlockK(DType type, const uint8_t* blk, bf16_t* out, int64_t ld) {
  const __m512 d = Halves(blk);
  const uint8_t* ch = blk + kKHeadBytes;
  for (int k = 0; k < 8; ++k, ch += KChunkBytes(type)) {
    __m512 scale[2], min = _mm512_setzero_ps();
    if (type == DType::kQ6_K) {  // sub-blocks of 16: 2k for the chunk's first half, 2k + 1 for its second
      for (int h = 0; h < 2; ++h) {
        const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 64 + 16 * (2 * k + h)));
        scale[h] = _mm512_mul_ps(d, Float(sc, true));
      }
    } else {
      const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 64 + 16 * k));
      scale[0] = scale[1] = _mm512_mul_ps(d, Float(sc, false));
      const auto* pairs = reinterpret_cast<const __m256i*>(blk + 192 + 32 * (k / 2));  // sub-blocks 2p, 2p + 1
      const __m512i pair = _mm512_cvtepu16_epi32(_mm256_loadu_si256(pairs));
      const __m512i m = k % 2 == 0 ? _mm512_and_si512(pair, _mm512_set1_epi32(0xff)) : _mm512_srli_epi32(pair, 8);
      min = _mm512_mul_ps(Halves(blk + 32), _mm512_cvtepi32_ps(m));
    }
    __m512i high[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int reg = 0; reg < B; ++reg) high[reg] = Transpose16x4(ch + 256 + 64 * reg);
    for (int c = 0; c < 4; ++c) {
      const __m512i t = Transpose16x4(ch + 64 * c);
      for (int h = 0; h < 2; ++h) {
        __m512i q = Nibbles(t, 4 * h);
        if constexpr (B == 1) {
          const __m512i bit = _mm512_and_si512(_mm512_srli_epi16(high[0], 4 * h + c), _mm512_set1_epi8(1));
          q = _mm512_or_si512(q, _mm512_slli_epi16(bit, 4));
        } else if constexpr (B == 2) {
          const __m512i bits = _mm512_and_si512(_mm512_srli_epi16(high[h], 2 * c), _mm512_set1_epi8(3));
          q = _mm512_or_si512(q, _mm512_slli_epi16(bits, 4));
        }
        for (int i = 0; i < 4; ++i) {
          const __m512 qf = Float(Lane(q, i), false);
          const __m512 v = type == DType::kQ6_K
                               ? _mm512_mul_ps(scale[h], _mm512_sub_ps(qf, _mm512_set1_ps(32)))
                               : _mm512_sub_ps(_mm512_mul_ps(scale[h], qf), min);
          StoreBf16(out + (32 * k + 16 * h + 4 * c + i) * ld, v);
        }
      }
    }
  }
}

}  // namespace

void Avx512DequantizePacked(const WeightMatrix& w, int64_t g0, int64_t n_groups, bf16_t* out, int64_t ld) {
  TANDEM_CHECK(CanDequantizePacked(w) && ld >= kPackRows * n_groups);
  const int64_t be = Traits(w.type).block_elems, nb = w.cols / be;
  const size_t block_bytes = PackedBlockBytes(w.type);
  // Block by block across the groups, so that the groups' stores down a column fill whole cache lines together
  // (four groups of 16 bf16 are two lines) instead of half a line each, the other half written much later.
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t g = 0; g < n_groups; ++g) {
      const auto* blk = static_cast<const uint8_t*>(w.data) + static_cast<size_t>((g0 + g) * nb + b) * block_bytes;
      bf16_t* cols = out + kPackRows * g + b * be * ld;
      switch (w.type) {
        case DType::kQ4_K: BlockK<0>(w.type, blk, cols, ld); break;
        case DType::kQ5_K: BlockK<1>(w.type, blk, cols, ld); break;
        case DType::kQ6_K: BlockK<2>(w.type, blk, cols, ld); break;
        default: Block32(w.type, blk, cols, ld); break;
      }
    }
  }
}

}  // namespace tandem::cpu::internal

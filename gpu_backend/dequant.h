// Block decoding shared by the GPU kernels and their host-side tests. Every quantized block is split into
// pieces of 8 consecutive elements; Dequant8<T>(block, piece, v) writes elements 8*piece .. 8*piece+7 of the block.
// Within a piece all elements share one scale (every format's sub-blocks are 16 or 32 wide), so a kernel can
// give one piece to one thread and keep the values in registers.
//
// Compiled by nvcc for the device and by the host compiler for tests; the math is the same float expression on
// both. Block layouts are those of core/dtype.h. Rows must be 2-byte aligned (4 for Q8_K): 16-bit fields are
// loaded whole. MXFP4's 17-byte blocks put its quants at any address, so it loads bytes and needs no alignment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define TANDEM_HD __host__ __device__ __forceinline__
#else
#define TANDEM_HD inline
#endif
// Unrolling hints for the device pass only (the host compiler would warn about an unknown pragma).
#if defined(__CUDA_ARCH__)
#define TANDEM_UNROLL _Pragma("unroll")
#else
#define TANDEM_UNROLL
#endif

namespace tandem::gpu {

TANDEM_HD float HalfToFloat(uint16_t h) {
#if defined(__CUDA_ARCH__)
  __half_raw raw;
  raw.x = h;
  return __half2float(__half(raw));
#else
  return F16ToF32(h);
#endif
}

TANDEM_HD float Bf16BitsToFloat(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
#else
  return Bf16ToF32(h);
#endif
}

TANDEM_HD uint16_t Load16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}

TANDEM_HD float LoadF32(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const float*>(p);
#else
  float v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}

// Eight consecutive bytes p[0..7], loaded as four 16-bit words.
TANDEM_HD void Load8Bytes(const uint8_t* p, uint8_t b[8]) {
TANDEM_UNROLL
  for (int i = 0; i < 4; ++i) {
    const uint16_t w = Load16(p + 2 * i);
    b[2 * i] = static_cast<uint8_t>(w & 0xff);
    b[2 * i + 1] = static_cast<uint8_t>(w >> 8);
  }
}

// Eight consecutive bytes at any address.
TANDEM_HD void Load8BytesAnyAlign(const uint8_t* p, uint8_t b[8]) {
TANDEM_UNROLL
  for (int i = 0; i < 8; ++i) b[i] = p[i];
}

// ---- Per-type facts: elements and bytes per block ----
template <DType T>
struct BlockInfo;
template <>
struct BlockInfo<DType::kQ4_0> {
  static constexpr int kElems = kQK4_0;
  static constexpr int kBytes = sizeof(BlockQ4_0);
};
template <>
struct BlockInfo<DType::kQ4_1> {
  static constexpr int kElems = kQK4_1;
  static constexpr int kBytes = sizeof(BlockQ4_1);
};
template <>
struct BlockInfo<DType::kQ5_0> {
  static constexpr int kElems = kQK5_0;
  static constexpr int kBytes = sizeof(BlockQ5_0);
};
template <>
struct BlockInfo<DType::kQ5_1> {
  static constexpr int kElems = kQK5_1;
  static constexpr int kBytes = sizeof(BlockQ5_1);
};
template <>
struct BlockInfo<DType::kQ8_0> {
  static constexpr int kElems = kQK8_0;
  static constexpr int kBytes = sizeof(BlockQ8_0);
};
template <>
struct BlockInfo<DType::kQ8_1> {
  static constexpr int kElems = kQK8_1;
  static constexpr int kBytes = sizeof(BlockQ8_1);
};
template <>
struct BlockInfo<DType::kMXFP4> {
  static constexpr int kElems = kQKMXFP4;
  static constexpr int kBytes = sizeof(BlockMXFP4);
};
template <>
struct BlockInfo<DType::kQ2_K> {
  static constexpr int kElems = kQK_K;
  static constexpr int kBytes = sizeof(BlockQ2_K);
};
template <>
struct BlockInfo<DType::kQ3_K> {
  static constexpr int kElems = kQK_K;
  static constexpr int kBytes = sizeof(BlockQ3_K);
};
template <>
struct BlockInfo<DType::kQ4_K> {
  static constexpr int kElems = kQK_K;
  static constexpr int kBytes = sizeof(BlockQ4_K);
};
template <>
struct BlockInfo<DType::kQ5_K> {
  static constexpr int kElems = kQK_K;
  static constexpr int kBytes = sizeof(BlockQ5_K);
};
template <>
struct BlockInfo<DType::kQ6_K> {
  static constexpr int kElems = kQK_K;
  static constexpr int kBytes = sizeof(BlockQ6_K);
};
template <>
struct BlockInfo<DType::kQ8_K> {
  static constexpr int kElems = kQK_K;
  static constexpr int kBytes = sizeof(BlockQ8_K);
};

template <DType T>
constexpr int kPiecesPerBlock = BlockInfo<T>::kElems / 8;

// ---- Decoders. `b` points at the block; `piece` is in [0, kPiecesPerBlock<T>). ----

// Q4_0 / Q4_1: element j < 16 is the low nibble of qs[j], element j >= 16 the high nibble of qs[j - 16].
TANDEM_HD void Nibbles8(const uint8_t* qs, int piece, int q[8]) {
  uint8_t b[8];
  Load8Bytes(qs + 8 * (piece & 1), b);
  const int shift = (piece >> 1) * 4;
TANDEM_UNROLL
  for (int i = 0; i < 8; ++i) q[i] = (b[i] >> shift) & 0xf;
}

template <DType T>
TANDEM_HD void Dequant8(const uint8_t* b, int piece, float v[8]);

template <>
TANDEM_HD void Dequant8<DType::kQ4_0>(const uint8_t* b, int piece, float v[8]) {
  const float d = HalfToFloat(Load16(b));
  int q[8];
  Nibbles8(b + 2, piece, q);
TANDEM_UNROLL
  for (int i = 0; i < 8; ++i) v[i] = d * static_cast<float>(q[i] - 8);
}

template <>
TANDEM_HD void Dequant8<DType::kQ4_1>(const uint8_t* b, int piece, float v[8]) {
  const float d = HalfToFloat(Load16(b));
  const float m = HalfToFloat(Load16(b + 2));
  int q[8];
  Nibbles8(b + 4, piece, q);
TANDEM_UNROLL
  for (int i = 0; i < 8; ++i) v[i] = d * static_cast<float>(q[i]) + m;
}

// Q5_0 / Q5_1: the nibbles as in Q4, plus bit j of the little-endian 32-bit qh as element j's fifth bit.
TANDEM_HD void Fives8(const uint8_t* qh, const uint8_t* qs, int piece, int q[8]) {
  const uint32_t high = static_cast<uint32_t>(Load16(qh)) | static_cast<uint32_t>(Load16(qh + 2)) << 16;
  Nibbles8(qs, piece, q);
TANDEM_UNROLL
  for (int i = 0; i < 8; ++i) q[i] |= static_cast<int>((high >> (8 * piece + i)) & 1u) << 4;
}

template <>
TANDEM_HD void Dequant8<DType::kQ5_0>(const uint8_t* b, int piece, float v[8]) {
  const float d = HalfToFloat(Load16(b));
  int q[8];
  Fives8(b + 2, b + 6, piece, q);
TANDEM_UNROLL
  for (int i = 0; i < 8; ++i) v[i] = d * static_cast<float>(q[i] - 16);
}

template <>
TANDEM_HD void Dequant8<DType::kQ5_1>(const uint8_t* b, int piece, float v[8]) {
  const float d = HalfToFloat(Load16(b));
  const float m = HalfToFloat(Load16(b + 2));
  int q[8];
  Fives8(b + 4, b + 8, piece, q);
TANDEM_UNROLL
  for (int i = 0; i < 8; ++i) v[i] = d * static_cast<float>(q[i]) + m;
}

TANDEM_HD void Int8x8(const uint8_t* p, float d, float v[8]) {
  uint8_t b[8];
  Load8Bytes(p, b);
TANDEM_UNROLL
  for (int i = 0; i < 8; ++i) v[i] = d * static_cast<float>(static_cast<int8_t>(b[i]));
}

template <>
TANDEM_HD void Dequant8<DType::kQ8_0>(const uint8_t* b, int piece, float v[8]) {
  Int8x8(b + 2 + 8 * piece, HalfToFloat(Load16(b)), v);
}

template <>
TANDEM_HD void Dequant8<DType::kQ8_1>(const uint8_t* b, int piece, float v[8]) {
  Int8x8(b + 4 + 8 * piece, HalfToFloat(Load16(b)), v);
}

template <>
TANDEM_HD void Dequant8<DType::kQ8_K>(const uint8_t* b, int piece, float v[8]) {
  Int8x8(b + 4 + 8 * piece, LoadF32(b), v);
}

// MXFP4's scale byte as the factor of the doubled E2M1 values: core's E8M0HalfToF32, 2^(e - 128).
TANDEM_HD float E8M0Half(uint8_t e) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23);
#else
  return E8M0HalfToF32(e);
#endif
}

// kMxfp4Values[q] (core/dtype.h) from two 64-bit words, so that device code needs no table in memory.
constexpr uint64_t kMxfp4ValuesLo = 0x0C08060403020100ull;  // q = 0..7: 0, 1, 2, 3, 4, 6, 8, 12
constexpr uint64_t kMxfp4ValuesHi = 0xF4F8FAFCFDFEFF00ull;  // q = 8..15: the same, negated (0 for -0)
TANDEM_HD int Mxfp4Value(int q) {
  const uint64_t w = q < 8 ? kMxfp4ValuesLo : kMxfp4ValuesHi;
  return static_cast<int8_t>(static_cast<uint8_t>(w >> (8 * (q & 7))));
}
constexpr bool Mxfp4WordsMatchCore() {
  for (int q = 0; q < 16; ++q) {
    const uint64_t w = q < 8 ? kMxfp4ValuesLo : kMxfp4ValuesHi;
    if (static_cast<int8_t>(static_cast<uint8_t>(w >> (8 * (q & 7)))) != kMxfp4Values[q]) return false;
  }
  return true;
}
static_assert(Mxfp4WordsMatchCore());

// MXFP4: the nibbles as in Q4_0 (element j < 16 the low nibble of qs[j], j >= 16 the high nibble of qs[j - 16]).
template <>
TANDEM_HD void Dequant8<DType::kMXFP4>(const uint8_t* b, int piece, float v[8]) {
  const float d = E8M0Half(b[0]);
  uint8_t q[8];
  Load8BytesAnyAlign(b + 1 + 8 * (piece & 1), q);
  const int shift = (piece >> 1) * 4;
TANDEM_UNROLL
  for (int i = 0; i < 8; ++i) v[i] = static_cast<float>(Mxfp4Value((q[i] >> shift) & 0xf)) * d;
}

// K-quants with 16-element groups (Q2_K, Q3_K): group g = element / 16 lies in half h = g / 8 of the block and
// takes bit pair j = (g % 8) / 2 of the bytes qs[32h + 16(g % 2) + l], l = element % 16.
struct Group16 {
  int g;       // group index 0..15
  int h;       // half 0..1
  int j;       // 2-bit field 0..3
  int part;    // which 16 bytes of the half's 32
  int l0;      // first element of the piece within its group: 0 or 8
};
TANDEM_HD Group16 Group16Of(int piece) {
  Group16 r;
  r.g = piece >> 1;
  r.h = r.g >> 3;
  r.j = (r.g & 7) >> 1;
  r.part = r.g & 1;
  r.l0 = (piece & 1) * 8;
  return r;
}

template <>
TANDEM_HD void Dequant8<DType::kQ2_K>(const uint8_t* b, int piece, float v[8]) {
  const uint8_t* scales = b;     // [16]: low nibble scale, high nibble min
  const uint8_t* qs = b + 16;    // [64]
  const float d = HalfToFloat(Load16(b + 80));
  const float dmin = HalfToFloat(Load16(b + 82));
  const Group16 g = Group16Of(piece);
  const int sc = scales[g.g];
  const float dl = d * static_cast<float>(sc & 0xf);
  const float ml = dmin * static_cast<float>(sc >> 4);
  uint8_t q[8];
  Load8Bytes(qs + 32 * g.h + 16 * g.part + g.l0, q);
TANDEM_UNROLL
  for (int i = 0; i < 8; ++i) v[i] = dl * static_cast<float>((q[i] >> (2 * g.j)) & 3) - ml;
}

// Q3_K's 16 six-bit scales: the low 4 bits in nibbles of bytes 0..7, the high 2 bits in bytes 8..11.
TANDEM_HD int Q3KScale(const uint8_t* s, int i) {
  const int low = i < 8 ? (s[i] & 0xf) : (s[i - 8] >> 4);
  const int high = (s[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
  return (low | high << 4) - 32;
}

template <>
TANDEM_HD void Dequant8<DType::kQ3_K>(const uint8_t* b, int piece, float v[8]) {
  const uint8_t* hmask = b;      // [32]: bit (4h + j) of hmask[16 part + l] is the quant's third bit
  const uint8_t* qs = b + 32;    // [64]: low two bits
  const uint8_t* scales = b + 96;
  const float d = HalfToFloat(Load16(b + 108));
  const Group16 g = Group16Of(piece);
  const float dl = d * static_cast<float>(Q3KScale(scales, g.g));
  uint8_t q[8], hm[8];
  Load8Bytes(qs + 32 * g.h + 16 * g.part + g.l0, q);
  Load8Bytes(hmask + 16 * g.part + g.l0, hm);
  const int hbit = 4 * g.h + g.j;
TANDEM_UNROLL
  for (int i = 0; i < 8; ++i) {
    const int low = (q[i] >> (2 * g.j)) & 3;
    const int sub = ((hm[i] >> hbit) & 1) ? 0 : 4;
    v[i] = dl * static_cast<float>(low - sub);
  }
}

// Q4_K / Q5_K: eight 32-element sub-blocks, each with a 6-bit scale and a 6-bit min packed in 12 bytes.
TANDEM_HD void KScaleMin(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Sub-block sb = element / 32 reads nibble (sb % 2) of qs[32 (sb / 2) + element % 32].
template <>
TANDEM_HD void Dequant8<DType::kQ4_K>(const uint8_t* b, int piece, float v[8]) {
  const float d = HalfToFloat(Load16(b));
  const float dmin = HalfToFloat(Load16(b + 2));
  const uint8_t* qs = b + 16;
  const int sb = piece >> 2;
  const int l0 = (piece & 3) * 8;
  int sc, m;
  KScaleMin(b + 4, sb, &sc, &m);
  const float dl = d * static_cast<float>(sc);
  const float ml = dmin * static_cast<float>(m);
  uint8_t q[8];
  Load8Bytes(qs + 32 * (sb >> 1) + l0, q);
  const int shift = 4 * (sb & 1);
TANDEM_UNROLL
  for (int i = 0; i < 8; ++i) v[i] = dl * static_cast<float>((q[i] >> shift) & 0xf) - ml;
}

// Q5_K adds bit sb of qh[element % 32] as the fifth bit.
template <>
TANDEM_HD void Dequant8<DType::kQ5_K>(const uint8_t* b, int piece, float v[8]) {
  const float d = HalfToFloat(Load16(b));
  const float dmin = HalfToFloat(Load16(b + 2));
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  const int sb = piece >> 2;
  const int l0 = (piece & 3) * 8;
  int sc, m;
  KScaleMin(b + 4, sb, &sc, &m);
  const float dl = d * static_cast<float>(sc);
  const float ml = dmin * static_cast<float>(m);
  uint8_t q[8], h[8];
  Load8Bytes(qs + 32 * (sb >> 1) + l0, q);
  Load8Bytes(qh + l0, h);
  const int shift = 4 * (sb & 1);
TANDEM_UNROLL
  for (int i = 0; i < 8; ++i) {
    const int quant = ((q[i] >> shift) & 0xf) | (((h[i] >> sb) & 1) << 4);
    v[i] = dl * static_cast<float>(quant) - ml;
  }
}

// Q6_K: element e in half h = e / 128, quarter qq = (e % 128) / 32, l = e % 32. Low 4 bits: nibble (qq / 2) of
// ql[64h + 32 (qq % 2) + l]; high 2 bits: bits 2qq of qh[32h + l]; scale scales[8h + 2qq + l / 16]; q - 32.
template <>
TANDEM_HD void Dequant8<DType::kQ6_K>(const uint8_t* b, int piece, float v[8]) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = HalfToFloat(Load16(b + 208));
  const int e0 = 8 * piece;
  const int h = e0 >> 7;
  const int qq = (e0 & 127) >> 5;
  const int l0 = e0 & 31;
  const float dl = d * static_cast<float>(scales[8 * h + 2 * qq + (l0 >> 4)]);
  uint8_t lo[8], hi[8];
  Load8Bytes(ql + 64 * h + 32 * (qq & 1) + l0, lo);
  Load8Bytes(qh + 32 * h + l0, hi);
  const int lshift = 4 * (qq >> 1);
  const int hshift = 2 * qq;
TANDEM_UNROLL
  for (int i = 0; i < 8; ++i) {
    const int quant = ((lo[i] >> lshift) & 0xf) | (((hi[i] >> hshift) & 3) << 4);
    v[i] = dl * static_cast<float>(quant - 32);
  }
}

// ---- Plain float rows ----
template <DType T>
TANDEM_HD float LoadElem(const uint8_t* row, int64_t i);
template <>
TANDEM_HD float LoadElem<DType::kF32>(const uint8_t* row, int64_t i) {
  return LoadF32(row + 4 * i);
}
template <>
TANDEM_HD float LoadElem<DType::kF16>(const uint8_t* row, int64_t i) {
  return HalfToFloat(Load16(row + 2 * i));
}
template <>
TANDEM_HD float LoadElem<DType::kBF16>(const uint8_t* row, int64_t i) {
  return Bf16BitsToFloat(Load16(row + 2 * i));
}

// Byte alignment a row of this type needs for the loads above.
inline size_t RowAlignment(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kQ8_K:
      return 4;
    case DType::kMXFP4:
      return 1;
    default:
      return 2;
  }
}

// True for the types the decoders above handle.
inline bool IsQuantized(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kQ8_1:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ8_K:
    case DType::kMXFP4:
      return true;
    default:
      return false;
  }
}
inline bool IsPlainFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// Calls f(std::integral_constant<DType, T>{}) for the quantized type t; returns false for other types.
template <typename F>
bool DispatchQuantized(DType t, F&& f) {
  switch (t) {
#define TANDEM_DISPATCH_CASE(T)                   \
  case T:                                         \
    f(std::integral_constant<DType, T>{});        \
    return true;
    TANDEM_DISPATCH_CASE(DType::kQ4_0)
    TANDEM_DISPATCH_CASE(DType::kQ4_1)
    TANDEM_DISPATCH_CASE(DType::kQ5_0)
    TANDEM_DISPATCH_CASE(DType::kQ5_1)
    TANDEM_DISPATCH_CASE(DType::kQ8_0)
    TANDEM_DISPATCH_CASE(DType::kQ8_1)
    TANDEM_DISPATCH_CASE(DType::kQ2_K)
    TANDEM_DISPATCH_CASE(DType::kQ3_K)
    TANDEM_DISPATCH_CASE(DType::kQ4_K)
    TANDEM_DISPATCH_CASE(DType::kQ5_K)
    TANDEM_DISPATCH_CASE(DType::kQ6_K)
    TANDEM_DISPATCH_CASE(DType::kQ8_K)
    TANDEM_DISPATCH_CASE(DType::kMXFP4)
#undef TANDEM_DISPATCH_CASE
    default:
      return false;
  }
}

}  // namespace tandem::gpu

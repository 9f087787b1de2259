// Reference dequantizers (one per GGUF block type), the activation quantizers and VecDotType.
// Weight quantizers live in quant_quantize.cc.
#include "core/quant.h"

#include <cmath>
#include <cstring>

#include "core/status.h"

namespace tandem {
namespace {

// Little-endian u32 from 4 bytes (Q5_0/Q5_1 high bits are stored as bytes, not aligned).
uint32_t LoadU32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

// 4-bit quant of element j (0..31) of a 32-element block: low nibbles hold 0..15, high nibbles 16..31.
int Nibble32(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4); }

// ---- plain floats ----
void DequantF32(const void* src, float* y, int64_t n) { std::memcpy(y, src, static_cast<size_t>(n) * 4); }

void DequantF16(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    f16_t h;
    std::memcpy(&h, x + 2 * i, 2);
    y[i] = F16ToF32(h);
  }
}

void DequantBF16(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    bf16_t h;
    std::memcpy(&h, x + 2 * i, 2);
    y[i] = Bf16ToF32(h);
  }
}

// ---- 32-element blocks ----
void DequantQ4_0(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK4_0; ++i, y += kQK4_0) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < kQK4_0; ++j) y[j] = d * static_cast<float>(Nibble32(b[i].qs, j) - 8);
  }
}

void DequantQ4_1(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK4_1; ++i, y += kQK4_1) {
    const float d = F16ToF32(b[i].d);
    const float m = F16ToF32(b[i].m);
    for (int j = 0; j < kQK4_1; ++j) y[j] = d * static_cast<float>(Nibble32(b[i].qs, j)) + m;
  }
}

void DequantQ5_0(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK5_0; ++i, y += kQK5_0) {
    const float d = F16ToF32(b[i].d);
    const uint32_t qh = LoadU32(b[i].qh);
    for (int j = 0; j < kQK5_0; ++j) {
      const int q = Nibble32(b[i].qs, j) | static_cast<int>((qh >> j) & 1) << 4;
      y[j] = d * static_cast<float>(q - 16);
    }
  }
}

void DequantQ5_1(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK5_1; ++i, y += kQK5_1) {
    const float d = F16ToF32(b[i].d);
    const float m = F16ToF32(b[i].m);
    const uint32_t qh = LoadU32(b[i].qh);
    for (int j = 0; j < kQK5_1; ++j) {
      const int q = Nibble32(b[i].qs, j) | static_cast<int>((qh >> j) & 1) << 4;
      y[j] = d * static_cast<float>(q) + m;
    }
  }
}

void DequantQ8_0(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i, y += kQK8_0) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = d * static_cast<float>(b[i].qs[j]);
  }
}

void DequantQ8_1(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kQK8_1; ++i, y += kQK8_1) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < kQK8_1; ++j) y[j] = d * static_cast<float>(b[i].qs[j]);
  }
}

void DequantMXFP4(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockMXFP4*>(src);
  for (int64_t i = 0; i < n / kQKMXFP4; ++i, y += kQKMXFP4) {
    const float d = E8M0HalfToF32(b[i].e);
    for (int j = 0; j < kQKMXFP4; ++j) y[j] = static_cast<float>(kMxfp4Values[Nibble32(b[i].qs, j)]) * d;
  }
}

// ---- K-quants (256-element super-blocks) ----
//
// Quant layout shared by Q2_K and Q3_K: the super-block is two halves of 128; in half h, the 2-bit field at
// shift 2*s of byte qs[32*h + l] (l < 32) is element 128*h + 32*s + l. Sub-blocks of 16 are numbered in
// element order, so element e uses scale e / 16.
int TwoBitQuant(const uint8_t* qs, int e) {
  const int half = e / 128;
  const int shift = 2 * ((e % 128) / 32);
  return (qs[32 * half + e % 32] >> shift) & 3;
}

void DequantQ2_K(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = F16ToF32(b[i].d);
    const float dmin = F16ToF32(b[i].dmin);
    for (int e = 0; e < kQK_K; ++e) {
      const uint8_t sc = b[i].scales[e / 16];  // low nibble: scale, high nibble: min
      y[e] = d * static_cast<float>(sc & 0xF) * static_cast<float>(TwoBitQuant(b[i].qs, e)) -
             dmin * static_cast<float>(sc >> 4);
    }
  }
}

// Q3_K sub-block scale j (0..15), 6 bits stored as 4 low bits (nibbles of bytes 0..7) and 2 high bits
// (pairs of bytes 8..11), biased by 32.
int Q3KScale(const uint8_t* scales, int j) {
  const int low = j < 8 ? (scales[j] & 0xF) : (scales[j - 8] >> 4);
  const int high = (scales[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
  return (low | high << 4) - 32;
}

void DequantQ3_K(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = F16ToF32(b[i].d);
    float dl[16];
    for (int j = 0; j < 16; ++j) dl[j] = d * static_cast<float>(Q3KScale(b[i].scales, j));
    for (int e = 0; e < kQK_K; ++e) {
      // hmask bit (e / 32) of byte e % 32 is the high bit; a clear bit means "subtract 4".
      const bool high = (b[i].hmask[e % 32] >> (e / 32)) & 1;
      const int q = TwoBitQuant(b[i].qs, e) - (high ? 0 : 4);
      y[e] = dl[e / 16] * static_cast<float>(q);
    }
  }
}

// Q4_K/Q5_K quant layout: in chunk c (64 elements), element 64c + l (l < 32) is the low nibble of qs[32c + l],
// element 64c + 32 + l its high nibble. Q5_K's 5th bit of sub-block k (= e / 32) is bit k of qh[e % 32].
int Q4KNibble(const uint8_t* qs, int e) {
  const uint8_t byte = qs[32 * (e / 64) + e % 32];
  return (e % 64) < 32 ? (byte & 0xF) : (byte >> 4);
}

void DequantQ4_K(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = F16ToF32(b[i].d);
    const float dmin = F16ToF32(b[i].dmin);
    for (int k = 0; k < 8; ++k) {
      int sc, m;
      KScaleMin(b[i].scales, k, &sc, &m);
      const float dk = d * static_cast<float>(sc);
      const float mk = dmin * static_cast<float>(m);
      for (int e = 32 * k; e < 32 * k + 32; ++e) y[e] = dk * static_cast<float>(Q4KNibble(b[i].qs, e)) - mk;
    }
  }
}

void DequantQ5_K(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = F16ToF32(b[i].d);
    const float dmin = F16ToF32(b[i].dmin);
    for (int k = 0; k < 8; ++k) {
      int sc, m;
      KScaleMin(b[i].scales, k, &sc, &m);
      const float dk = d * static_cast<float>(sc);
      const float mk = dmin * static_cast<float>(m);
      for (int e = 32 * k; e < 32 * k + 32; ++e) {
        const int q = Q4KNibble(b[i].qs, e) | ((b[i].qh[e % 32] >> k) & 1) << 4;
        y[e] = dk * static_cast<float>(q) - mk;
      }
    }
  }
}

// Q6_K: two halves of 128. In half h, for l < 32 and quarter r (0..3) the element 128h + 32r + l takes its low
// nibble from ql[64h + l + 32*(r & 1)] (low nibble for r < 2, high for r >= 2) and its high 2 bits from
// qh[32h + l] at shift 2r. Scales are int8, one per 16 elements in element order; value d * sc * (q - 32).
int Q6KQuant(const BlockQ6_K& b, int e) {
  const int h = e / 128, r = (e % 128) / 32, l = e % 32;
  const uint8_t lo_byte = b.ql[64 * h + l + 32 * (r & 1)];
  const int lo = r < 2 ? (lo_byte & 0xF) : (lo_byte >> 4);
  const int hi = (b.qh[32 * h + l] >> (2 * r)) & 3;
  return (lo | hi << 4) - 32;
}

void DequantQ6_K(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = F16ToF32(b[i].d);
    for (int e = 0; e < kQK_K; ++e) {
      y[e] = d * static_cast<float>(b[i].scales[e / 16]) * static_cast<float>(Q6KQuant(b[i], e));
    }
  }
}

void DequantQ8_K(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    for (int j = 0; j < kQK_K; ++j) y[j] = b[i].d * static_cast<float>(b[i].qs[j]);
  }
}

using DequantFn = void (*)(const void*, float*, int64_t);

DequantFn DequantFor(DType type) {
  switch (type) {
    case DType::kF32: return DequantF32;
    case DType::kF16: return DequantF16;
    case DType::kBF16: return DequantBF16;
    case DType::kQ4_0: return DequantQ4_0;
    case DType::kQ4_1: return DequantQ4_1;
    case DType::kQ5_0: return DequantQ5_0;
    case DType::kQ5_1: return DequantQ5_1;
    case DType::kQ8_0: return DequantQ8_0;
    case DType::kQ8_1: return DequantQ8_1;
    case DType::kQ2_K: return DequantQ2_K;
    case DType::kQ3_K: return DequantQ3_K;
    case DType::kQ4_K: return DequantQ4_K;
    case DType::kQ5_K: return DequantQ5_K;
    case DType::kQ6_K: return DequantQ6_K;
    case DType::kQ8_K: return DequantQ8_K;
    case DType::kMXFP4: return DequantMXFP4;
  }
  return nullptr;
}

// Round half to even under the default FP environment, as both the AVX path (_MM_ROUND_NEAREST) and the
// "add 1.5 * 2^23" trick of the reference code do.
int RoundEven(float v) { return static_cast<int>(std::nearbyint(v)); }

// q[0..32) and the float d of one Q8_0/Q8_1 block.
float QuantizeBlock32(const float* x, int8_t* q) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float scaled = x[j] * id;  // a separate product: no fused multiply-add may change the rounding
    q[j] = static_cast<int8_t>(RoundEven(scaled));
  }
  return d;
}

}  // namespace

// Q4_K/Q5_K: 8 sub-blocks of 32, each with a 6-bit scale and a 6-bit min packed into 12 bytes. Bytes 0..3 hold
// scales 0..3 and bytes 4..7 mins 0..3 in their low 6 bits; for sub-blocks 4..7 the low nibbles sit in bytes
// 8..11 (scale low, min high) and the top 2 bits in the spare top bits of bytes 0..3 (scale) and 4..7 (min).
void KScaleMin(const uint8_t* s, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0xF) | (s[j - 4] >> 6) << 4;
    *min = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
}

void DequantizeRow(DType type, const void* src, float* dst, int64_t n) {
  const DequantFn fn = DequantFor(type);
  TANDEM_CHECK(fn != nullptr);
  TANDEM_CHECK(n % Traits(type).block_elems == 0);
  fn(src, dst, n);
}

void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n) {
  TANDEM_CHECK(n % kQK8_0 == 0);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    y[i].d = F32ToF16(QuantizeBlock32(x + i * kQK8_0, y[i].qs));
  }
}

void QuantizeRowQ8_1(const float* x, BlockQ8_1* y, int64_t n) {
  TANDEM_CHECK(n % kQK8_1 == 0);
  for (int64_t i = 0; i < n / kQK8_1; ++i) {
    const float d = QuantizeBlock32(x + i * kQK8_1, y[i].qs);
    int sum = 0;
    for (int j = 0; j < kQK8_1; ++j) sum += y[i].qs[j];
    y[i].d = F32ToF16(d);
    y[i].s = F32ToF16(d * static_cast<float>(sum));
  }
}

void QuantizeRowQ8_K(const float* x, BlockQ8_K* y, int64_t n) {
  TANDEM_CHECK(n % kQK_K == 0);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    BlockQ8_K& b = y[i];
    float amax = 0.0f, max = 0.0f;  // max: the signed element of largest magnitude, first one on ties
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      b.d = 0.0f;
      std::memset(b.qs, 0, sizeof(b.qs));
      std::memset(b.bsums, 0, sizeof(b.bsums));
      continue;
    }
    // The sign flip makes the extreme element -127; elements of the other sign may reach 128 and are clamped.
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const float scaled = iscale * x[j];
      const int v = RoundEven(scaled);
      b.qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += b.qs[16 * g + j];
      b.bsums[g] = static_cast<int16_t>(sum);
    }
    b.d = 1.0f / iscale;
  }
}

DType VecDotType(DType weight_type) {
  switch (weight_type) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: return weight_type;
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0:
    case DType::kMXFP4: return DType::kQ8_0;
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ8_1: return DType::kQ8_1;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ8_K: return DType::kQ8_K;
  }
  return DType::kF32;
}

}  // namespace tandem

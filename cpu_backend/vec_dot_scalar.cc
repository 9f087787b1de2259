// Portable dot products for every weight type: each weight block is unpacked to small integers, multiplied with
// the activation block's integers, and the integer sum is scaled by both blocks' scales and added in float.
// These are the fallback for types without SIMD kernels and the baseline the SIMD kernels are tested against.
#include <cstring>

#include "core/quant.h"
#include "cpu_backend/vec_dot.h"

namespace tandem::cpu::internal {
namespace {

float H(f16_t h) { return F16ToF32(h); }

int DotI8(const int8_t* a, const int8_t* b, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<int>(a[i]) * static_cast<int>(b[i]);
  return s;
}

// ---- plain floats (x rows are float for F32, float rounded to fp16 for F16, bf16 for BF16) ----
float DotF32(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const float*>(w);
  const auto* b = static_cast<const float*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

float DotF16(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const f16_t*>(w);
  const auto* b = static_cast<const float*>(x);  // already rounded to fp16
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += F16ToF32(a[i]) * b[i];
  return s;
}

float DotBF16(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const bf16_t*>(w);
  const auto* b = static_cast<const bf16_t*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += Bf16ToF32(a[i]) * Bf16ToF32(b[i]);
  return s;
}

// ---- 32-element blocks against split Q8_0/Q8_1 rows (vec_dot.h) ----
// The weight quants are unpacked with their offset removed (Q4_0/Q5_0), so the c array is not needed here.
void Unpack4(const uint8_t* qs, int offset, int8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<int8_t>((qs[j] & 0xF) - offset);
    q[j + 16] = static_cast<int8_t>((qs[j] >> 4) - offset);
  }
}

void Unpack5(const uint8_t* qs, const uint8_t* qh_bytes, int offset, int8_t* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);  // little-endian: bit j is element j
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<int8_t>(((qs[j] & 0xF) | ((qh >> j) & 1) << 4) - offset);
    q[j + 16] = static_cast<int8_t>(((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - offset);
  }
}

// Q4_0/Q5_0 activations are in nibble order (vec_dot.h): block i's two halves sit apart.
int DotNibbleOrder(const int8_t* q, const Act32& b, int64_t nb, int64_t i) {
  return DotI8(q, b.qs + NibbleHalfOffset(nb, i, 0), 16) + DotI8(q + 16, b.qs + NibbleHalfOffset(nb, i, 1), 16);
}

float DotQ4_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ4_0*>(w);
  const Act32 b = ViewAct32(x, n);
  float s = 0.0f;
  int8_t q[32];
  for (int64_t i = 0; i < n / 32; ++i) {
    Unpack4(a[i].qs, 8, q);
    s += H(a[i].d) * b.d[i] * static_cast<float>(DotNibbleOrder(q, b, n / 32, i));
  }
  return s;
}

float DotQ4_1(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ4_1*>(w);
  const Act32 b = ViewAct32(x, n);
  float s = 0.0f;
  int8_t q[32];
  for (int64_t i = 0; i < n / 32; ++i) {
    Unpack4(a[i].qs, 0, q);
    // sum(d q + m)(dx qx) = d dx sum(q qx) + m * (dx sum(qx)), the last factor stored with the Q8_1 block.
    s += H(a[i].d) * b.d[i] * static_cast<float>(DotI8(q, b.qs + 32 * i, 32)) + H(a[i].m) * b.s[i];
  }
  return s;
}

float DotQ5_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ5_0*>(w);
  const Act32 b = ViewAct32(x, n);
  float s = 0.0f;
  int8_t q[32];
  for (int64_t i = 0; i < n / 32; ++i) {
    Unpack5(a[i].qs, a[i].qh, 16, q);
    s += H(a[i].d) * b.d[i] * static_cast<float>(DotNibbleOrder(q, b, n / 32, i));
  }
  return s;
}

float DotQ5_1(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ5_1*>(w);
  const Act32 b = ViewAct32(x, n);
  float s = 0.0f;
  int8_t q[32];
  for (int64_t i = 0; i < n / 32; ++i) {
    Unpack5(a[i].qs, a[i].qh, 0, q);
    s += H(a[i].d) * b.d[i] * static_cast<float>(DotI8(q, b.qs + 32 * i, 32)) + H(a[i].m) * b.s[i];
  }
  return s;
}

// MXFP4: nibbles as Q4_0's, looked up as the doubled E2M1 values; the activations are in nibble order.
float DotMXFP4(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockMXFP4*>(w);
  const Act32 b = ViewAct32(x, n);
  float s = 0.0f;
  int8_t q[32];
  for (int64_t i = 0; i < n / 32; ++i) {
    for (int j = 0; j < 16; ++j) {
      q[j] = kMxfp4Values[a[i].qs[j] & 0xF];
      q[j + 16] = kMxfp4Values[a[i].qs[j] >> 4];
    }
    s += E8M0HalfToF32(a[i].e) * b.d[i] * static_cast<float>(DotNibbleOrder(q, b, n / 32, i));
  }
  return s;
}

float DotQ8_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ8_0*>(w);
  const Act32 b = ViewAct32(x, n);
  float s = 0.0f;
  for (int64_t i = 0; i < n / 32; ++i) {
    s += H(a[i].d) * b.d[i] * static_cast<float>(DotI8(a[i].qs, b.qs + 32 * i, 32));
  }
  return s;
}

// ---- K-quants against Q8_K: integer sums per sub-block, times the integer sub-block scales ----

// Q2_K/Q3_K 2-bit field of element e: half e/128, shift 2 * ((e % 128) / 32), byte e % 32 of that half.
int TwoBits(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

float DotQ2_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ2_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float s = 0.0f;
  int8_t q[256];
  for (int64_t i = 0; i < n / 256; ++i) {
    for (int e = 0; e < 256; ++e) q[e] = static_cast<int8_t>(TwoBits(a[i].qs, e));
    int sumi = 0, summ = 0;  // sum sc * q * qx, sum min * qx
    for (int g = 0; g < 16; ++g) {
      sumi += (a[i].scales[g] & 0xF) * DotI8(q + 16 * g, b[i].qs + 16 * g, 16);
      summ += (a[i].scales[g] >> 4) * b[i].bsums[g];
    }
    s += b[i].d * (H(a[i].d) * static_cast<float>(sumi) - H(a[i].dmin) * static_cast<float>(summ));
  }
  return s;
}

// 6-bit Q3_K scale j (bias 32 removed): low 4 bits in nibbles of bytes 0..7, high 2 bits in bytes 8..11.
int Q3Scale(const uint8_t* sc, int j) {
  const int low = j < 8 ? (sc[j] & 0xF) : (sc[j - 8] >> 4);
  const int high = (sc[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
  return (low | high << 4) - 32;
}

float DotQ3_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ3_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float s = 0.0f;
  int8_t q[256];
  for (int64_t i = 0; i < n / 256; ++i) {
    for (int e = 0; e < 256; ++e) {
      const int high = (a[i].hmask[e % 32] >> (e / 32)) & 1;  // clear bit: value is 4 lower
      q[e] = static_cast<int8_t>(TwoBits(a[i].qs, e) - (high ? 0 : 4));
    }
    int sumi = 0;
    for (int g = 0; g < 16; ++g) sumi += Q3Scale(a[i].scales, g) * DotI8(q + 16 * g, b[i].qs + 16 * g, 16);
    s += b[i].d * H(a[i].d) * static_cast<float>(sumi);
  }
  return s;
}

// Q4_K/Q5_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
void ScaleMin(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | (s[j - 4] >> 6) << 4;
    *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
}

// Element 64c + l (l < 32) is the low nibble of qs[32c + l], element 64c + 32 + l its high nibble.
void UnpackK4(const uint8_t* qs, int8_t* q) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = static_cast<int8_t>(qs[32 * c + l] & 0xF);
      q[64 * c + 32 + l] = static_cast<int8_t>(qs[32 * c + l] >> 4);
    }
  }
}

// sum over sub-blocks of sc * (q . qx) and of m * (sum qx), for 8 sub-blocks of 32.
void KSums(const uint8_t* scales, const int8_t* q, const BlockQ8_K& b, int* sumi, int* summ) {
  *sumi = 0;
  *summ = 0;
  for (int k = 0; k < 8; ++k) {
    int sc, m;
    ScaleMin(scales, k, &sc, &m);
    *sumi += sc * DotI8(q + 32 * k, b.qs + 32 * k, 32);
    *summ += m * (b.bsums[2 * k] + b.bsums[2 * k + 1]);
  }
}

float DotQ4_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ4_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float s = 0.0f;
  int8_t q[256];
  for (int64_t i = 0; i < n / 256; ++i) {
    UnpackK4(a[i].qs, q);
    int sumi, summ;
    KSums(a[i].scales, q, b[i], &sumi, &summ);
    s += b[i].d * (H(a[i].d) * static_cast<float>(sumi) - H(a[i].dmin) * static_cast<float>(summ));
  }
  return s;
}

float DotQ5_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ5_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float s = 0.0f;
  int8_t q[256];
  for (int64_t i = 0; i < n / 256; ++i) {
    UnpackK4(a[i].qs, q);
    for (int e = 0; e < 256; ++e) q[e] = static_cast<int8_t>(q[e] | ((a[i].qh[e % 32] >> (e / 32)) & 1) << 4);
    int sumi, summ;
    KSums(a[i].scales, q, b[i], &sumi, &summ);
    s += b[i].d * (H(a[i].d) * static_cast<float>(sumi) - H(a[i].dmin) * static_cast<float>(summ));
  }
  return s;
}

float DotQ6_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ6_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float s = 0.0f;
  int8_t q[256];
  for (int64_t i = 0; i < n / 256; ++i) {
    // Half h, quarter r, lane l: low nibble from ql[64h + l + 32(r & 1)] (high nibble when r >= 2), top two bits
    // from qh[32h + l] at shift 2r.
    for (int h = 0; h < 2; ++h) {
      for (int r = 0; r < 4; ++r) {
        for (int l = 0; l < 32; ++l) {
          const uint8_t lo_byte = a[i].ql[64 * h + l + 32 * (r & 1)];
          const int lo = r < 2 ? (lo_byte & 0xF) : (lo_byte >> 4);
          const int hi = (a[i].qh[32 * h + l] >> (2 * r)) & 3;
          q[128 * h + 32 * r + l] = static_cast<int8_t>((lo | hi << 4) - 32);
        }
      }
    }
    int sumi = 0;
    for (int g = 0; g < 16; ++g) sumi += a[i].scales[g] * DotI8(q + 16 * g, b[i].qs + 16 * g, 16);
    s += b[i].d * H(a[i].d) * static_cast<float>(sumi);
  }
  return s;
}

using DotFn = float (*)(int64_t, const void*, const void*);

// Scalar code gains nothing from sharing weight loads across tokens, so it loops.
template <DotFn kDot>
void ForEachToken(int64_t n, const void* w, const void* x, size_t x_stride, int n_x, float* out,
                  size_t out_stride) {
  for (int j = 0; j < n_x; ++j) {
    out[j * out_stride] = kDot(n, w, static_cast<const uint8_t*>(x) + j * x_stride);
  }
}

}  // namespace

VecDotFn ScalarVecDot(DType wtype) {
  switch (wtype) {
    case DType::kF32: return ForEachToken<DotF32>;
    case DType::kF16: return ForEachToken<DotF16>;
    case DType::kBF16: return ForEachToken<DotBF16>;
    case DType::kQ4_0: return ForEachToken<DotQ4_0>;
    case DType::kQ4_1: return ForEachToken<DotQ4_1>;
    case DType::kQ5_0: return ForEachToken<DotQ5_0>;
    case DType::kQ5_1: return ForEachToken<DotQ5_1>;
    case DType::kQ8_0: return ForEachToken<DotQ8_0>;
    case DType::kMXFP4: return ForEachToken<DotMXFP4>;
    case DType::kQ2_K: return ForEachToken<DotQ2_K>;
    case DType::kQ3_K: return ForEachToken<DotQ3_K>;
    case DType::kQ4_K: return ForEachToken<DotQ4_K>;
    case DType::kQ5_K: return ForEachToken<DotQ5_K>;
    case DType::kQ6_K: return ForEachToken<DotQ6_K>;
    default: return nullptr;  // Q8_1 / Q8_K are activation formats, never weights
  }
}

}  // namespace tandem::cpu::internal

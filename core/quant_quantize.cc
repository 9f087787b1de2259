// Weight quantizers: round-to-nearest with a small per-block scale search that minimises squared error. Not
// bit-identical to llama-quantize, but the blocks decode with the standard decoders (the layouts are described
// next to the decoders in quant.cc) and the error is comparable. MXFP4 is the exception: ggml's reference
// quantizer has no search, and this one gives its bytes.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/quant.h"
#include "core/status.h"

namespace tandem {
namespace {

// std::lround's rounding (halves away from zero) without its library call, which was a third of the quantizers'
// time. Exact: v - trunc(v) has no rounding error below 2^23, and larger values clamp to the levels anyway.
int RoundInt(float v) {
  v = v > 1e8f ? 1e8f : v > -1e8f ? v : -1e8f;  // NaN too: no undefined conversion
  const int i = static_cast<int>(v);  // toward zero
  const float frac = v - static_cast<float>(i);
  return i + static_cast<int>(frac >= 0.5f) - static_cast<int>(frac <= -0.5f);  // branch-free: ties are random
}
int Clamp(int v, int lo, int hi) { return std::min(hi, std::max(lo, v)); }

// The search tries many scales per block, so each try is one pass: quantize and sum, the error from the sums. A
// try of the search runs in float, four lanes at a time (blocks are multiples of 16), which is precise enough to
// rank candidates; the one-try path (kFast) computes exactly what it always has, in order and in double, so
// synthetic files stay bit-identical.
using F4 = float __attribute__((vector_size(16)));
using I4 = int32_t __attribute__((vector_size(16)));

F4 Splat(float f) { return F4{f, f, f, f}; }
F4 Load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
float Sum4(F4 v) { return (v[0] + v[1]) + (v[2] + v[3]); }

// Clamped to [lo, hi], then rounded with halves away from zero as std::lround (clamping first rounds the same,
// the bounds being integers).
F4 ClampRoundAway(F4 v, F4 lo, F4 hi) {
  v = v > lo ? v : lo;
  v = v < hi ? v : hi;
  const F4 t = __builtin_convertvector(__builtin_convertvector(v, I4), F4);  // toward zero
  const F4 frac = v - t;  // exact
  const F4 one = Splat(1.0f), zero = Splat(0.0f);
  return t + (frac >= Splat(0.5f) ? one : zero) - (frac <= Splat(-0.5f) ? one : zero);
}

// ---- symmetric blocks: x ~ s * q, q in [qmin, qmax] ----

// Squared error of x ~ s * q after quantizing with scale s and refitting s by least squares (sxx = sum of x^2),
// and the refit scale.
float FitSymmetric(const float* x, int n, float s, int qmin, int qmax, double sxx, bool search, float* s_out) {
  double sxq = 0, sqq = 0;
  if (search) {
    const F4 inv = Splat(1.0f / s), lo = Splat(static_cast<float>(qmin)), hi = Splat(static_cast<float>(qmax));
    F4 xq = Splat(0.0f), qq = Splat(0.0f);
    for (int i = 0; i < n; i += 4) {
      const F4 xi = Load4(x + i);
      const F4 q = ClampRoundAway(xi * inv, lo, hi);
      xq += xi * q;
      qq += q * q;
    }
    sxq = Sum4(xq);
    sqq = Sum4(qq);  // integers below 2^24: exact
  } else {
    int64_t iqq = 0;
    for (int i = 0; i < n; ++i) {
      const int q = Clamp(RoundInt(x[i] / s), qmin, qmax);
      sxq += static_cast<double>(x[i]) * q;
      iqq += q * q;
    }
    sqq = static_cast<double>(iqq);
  }
  *s_out = sqq > 0 ? static_cast<float>(sxq / sqq) : 0.0f;
  const double sd = *s_out;  // sum (x - sd q)^2
  return static_cast<float>(sxx - 2 * sd * sxq + sd * sd * sqq);
}

// Scale of the block (0 for an all-zero block). Candidates map the element of largest magnitude onto either end
// of the range, stretched by up to 2 levels; the best least-squares refit wins.
float SearchSymmetric(const float* x, int n, int qmin, int qmax, bool search) {
  float xm = 0.0f;  // signed element of largest magnitude
  double sxx = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(xm)) xm = x[i];
    sxx += static_cast<double>(x[i]) * x[i];
  }
  if (xm == 0.0f) return 0.0f;
  float best_err = INFINITY, best_s = 0.0f;
  for (int end = 0; end < (search ? 2 : 1); ++end) {
    const float t0 = end == 0 ? static_cast<float>(qmin) : static_cast<float>(qmax);
    const float toward_zero = end == 0 ? 0.25f : -0.25f;
    for (int k = 0; k <= (search ? 8 : 0); ++k) {
      float s;
      const float err =
          FitSymmetric(x, n, xm / (t0 + toward_zero * static_cast<float>(k)), qmin, qmax, sxx, search, &s);
      if (err < best_err && s != 0.0f) {
        best_err = err;
        best_s = s;
      }
    }
  }
  return best_s;
}

// ---- asymmetric sub-blocks: x ~ scale * q - min, q in [0, nmax], scale >= 0, min >= 0 ----
struct ScaleMin {
  float scale = 0.0f;
  float min = 0.0f;
};

// Sums over a sub-block: of x once, of the quants per try.
struct XSums {
  double sx = 0, sxx = 0;
};
struct QSums {
  double sq = 0, sqq = 0, sxq = 0;
};

// Quantizes x[i] to round(iscale * (x[i] + offset)) in [0, nmax] and sums.
QSums QuantizeAffine(const float* x, int n, float iscale, float offset, int nmax, bool search) {
  QSums s;
  if (search) {
    const F4 scale = Splat(iscale), shift = Splat(offset), lo = Splat(0.0f), hi = Splat(static_cast<float>(nmax));
    F4 q1 = lo, qq = lo, xq = lo;
    for (int i = 0; i < n; i += 4) {
      const F4 xi = Load4(x + i);
      const F4 q = ClampRoundAway(scale * (xi + shift), lo, hi);
      q1 += q;
      qq += q * q;
      xq += xi * q;
    }
    s.sq = Sum4(q1);  // integers below 2^24: exact
    s.sqq = Sum4(qq);
    s.sxq = Sum4(xq);
    return s;
  }
  int64_t iq = 0, iqq = 0;
  for (int i = 0; i < n; ++i) {
    const int q = Clamp(RoundInt(iscale * (x[i] + offset)), 0, nmax);
    iq += q;
    iqq += q * q;
    s.sxq += static_cast<double>(x[i]) * q;
  }
  s.sq = static_cast<double>(iq);
  s.sqq = static_cast<double>(iqq);
  return s;
}

// Least-squares (scale, min) for fixed q, keeping min >= 0 where the format stores it unsigned (the K-quants; Q5_1
// stores it signed). Returns the error.
float FitAffine(const XSums& xs, const QSums& qs, int n, bool signed_min, ScaleMin* out) {
  const double sq = qs.sq, sqq = qs.sqq, sx = xs.sx, sxq = qs.sxq;
  const double det = n * sqq - sq * sq;
  double a = 0, b = 0;  // x ~ a * q + b
  if (det > 0) {
    a = (n * sxq - sq * sx) / det;
    b = (sx - a * sq) / n;
  }
  if (det <= 0 || (b > 0 && !signed_min)) {  // an unsigned min wants the offset <= 0: fit the scale alone
    b = 0;
    a = sqq > 0 ? sxq / sqq : 0;
  }
  out->scale = static_cast<float>(a);
  out->min = static_cast<float>(-b);
  // sum (x - a q - b)^2
  return static_cast<float>(xs.sxx - 2 * a * sxq - 2 * b * sx + a * a * sqq + 2 * a * b * sq + n * b * b);
}

ScaleMin SearchAffine(const float* x, int n, int nmax, bool search, bool signed_min = false) {
  float lo = signed_min ? x[0] : 0.0f, hi = x[0];  // lo <= 0 where min is stored unsigned
  XSums xs;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    xs.sx += x[i];
    xs.sxx += static_cast<double>(x[i]) * x[i];
  }
  ScaleMin best{0.0f, -lo};
  if (hi <= lo) return best;
  float best_err = INFINITY;
  const int spread = search ? 10 : 0;
  for (int k = -spread; k <= spread; ++k) {  // levels spread over [lo, hi]: nmax - 1 .. nmax + 1
    const float iscale = (static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / (hi - lo);
    ScaleMin fit;
    const float err = FitAffine(xs, QuantizeAffine(x, n, iscale, -lo, nmax, search), n, signed_min, &fit);
    if (err < best_err && fit.scale > 0) {
      best_err = err;
      best = fit;
    }
  }
  // Alternate quantizing against the best fit and refitting while the error drops.
  for (int iter = 0; iter < (search ? 4 : 0) && best.scale > 0; ++iter) {
    ScaleMin fit;
    const float err = FitAffine(xs, QuantizeAffine(x, n, 1.0f / best.scale, best.min, nmax, search), n, signed_min,
                                &fit);
    if (!(err < best_err && fit.scale > 0)) break;
    best_err = err;
    best = fit;
  }
  return best;
}

// ---- plain floats ----
void QuantF32(const float* x, void* dst, int64_t n, bool search) { std::memcpy(dst, x, static_cast<size_t>(n) * 4); }

void QuantF16(const float* x, void* dst, int64_t n, bool search) {
  auto* y = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const f16_t h = F32ToF16(x[i]);
    std::memcpy(y + 2 * i, &h, 2);
  }
}

void QuantBF16(const float* x, void* dst, int64_t n, bool search) {
  auto* y = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const bf16_t h = F32ToBf16(x[i]);
    std::memcpy(y + 2 * i, &h, 2);
  }
}

// ---- 32-element blocks ----
void QuantQ8_0(const float* x, void* dst, int64_t n, bool search) { QuantizeRowQ8_0(x, static_cast<BlockQ8_0*>(dst), n); }

void QuantQ4_0(const float* x, void* dst, int64_t n, bool search) {
  auto* b = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK4_0; ++i, x += kQK4_0) {
    b[i].d = F32ToF16(SearchSymmetric(x, kQK4_0, -8, 7, search));
    const float d = F16ToF32(b[i].d);  // quantize against the scale as stored
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int lo = Clamp(RoundInt(x[j] * id), -8, 7) + 8;
      const int hi = Clamp(RoundInt(x[j + 16] * id), -8, 7) + 8;
      b[i].qs[j] = static_cast<uint8_t>(lo | hi << 4);
    }
  }
}

// ---- MXFP4: ggml's quantize_row_mxfp4_ref, bit for bit ----

// The quant of v among a block's 16 levels: the nearest, the lowest q on ties (so ties go to the smaller
// magnitude, and zero is q = 0, never the negative zero q = 8).
int Mxfp4Quant(float v, const float* level) {
  int best = 0;
  float best_err = std::fabs(level[0] - v);
  for (int q = 1; q < 16; ++q) {
    const float err = std::fabs(level[q] - v);
    if (err < best_err) {
      best = q;
      best_err = err;
    }
  }
  return best;
}

// The scale is the power of two d = 2^(e - 128) with e = floor(log2(amax)) - 2 + 127, so amax lies in [8d, 16d)
// and values beyond the top level 12d go to it; an all-zero block gets e = 0. log2f, not the exact exponent: just
// below a power of two it rounds up, and ggml's e follows it (so the largest floats get 253). Where ggml's
// conversion of that float to uint8 is undefined, e is clamped instead: amax below 2^-125 (e would be negative)
// gets 0, an infinite amax 254 (255 is NaN in the OCP spec). NaN elements do not raise amax, as in ggml.
// The levels k * d are exact, except that at e = 253 the top ones overflow to infinity as ggml's products do; they
// are made with ldexp, not a product, so that no fused multiply-add (-march=native) can keep them finite.
void QuantMXFP4(const float* x, void* dst, int64_t n, bool search) {
  auto* b = static_cast<BlockMXFP4*>(dst);
  for (int64_t i = 0; i < n / kQKMXFP4; ++i, x += kQKMXFP4) {
    float amax = 0.0f;
    for (int j = 0; j < kQKMXFP4; ++j) {
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    }
    const float e = amax > 0.0f ? std::floor(std::log2(amax)) - 2 + 127 : 0.0f;
    b[i].e = static_cast<uint8_t>(std::clamp(e, 0.0f, 254.0f));
    float level[16];
    for (int q = 0; q < 16; ++q) level[q] = std::ldexp(static_cast<float>(kMxfp4Values[q]), b[i].e - 128);
    for (int j = 0; j < kQKMXFP4 / 2; ++j) {
      b[i].qs[j] = static_cast<uint8_t>(Mxfp4Quant(x[j], level) | Mxfp4Quant(x[j + kQKMXFP4 / 2], level) << 4);
    }
  }
}

// The 5-bit quants of a 32-element block: low nibbles as Q4_0's (element j < 16 low in qs[j], j >= 16 high in
// qs[j - 16]), the fifth bit of element j in bit j of qh.
void PackQ5(const int* q, uint8_t* qs, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0xF) | (q[j + 16] & 0xF) << 4);
  for (int j = 0; j < 32; ++j) h |= static_cast<uint32_t>(q[j] >> 4) << j;
  for (int k = 0; k < 4; ++k) qh[k] = static_cast<uint8_t>(h >> (8 * k));
}

void QuantQ5_0(const float* x, void* dst, int64_t n, bool search) {
  auto* b = static_cast<BlockQ5_0*>(dst);
  int q[kQK5_0];
  for (int64_t i = 0; i < n / kQK5_0; ++i, x += kQK5_0) {
    b[i].d = F32ToF16(SearchSymmetric(x, kQK5_0, -16, 15, search));
    const float d = F16ToF32(b[i].d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQK5_0; ++j) q[j] = Clamp(RoundInt(x[j] * id), -16, 15) + 16;
    PackQ5(q, b[i].qs, b[i].qh);
  }
}

// x = d * q + m with a signed m: llama.cpp's fallback for Q5_K rows a super-block does not divide.
void QuantQ5_1(const float* x, void* dst, int64_t n, bool search) {
  auto* b = static_cast<BlockQ5_1*>(dst);
  int q[kQK5_1];
  for (int64_t i = 0; i < n / kQK5_1; ++i, x += kQK5_1) {
    const ScaleMin fit = SearchAffine(x, kQK5_1, 31, search, /*signed_min=*/true);
    b[i].d = F32ToF16(fit.scale);
    b[i].m = F32ToF16(-fit.min);
    const float d = F16ToF32(b[i].d), m = F16ToF32(b[i].m);
    for (int j = 0; j < kQK5_1; ++j) q[j] = d > 0 ? Clamp(RoundInt((x[j] - m) / d), 0, 31) : 0;
    PackQ5(q, b[i].qs, b[i].qh);
  }
}

// ---- K-quants ----

// Packs 8 6-bit scales and mins in the Q4_K/Q5_K layout (see KScaleMin in quant.cc).
void PackKScales(const int* sc, const int* m, uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] | (sc[j + 4] >> 4) << 6);
    out[j + 4] = static_cast<uint8_t>(m[j] | (m[j + 4] >> 4) << 6);
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | (m[j + 4] & 0xF) << 4);
  }
}

// One Q4_K/Q5_K super-block: searches each sub-block's scale and min, quantizes them to 6 bits against fp16
// super-block scales, then quantizes the elements against the stored scales. Writes q[256] in [0, nmax].
void QuantizeKAffine(const float* x, int nmax, bool search, f16_t* d_out, f16_t* dmin_out, uint8_t* scales,
                     int* q) {
  ScaleMin sub[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int k = 0; k < 8; ++k) {
    sub[k] = SearchAffine(x + 32 * k, 32, nmax, search);
    max_scale = std::max(max_scale, sub[k].scale);
    max_min = std::max(max_min, sub[k].min);
  }
  *d_out = F32ToF16(max_scale / 63.0f);
  *dmin_out = F32ToF16(max_min / 63.0f);
  const float d = F16ToF32(*d_out), dmin = F16ToF32(*dmin_out);
  int sc[8], m[8];
  for (int k = 0; k < 8; ++k) {
    sc[k] = d > 0 ? Clamp(RoundInt(sub[k].scale / d), 0, 63) : 0;
    m[k] = dmin > 0 ? Clamp(RoundInt(sub[k].min / dmin), 0, 63) : 0;
    const float ds = d * static_cast<float>(sc[k]);
    const float dm = dmin * static_cast<float>(m[k]);
    for (int i = 32 * k; i < 32 * k + 32; ++i) {
      q[i] = ds > 0 ? Clamp(RoundInt((x[i] + dm) / ds), 0, nmax) : 0;
    }
  }
  PackKScales(sc, m, scales);
}

// Low nibbles in the Q4_K/Q5_K layout: element 64c + l in the low nibble of qs[32c + l], 64c + 32 + l high.
void PackKNibbles(const int* q, uint8_t* qs) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      qs[32 * c + l] = static_cast<uint8_t>((q[64 * c + l] & 0xF) | (q[64 * c + 32 + l] & 0xF) << 4);
    }
  }
}

void QuantQ4_K(const float* x, void* dst, int64_t n, bool search) {
  auto* b = static_cast<BlockQ4_K*>(dst);
  int q[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    QuantizeKAffine(x, 15, search, &b[i].d, &b[i].dmin, b[i].scales, q);
    PackKNibbles(q, b[i].qs);
  }
}

void QuantQ5_K(const float* x, void* dst, int64_t n, bool search) {
  auto* b = static_cast<BlockQ5_K*>(dst);
  int q[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    QuantizeKAffine(x, 31, search, &b[i].d, &b[i].dmin, b[i].scales, q);
    PackKNibbles(q, b[i].qs);
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int e = 0; e < kQK_K; ++e) b[i].qh[e % 32] |= static_cast<uint8_t>((q[e] >> 4) << (e / 32));
  }
}

// Q6_K: 16 symmetric sub-blocks of 16 with int8 scales against an fp16 super-block scale.
void QuantQ6_K(const float* x, void* dst, int64_t n, bool search) {
  auto* b = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float sub[16];
    float ms = 0.0f;  // signed sub-block scale of largest magnitude
    for (int k = 0; k < 16; ++k) {
      sub[k] = SearchSymmetric(x + 16 * k, 16, -32, 31, search);
      if (std::fabs(sub[k]) > std::fabs(ms)) ms = sub[k];
    }
    b[i].d = F32ToF16(ms / -128.0f);  // the largest scale becomes -128, using the full int8 range
    const float d = F16ToF32(b[i].d);
    int q[kQK_K];
    for (int k = 0; k < 16; ++k) {
      const int sc = d != 0.0f ? Clamp(RoundInt(sub[k] / d), -128, 127) : 0;
      b[i].scales[k] = static_cast<int8_t>(sc);
      const float ds = d * static_cast<float>(sc);
      for (int e = 16 * k; e < 16 * k + 16; ++e) q[e] = (ds != 0.0f ? Clamp(RoundInt(x[e] / ds), -32, 31) : 0) + 32;
    }
    // Layout (see Q6KQuant in quant.cc): half h, quarter r, position l.
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        const int* qh = q + 128 * h + l;  // qh[32 * r] is quarter r
        b[i].ql[64 * h + l] = static_cast<uint8_t>((qh[0] & 0xF) | (qh[64] & 0xF) << 4);
        b[i].ql[64 * h + 32 + l] = static_cast<uint8_t>((qh[32] & 0xF) | (qh[96] & 0xF) << 4);
        b[i].qh[32 * h + l] =
            static_cast<uint8_t>((qh[0] >> 4) | (qh[32] >> 4) << 2 | (qh[64] >> 4) << 4 | (qh[96] >> 4) << 6);
      }
    }
  }
}

// `search`: try several scales and refit (slow, lower error); otherwise one round-to-nearest candidate.
using QuantFn = void (*)(const float*, void*, int64_t, bool search);

QuantFn QuantFor(DType type) {
  switch (type) {
    case DType::kF32: return QuantF32;
    case DType::kF16: return QuantF16;
    case DType::kBF16: return QuantBF16;
    case DType::kQ8_0: return QuantQ8_0;
    case DType::kQ4_0: return QuantQ4_0;
    case DType::kMXFP4: return QuantMXFP4;
    case DType::kQ5_0: return QuantQ5_0;
    case DType::kQ5_1: return QuantQ5_1;
    case DType::kQ4_K: return QuantQ4_K;
    case DType::kQ5_K: return QuantQ5_K;
    case DType::kQ6_K: return QuantQ6_K;
    default: return nullptr;
  }
}

}  // namespace

bool CanQuantize(DType type) { return QuantFor(type) != nullptr; }

absl::Status QuantizeRow(DType type, const float* src, void* dst, int64_t n, QuantizeEffort effort) {
  const QuantFn fn = QuantFor(type);
  if (fn == nullptr) return Unimplemented("no weight quantizer for ", DTypeName(type));
  const int64_t block = Traits(type).block_elems;
  if (n % block != 0)
    return InvalidArgument("row of ", n, " elements is not a multiple of ", DTypeName(type), "'s block size ", block);
  fn(src, dst, n, effort == QuantizeEffort::kBest);
  return absl::OkStatus();
}

}  // namespace tandem

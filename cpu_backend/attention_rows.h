// Internal to attention.cc: the two inner loops of attention over one cache row, per ISA.
// The AVX2 versions live in attention_avx2.cc (built with -mavx2 -mfma -mf16c); call them only when
// DetectedIsa() >= kAvx2. Cache elements are float or fp16 bits.
#pragma once

#include <cstdint>

namespace tandem::cpu::attention_rows {

// sum over d < n of q[d] * k[d]
float DotF32Avx2(const float* q, const float* k, int n);
float DotF16Avx2(const float* q, const uint16_t* k, int n);
// out[d] += p * v[d] for d < n
void AxpyF32Avx2(float p, const float* v, int n, float* out);
void AxpyF16Avx2(float p, const uint16_t* v, int n, float* out);

// The query heads that share one KV head, over an fp16 cache, AVX-512 (attention_avx512.cc; call only when
// DetectedIsa() == kAvx512 and GroupedF16Avx512Supports(head_dim)). q and out are [n_q][head_dim].
bool GroupedF16Avx512Supports(int head_dim);
// scores[g * score_stride + j] = DotF16Avx2(q_g, k_j, head_dim) for j < n_keys, bit for bit.
void DotsF16Avx512(const float* q, int n_q, int head_dim, const uint16_t* k_rows, size_t row_elems, int64_t n_keys,
                   float* scores, size_t score_stride);
// n fp16 rows: the first n_a from a, the rest from b (a ring cache that wrapped), row_elems apart.
struct HalfRows {
  const uint16_t* a;
  int64_t n_a;
  const uint16_t* b;
  int64_t n;
  size_t row_elems;
  const uint16_t* row(int64_t j) const {
    return j < n_a ? a + static_cast<size_t>(j) * row_elems : b + static_cast<size_t>(j - n_a) * row_elems;
  }
};
// out_g = sum over j < v.n of p[g * p_stride + j] * v_j, as AxpyF16Avx2 from zero row after row, bit for bit.
void WeightedSumsF16Avx512(const float* p, size_t p_stride, int n_q, int head_dim, const HalfRows& v, float* out);

}  // namespace tandem::cpu::attention_rows

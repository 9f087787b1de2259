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

}  // namespace tandem::cpu::attention_rows

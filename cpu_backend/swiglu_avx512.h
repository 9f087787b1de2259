// Internal to swiglu.cc: the AVX-512 loop (swiglu_avx512.cc). Call only when DetectedIsa() == kAvx512.
#pragma once

#include <cstdint>

namespace tandem::cpu::internal {

// y[i] = g[i] / (1 + e^-g[i]) * u[i] for i < n, with a vectorised e^x within 2 ulp of the correctly rounded one.
void SwiGluAvx512(const float* g, const float* u, int64_t n, float* y);

}  // namespace tandem::cpu::internal

// SwiGLU gate: y = silu(g) * u, silu(x) = x / (1 + e^-x).
#include <cmath>

#include "cpu_backend/kernels.h"
#include "cpu_backend/swiglu_avx512.h"

namespace tandem::cpu {

void SwiGlu(const float* g, const float* u, int64_t n, float* y) {
  if (ActiveIsa() == Isa::kAvx512) {
    internal::SwiGluAvx512(g, u, n, y);
    return;
  }
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

}  // namespace tandem::cpu

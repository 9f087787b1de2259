// Elementwise sum (residual connections). y may alias a: each element is read before it is written.
#include "cpu_backend/kernels.h"

namespace tandem::cpu {

void Add(const float* a, const float* b, int64_t n, float* y) {
#pragma omp parallel for simd schedule(static) if (n >= (1 << 17))
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

}  // namespace tandem::cpu

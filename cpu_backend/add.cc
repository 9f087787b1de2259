// Elementwise sums (residual connections, biases). y may alias the first operand: each element is read before it
// is written.
#include "cpu_backend/kernels.h"

namespace tandem::cpu {

void Add(const float* a, const float* b, int64_t n, float* y) {
#pragma omp parallel for simd schedule(static) if (n >= (1 << 17))
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void AddBias(const float* x, const float* b, int64_t n_tok, int64_t n, float* y) {
#pragma omp parallel for schedule(static) if (n_tok * n >= (1 << 17))
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t i = 0; i < n; ++i) y[t * n + i] = x[t * n + i] + b[i];
  }
}

}  // namespace tandem::cpu

// Elementwise sums (residual connections, biases) and per-row scales (gates). y may alias the first operand: each element is read before it
// is written.
#include <cmath>

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

void ScaleRows(const float* x, const float* s, int64_t n_tok, int64_t n, RowScale f, float* y) {
#pragma omp parallel for schedule(static) if (n_tok * n >= (1 << 17))
  for (int64_t t = 0; t < n_tok; ++t) {
    const float scale = f == RowScale::kSigmoid ? 1.0f / (1.0f + std::exp(-s[t])) : s[t];
    for (int64_t i = 0; i < n; ++i) y[t * n + i] = x[t * n + i] * scale;
  }
}

}  // namespace tandem::cpu

// RMSNorm. The fast path follows llama.cpp's rounding steps: squares in float summed in double, the mean and
// 1/sqrt in float, then (x * scale) * w as two float multiplies (the norm and the weight are separate ops there).
#include <cmath>

#include "cpu_backend/kernels.h"

namespace tandem::cpu {

void RmsNorm(const float* x, const float* w, int64_t n_tok, int64_t n, float eps, float* y) {
#pragma omp parallel for schedule(static) if (n_tok > 1 && n_tok * n >= (1 << 15))
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* xt = x + t * n;
    float* yt = y + t * n;
    double sum_sq = 0.0;
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(xt[i] * xt[i]);
    const float mean = static_cast<float>(sum_sq / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    if (w != nullptr) {
      for (int64_t i = 0; i < n; ++i) yt[i] = (xt[i] * scale) * w[i];
    } else {
      for (int64_t i = 0; i < n; ++i) yt[i] = xt[i] * scale;
    }
  }
}

void RmsNormRef(const float* x, const float* w, int64_t n_tok, int64_t n, float eps, float* y) {
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* xt = x + t * n;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(xt[i]) * xt[i];
    const double scale = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + static_cast<double>(eps));
    for (int64_t i = 0; i < n; ++i) {
      const double wi = w != nullptr ? static_cast<double>(w[i]) : 1.0;
      y[t * n + i] = static_cast<float>(xt[i] * scale * wi);
    }
  }
}

}  // namespace tandem::cpu

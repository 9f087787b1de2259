// Gated activations (runtime/ops.h's GluParams): y = act(g) * u, elementwise.
#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "cpu_backend/kernels.h"
#include "cpu_backend/swiglu_avx512.h"

namespace tandem::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluCoefA = 0.044715f;

inline float Silu(float g) { return g / (1.0f + std::exp(-g)); }
inline float Gelu(float g) { return 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * g * (1.0f + kGeluCoefA * g * g))); }

}  // namespace

void Glu(const float* g, const float* u, int64_t n, const GluParams& p, float* y) {
  switch (p.act) {
    case Activation::kSilu:
      if (u != nullptr && ActiveIsa() == Isa::kAvx512) {
        internal::SwiGluAvx512(g, u, n, y);
        return;
      }
      if (u == nullptr) {
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
        for (int64_t i = 0; i < n; ++i) y[i] = Silu(g[i]);
        return;
      }
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
      for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
      return;
    case Activation::kGelu:
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
      for (int64_t i = 0; i < n; ++i) y[i] = u != nullptr ? Gelu(g[i]) * u[i] : Gelu(g[i]);
      return;
    case Activation::kSwigluOai: {
      TANDEM_CHECK(u != nullptr);
      const float alpha = p.alpha, limit = p.limit;
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
      for (int64_t i = 0; i < n; ++i) {
        const float x = std::min(g[i], limit);
        const float up = std::clamp(u[i], -limit, limit);
        y[i] = x / (1.0f + std::exp(alpha * -x)) * (up + 1.0f);
      }
      return;
    }
  }
}

void GluRef(const float* g, const float* u, int64_t n, const GluParams& p, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[i];
    double out = 0;
    switch (p.act) {
      case Activation::kSilu:
        out = x / (1.0 + std::exp(-x)) * (u != nullptr ? u[i] : 1.0);
        break;
      case Activation::kGelu:
        out = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))) *
              (u != nullptr ? u[i] : 1.0);
        break;
      case Activation::kSwigluOai: {
        const double gx = std::min<double>(x, p.limit);
        const double up = std::clamp<double>(u[i], -p.limit, p.limit);
        out = gx / (1.0 + std::exp(-static_cast<double>(p.alpha) * gx)) * (up + 1.0);
        break;
      }
    }
    y[i] = static_cast<float>(out);
  }
}

}  // namespace tandem::cpu

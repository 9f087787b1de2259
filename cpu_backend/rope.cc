// Rotary position embedding, llama.cpp "NORM" mode: within each head, the pairs (2i, 2i+1) of the first n_rot
// dims rotate by theta_i = pos * freq_scale * freq_base^(-2i/n_rot); dims n_rot.. stay as they are.
#include <cmath>

#include "core/status.h"
#include "cpu_backend/kernels.h"

namespace tandem::cpu {

void Rope(float* x, int64_t n_tok, const int32_t* pos, const RopeParams& p) {
  TANDEM_CHECK(p.n_rot % 2 == 0 && p.n_rot <= p.head_dim);
  const int64_t row = static_cast<int64_t>(p.n_head) * p.head_dim;
  // Angles are built the way llama.cpp builds them so results stay bit-close: one float powf for the ratio
  // between successive pair frequencies, the angle advanced by repeated float multiplies, freq_scale last.
  const float theta_ratio = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
#pragma omp parallel for schedule(static) if (n_tok >= 16 && n_tok * row >= (1 << 15))
  for (int64_t t = 0; t < n_tok; ++t) {
    float* xt = x + t * row;
    float theta_unscaled = static_cast<float>(pos[t]);
    for (int i = 0; i < p.n_rot / 2; ++i) {
      const float theta = p.freq_scale * theta_unscaled;
      const float c = std::cos(theta);
      const float s = std::sin(theta);
      theta_unscaled *= theta_ratio;
      // One angle serves every head of the token.
      for (int h = 0; h < p.n_head; ++h) {
        float* pair = xt + static_cast<int64_t>(h) * p.head_dim + 2 * i;
        const float x0 = pair[0];
        const float x1 = pair[1];
        pair[0] = x0 * c - x1 * s;
        pair[1] = x0 * s + x1 * c;
      }
    }
  }
}

void RopeRef(float* x, int64_t n_tok, const int32_t* pos, const RopeParams& p) {
  const int64_t row = static_cast<int64_t>(p.n_head) * p.head_dim;
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int h = 0; h < p.n_head; ++h) {
      float* head = x + t * row + static_cast<int64_t>(h) * p.head_dim;
      for (int i = 0; i < p.n_rot / 2; ++i) {
        const double theta = static_cast<double>(pos[t]) * p.freq_scale *
                             std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot);
        const double c = std::cos(theta);
        const double s = std::sin(theta);
        const double x0 = head[2 * i];
        const double x1 = head[2 * i + 1];
        head[2 * i] = static_cast<float>(x0 * c - x1 * s);
        head[2 * i + 1] = static_cast<float>(x0 * s + x1 * c);
      }
    }
  }
}

}  // namespace tandem::cpu

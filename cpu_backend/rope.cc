// Rotary position embedding (runtime/ops.h's RopeParams): kNorm turns the pairs (2i, 2i+1) of each head's first
// n_rot dims, kNeox the pairs (i, i + n_rot/2); YaRN and frequency factors change the angles.
#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "cpu_backend/kernels.h"

namespace tandem::cpu {
namespace {

// YaRN's correction range: the pairs below lo extrapolate, above hi interpolate (llama.cpp's
// ggml_rope_yarn_corr_dims).
void YarnCorrDims(const RopeParams& p, float dims[2]) {
  auto corr_dim = [&](float beta) {
    return static_cast<float>(p.n_rot) * std::log(static_cast<float>(p.n_ctx_orig) / (beta * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * std::log(p.freq_base));
  };
  dims[0] = std::max(0.0f, std::floor(corr_dim(p.beta_fast)));
  dims[1] = std::min(static_cast<float>(p.n_rot - 1), std::ceil(corr_dim(p.beta_slow)));
}

// The pair index (first, second) of pair i in a head.
inline void PairDims(const RopeParams& p, int i, int* a, int* b) {
  if (p.mode == RopeMode::kNeox) {
    *a = i;
    *b = i + p.n_rot / 2;
  } else {
    *a = 2 * i;
    *b = 2 * i + 1;
  }
}

// Turns every head of one token by the angles in cs (cos, sin of pair i at 2i, 2i+1).
template <RopeMode kMode>
void RotateHeads(float* xt, const RopeParams& p, const float* cs) {
  const int half = p.n_rot / 2;
  for (int h = 0; h < p.n_head; ++h) {
    float* head = xt + static_cast<int64_t>(h) * p.head_dim;
    for (int i = 0; i < half; ++i) {
      float* a = kMode == RopeMode::kNeox ? head + i : head + 2 * i;
      float* b = kMode == RopeMode::kNeox ? head + i + half : head + 2 * i + 1;
      const float x0 = *a, x1 = *b, c = cs[2 * i], s = cs[2 * i + 1];
      *a = x0 * c - x1 * s;
      *b = x0 * s + x1 * c;
    }
  }
}

}  // namespace

void Rope(float* x, int64_t n_tok, const int32_t* pos, const RopeParams& p) {
  constexpr int kMaxRot = 1024;
  TANDEM_CHECK(p.n_rot % 2 == 0 && p.n_rot <= p.head_dim && p.n_rot <= kMaxRot);
  const int64_t row = static_cast<int64_t>(p.n_head) * p.head_dim;
  // Angles are built the way llama.cpp builds them so results stay bit-close: one float powf for the ratio
  // between successive pair frequencies, the angle advanced by repeated float multiplies, each pair's factor
  // dividing it, freq_scale last (then YaRN's mix, when on). One token's angles serve all of its heads.
  const float theta_ratio = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  const bool yarn = p.ext_factor != 0.0f;
  float corr[2] = {0.0f, 0.0f};
  float mscale = p.attn_factor;
  if (yarn) {
    YarnCorrDims(p, corr);
    mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
  }
#pragma omp parallel for schedule(static) if (n_tok >= 16 && n_tok * row >= (1 << 15))
  for (int64_t t = 0; t < n_tok; ++t) {
    float cs[kMaxRot];
    float theta_unscaled = static_cast<float>(pos[t]);
    for (int i = 0; i < p.n_rot / 2; ++i) {
      const float extrap = p.freq_factors != nullptr ? theta_unscaled / p.freq_factors[i] : theta_unscaled;
      float theta = p.freq_scale * extrap;
      if (yarn) {
        const float y = (static_cast<float>(i) - corr[0]) / std::max(0.001f, corr[1] - corr[0]);
        const float ramp = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
        theta = theta * (1.0f - ramp) + extrap * ramp;
      }
      cs[2 * i] = std::cos(theta);
      cs[2 * i + 1] = std::sin(theta);
      if (mscale != 1.0f) {
        cs[2 * i] *= mscale;
        cs[2 * i + 1] *= mscale;
      }
      theta_unscaled *= theta_ratio;
    }
    if (p.mode == RopeMode::kNeox) {
      RotateHeads<RopeMode::kNeox>(x + t * row, p, cs);
    } else {
      RotateHeads<RopeMode::kNorm>(x + t * row, p, cs);
    }
  }
}

// The formula of runtime/ops.h in double, each angle from its own power.
void RopeRef(float* x, int64_t n_tok, const int32_t* pos, const RopeParams& p) {
  const int64_t row = static_cast<int64_t>(p.n_head) * p.head_dim;
  const bool yarn = p.ext_factor != 0.0f;
  double lo = 0, hi = 0, mscale = p.attn_factor;
  if (yarn) {
    auto corr_dim = [&](double beta) {
      return p.n_rot * std::log(p.n_ctx_orig / (beta * 2.0 * M_PI)) / (2.0 * std::log(static_cast<double>(p.freq_base)));
    };
    lo = std::max(0.0, std::floor(corr_dim(p.beta_fast)));
    hi = std::min(static_cast<double>(p.n_rot - 1), std::ceil(corr_dim(p.beta_slow)));
    mscale *= 1.0 + 0.1 * std::log(1.0 / p.freq_scale);
  }
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int h = 0; h < p.n_head; ++h) {
      float* head = x + t * row + static_cast<int64_t>(h) * p.head_dim;
      for (int i = 0; i < p.n_rot / 2; ++i) {
        const double ff = p.freq_factors != nullptr ? p.freq_factors[i] : 1.0;
        const double extrap =
            static_cast<double>(pos[t]) * std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot) / ff;
        double theta = p.freq_scale * extrap;
        if (yarn) {
          const double r = p.ext_factor * (1.0 - std::clamp((i - lo) / std::max(0.001, hi - lo), 0.0, 1.0));
          theta = theta * (1.0 - r) + extrap * r;
        }
        const double c = std::cos(theta) * mscale;
        const double s = std::sin(theta) * mscale;
        int a = 0, b = 0;
        PairDims(p, i, &a, &b);
        const double x0 = head[a];
        const double x1 = head[b];
        head[a] = static_cast<float>(x0 * c - x1 * s);
        head[b] = static_cast<float>(x0 * s + x1 * c);
      }
    }
  }
}

}  // namespace tandem::cpu

#include "runtime/rope_scaling.h"

#include <cmath>
#include <numbers>

#include "core/status.h"

namespace tandem {

std::vector<float> Llama3RopeFreqFactors(int n_rot, float freq_base, float factor, float low_freq_factor,
                                         float high_freq_factor, int n_ctx_orig) {
  TANDEM_CHECK(n_rot > 0 && n_rot % 2 == 0);
  TANDEM_CHECK(factor > 0.0f && low_freq_factor > 0.0f && high_freq_factor > low_freq_factor && n_ctx_orig > 0);
  const double orig = n_ctx_orig;
  const double low_wavelen = orig / low_freq_factor;    // longer than this: fully interpolated
  const double high_wavelen = orig / high_freq_factor;  // shorter than this: untouched
  std::vector<float> factors(static_cast<size_t>(n_rot / 2));
  for (int i = 0; i < n_rot / 2; ++i) {
    const double freq = std::pow(static_cast<double>(freq_base), -2.0 * i / n_rot);
    const double wavelen = 2.0 * std::numbers::pi / freq;
    double f = 0.0;
    if (wavelen < high_wavelen) {
      f = 1.0;
    } else if (wavelen > low_wavelen) {
      f = factor;
    } else {
      const double smooth = (orig / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    factors[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return factors;
}

}  // namespace tandem

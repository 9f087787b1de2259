// Rope scalings that a family expresses as per-pair frequency factors (RopeParams::freq_factors): the angle of
// pair i is divided by factors[i]. Files usually carry them (rope_freqs.weight); these build them when a file
// gives only the scaling's parameters.
#pragma once

#include <vector>

namespace tandem {

// Llama 3.1's "llama3" scaling, as the GGUF converter writes rope_freqs: with freq_i = freq_base^(-2i/n_rot) and
// wavelength w_i = 2 pi / freq_i, pair i (0 <= i < n_rot/2) gets
//   1                                   when w_i < n_ctx_orig / high_freq_factor   (high frequencies: kept)
//   factor                              when w_i > n_ctx_orig / low_freq_factor    (low frequencies: interpolated)
//   1 / ((1 - s) / factor + s)          between, s = (n_ctx_orig / w_i - low_freq_factor) /
//                                                    (high_freq_factor - low_freq_factor)
// Computed in double and rounded once; the converter's float32 arithmetic agrees to a few ulp.
// n_rot even and > 0, factor > 0, high_freq_factor > low_freq_factor > 0, n_ctx_orig > 0.
std::vector<float> Llama3RopeFreqFactors(int n_rot, float freq_base, float factor, float low_freq_factor,
                                         float high_freq_factor, int n_ctx_orig);

}  // namespace tandem

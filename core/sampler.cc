// Sampling chain in llama.cpp's common order: penalties (repetition, then frequency and presence), top-k, top-p, min-p, temperature, draw.
// top-p and min-p see the distribution at temperature 1, as in llama.cpp; only the draw sees the temperature.
#include "core/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/status.h"

namespace tandem {
namespace {

// Highest logit first; equal logits go to the lower id so results never depend on sort internals.
bool HigherLogit(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  if (a.first != b.first) return a.first > b.first;
  return a.second < b.second;
}

}  // namespace

int32_t Argmax(std::span<const float> logits) {
  TANDEM_CHECK(!logits.empty());
  int32_t best = 0;
  float best_logit = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > best_logit) {  // strict: the first (lowest) id wins ties; NaN never wins
      best_logit = logits[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

Sampler::Sampler(const SamplerOptions& opts, int n_vocab) : opts_(opts), rng_(opts.seed) {
  TANDEM_CHECK(n_vocab > 0);
  cand_.reserve(static_cast<size_t>(n_vocab));
  seen_.assign(static_cast<size_t>(n_vocab), 0);
}

int32_t Sampler::Sample(std::span<float> logits, std::span<const int32_t> history) {
  TANDEM_CHECK(!logits.empty() && logits.size() <= cand_.capacity());
  const int32_t n_vocab = static_cast<int32_t>(logits.size());

  // Penalties, as llama.cpp applies them: each distinct recent token once, with its count in the window. The
  // repetition penalty pushes its logit toward "less likely" on either side of 0; frequency and presence subtract.
  const bool penalize = opts_.repeat_penalty != 1.0f || opts_.presence_penalty != 0.0f ||
                        opts_.frequency_penalty != 0.0f;
  if (penalize && opts_.repeat_last_n != 0 && !history.empty()) {
    const size_t window = opts_.repeat_last_n < 0 ? history.size()
                                                  : std::min(history.size(), static_cast<size_t>(opts_.repeat_last_n));
    const std::span<const int32_t> recent = history.last(window);
    for (int32_t id : recent) {
      if (id >= 0 && id < n_vocab) ++seen_[id];
    }
    for (int32_t id : recent) {
      if (id < 0 || id >= n_vocab || seen_[id] == 0) continue;  // out of range, or already applied
      const int32_t count = seen_[id];
      seen_[id] = 0;
      float& l = logits[id];
      l = l <= 0 ? l * opts_.repeat_penalty : l / opts_.repeat_penalty;
      l -= static_cast<float>(count) * opts_.frequency_penalty + opts_.presence_penalty;
    }
  }

  if (opts_.temp <= 0) return Argmax(logits);

  cand_.clear();  // keeps capacity: no allocation below
  for (int32_t i = 0; i < n_vocab; ++i) cand_.emplace_back(logits[i], i);
  size_t n = cand_.size();
  bool sorted = false;

  if (opts_.top_k > 0 && static_cast<size_t>(opts_.top_k) < n) {
    n = static_cast<size_t>(opts_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + n, cand_.end(), HigherLogit);
    sorted = true;
  }

  // Smallest prefix (by descending probability) whose mass reaches top_p.
  if (opts_.top_p < 1.0f) {
    if (!sorted) std::sort(cand_.begin(), cand_.begin() + n, HigherLogit);
    sorted = true;
    const float max_logit = cand_[0].first;
    double total = 0;
    for (size_t i = 0; i < n; ++i) total += std::exp(static_cast<double>(cand_[i].first - max_logit));
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += std::exp(static_cast<double>(cand_[i].first - max_logit)) / total;
      if (cum >= opts_.top_p) {
        n = i + 1;
        break;
      }
    }
  }

  // Keep tokens whose probability is at least min_p times the top one's (in logits: >= max + log(min_p)).
  if (opts_.min_p > 0.0f) {
    float max_logit = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) max_logit = std::max(max_logit, cand_[i].first);
    const float threshold = max_logit + std::log(opts_.min_p);
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      if (cand_[i].first >= threshold) cand_[kept++] = cand_[i];
    }
    if (kept > 0) n = kept;  // all-NaN rows keep everything rather than nothing
  }

  // Temperature, softmax and draw; weights overwrite the logits in place.
  float max_logit = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) max_logit = std::max(max_logit, cand_[i].first);
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    const double w = std::exp(static_cast<double>(cand_[i].first - max_logit) / opts_.temp);
    cand_[i].first = static_cast<float>(w);
    total += w;
  }
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;  // uniform in [0, total)
  double cum = 0;
  for (size_t i = 0; i < n; ++i) {
    cum += cand_[i].first;
    if (u < cum) return cand_[i].second;
  }
  return cand_[n - 1].second;  // rounding left u at the very top
}

}  // namespace tandem

// MoE router: softmax over each token's expert logits, the k most probable experts (descending probability,
// ties to the lower id), and their probabilities renormalized to sum to 1.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/status.h"
#include "cpu_backend/kernels.h"

namespace tandem::cpu {
namespace {

// True when expert a (probability pa) ranks before expert b: higher probability, then lower id.
template <typename T>
bool RanksBefore(T pa, int a, T pb, int b) {
  return pa > pb || (pa == pb && a < b);
}

inline int FirstUnpicked(const int32_t* ids, int n_picked) {
  for (int e = 0;; ++e) {
    if (std::find(ids, ids + n_picked, e) == ids + n_picked) return e;
  }
}

// Top-k without a sort buffer: each pick is the best expert ranking strictly after the previous pick.
template <typename T, typename ProbOf>
void TopK(int n_expert, int k, ProbOf prob_of, int32_t* ids, T* picked_probs) {
  for (int slot = 0; slot < k; ++slot) {
    int best = -1;
    T best_p = T(0);
    for (int e = 0; e < n_expert; ++e) {
      const T pe = prob_of(e);
      if (slot > 0 && !RanksBefore(picked_probs[slot - 1], ids[slot - 1], pe, e)) continue;
      if (best < 0 || RanksBefore(pe, e, best_p, best)) {
        best = e;
        best_p = pe;
      }
    }
    if (best < 0) best = FirstUnpicked(ids, slot);  // only when NaN probabilities defeat the ordering
    ids[slot] = best;
    picked_probs[slot] = prob_of(best);
  }
}

}  // namespace

void MoeRoute(const float* logits, int64_t n_tok, int n_expert, int k, int32_t* ids, float* weights) {
  TANDEM_CHECK(k >= 1 && k <= n_expert);
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* row = logits + t * n_expert;
    // Softmax as llama.cpp rounds it: e^(x - max) in float, summed in double, scaled by a float 1/sum.
    float max_logit = -std::numeric_limits<float>::infinity();
    for (int e = 0; e < n_expert; ++e) max_logit = std::max(max_logit, row[e]);
    double sum = 0.0;
    for (int e = 0; e < n_expert; ++e) sum += std::exp(row[e] - max_logit);
    const float inv_sum = static_cast<float>(1.0 / sum);
    // Recomputing a probability gives the same float every time, so no per-expert buffer is needed.
    auto prob_of = [&](int e) { return std::exp(row[e] - max_logit) * inv_sum; };

    int32_t* ids_t = ids + t * k;
    float* w_t = weights + t * k;
    TopK<float>(n_expert, k, prob_of, ids_t, w_t);
    double picked_sum = 0.0;
    for (int i = 0; i < k; ++i) picked_sum += w_t[i];
    const float norm = static_cast<float>(picked_sum);
    for (int i = 0; i < k; ++i) w_t[i] /= norm;
  }
}

void MoeRouteRef(const float* logits, int64_t n_tok, int n_expert, int k, int32_t* ids, float* weights) {
  std::vector<double> probs(static_cast<size_t>(n_expert));
  std::vector<double> picked(static_cast<size_t>(k));
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* row = logits + t * n_expert;
    double max_logit = -std::numeric_limits<double>::infinity();
    for (int e = 0; e < n_expert; ++e) max_logit = std::max(max_logit, static_cast<double>(row[e]));
    double sum = 0.0;
    for (int e = 0; e < n_expert; ++e) {
      probs[e] = std::exp(row[e] - max_logit);
      sum += probs[e];
    }
    for (int e = 0; e < n_expert; ++e) probs[e] /= sum;
    TopK<double>(n_expert, k, [&](int e) { return probs[e]; }, ids + t * k, picked.data());
    double picked_sum = 0.0;
    for (int i = 0; i < k; ++i) picked_sum += picked[i];
    for (int i = 0; i < k; ++i) weights[t * k + i] = static_cast<float>(picked[i] / picked_sum);
  }
}

}  // namespace tandem::cpu

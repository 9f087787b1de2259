// MoE router (runtime/ops.h's MoeRouteParams): scores per expert, the k best (descending, ties to the lower id),
// their weights, optionally renormalized and scaled.
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

// llama.cpp clamps the sum it normalizes by from below (2^-14, an fp16 normal) so near-zero sigmoid scores stay finite.
constexpr float kMinWeightSum = 6.103515625e-5f;

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

void MoeRoute(const float* logits, int64_t n_tok, const MoeRouteParams& p, int32_t* ids, float* weights) {
  const int n_expert = p.n_expert, k = p.k;
  TANDEM_CHECK(k >= 1 && k <= n_expert);
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* row = logits + t * n_expert;
    int32_t* ids_t = ids + t * k;
    float* w_t = weights + t * k;
    // Recomputing a score gives the same float every time, so no per-expert buffer is needed.
    float max_logit = -std::numeric_limits<float>::infinity();
    float inv_sum = 1.0f;
    if (p.gating == MoeGating::kSoftmax) {
      // Softmax as llama.cpp rounds it: e^(x - max) in float, summed in double, scaled by a float 1/sum.
      for (int e = 0; e < n_expert; ++e) max_logit = std::max(max_logit, row[e]);
      double sum = 0.0;
      for (int e = 0; e < n_expert; ++e) sum += std::exp(row[e] - max_logit);
      inv_sum = static_cast<float>(1.0 / sum);
    }
    auto prob_of = [&](int e) -> float {
      switch (p.gating) {
        case MoeGating::kSoftmax: return std::exp(row[e] - max_logit) * inv_sum;
        case MoeGating::kSigmoid: return 1.0f / (1.0f + std::exp(-row[e]));
        case MoeGating::kSoftmaxTopK: return row[e];
      }
      return 0.0f;
    };
    if (p.selection_bias == nullptr && p.gating == MoeGating::kSoftmax) {  // the common case, without the switch
      TopK<float>(n_expert, k, [&](int e) { return std::exp(row[e] - max_logit) * inv_sum; }, ids_t, w_t);
    } else if (p.selection_bias == nullptr) {
      TopK<float>(n_expert, k, prob_of, ids_t, w_t);
    } else {
      TopK<float>(n_expert, k, [&](int e) { return prob_of(e) + p.selection_bias[e]; }, ids_t, w_t);
      for (int i = 0; i < k; ++i) w_t[i] = prob_of(ids_t[i]);  // the bias ranks; the weight is the score's
    }
    if (p.gating == MoeGating::kSoftmaxTopK) {  // softmax over the chosen logits
      float m = -std::numeric_limits<float>::infinity();
      for (int i = 0; i < k; ++i) m = std::max(m, w_t[i]);
      double sum = 0.0;
      for (int i = 0; i < k; ++i) {
        w_t[i] = std::exp(w_t[i] - m);
        sum += w_t[i];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int i = 0; i < k; ++i) w_t[i] *= inv;
    }
    if (p.normalize) {
      double picked_sum = 0.0;
      for (int i = 0; i < k; ++i) picked_sum += w_t[i];
      const float norm = std::max(static_cast<float>(picked_sum), kMinWeightSum);
      for (int i = 0; i < k; ++i) w_t[i] /= norm;
    }
    if (p.scale != 1.0f) {
      for (int i = 0; i < k; ++i) w_t[i] *= p.scale;
    }
  }
}

void MoeRouteRef(const float* logits, int64_t n_tok, const MoeRouteParams& p, int32_t* ids, float* weights) {
  const int n_expert = p.n_expert, k = p.k;
  std::vector<double> probs(static_cast<size_t>(n_expert)), rank(static_cast<size_t>(n_expert));
  std::vector<double> picked(static_cast<size_t>(k));
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* row = logits + t * n_expert;
    if (p.gating == MoeGating::kSoftmax) {
      double max_logit = -std::numeric_limits<double>::infinity();
      for (int e = 0; e < n_expert; ++e) max_logit = std::max(max_logit, static_cast<double>(row[e]));
      double sum = 0.0;
      for (int e = 0; e < n_expert; ++e) {
        probs[e] = std::exp(row[e] - max_logit);
        sum += probs[e];
      }
      for (int e = 0; e < n_expert; ++e) probs[e] /= sum;
    } else {
      for (int e = 0; e < n_expert; ++e) {
        probs[e] = p.gating == MoeGating::kSigmoid ? 1.0 / (1.0 + std::exp(-static_cast<double>(row[e]))) : row[e];
      }
    }
    for (int e = 0; e < n_expert; ++e) rank[e] = probs[e] + (p.selection_bias ? p.selection_bias[e] : 0.0);
    TopK<double>(n_expert, k, [&](int e) { return rank[e]; }, ids + t * k, picked.data());
    for (int i = 0; i < k; ++i) picked[i] = probs[ids[t * k + i]];
    if (p.gating == MoeGating::kSoftmaxTopK) {
      double m = -std::numeric_limits<double>::infinity(), sum = 0.0;
      for (int i = 0; i < k; ++i) m = std::max(m, picked[i]);
      for (int i = 0; i < k; ++i) sum += (picked[i] = std::exp(picked[i] - m));
      for (int i = 0; i < k; ++i) picked[i] /= sum;
    }
    if (p.normalize) {
      double picked_sum = 0.0;
      for (int i = 0; i < k; ++i) picked_sum += picked[i];
      picked_sum = std::max(picked_sum, static_cast<double>(kMinWeightSum));
      for (int i = 0; i < k; ++i) picked[i] /= picked_sum;
    }
    for (int i = 0; i < k; ++i) weights[t * k + i] = static_cast<float>(picked[i] * p.scale);
  }
}

}  // namespace tandem::cpu

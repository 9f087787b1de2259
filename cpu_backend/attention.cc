// Causal softmax attention over one layer's KV cache, with grouped-query heads, an optional sliding window, sinks
// and logit soft-capping (runtime/ops.h's AttentionParams).
//
// Rounding follows llama.cpp's non-flash path: scores = (q.k) * scale in float, softmax with e^(s - max) in
// float summed in double, then out = sum_j p_j v_j in float. With an F16 cache llama.cpp's matmuls convert
// their float operand to F16 first, so q (for q.k) and the probabilities (for p.v) are rounded through fp16.
// The per-row loops use AVX2/FMA/F16C when ActiveIsa() allows it (the Isa switch of kernels.h), else portable
// loops that keep the same float operation order, so the result does not depend on the ISA.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/status.h"
#include "cpu_backend/attention_rows.h"
#include "cpu_backend/f16_fast.h"
#include "cpu_backend/kernels.h"

namespace tandem::cpu {
namespace {

// The two loops over one cache row, portable (vectorised by the compiler) or AVX2 (attention_avx2.cc).
template <typename Elem>
struct RowOps {
  float (*dot)(const float* q, const Elem* k, int n);          // sum q[d] * k[d]
  void (*axpy)(float p, const Elem* v, int n, float* out);     // out[d] += p * v[d]
};

template <typename Elem>
float Widen(Elem x) {
  if constexpr (std::is_same_v<Elem, f16_t>) {
    return HalfToFloat(x);
  } else {
    return x;
  }
}

// The portable loops keep the AVX2 path's exact order (two 8-lane fused accumulators, the same pairwise
// horizontal sum, fused axpy), so every ISA gives bit-identical attention: quantized models turn even last-bit
// differences into rounding-boundary crossings downstream.
template <typename Elem>
float DotPortable(const float* q, const Elem* k, int n) {
  float acc[16] = {};
  int d = 0;
  for (; d + 16 <= n; d += 16) {
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(q[d + l], Widen(k[d + l]), acc[l]);
  }
  if (d + 8 <= n) {
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(q[d + l], Widen(k[d + l]), acc[l]);
    d += 8;
  }
  float half[4];
  for (int i = 0; i < 4; ++i) half[i] = (acc[i] + acc[i + 8]) + (acc[i + 4] + acc[i + 12]);
  float sum = (half[0] + half[2]) + (half[1] + half[3]);
  for (; d < n; ++d) sum = std::fma(q[d], Widen(k[d]), sum);
  return sum;
}

template <typename Elem>
void AxpyPortable(float p, const Elem* v, int n, float* out) {
  for (int d = 0; d < n; ++d) out[d] = std::fma(p, Widen(v[d]), out[d]);
}

template <typename Elem>
RowOps<Elem> PickRowOps() {
  if (static_cast<int>(ActiveIsa()) >= static_cast<int>(Isa::kAvx2)) {
    if constexpr (std::is_same_v<Elem, f16_t>) {
      return {attention_rows::DotF16Avx2, attention_rows::AxpyF16Avx2};
    } else {
      return {attention_rows::DotF32Avx2, attention_rows::AxpyF32Avx2};
    }
  }
  return {DotPortable<Elem>, AxpyPortable<Elem>};
}

// scores[j] = softmax over j of (dots[j] * scale), in place, with the options of AttentionParams: the dots capped
// first (softcap), and the head's sink logit joining the normalisation. With an fp16 cache the probabilities are
// rounded through fp16 as llama.cpp's p.v matmul does.
void Softmax(float* scores, int64_t n, const AttentionParams& p, int head, bool round_half) {
  float max_score = -std::numeric_limits<float>::infinity();
  const float scale = p.scale;
  if (p.softcap > 0.0f) {
    const float inv_cap = 1.0f / p.softcap;  // llama.cpp scales by the reciprocal
    for (int64_t j = 0; j < n; ++j) scores[j] = p.softcap * std::tanh(scores[j] * inv_cap);
  }
  for (int64_t j = 0; j < n; ++j) {
    scores[j] *= scale;
    max_score = std::max(max_score, scores[j]);
  }
  const float sink = p.sinks != nullptr ? p.sinks[head] : -std::numeric_limits<float>::infinity();
  max_score = std::max(max_score, sink);
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    scores[j] = std::exp(scores[j] - max_score);
    sum += scores[j];
  }
  if (p.sinks != nullptr) sum += std::exp(sink - max_score);
  const float inv_sum = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) {
    scores[j] *= inv_sum;
    if (round_half) scores[j] = RoundThroughHalf(scores[j]);
  }
}

// The first cache row a query at position `pos` sees.
inline int64_t FirstVisible(int64_t pos, const AttentionParams& p) {
  return p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
}

// The visible keys of one KV head: n_a rows from the first visible position's row, then, where a ring cache
// wrapped, the rest from row 0. Key j is row(j) in either cache.
template <typename Elem>
struct VisibleRows {
  const Elem* a;
  int64_t n_a;
  const Elem* b;
  int64_t stride;
  const Elem* row(int64_t j) const { return j < n_a ? a + j * stride : b + (j - n_a) * stride; }
};
template <typename Elem>
VisibleRows<Elem> VisibleRowsOf(const void* cache, const KvLayer& kv, int64_t first, int64_t n_visible,
                                int64_t head_offset) {
  const Elem* base = static_cast<const Elem*>(cache) + head_offset;
  return {base + kv.Row(first) * kv.row_elems, std::min(n_visible, kv.RowsBeforeWrap(first)), base, kv.row_elems};
}

template <typename Elem>
void AttendOneHead(const RowOps<Elem>& ops, const float* q, const KvLayer& kv, int head, int kv_head, int64_t first,
                   int64_t end, const AttentionParams& p, float* scores, float* out) {
  constexpr bool kHalf = std::is_same_v<Elem, f16_t>;
  const int64_t n_visible = end - first;
  const int64_t head_offset = static_cast<int64_t>(kv_head) * p.head_dim;
  const VisibleRows<Elem> k_rows = VisibleRowsOf<Elem>(kv.k, kv, first, n_visible, head_offset);
  const VisibleRows<Elem> v_rows = VisibleRowsOf<Elem>(kv.v, kv, first, n_visible, head_offset);

  const float* q_used = q;
  if constexpr (kHalf) {
    // The fp16-rounded q lives in this head's output slice until the weighted sum overwrites it.
    for (int d = 0; d < p.head_dim; ++d) out[d] = RoundThroughHalf(q[d]);
    q_used = out;
  }
  for (int64_t j = 0; j < n_visible; ++j) scores[j] = ops.dot(q_used, k_rows.row(j), p.head_dim);
  Softmax(scores, n_visible, p, head, kHalf);
  for (int d = 0; d < p.head_dim; ++d) out[d] = 0.0f;
  for (int64_t j = 0; j < n_visible; ++j) ops.axpy(scores[j], v_rows.row(j), p.head_dim, out);
}

template <typename Elem>
void AttentionTyped(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
                    float* out, float* scratch) {
  const int group = p.n_head / p.n_head_kv;
  const int64_t q_row = static_cast<int64_t>(p.n_head) * p.head_dim;
  const int64_t n_items = n_tok * p.n_head;
  const RowOps<Elem> ops = PickRowOps<Elem>();
  // Work per (token, head) grows with the token's position, so hand items out dynamically.
#pragma omp parallel if (n_items > 1 && (pos0 + n_tok) * n_items * p.head_dim >= (1 << 14))
  {
    float* scores = scratch + static_cast<int64_t>(omp_get_thread_num()) * kv.n_ctx;
#pragma omp for schedule(dynamic, 4)
    for (int64_t item = 0; item < n_items; ++item) {
      const int64_t t = item / p.n_head;
      const int h = static_cast<int>(item % p.n_head);
      const int64_t offset = t * q_row + static_cast<int64_t>(h) * p.head_dim;
      const int64_t pos = pos0 + t;
      AttendOneHead<Elem>(ops, q + offset, kv, h, h / group, FirstVisible(pos, p), pos + 1, p, scores, out + offset);
    }
  }
}

// fp16 cache on AVX-512: one item is a token and a KV head, with all the query heads that read it, so each cache
// row is widened once for the group (attention_avx512.cc). Bit-identical to AttendOneHead.
void AttentionGroupedF16(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
                         float* out, float* scratch) {
  const int group = p.n_head / p.n_head_kv;
  const int64_t q_row = static_cast<int64_t>(p.n_head) * p.head_dim;
  const int64_t n_items = n_tok * p.n_head_kv;
  const auto* k_base = static_cast<const uint16_t*>(kv.k);
  const auto* v_base = static_cast<const uint16_t*>(kv.v);
  const auto row_elems = static_cast<size_t>(kv.row_elems);
  const auto score_stride = static_cast<size_t>(kv.n_ctx);
#pragma omp parallel if (n_items > 1 && (pos0 + n_tok) * n_items * group * p.head_dim >= (1 << 14))
  {
    float* scores = scratch + static_cast<int64_t>(omp_get_thread_num()) * kv.n_ctx * group;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_items; ++item) {
      const int64_t t = item / p.n_head_kv;
      const int kv_head = static_cast<int>(item % p.n_head_kv);
      const int64_t first = FirstVisible(pos0 + t, p);
      const int64_t n_visible = pos0 + t + 1 - first;
      const int64_t offset = t * q_row + static_cast<int64_t>(kv_head) * group * p.head_dim;  // the group's heads
      float* o = out + offset;
      // The fp16-rounded queries live in the group's output slice until the weighted sums overwrite it.
      for (int64_t i = 0; i < static_cast<int64_t>(group) * p.head_dim; ++i) o[i] = RoundThroughHalf(q[offset + i]);
      // A ring that wrapped gives two runs of rows: from the first visible one to its end, then from row 0.
      const size_t head_offset = static_cast<size_t>(kv_head) * p.head_dim;
      const size_t row_a = static_cast<size_t>(kv.Row(first)) * row_elems + head_offset;
      const int64_t n_a = std::min(n_visible, kv.RowsBeforeWrap(first));
      attention_rows::DotsF16Avx512(o, group, p.head_dim, k_base + row_a, row_elems, n_a, scores, score_stride);
      attention_rows::DotsF16Avx512(o, group, p.head_dim, k_base + head_offset, row_elems, n_visible - n_a,
                                    scores + n_a, score_stride);
      for (int g = 0; g < group; ++g) {
        Softmax(scores + g * score_stride, n_visible, p, kv_head * group + g, /*round_half=*/true);
      }
      attention_rows::WeightedSumsF16Avx512(scores, score_stride, group, p.head_dim,
                                            {.a = v_base + row_a, .n_a = n_a, .b = v_base + head_offset,
                                             .n = n_visible, .row_elems = row_elems},
                                            o);
    }
  }
}

}  // namespace

size_t AttentionScratchBytes(int64_t n_ctx, int n_head, int n_threads) {
  // Per thread, one score row for each query head of a KV group (at most n_head of them); n_threads <= 0 means
  // "as many as OpenMP would use now".
  const int threads = n_threads > 0 ? n_threads : omp_get_max_threads();
  return static_cast<size_t>(threads) * static_cast<size_t>(n_ctx) * static_cast<size_t>(std::max(n_head, 1)) *
         sizeof(float);
}

void Attention(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
               float* out, void* scratch) {
  TANDEM_CHECK(kv.type == DType::kF32 || kv.type == DType::kF16);
  TANDEM_CHECK(p.n_head_kv > 0 && p.n_head % p.n_head_kv == 0);
  TANDEM_CHECK(static_cast<int64_t>(p.n_head_kv) * p.head_dim == kv.row_elems);
  TANDEM_CHECK(kv.HoldsAttention(pos0, n_tok, p.window));
  auto* scores = static_cast<float*>(scratch);
  if (kv.type == DType::kF16) {
    if (ActiveIsa() == Isa::kAvx512 && attention_rows::GroupedF16Avx512Supports(p.head_dim)) {
      AttentionGroupedF16(q, kv, n_tok, pos0, p, out, scores);
      return;
    }
    AttentionTyped<f16_t>(q, kv, n_tok, pos0, p, out, scores);
  } else {
    AttentionTyped<float>(q, kv, n_tok, pos0, p, out, scores);
  }
}

void AttentionRef(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
                  float* out) {
  const bool half = kv.type == DType::kF16;
  const int group = p.n_head / p.n_head_kv;
  const int64_t q_row = static_cast<int64_t>(p.n_head) * p.head_dim;
  auto cache_value = [&](const void* base, int64_t j, int64_t e) -> double {
    const int64_t i = kv.Row(j) * kv.row_elems + e;
    return half ? F16ToF32(static_cast<const f16_t*>(base)[i]) : static_cast<const float*>(base)[i];
  };
  // llama.cpp's fp16 operand rounding is part of the semantics with an F16 cache, so the reference does it too.
  auto operand = [&](double x) -> double { return half ? F16ToF32(F32ToF16(static_cast<float>(x))) : x; };

  std::vector<double> scores(static_cast<size_t>(pos0 + n_tok));  // by position
  for (int64_t t = 0; t < n_tok; ++t) {
    const int64_t pos = pos0 + t;
    const int64_t first = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
    for (int h = 0; h < p.n_head; ++h) {
      const float* qh = q + t * q_row + static_cast<int64_t>(h) * p.head_dim;
      const int64_t kv_offset = static_cast<int64_t>(h / group) * p.head_dim;
      double max_score = p.sinks != nullptr ? p.sinks[h] : -std::numeric_limits<double>::infinity();
      for (int64_t j = first; j <= pos; ++j) {
        double dot = 0.0;
        for (int d = 0; d < p.head_dim; ++d) dot += operand(qh[d]) * cache_value(kv.k, j, kv_offset + d);
        if (p.softcap > 0.0f) dot = p.softcap * std::tanh(dot / p.softcap);
        scores[j] = dot * p.scale;
        max_score = std::max(max_score, scores[j]);
      }
      double sum = p.sinks != nullptr ? std::exp(p.sinks[h] - max_score) : 0.0;
      for (int64_t j = first; j <= pos; ++j) {
        scores[j] = std::exp(scores[j] - max_score);
        sum += scores[j];
      }
      for (int64_t j = first; j <= pos; ++j) scores[j] = operand(scores[j] / sum);
      float* oh = out + t * q_row + static_cast<int64_t>(h) * p.head_dim;
      for (int d = 0; d < p.head_dim; ++d) {
        double acc = 0.0;
        for (int64_t j = first; j <= pos; ++j) acc += scores[j] * cache_value(kv.v, j, kv_offset + d);
        oh[d] = static_cast<float>(acc);
      }
    }
  }
}

}  // namespace tandem::cpu

// MoE experts on the host: the routed (token, slot) pairs grouped by expert, and the naive reference of the whole
// op (runtime/ops.h's MoeExpertsArgs). The fast path is CpuBackend::MoeExperts, which runs the groups through
// MatMulBatch.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/status.h"
#include "cpu_backend/kernels.h"

namespace tandem::cpu {
namespace {

size_t Align64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

size_t MoeGroupingBytes(int64_t max_tokens, int n_expert, int k) {
  const auto pairs = static_cast<size_t>(std::max<int64_t>(max_tokens, 1) * std::max(k, 1));
  return 2 * Align64(pairs * sizeof(int32_t)) + Align64(pairs * sizeof(float)) +
         Align64(static_cast<size_t>(n_expert + 1) * sizeof(int64_t));
}

ExpertGroups CarveExpertGroups(void* block, int64_t max_tokens, int n_expert, int k) {
  const auto pairs = static_cast<size_t>(std::max<int64_t>(max_tokens, 1) * std::max(k, 1));
  auto* p = static_cast<uint8_t*>(block);
  ExpertGroups g;
  g.rows = reinterpret_cast<int32_t*>(p);
  p += Align64(pairs * sizeof(int32_t));
  g.slot_rows = reinterpret_cast<int32_t*>(p);
  p += Align64(pairs * sizeof(int32_t));
  g.row_weights = reinterpret_cast<float*>(p);
  p += Align64(pairs * sizeof(float));
  g.expert_begin = reinterpret_cast<int64_t*>(p);
  return g;
}

void GroupByExpert(const int32_t* ids, const float* weights, int64_t n_tok, int k, int n_expert, ExpertGroups& g) {
  // A counting sort: each expert's (token, slot) pairs in token order.
  std::fill(g.expert_begin, g.expert_begin + n_expert + 1, 0);
  for (int64_t i = 0; i < n_tok * k; ++i) {
    TANDEM_CHECK(ids[i] >= 0 && ids[i] < n_expert);
    ++g.expert_begin[ids[i] + 1];
  }
  for (int e = 0; e < n_expert; ++e) g.expert_begin[e + 1] += g.expert_begin[e];
  // Fill from each expert's start, moving it to the end, then move the starts back.
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int j = 0; j < k; ++j) {
      const int64_t at = g.expert_begin[ids[t * k + j]]++;
      g.rows[at] = static_cast<int32_t>(t);
      g.slot_rows[at] = static_cast<int32_t>(j * n_tok + t);
      g.row_weights[at] = weights[t * k + j];
    }
  }
  for (int e = n_expert; e > 0; --e) g.expert_begin[e] = g.expert_begin[e - 1];
  g.expert_begin[0] = 0;
}

int FirstComputedExpert(const MoeExpertsArgs& a) {
  for (int e = 0; e < a.n_expert; ++e) {
    if (!SkipsExpert(a, e)) return e;
  }
  return -1;
}

int64_t MoeOutWidth(const MoeExpertsArgs& a) {
  const int first = FirstComputedExpert(a);
  return first >= 0 ? a.experts[first].gate->cols : a.n_embd;
}

void ZeroSkippedSlots(const MoeExpertsArgs& a, const ExpertGroups& g, int64_t n_embd) {
  for (int e = 0; e < a.n_expert; ++e) {
    if (!SkipsExpert(a, e)) continue;
    for (int64_t i = g.expert_begin[e]; i < g.expert_begin[e + 1]; ++i) {
      float* row = a.out + static_cast<int64_t>(g.slot_rows[i]) * n_embd;
      std::fill(row, row + n_embd, 0.0f);
    }
  }
}

void GatherExpertInputs(const MoeExpertsArgs& a, const ExpertMatrices& m, const ExpertGroups& g, int64_t begin,
                        int64_t end, float* xe) {
  const int64_t n_embd = m.gate->cols;
  for (int64_t i = begin; i < end; ++i) {
    const float* src = a.x + static_cast<int64_t>(g.rows[i]) * n_embd;
    float* dst = xe + (i - begin) * n_embd;
    if (a.weight_input) {
      for (int64_t c = 0; c < n_embd; ++c) dst[c] = g.row_weights[i] * src[c];
    } else {
      std::memcpy(dst, src, static_cast<size_t>(n_embd) * sizeof(float));
    }
  }
}

void AddExpertGateUpBiases(const ExpertMatrices& m, int64_t n, float* gate, float* up) {
  if (m.gate_bias != nullptr) AddBias(gate, m.gate_bias, n, m.gate->rows, gate);
  if (m.up_bias != nullptr) AddBias(up, m.up_bias, n, m.up->rows, up);
}

void ScatterExpertOutputs(const MoeExpertsArgs& a, const ExpertMatrices& m, const ExpertGroups& g, int64_t begin,
                          int64_t end, float* y) {
  const int64_t n_embd = m.down->rows;
  for (int64_t i = begin; i < end; ++i) {
    float* row = y + (i - begin) * n_embd;
    if (m.down_bias != nullptr) Add(row, m.down_bias, n_embd, row);
    float* dst = a.out + static_cast<int64_t>(g.slot_rows[i]) * n_embd;
    const float w = a.weight_input ? 1.0f : g.row_weights[i];
    for (int64_t c = 0; c < n_embd; ++c) dst[c] = w * row[c];
  }
}

void MoeExpertsOneByOne(const MoeExpertsArgs& a, const ExpertGroups& g, void* matmul_scratch) {
  ZeroSkippedSlots(a, g, MoeOutWidth(a));
  for (int e = 0; e < a.n_expert; ++e) {
    if (SkipsExpert(a, e)) continue;
    const ExpertMatrices& m = a.experts[e];
    const int64_t n_ff = m.gate->rows;
    for (int64_t b = g.expert_begin[e]; b < g.expert_begin[e + 1]; b += a.buf.rows) {
      const int64_t end = std::min(g.expert_begin[e + 1], b + a.buf.rows), n = end - b;
      GatherExpertInputs(a, m, g, b, end, a.buf.xe);
      MatMul(*m.gate, a.buf.xe, n, a.buf.gate, matmul_scratch);
      MatMul(*m.up, a.buf.xe, n, a.buf.up, matmul_scratch);
      AddExpertGateUpBiases(m, n, a.buf.gate, a.buf.up);
      Glu(a.buf.gate, a.buf.up, n * n_ff, a.act, a.buf.gate);
      MatMul(*m.down, a.buf.gate, n, a.buf.xe, matmul_scratch);
      ScatterExpertOutputs(a, m, g, b, end, a.buf.xe);
    }
  }
}

void MoeExpertsRef(const MoeExpertsArgs& a) {
  TANDEM_CHECK(a.n_expert > 0 && a.k > 0);
  const int first = FirstComputedExpert(a);
  const int64_t n_embd = MoeOutWidth(a), n_ff = first >= 0 ? a.experts[first].gate->rows : 0;
  TANDEM_CHECK(n_embd > 0 && (a.n_embd == 0 || a.n_embd == n_embd));
  std::vector<float> x(n_embd), gate(n_ff), up(n_ff), down(n_embd);
  for (int64_t t = 0; t < a.n_tok; ++t) {
    for (int j = 0; j < a.k; ++j) {
      const int e = a.ids[t * a.k + j];
      TANDEM_CHECK(e >= 0 && e < a.n_expert);
      const ExpertMatrices& m = a.experts[e];
      float* out = a.out + (static_cast<int64_t>(j) * a.n_tok + t) * n_embd;
      if (SkipsExpert(a, e)) {
        std::fill(out, out + n_embd, 0.0f);
        continue;
      }
      const float w = a.weights[t * a.k + j];
      for (int64_t i = 0; i < n_embd; ++i) x[i] = a.x[t * n_embd + i] * (a.weight_input ? w : 1.0f);
      MatMulRef(*m.gate, x.data(), 1, gate.data());
      MatMulRef(*m.up, x.data(), 1, up.data());
      for (int64_t i = 0; i < n_ff; ++i) {
        if (m.gate_bias != nullptr) gate[i] += m.gate_bias[i];
        if (m.up_bias != nullptr) up[i] += m.up_bias[i];
      }
      GluRef(gate.data(), up.data(), n_ff, a.act, gate.data());
      MatMulRef(*m.down, gate.data(), 1, down.data());
      for (int64_t i = 0; i < n_embd; ++i) {
        const float d = down[i] + (m.down_bias != nullptr ? m.down_bias[i] : 0.0f);
        out[i] = a.weight_input ? d : w * d;
      }
    }
  }
}

}  // namespace tandem::cpu

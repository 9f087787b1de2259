// Test fixtures for MoeExperts (runtime/ops.h's MoeExpertsArgs): random experts in a weight type, with or without
// biases, a routing, and the pieces every MoeExperts test assembles (buffers, the reference output, the
// one-by-one path). Shared by the CPU backend's and the simulated GPU's tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/quant.h"
#include "core/status.h"
#include "cpu_backend/kernels.h"
#include "runtime/backend.h"
#include "tests/testutil.h"

namespace tandem::test {

// n_expert experts, each gate and up [n_embd -> n_ff] and down [n_ff -> n_embd], in GGUF rows of `type`, with
// optional biases. Storage is host memory; `views` point into it.
struct ExpertSet {
  // Moves keep the views valid (deque and vector storage stays put); copies would not.
  ExpertSet() = default;
  ExpertSet(ExpertSet&&) = default;
  ExpertSet& operator=(ExpertSet&&) = default;
  ExpertSet(const ExpertSet&) = delete;

  DType type = DType::kF32;
  int n_expert = 0;
  int64_t n_embd = 0, n_ff = 0;
  std::deque<std::vector<uint8_t>> bytes;    // the rows of each matrix (a deque: views stay put)
  std::vector<WeightMatrix> matrices;        // [3 * e + {0 gate, 1 up, 2 down}], GGUF layout
  std::vector<std::vector<float>> biases;    // [3 * e + m]: gate and up [n_ff], down [n_embd]; empty: none
  std::vector<ExpertMatrices> views;         // [n_expert] over matrices and biases

  // Views over other copies of the same matrices (a backend's prepared or device copies) and biases.
  std::vector<ExpertMatrices> ViewsOver(const std::vector<WeightMatrix>& m,
                                        const std::vector<const float*>& bias) const {
    std::vector<ExpertMatrices> v(static_cast<size_t>(n_expert));
    for (int e = 0; e < n_expert; ++e) {
      v[e] = ExpertMatrices{.gate = &m[3 * e], .up = &m[3 * e + 1], .down = &m[3 * e + 2], .gate_bias = bias[3 * e],
                            .up_bias = bias[3 * e + 1], .down_bias = bias[3 * e + 2]};
    }
    return v;
  }
  std::vector<const float*> BiasPointers() const {
    std::vector<const float*> p;
    for (const std::vector<float>& b : biases) p.push_back(b.empty() ? nullptr : b.data());
    return p;
  }
};

inline ExpertSet MakeExperts(DType type, int n_expert, int64_t n_embd, int64_t n_ff, bool with_biases,
                             uint64_t seed) {
  ExpertSet s;
  s.type = type;
  s.n_expert = n_expert;
  s.n_embd = n_embd;
  s.n_ff = n_ff;
  for (int e = 0; e < n_expert; ++e) {
    for (int m = 0; m < 3; ++m) {
      const int64_t rows = m == 2 ? n_embd : n_ff, cols = m == 2 ? n_ff : n_embd;
      // Weights of about 1/sqrt(cols) keep the activations O(1) through the FFN.
      const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
      const std::vector<float> wf = RandomNormal(static_cast<size_t>(rows * cols), seed + 3 * e + m, scale);
      const size_t row_bytes = RowBytes(type, cols);
      s.bytes.emplace_back(row_bytes * static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        TANDEM_CHECK(QuantizeRow(type, wf.data() + r * cols, s.bytes.back().data() + r * row_bytes, cols).ok());
      }
      s.matrices.push_back(WeightMatrix{.type = type, .data = s.bytes.back().data(), .rows = rows, .cols = cols,
                                        .row_stride = row_bytes});
      s.biases.push_back(with_biases ? RandomNormal(static_cast<size_t>(rows), seed + 1000 + 3 * e + m, 0.5f)
                                     : std::vector<float>());
    }
  }
  s.views = s.ViewsOver(s.matrices, s.BiasPointers());
  return s;
}

// Each token's k distinct experts and weights, from MoeRoute over random logits (softmax, normalized).
struct Routing {
  std::vector<int32_t> ids;    // [n_tok][k]
  std::vector<float> weights;  // [n_tok][k]
};
inline Routing RandomRouting(int64_t n_tok, int n_expert, int k, uint64_t seed) {
  const std::vector<float> logits = RandomNormal(static_cast<size_t>(n_tok * n_expert), seed, 2.0f);
  Routing r;
  r.ids.resize(static_cast<size_t>(n_tok * k));
  r.weights.resize(r.ids.size());
  cpu::MoeRoute(logits.data(), n_tok, MoeRouteParams{.n_expert = n_expert, .k = k}, r.ids.data(), r.weights.data());
  return r;
}

// Host buffers for MoeExperts' intermediates, `rows` rows.
struct HostExpertBuffers {
  HostExpertBuffers(int64_t rows, int64_t n_embd, int64_t n_ff)
      : xe(static_cast<size_t>(rows * n_embd)), gate(static_cast<size_t>(rows * n_ff)), up(gate.size()) {
    Poison(xe);
    Poison(gate);
    Poison(up);
    buf = ExpertBuffers{.xe = xe.data(), .gate = gate.data(), .up = up.data(), .rows = rows};
  }
  std::vector<float> xe, gate, up;
  ExpertBuffers buf;
};

// Holds MoeExperts' output ([k * n_tok] rows of n_embd) to cpu::MoeExpertsRef's. F32 experts: float sums against
// double, NMSE < 1e-12 (measured at most 4.3e-14). Quantized experts: both sides round the down projection's input
// through Q8_0 the same way, but the reference's activation is computed in double and the kernel's in float; where
// they differ by an ulp near a Q8_0 rounding boundary (or at a block's largest value) the two quantize one element a
// step apart, and that row is off by up to ~1e-6 in NMSE (one step is amax/127 of one of n_ff values). Measured: no
// row off in most cases, at most 1.4e-7 overall (gpt-oss's activation, whose float e^(-alpha g) is the least
// exact). So: at most one row in 20 (and at least one allowed) may be off, the others within 1e-11, and the whole
// within 1e-5; any error in the math itself is orders of magnitude beyond.
struct ReferenceMatch {
  double nmse = 0;
  int rows_off = 0;  // rows whose own NMSE is above 1e-11
};
inline ReferenceMatch CompareToReference(std::span<const float> got, std::span<const float> want, int64_t n_embd) {
  ReferenceMatch m{.nmse = Nmse(got, want)};
  for (size_t r = 0; r * n_embd < got.size(); ++r) {
    const size_t at = r * static_cast<size_t>(n_embd);
    if (Nmse(got.subspan(at, n_embd), want.subspan(at, n_embd)) > 1e-11) ++m.rows_off;
  }
  return m;
}
inline void ExpectMatchesReference(DType type, std::span<const float> got, std::span<const float> want,
                                   int64_t n_embd) {
  const ReferenceMatch m = CompareToReference(got, want, n_embd);
  const auto rows = static_cast<int>(got.size() / static_cast<size_t>(n_embd));
  std::printf("  vs reference: NMSE %.3g, %d of %d rows off\n", m.nmse, m.rows_off, rows);
  if (type == DType::kF32) {
    EXPECT_LT(m.nmse, 1e-12);
    return;
  }
  EXPECT_LT(m.nmse, 1e-5);
  EXPECT_LE(m.rows_off, std::max(1, rows / 20));
}

// cpu::MoeExpertsOneByOne on its own grouping and scratch: the path for any layout, which the batched path of
// packed experts must equal bit for bit.
inline void RunOneByOne(const MoeExpertsArgs& a) {
  std::vector<uint64_t> grouping((cpu::MoeGroupingBytes(a.n_tok, a.n_expert, a.k) + 7) / 8);  // 8-byte aligned
  cpu::ExpertGroups g = cpu::CarveExpertGroups(grouping.data(), a.n_tok, a.n_expert, a.k);
  cpu::GroupByExpert(a.ids, a.weights, a.n_tok, a.k, a.n_expert, g);
  size_t scratch_bytes = 0;
  for (int e = 0; e < a.n_expert; ++e) {
    if (cpu::SkipsExpert(a, e)) continue;
    for (const WeightMatrix* w : {a.experts[e].gate, a.experts[e].up, a.experts[e].down}) {
      scratch_bytes = std::max(scratch_bytes, cpu::MatMulScratchBytes(w->type, w->cols, a.buf.rows));
    }
  }
  std::vector<uint64_t> scratch(scratch_bytes / 8 + 8);
  cpu::MoeExpertsOneByOne(a, g, scratch.data());
}

// ---- Masked calls (runtime/ops.h): an expert with a null gate is skipped, its slots zeros ----

// Which experts a masked call skips: none, the even half, the one of token 0's first slot (so it has pairs), all.
enum class ExpertMask { kNone, kHalf, kOne, kAll };
inline const char* ExpertMaskName(ExpertMask m) {
  switch (m) {
    case ExpertMask::kNone: return "none";
    case ExpertMask::kHalf: return "half";
    case ExpertMask::kOne: return "one";
    case ExpertMask::kAll: return "all";
  }
  return "?";
}
inline std::vector<bool> SkippedExperts(ExpertMask m, int n_expert, const Routing& r) {
  std::vector<bool> skip(static_cast<size_t>(n_expert));
  for (int e = 0; e < n_expert; ++e) {
    skip[e] = m == ExpertMask::kAll || (m == ExpertMask::kHalf && e % 2 == 0) ||
              (m == ExpertMask::kOne && e == r.ids[0]);
  }
  return skip;
}
inline std::vector<bool> Complement(std::vector<bool> skip) {
  skip.flip();
  return skip;
}
// `views` with the skipped experts' gates null. Their other fields become `elsewhere`'s (another device's copy, or
// anything): the call must not touch them.
inline std::vector<ExpertMatrices> MaskedViews(std::span<const ExpertMatrices> views, const std::vector<bool>& skip,
                                               std::span<const ExpertMatrices> elsewhere) {
  std::vector<ExpertMatrices> v(views.begin(), views.end());
  for (size_t e = 0; e < v.size(); ++e) {
    if (!skip[e]) continue;
    v[e] = elsewhere[e];
    v[e].gate = nullptr;
  }
  return v;
}

// The masked call's out against the unmasked call's, [k][n_tok] rows of n_embd: a computed slot bit for bit, a
// skipped one +0.0f throughout.
inline void ExpectMaskedSlots(std::span<const float> masked, std::span<const float> full, const Routing& r,
                              const std::vector<bool>& skip, int64_t n_tok, int k, int64_t n_embd) {
  int bad_rows = 0;
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int j = 0; j < k; ++j) {
      const int e = r.ids[t * k + j];
      const size_t at = static_cast<size_t>((j * n_tok + t) * n_embd);
      bool ok = true;
      for (int64_t c = 0; c < n_embd; ++c) {
        const float v = masked[at + c];
        ok = ok && (skip[e] ? v == 0.0f && !std::signbit(v) : std::memcmp(&v, &full[at + c], sizeof(float)) == 0);
      }
      if (!ok && ++bad_rows <= 5) {
        ADD_FAILURE() << "token " << t << " slot " << j << " (expert " << e << (skip[e] ? ", skipped" : "")
                      << "): " << (skip[e] ? "not +0.0f" : "differs from the unmasked call's");
      }
    }
  }
  EXPECT_EQ(bad_rows, 0);
}
// Complementary masked calls add up to the unmasked call, bit for bit.
inline void ExpectSumsToFull(std::span<const float> a, std::span<const float> b, std::span<const float> full) {
  size_t bad = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    const float s = a[i] + b[i];
    if (std::memcmp(&s, &full[i], sizeof(float)) != 0 && ++bad <= 5) {
      ADD_FAILURE() << "element " << i << ": " << a[i] << " + " << b[i] << " != " << full[i];
    }
  }
  EXPECT_EQ(bad, 0u);
}

}  // namespace tandem::test

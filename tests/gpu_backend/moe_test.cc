// MoE on the GPU, all in device memory: MoeRoute against cpu::MoeRouteRef (every gating, with and without
// normalization, scale and selection bias), MoeExperts against cpu::MoeExpertsRef and an exact reference (weight
// types, batch sizes across the passes of small buffers, biases, weight_input, every activation, gate/up/down of
// different types), masked calls (skipped experts), MoeRoute feeding MoeExperts with the routing never leaving the
// device, and the errors.
// Outputs are poisoned before every kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/quant.h"
#include "core/status.h"
#include "cpu_backend/kernels.h"
#include "gpu_backend/dequant.h"
#include "tests/cpu_backend/expert_fixture.h"
#include "tests/gpu_backend/gpu_test_util.h"
#include "tests/gpu_backend/random_weights.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

class GpuMoeTest : public test::CudaTest {
 protected:
  WorkspaceSpec Workspace() const override {
    WorkspaceSpec spec = CudaTest::Workspace();
    spec.max_tokens = 64;
    spec.n_expert = 256;
    spec.n_expert_used = 8;
    return spec;
  }
};

// ---- MoeRoute ----

// What the choice ranks by, in double as cpu::MoeRouteRef forms it: the gating score plus the selection bias.
std::vector<double> RanksOf(const float* row, const MoeRouteParams& p) {
  std::vector<double> r(static_cast<size_t>(p.n_expert));
  if (p.gating == MoeGating::kSoftmax) {
    double m = -std::numeric_limits<double>::infinity(), sum = 0.0;
    for (int e = 0; e < p.n_expert; ++e) m = std::max(m, static_cast<double>(row[e]));
    for (int e = 0; e < p.n_expert; ++e) sum += (r[e] = std::exp(row[e] - m));
    for (double& v : r) v /= sum;
  } else {
    for (int e = 0; e < p.n_expert; ++e) {
      r[e] = p.gating == MoeGating::kSigmoid ? 1.0 / (1.0 + std::exp(-static_cast<double>(row[e]))) : row[e];
    }
  }
  if (p.selection_bias != nullptr) {
    for (int e = 0; e < p.n_expert; ++e) r[e] += p.selection_bias[e];
  }
  return r;
}

// Ids match exactly, except where two experts rank within float rounding of each other (either order is right);
// a token whose ids match has its weights to float rounding.
void ExpectSameRouting(const std::vector<float>& logits, const MoeRouteParams& p, int64_t n_tok,
                       const std::vector<int32_t>& ids, const std::vector<float>& w,
                       const std::vector<int32_t>& ref_ids, const std::vector<float>& ref_w) {
  int64_t differing_tokens = 0;
  for (int64_t t = 0; t < n_tok; ++t) {
    const std::vector<double> rank = RanksOf(logits.data() + t * p.n_expert, p);
    bool same = true;
    for (int j = 0; j < p.k; ++j) {
      const size_t i = static_cast<size_t>(t * p.k + j);
      if (ids[i] == ref_ids[i]) continue;
      same = false;
      ASSERT_GE(ids[i], 0) << "token " << t << " slot " << j;
      ASSERT_LT(ids[i], p.n_expert) << "token " << t << " slot " << j;
      EXPECT_LT(std::fabs(rank[ids[i]] - rank[ref_ids[i]]), 1e-5)
          << "token " << t << " slot " << j << ": expert " << ids[i] << " instead of " << ref_ids[i];
    }
    if (!same) {
      ++differing_tokens;
      continue;
    }
    for (int j = 0; j < p.k; ++j) {
      const size_t i = static_cast<size_t>(t * p.k + j);
      EXPECT_NEAR(w[i], ref_w[i], 1e-5 * std::fabs(ref_w[i]) + 1e-9) << "token " << t << " slot " << j;
    }
  }
  EXPECT_LE(differing_tokens, 2 + n_tok / 100);
}

struct RouteShape {
  int n_expert, k;
  int64_t n_tok;
};

class GpuMoeRouteTest : public GpuMoeTest {
 protected:
  void Check(const RouteShape& s, MoeRouteParams p, float logit_scale, float logit_shift) {
    p.n_expert = s.n_expert;
    p.k = s.k;
    const auto n_out = static_cast<size_t>(s.n_tok * s.k);
    std::vector<float> logits = test::RandomNormal(static_cast<size_t>(s.n_tok * s.n_expert), s.n_expert, logit_scale);
    for (float& l : logits) l += logit_shift;
    std::vector<float> bias;
    if (p.selection_bias != nullptr) bias = test::RandomNormal(static_cast<size_t>(s.n_expert), 99, 0.3f);
    MoeRouteParams host_p = p;
    host_p.selection_bias = bias.empty() ? nullptr : bias.data();
    std::vector<int32_t> ref_ids(n_out);
    std::vector<float> ref_w(n_out);
    cpu::MoeRouteRef(logits.data(), s.n_tok, host_p, ref_ids.data(), ref_w.data());

    MoeRouteParams dev_p = p;
    dev_p.selection_bias = bias.empty() ? nullptr : Upload(bias);
    auto* ids = Upload(std::vector<int32_t>(n_out, -1));
    float* w = PoisonedFloats(n_out);
    gpu().MoeRoute(Upload(logits), s.n_tok, dev_p, ids, w);
    const std::vector<int32_t> got_ids = Download(ids, n_out);
    const std::vector<float> got_w = Download(w, n_out);
    ASSERT_TRUE(Error().ok());
    ExpectSameRouting(logits, host_p, s.n_tok, got_ids, got_w, ref_ids, ref_w);
  }
};

// Every gating with and without normalization, scale and selection bias, over expert counts up to the limit and
// batches up to 5000 tokens.
TEST_F(GpuMoeRouteTest, EveryGatingMatchesReference) {
  const RouteShape shapes[] = {{4, 2, 1}, {8, 2, 37}, {64, 6, 100}, {256, 8, 5000}, {8, 8, 3}, {100, 1, 9}};
  const float not_null = 0.0f;
  for (MoeGating gating : {MoeGating::kSoftmax, MoeGating::kSigmoid, MoeGating::kSoftmaxTopK}) {
    for (bool normalize : {true, false}) {
      for (float scale : {1.0f, 2.5f}) {
        for (bool with_bias : {false, true}) {
          for (const RouteShape& s : shapes) {
            SCOPED_TRACE(::testing::Message() << MoeGatingName(gating) << (normalize ? " normalized" : "") << " scale "
                                              << scale << (with_bias ? " bias" : "") << ", " << s.n_expert
                                              << " experts, top " << s.k << ", " << s.n_tok << " tokens");
            MoeRouteParams p;
            p.gating = gating;
            p.normalize = normalize;
            p.scale = scale;
            p.selection_bias = with_bias ? &not_null : nullptr;  // Check() makes the real ones
            Check(s, p, 2.0f, 0.0f);
          }
        }
      }
    }
  }
}

// Sigmoid scores near zero: the sum of the chosen is floored at 2^-14 before it divides.
TEST_F(GpuMoeRouteTest, NormalizationFloorsTheSum) {
  MoeRouteParams p;
  p.gating = MoeGating::kSigmoid;
  p.normalize = true;
  Check({16, 4, 20}, p, 1.0f, -20.0f);
}

// All-equal logits: every score ties, so the lowest ids win, in order, with equal weights.
TEST_F(GpuMoeTest, RouteTiesGoToTheLowerId) {
  const std::vector<float> logits(2 * 8, 0.25f);
  auto* ids = Upload(std::vector<int32_t>(6, -1));
  float* w = PoisonedFloats(6);
  MoeRouteParams p;
  p.n_expert = 8;
  p.k = 3;
  gpu().MoeRoute(Upload(logits), 2, p, ids, w);
  EXPECT_EQ(Download(ids, 6), (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  for (float x : Download(w, 6)) EXPECT_NEAR(x, 1.0f / 3.0f, 1e-7f);
  ASSERT_TRUE(Error().ok());
}

TEST_F(GpuMoeTest, RouteRejectsTooManyExperts) {
  const std::vector<float> logits(300, 0.0f);
  MoeRouteParams p;
  p.n_expert = 300;
  p.k = 2;
  gpu().MoeRoute(Upload(logits), 1, p, Upload(std::vector<int32_t>(2)), PoisonedFloats(2));
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
}

// ---- MoeExperts ----

// Experts on both sides: random weights of each matrix kind for every expert, biases, routing, inputs.
struct ExpertCase {
  DType gate_type = DType::kQ4_K;
  DType up_type = DType::kQ4_K;
  DType down_type = DType::kQ4_K;
  int64_t n_embd = 256;
  int64_t n_ff = 256;
  int n_expert = 8;
  int k = 2;
  int64_t n_tok = 1;
  bool biases = false;
  bool weight_input = false;
  GluParams act;
  int64_t buf_rows = 0;       // 0: n_tok * k (one pass)
  int same_expert = -1;       // >= 0: every pair routes to this expert (ids need not be distinct per token)
};

std::string Describe(const ExpertCase& c) {
  const char* acts[] = {"silu", "gelu", "swiglu_oai"};
  return Cat(DTypeName(c.gate_type), "/", DTypeName(c.up_type), "/", DTypeName(c.down_type), " embd ", c.n_embd,
             " ff ", c.n_ff, ", ", c.n_tok, " tokens, top ", c.k, " of ", c.n_expert, ", ",
             acts[static_cast<int>(c.act.act)], c.biases ? ", biases" : "", c.weight_input ? ", weight_input" : "",
             c.buf_rows > 0 ? Cat(", buffer rows ", c.buf_rows) : "", c.same_expert >= 0 ? ", one expert" : "");
}

struct HostMatrices {
  std::vector<uint8_t> bytes;  // every expert's rows, one expert after another
  std::vector<WeightMatrix> m;
};

HostMatrices MakeMatrices(DType t, int n_expert, int64_t rows, int64_t cols, uint64_t seed) {
  HostMatrices h;
  h.bytes = test::RandomWeightRows(t, rows * n_expert, cols, seed);
  const size_t stride = RowBytes(t, cols);
  for (int e = 0; e < n_expert; ++e) {
    h.m.push_back(WeightMatrix{t, h.bytes.data() + static_cast<size_t>(e) * rows * stride, rows, cols, stride});
  }
  return h;
}

// out as runtime/ops.h defines it, with dequantized weights, f32 activations and double sums.
std::vector<float> ExactMoeExperts(const MoeExpertsArgs& a) {
  const int64_t n_embd = a.experts[0].gate->cols, n_ff = a.experts[0].gate->rows;
  std::map<const void*, std::vector<float>> dequantized;
  auto rows_of = [&](const WeightMatrix& w) -> const std::vector<float>& {
    std::vector<float>& d = dequantized[w.data];
    if (d.empty()) {
      d.resize(static_cast<size_t>(w.rows * w.cols));
      for (int64_t r = 0; r < w.rows; ++r) {
        DequantizeRow(w.type, static_cast<const uint8_t*>(w.data) + r * w.row_stride, d.data() + r * w.cols, w.cols);
      }
    }
    return d;
  };
  auto product = [](const std::vector<float>& w, int64_t rows, int64_t cols, const std::vector<float>& x,
                    const float* bias, std::vector<float>& y) {
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0.0;
      for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(w[r * cols + c]) * x[c];
      y[r] = static_cast<float>(s) + (bias != nullptr ? bias[r] : 0.0f);
    }
  };
  std::vector<float> out(static_cast<size_t>(a.k * a.n_tok * n_embd));
  std::vector<float> x(n_embd), gate(n_ff), up(n_ff), down(n_embd);
  for (int64_t t = 0; t < a.n_tok; ++t) {
    for (int j = 0; j < a.k; ++j) {
      const ExpertMatrices& m = a.experts[a.ids[t * a.k + j]];
      const float w = a.weights[t * a.k + j];
      for (int64_t c = 0; c < n_embd; ++c) x[c] = a.x[t * n_embd + c] * (a.weight_input ? w : 1.0f);
      product(rows_of(*m.gate), n_ff, n_embd, x, m.gate_bias, gate);
      product(rows_of(*m.up), n_ff, n_embd, x, m.up_bias, up);
      cpu::GluRef(gate.data(), up.data(), n_ff, a.act, gate.data());
      product(rows_of(*m.down), n_embd, n_ff, gate, m.down_bias, down);
      for (int64_t c = 0; c < n_embd; ++c) {
        out[(j * a.n_tok + t) * n_embd + c] = a.weight_input ? down[c] : w * down[c];
      }
    }
  }
  return out;
}

// cpu::MoeExpertsRef rounds the activations to the CPU's vec-dot type (Q8 for quantized weights) and the GPU does
// not: the bound is the size of that rounding, through two products.
double RefTolerance(const ExpertCase& c) {
  double tol = 1e-9;
  for (DType t : {c.gate_type, c.up_type, c.down_type}) {
    tol = std::max(tol, t == DType::kF32 ? 1e-9 : t == DType::kF16 ? 4e-5 : t == DType::kBF16 ? 4e-4 : 4e-3);
  }
  return tol;
}

class GpuMoeExpertsTest : public GpuMoeTest {
 protected:
  // Each kind's matrices (gate, up, down) uploaded: device views in the host matrices' order.
  std::array<std::vector<WeightMatrix>, 3> UploadMatrices(std::array<const HostMatrices*, 3> kinds) {
    std::array<std::vector<WeightMatrix>, 3> dev;
    for (int kind = 0; kind < 3; ++kind) {
      const uint8_t* base = Upload(kinds[kind]->bytes);
      for (const WeightMatrix& m : kinds[kind]->m) {
        WeightMatrix d = m;
        d.data = base + (static_cast<const uint8_t*>(m.data) - kinds[kind]->bytes.data());
        dev[kind].push_back(d);
      }
    }
    return dev;
  }

  // Routes the case's tokens, runs MoeExperts on the device and compares `out` with both references. With
  // route_on_device, MoeRoute makes the routing from logits instead and nothing of it reaches the host until the
  // end (then the references use the routing the device made).
  void Run(const ExpertCase& c, bool route_on_device = false) {
    SCOPED_TRACE(Describe(c));
    const uint64_t seed = static_cast<uint64_t>(c.gate_type) * 131 + static_cast<uint64_t>(c.down_type) * 17 +
                          static_cast<uint64_t>(c.n_tok) * 7 + static_cast<uint64_t>(c.n_expert);
    const HostMatrices gate = MakeMatrices(c.gate_type, c.n_expert, c.n_ff, c.n_embd, seed + 1);
    const HostMatrices up = MakeMatrices(c.up_type, c.n_expert, c.n_ff, c.n_embd, seed + 2);
    const HostMatrices down = MakeMatrices(c.down_type, c.n_expert, c.n_embd, c.n_ff, seed + 3);
    std::vector<std::vector<float>> biases;  // per expert: gate, up, down
    if (c.biases) {
      for (int e = 0; e < c.n_expert; ++e) {
        biases.push_back(test::RandomNormal(static_cast<size_t>(c.n_ff), seed + 10 + 3 * e, 0.2f));
        biases.push_back(test::RandomNormal(static_cast<size_t>(c.n_ff), seed + 11 + 3 * e, 0.2f));
        biases.push_back(test::RandomNormal(static_cast<size_t>(c.n_embd), seed + 12 + 3 * e, 0.2f));
      }
    }
    const std::vector<float> x = test::RandomNormal(static_cast<size_t>(c.n_tok * c.n_embd), seed + 4, 2.0f);
    const auto n_pairs = static_cast<size_t>(c.n_tok * c.k);

    // Host routing: k distinct experts per token (or one expert for all), positive weights.
    std::vector<int32_t> ids(n_pairs);
    std::vector<float> weights(n_pairs);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_real_distribution<float> unit(0.1f, 1.0f);
    std::vector<int32_t> order(static_cast<size_t>(c.n_expert));
    for (int64_t t = 0; t < c.n_tok; ++t) {
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      for (int j = 0; j < c.k; ++j) {
        ids[t * c.k + j] = c.same_expert >= 0 ? c.same_expert : order[j];
        weights[t * c.k + j] = unit(rng);
      }
    }

    // The device side.
    const std::array<std::vector<WeightMatrix>, 3> dev_m = UploadMatrices({&gate, &up, &down});
    std::vector<ExpertMatrices> dev_experts(static_cast<size_t>(c.n_expert)), host_experts(dev_experts.size());
    for (int e = 0; e < c.n_expert; ++e) {
      dev_experts[e] = {&dev_m[0][e], &dev_m[1][e], &dev_m[2][e]};
      host_experts[e] = {&gate.m[e], &up.m[e], &down.m[e]};
      if (c.biases) {
        host_experts[e].gate_bias = biases[3 * e].data();
        host_experts[e].up_bias = biases[3 * e + 1].data();
        host_experts[e].down_bias = biases[3 * e + 2].data();
        dev_experts[e].gate_bias = Upload(biases[3 * e]);
        dev_experts[e].up_bias = Upload(biases[3 * e + 1]);
        dev_experts[e].down_bias = Upload(biases[3 * e + 2]);
      }
    }
    const int64_t rows = c.buf_rows > 0 ? c.buf_rows : static_cast<int64_t>(n_pairs);
    MoeExpertsArgs a;
    a.experts = dev_experts.data();
    a.n_expert = c.n_expert;
    a.x = Upload(x);
    a.n_tok = c.n_tok;
    a.k = c.k;
    a.act = c.act;
    a.weight_input = c.weight_input;
    a.buf = ExpertBuffers{PoisonedFloats(static_cast<size_t>(rows * c.n_embd)),
                          PoisonedFloats(static_cast<size_t>(rows * c.n_ff)),
                          PoisonedFloats(static_cast<size_t>(rows * c.n_ff)), rows};
    float* out = PoisonedFloats(n_pairs * c.n_embd);
    a.out = out;
    int32_t* dev_ids = nullptr;
    float* dev_weights = nullptr;
    if (route_on_device) {
      const std::vector<float> logits = test::RandomNormal(static_cast<size_t>(c.n_tok * c.n_expert), seed + 5);
      dev_ids = Upload(std::vector<int32_t>(n_pairs, -1));
      dev_weights = PoisonedFloats(n_pairs);
      MoeRouteParams p;
      p.n_expert = c.n_expert;
      p.k = c.k;
      gpu().MoeRoute(Upload(logits), c.n_tok, p, dev_ids, dev_weights);
    } else {
      dev_ids = Upload(ids);
      dev_weights = Upload(weights);
    }
    a.ids = dev_ids;
    a.weights = dev_weights;
    gpu().MoeExperts(a);
    const std::vector<float> got = Download(out, n_pairs * c.n_embd);
    ASSERT_TRUE(Error().ok());
    if (route_on_device) {  // the routing the device made, fetched only now for the references
      ids = Download(dev_ids, n_pairs);
      weights = Download(dev_weights, n_pairs);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < c.n_expert) << id;
    }

    MoeExpertsArgs host = a;
    host.experts = host_experts.data();
    host.x = x.data();
    host.ids = ids.data();
    host.weights = weights.data();
    std::vector<float> ref(got.size());
    host.out = ref.data();
    cpu::MoeExpertsRef(host);
    const std::vector<float> exact = ExactMoeExperts(host);
    EXPECT_LT(test::Nmse(got, exact), 1e-9);
    EXPECT_LT(test::Nmse(got, ref), RefTolerance(c));
  }
};

class GpuMoeExpertsTypeTest : public GpuMoeExpertsTest, public ::testing::WithParamInterface<DType> {
 protected:
  ExpertCase Base() const {
    ExpertCase c;
    c.gate_type = c.up_type = c.down_type = GetParam();
    return c;
  }
};

// Decode: one token, each expert a tile of one pair.
TEST_P(GpuMoeExpertsTypeTest, Decode) {
  ExpertCase c = Base();
  Run(c);
  c.biases = true;
  c.n_expert = 64;
  c.k = 6;
  Run(c);
}

// Small batches (tiles of several tokens, mostly one pair per expert) and prefill batches beyond the matvec
// threshold, with biases, weight_input and every activation.
TEST_P(GpuMoeExpertsTypeTest, Batches) {
  for (int64_t n_tok : {3, 40}) {
    ExpertCase c = Base();
    c.n_tok = n_tok;
    Run(c);
    c.biases = true;
    c.weight_input = true;
    c.act = GluParams{Activation::kGelu};
    Run(c);
    c.weight_input = false;
    c.act = GluParams{Activation::kSwigluOai, 1.702f, 7.0f};
    c.n_expert = 32;
    c.k = 4;
    Run(c);
  }
}

// Buffers smaller than the batch's pairs: several passes, an expert's pairs split across two of them.
TEST_P(GpuMoeExpertsTypeTest, PassesOfSmallBuffers) {
  ExpertCase c = Base();
  c.n_tok = 40;
  c.k = 2;
  c.biases = true;
  c.buf_rows = 40;
  Run(c);
  c.buf_rows = 13;
  c.weight_input = true;
  Run(c);
}

// Plain float rows whose widths are no multiple of 8: the pieces' tails.
TEST_P(GpuMoeExpertsTypeTest, OddWidths) {
  if (!gpu::IsPlainFloat(GetParam())) GTEST_SKIP() << "quantized rows are whole blocks";
  ExpertCase c = Base();
  c.n_embd = 100;
  c.n_ff = 60;
  c.biases = true;
  for (int64_t n_tok : {1, 9}) {
    c.n_tok = n_tok;
    Run(c);
  }
}

std::string TypeName(const ::testing::TestParamInfo<DType>& info) { return std::string(DTypeName(info.param)); }

INSTANTIATE_TEST_SUITE_P(AllTypes, GpuMoeExpertsTypeTest, ::testing::ValuesIn(test::AllWeightTypes()), TypeName);

// Q4_K_M-like: down in another type than gate and up; and gate and up of different types (two kernels, the up
// products parked in buf.up).
TEST_F(GpuMoeExpertsTest, MixedTypes) {
  for (int64_t n_tok : {1, 40}) {
    ExpertCase c;
    c.down_type = DType::kQ6_K;
    c.n_tok = n_tok;
    c.biases = true;
    Run(c);
    c.up_type = DType::kQ8_0;
    c.down_type = DType::kF16;
    c.act = GluParams{Activation::kSwigluOai, 1.702f, 7.0f};
    Run(c);
    c.buf_rows = 17;
    Run(c);
  }
}

// 256 experts (every slot of the kernels' by-value weight table), top-8.
TEST_F(GpuMoeExpertsTest, TheLargestExpertCount) {
  for (DType t : {DType::kQ4_K, DType::kF16}) {
    for (int64_t n_tok : {1, 5, 64}) {
      ExpertCase c;
      c.gate_type = c.up_type = c.down_type = t;
      c.n_expert = 256;
      c.k = 8;
      c.n_tok = n_tok;
      c.biases = n_tok == 5;
      Run(c);
    }
  }
}

// Every pair of the batch on one expert: a long run of tiles, cut where the passes begin.
TEST_F(GpuMoeExpertsTest, OneExpertTakesEveryPair) {
  for (int64_t buf_rows : {0, 16, 7}) {
    ExpertCase c;
    c.n_tok = 40;
    c.k = 2;
    c.same_expert = 3;
    c.buf_rows = buf_rows;
    Run(c);
  }
}

// MoeRoute's ids and weights go straight into MoeExperts in device memory, with no host step between them.
TEST_F(GpuMoeExpertsTest, RouteFeedsExpertsOnTheDevice) {
  for (int64_t n_tok : {1, 4, 40}) {
    ExpertCase c;
    c.n_expert = 64;
    c.k = 6;
    c.n_tok = n_tok;
    c.biases = true;
    Run(c, /*route_on_device=*/true);
  }
}

// Neither op waits for the device: queued behind ~50 ms of matrix products, MoeRoute and MoeExperts return to the
// host long before that work is done (a synchronization or a device-to-host copy inside either would wait for it).
TEST_F(GpuMoeExpertsTest, RouteAndExpertsDoNotWaitForTheDevice) {
  const int64_t n_embd = 256, n_ff = 256;
  const int n_expert = 8, k = 2;
  const int64_t n_tok = 4;
  // The busy work: an F32 matvec over 1 GiB of (uninitialized) weights, which reads them all.
  const int64_t big = 16384;
  WeightMatrix busy{DType::kF32, AllocBytes(static_cast<size_t>(big * big) * 4), big, big,
                    static_cast<size_t>(big) * 4};
  const float* busy_x = PoisonedFloats(static_cast<size_t>(big));
  float* busy_y = PoisonedFloats(static_cast<size_t>(big));
  auto queue_busy = [&](int reps) {
    for (int i = 0; i < reps; ++i) gpu().MatMul(busy, busy_x, 1, busy_y);
  };
  queue_busy(2);  // warm-up
  ASSERT_TRUE(gpu().Synchronize(Stream::kCompute).ok());
  const auto t0 = std::chrono::steady_clock::now();
  queue_busy(10);
  ASSERT_TRUE(gpu().Synchronize(Stream::kCompute).ok());
  const double per_rep = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 10;
  const int reps = static_cast<int>(std::clamp(0.05 / std::max(per_rep, 1e-6), 10.0, 500.0));

  const HostMatrices w = MakeMatrices(DType::kQ4_K, n_expert, n_ff, n_embd, 5);
  const uint8_t* dev = Upload(w.bytes);
  std::vector<WeightMatrix> mats;
  for (const WeightMatrix& m : w.m) {
    WeightMatrix d = m;
    d.data = dev + (static_cast<const uint8_t*>(m.data) - w.bytes.data());
    mats.push_back(d);
  }
  std::vector<ExpertMatrices> experts;
  for (int e = 0; e < n_expert; ++e) experts.push_back({&mats[e], &mats[e], &mats[e]});
  const float* logits = Upload(test::RandomNormal(static_cast<size_t>(n_tok * n_expert), 6));
  auto* ids = static_cast<int32_t*>(AllocBytes(n_tok * k * sizeof(int32_t)));
  float* weights = PoisonedFloats(static_cast<size_t>(n_tok * k));
  MoeExpertsArgs a;
  a.experts = experts.data();
  a.n_expert = n_expert;
  a.x = Upload(test::RandomNormal(static_cast<size_t>(n_tok * n_embd), 7));
  a.n_tok = n_tok;
  a.ids = ids;
  a.weights = weights;
  a.k = k;
  a.buf = ExpertBuffers{PoisonedFloats(n_tok * k * n_embd), PoisonedFloats(n_tok * k * n_ff),
                        PoisonedFloats(n_tok * k * n_ff), n_tok * k};
  a.out = PoisonedFloats(static_cast<size_t>(n_tok * k * n_embd));
  MoeRouteParams p;
  p.n_expert = n_expert;
  p.k = k;
  // Once untimed: the first launch of a kernel loads it (lazy loading), which may wait for the device.
  gpu().MoeRoute(logits, n_tok, p, ids, weights);
  gpu().MoeExperts(a);
  ASSERT_TRUE(gpu().Synchronize(Stream::kCompute).ok());

  queue_busy(reps);
  const auto c0 = std::chrono::steady_clock::now();
  gpu().MoeRoute(logits, n_tok, p, ids, weights);
  gpu().MoeExperts(a);
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
  ASSERT_TRUE(gpu().Synchronize(Stream::kCompute).ok());
  const double queued_s = per_rep * reps;
  EXPECT_LT(host_s, 0.25 * queued_s) << "the calls took " << host_s * 1e3 << " ms with " << queued_s * 1e3
                                     << " ms of work queued before them";
  const std::vector<float> out = Download(a.out, static_cast<size_t>(n_tok * k * n_embd));
  for (float v : out) ASSERT_TRUE(std::isfinite(v));
  ASSERT_TRUE(Error().ok());
}

// ---- Masked MoeExperts ----

// Masked calls (runtime/ops.h), as on the CPU backend (tests/cpu_backend/moe_experts_test.cc): the experts with a
// null gate are skipped, their slots +0.0f (out is zeroed before the kernels), every other slot the unmasked call's
// bit for bit; complementary masks add up to the unmasked out; the masked result matches the masked reference. The
// skipped experts' up, down and biases point at host memory, which the kernels must not read.
using GpuMaskCase = std::tuple<DType, int64_t /*n_tok*/, test::ExpertMask>;

std::string GpuMaskCaseName(const ::testing::TestParamInfo<GpuMaskCase>& info) {
  const auto& [type, n_tok, mask] = info.param;
  return Cat(DTypeName(type), "_tok", n_tok, "_skip_", test::ExpertMaskName(mask));
}

class GpuMoeExpertsMaskTest : public GpuMoeExpertsTest, public ::testing::WithParamInterface<GpuMaskCase> {};

TEST_P(GpuMoeExpertsMaskTest, SkippedSlotsAreZerosAndTheRestUnchanged) {
  const auto& [type, n_tok, mask] = GetParam();
  ExpertCase c;
  c.gate_type = c.up_type = c.down_type = type;
  c.n_tok = n_tok;
  c.k = 4;
  c.biases = true;
  SCOPED_TRACE(Describe(c));
  const uint64_t seed = static_cast<uint64_t>(type) * 131 + static_cast<uint64_t>(n_tok) * 7;
  const HostMatrices gate = MakeMatrices(type, c.n_expert, c.n_ff, c.n_embd, seed + 1);
  const HostMatrices up = MakeMatrices(type, c.n_expert, c.n_ff, c.n_embd, seed + 2);
  const HostMatrices down = MakeMatrices(type, c.n_expert, c.n_embd, c.n_ff, seed + 3);
  const std::array<std::vector<WeightMatrix>, 3> dev_m = UploadMatrices({&gate, &up, &down});
  std::vector<std::vector<float>> biases;  // per expert: gate, up, down
  std::vector<ExpertMatrices> dev_experts(static_cast<size_t>(c.n_expert)), host_experts(dev_experts.size());
  for (int e = 0; e < c.n_expert; ++e) {
    biases.push_back(test::RandomNormal(static_cast<size_t>(c.n_ff), seed + 10 + 3 * e, 0.2f));
    biases.push_back(test::RandomNormal(static_cast<size_t>(c.n_ff), seed + 11 + 3 * e, 0.2f));
    biases.push_back(test::RandomNormal(static_cast<size_t>(c.n_embd), seed + 12 + 3 * e, 0.2f));
    host_experts[e] = {&gate.m[e], &up.m[e], &down.m[e], biases[3 * e].data(), biases[3 * e + 1].data(),
                       biases[3 * e + 2].data()};
    dev_experts[e] = {&dev_m[0][e], &dev_m[1][e], &dev_m[2][e], Upload(biases[3 * e]), Upload(biases[3 * e + 1]),
                      Upload(biases[3 * e + 2])};
  }
  const std::vector<float> x = test::RandomNormal(static_cast<size_t>(n_tok * c.n_embd), seed + 4, 2.0f);
  const test::Routing r = test::RandomRouting(n_tok, c.n_expert, c.k, seed + 5);
  const std::vector<bool> skip = test::SkippedExperts(mask, c.n_expert, r), other = test::Complement(skip);
  const std::vector<ExpertMatrices> masked = test::MaskedViews(dev_experts, skip, host_experts);
  const std::vector<ExpertMatrices> complement = test::MaskedViews(dev_experts, other, host_experts);
  const auto n_pairs = static_cast<size_t>(n_tok * c.k);

  MoeExpertsArgs a;
  a.n_expert = c.n_expert;
  a.x = Upload(x);
  a.n_tok = n_tok;
  a.ids = Upload(r.ids);
  a.weights = Upload(r.weights);
  a.k = c.k;
  a.buf = ExpertBuffers{PoisonedFloats(n_pairs * c.n_embd), PoisonedFloats(n_pairs * c.n_ff),
                        PoisonedFloats(n_pairs * c.n_ff), static_cast<int64_t>(n_pairs)};
  a.n_embd = c.n_embd;
  auto run = [&](const std::vector<ExpertMatrices>& experts) {
    a.experts = experts.data();
    a.out = PoisonedFloats(n_pairs * c.n_embd);
    gpu().MoeExperts(a);
    std::vector<float> out = Download(a.out, n_pairs * c.n_embd);
    EXPECT_TRUE(Error().ok());
    return out;
  };
  const std::vector<float> full = run(dev_experts), got = run(masked), got_other = run(complement);
  test::ExpectMaskedSlots(got, full, r, skip, n_tok, c.k, c.n_embd);
  test::ExpectMaskedSlots(got_other, full, r, other, n_tok, c.k, c.n_embd);
  test::ExpectSumsToFull(got, got_other, full);

  const std::vector<ExpertMatrices> host_masked = test::MaskedViews(host_experts, skip, host_experts);
  MoeExpertsArgs host = a;
  host.experts = host_masked.data();
  host.x = x.data();
  host.ids = r.ids.data();
  host.weights = r.weights.data();
  std::vector<float> ref(got.size(), kNaN);
  host.out = ref.data();
  cpu::MoeExpertsRef(host);
  EXPECT_LT(test::Nmse(got, ref), RefTolerance(c));
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuMoeExpertsMaskTest,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kQ4_0, DType::kQ8_0, DType::kQ4_K,
                                                              DType::kMXFP4),
                                            ::testing::Values(int64_t{1}, int64_t{7}, int64_t{64}),
                                            ::testing::Values(test::ExpertMask::kNone, test::ExpertMask::kHalf,
                                                              test::ExpertMask::kOne, test::ExpertMask::kAll)),
                         GpuMaskCaseName);

// ---- MoeExperts errors ----

class GpuMoeExpertsErrorTest : public GpuMoeTest {
 protected:
  void SetUp() override {
    GpuMoeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    w_ = MakeMatrices(DType::kQ8_0, kExperts, 64, 64, 1);
    const uint8_t* dev = Upload(w_.bytes);
    for (const WeightMatrix& m : w_.m) {
      WeightMatrix d = m;
      d.data = dev + (static_cast<const uint8_t*>(m.data) - w_.bytes.data());
      mats_.push_back(d);
    }
    for (int e = 0; e < kExperts; ++e) experts_.push_back({&mats_[e], &mats_[e], &mats_[e]});
    a_.experts = experts_.data();
    a_.n_expert = kExperts;
    a_.x = Upload(test::RandomNormal(64 * 2, 3));
    a_.n_tok = 2;
    a_.k = 2;
    a_.weights = Upload(std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f});
    a_.buf = ExpertBuffers{PoisonedFloats(4 * 64), PoisonedFloats(4 * 64), PoisonedFloats(4 * 64), 4};
    a_.out = PoisonedFloats(4 * 64);
  }

  static constexpr int kExperts = 4;
  HostMatrices w_;
  std::vector<WeightMatrix> mats_;
  std::vector<ExpertMatrices> experts_;
  MoeExpertsArgs a_;
};

// A bad id in device memory: the kernels flag it (InvalidArgument from TakeError), its slot's output is NaN, the
// other slots are right, and the backend stays usable.
TEST_F(GpuMoeExpertsErrorTest, BadDeviceIdIsAnError) {
  a_.ids = Upload(std::vector<int32_t>{0, 1, 2, kExperts});
  gpu().MoeExperts(a_);
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<float> out = Download(a_.out, 4 * 64);
  // Slot 1 of token 1 is out row 1 * n_tok + 1 = 3.
  for (int c = 0; c < 64; ++c) EXPECT_TRUE(std::isnan(out[3 * 64 + c])) << c;
  for (int i = 0; i < 3 * 64; ++i) ASSERT_TRUE(std::isfinite(out[i])) << i;
  a_.ids = Upload(std::vector<int32_t>{0, 1, 2, 3});
  gpu().MoeExperts(a_);
  EXPECT_TRUE(Error().ok());
}

TEST_F(GpuMoeExpertsErrorTest, ExpertsOfDifferentShapesAreAnError) {
  a_.ids = Upload(std::vector<int32_t>{0, 1, 2, 3});
  WeightMatrix shorter = mats_[2];
  shorter.rows = 32;
  experts_[2].down = &shorter;
  gpu().MoeExperts(a_);
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
  experts_[2].down = nullptr;
  gpu().MoeExperts(a_);
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
}

// Skipping every expert needs n_embd (nothing else says how much of out to zero); with it, out is all +0.0f.
TEST_F(GpuMoeExpertsErrorTest, EveryExpertSkippedNeedsTheWidth) {
  a_.ids = Upload(std::vector<int32_t>{0, 1, 2, 3});
  const std::vector<ExpertMatrices> none(kExperts);
  a_.experts = none.data();
  gpu().MoeExperts(a_);
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
  a_.n_embd = 64;
  gpu().MoeExperts(a_);
  for (float v : Download(a_.out, 4 * 64)) ASSERT_TRUE(v == 0.0f && !std::signbit(v)) << v;
  EXPECT_TRUE(Error().ok());
  a_.experts = experts_.data();
  a_.n_embd = 32;  // not the experts' width
  gpu().MoeExperts(a_);
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(GpuMoeExpertsErrorTest, MorePairsThanTheWorkspaceIsAnError) {
  a_.ids = Upload(std::vector<int32_t>(65 * 8, 0));
  a_.n_tok = 65;  // the workspace holds 64 tokens of 8
  a_.k = 8;
  gpu().MoeExperts(a_);
  EXPECT_EQ(Error().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tandem

// The simulated GPU's ops with the options of runtime/ops.h: MoeExperts over every activation, bias and weight
// placement, against the reference and, bit for bit, the host's one-by-one path; and the ops whose parameters
// carry pointers (rope frequency factors, attention sinks, the routing's selection bias), which must be device
// memory and must give the CPU kernels' bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "cpu_backend/kernels.h"
#include "sim_backend/sim_backend.h"
#include "tests/cpu_backend/expert_fixture.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using test::Poison;
using test::RandomNormal;

// A sim whose copies and kernels are not throttled.
SimBackend MakeSim() { return SimBackend(ParseSimSpec("sim:64MiB,pcie=1000,gpu_gbps=0").value()); }

// A device copy of host data (freed with the backend).
template <typename T>
T* ToDevice(SimBackend& sim, const T* h, size_t n) {
  void* d = sim.Alloc(n * sizeof(T), "test").value();
  EXPECT_TRUE(sim.CopyHostToDevice(d, h, n * sizeof(T), Stream::kCompute).ok());
  return static_cast<T*>(d);
}
template <typename T>
T* ToDevice(SimBackend& sim, const std::vector<T>& h) {
  return ToDevice(sim, h.data(), h.size());
}
template <typename T>
std::vector<T> ToHost(SimBackend& sim, const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_TRUE(sim.Synchronize(Stream::kCompute).ok());
  EXPECT_TRUE(sim.CopyDeviceToHost(h.data(), d, n * sizeof(T), Stream::kCompute).ok());
  return h;
}
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---------------------------------------------------------------- MoeExperts

// The experts of a test::ExpertSet copied to the sim: matrices, biases and the views over them.
struct DeviceExperts {
  DeviceExperts(SimBackend& sim, const test::ExpertSet& ex) {
    std::vector<const float*> bias;
    for (size_t i = 0; i < ex.matrices.size(); ++i) {
      WeightMatrix m = ex.matrices[i];
      m.data = ToDevice(sim, ex.bytes[i]);
      matrices.push_back(m);
      bias.push_back(ex.biases[i].empty() ? nullptr : ToDevice(sim, ex.biases[i]));
    }
    views = ex.ViewsOver(matrices, bias);
  }
  std::vector<WeightMatrix> matrices;
  std::vector<ExpertMatrices> views;
};

// The sim runs the one-by-one path of the CPU kernels, so its results are those of the host's one-by-one path, bit
// for bit, and match the reference as the CPU backend's do (test::ExpectMatchesReference).
using SimExpertsCase = std::tuple<DType, Activation, bool /*biases*/, bool /*weight_input*/, int64_t /*n_tok*/>;

std::string SimExpertsCaseName(const testing::TestParamInfo<SimExpertsCase>& info) {
  const auto& [type, act, biases, weight_input, n_tok] = info.param;
  const char* act_name = act == Activation::kSilu ? "silu" : act == Activation::kGelu ? "gelu" : "oai";
  return Cat(DTypeName(type), "_", act_name, biases ? "_biases" : "", weight_input ? "_winput" : "", "_tok", n_tok);
}

class SimMoeExpertsTest : public testing::TestWithParam<SimExpertsCase> {};

TEST_P(SimMoeExpertsTest, MatchesHostAndReference) {
  const auto& [type, act, biases, weight_input, n_tok] = GetParam();
  constexpr int kExperts = 8, kUsed = 4;
  const int64_t n_embd = 128, n_ff = 96;
  const int64_t buf_rows = std::max<int64_t>(n_tok, std::min<int64_t>(n_tok * kUsed, 64));
  SimBackend sim = MakeSim();
  ASSERT_TRUE(sim.ReserveWorkspace(WorkspaceSpec{.max_tokens = n_tok, .expert_rows = buf_rows, .max_cols = n_embd,
                                                 .max_rows = n_embd, .n_ctx = 8, .n_head = 1, .n_expert = kExperts,
                                                 .n_expert_used = kUsed})
                  .ok());
  const test::ExpertSet ex = test::MakeExperts(type, kExperts, n_embd, n_ff, biases, 500);
  const DeviceExperts dev(sim, ex);
  const std::vector<float> x = RandomNormal(static_cast<size_t>(n_tok * n_embd), 600 + n_tok);
  const test::Routing r = test::RandomRouting(n_tok, kExperts, kUsed, 700 + n_tok);
  const size_t out_elems = static_cast<size_t>(kUsed * n_tok * n_embd);
  std::vector<float> nan(out_elems);
  Poison(nan);
  float* d_out = ToDevice(sim, nan);
  std::vector<float> nan_buf(static_cast<size_t>(buf_rows * std::max(n_embd, n_ff)));
  Poison(nan_buf);
  const ExpertBuffers d_buf{.xe = ToDevice(sim, nan_buf), .gate = ToDevice(sim, nan_buf),
                            .up = ToDevice(sim, nan_buf), .rows = buf_rows};
  MoeExpertsArgs a{.experts = dev.views.data(), .n_expert = kExperts, .x = ToDevice(sim, x), .n_tok = n_tok,
                   .ids = ToDevice(sim, r.ids), .weights = ToDevice(sim, r.weights), .k = kUsed,
                   .act = GluParams{.act = act}, .weight_input = weight_input, .buf = d_buf, .out = d_out};
  sim.MoeExperts(a);
  const std::vector<float> got = ToHost(sim, d_out, out_elems);
  ASSERT_TRUE(sim.TakeError().ok());

  // The same on the host: the one-by-one path, and the reference.
  test::HostExpertBuffers buf(buf_rows, n_embd, n_ff);
  std::vector<float> host(out_elems), want(out_elems);
  Poison(host);
  Poison(want);
  a = MoeExpertsArgs{.experts = ex.views.data(), .n_expert = kExperts, .x = x.data(), .n_tok = n_tok,
                     .ids = r.ids.data(), .weights = r.weights.data(), .k = kUsed, .act = GluParams{.act = act},
                     .weight_input = weight_input, .buf = buf.buf, .out = host.data()};
  test::RunOneByOne(a);
  EXPECT_TRUE(SameBits(got, host)) << "the sim differs from the host's one-by-one path";
  a.out = want.data();
  cpu::MoeExpertsRef(a);
  test::ExpectMatchesReference(type, got, want, n_embd);
}

INSTANTIATE_TEST_SUITE_P(Grid, SimMoeExpertsTest,
                         testing::Combine(testing::Values(DType::kQ4_0, DType::kQ8_0, DType::kMXFP4, DType::kF32),
                                          testing::Values(Activation::kSilu, Activation::kGelu,
                                                          Activation::kSwigluOai),
                                          testing::Bool(), testing::Bool(), testing::Values(int64_t{1}, int64_t{37})),
                         SimExpertsCaseName);

// The weights of the experts a batch routes to are what the throttle charges; the trace says how many bytes.
TEST(SimMoeExperts, ChargesTheRoutedExpertsWeights) {
  SimBackend sim = MakeSim();
  ASSERT_TRUE(sim.ReserveWorkspace(WorkspaceSpec{.max_tokens = 1, .expert_rows = 2, .max_cols = 64, .max_rows = 64,
                                                 .n_ctx = 8, .n_head = 1, .n_expert = 4, .n_expert_used = 2})
                  .ok());
  const test::ExpertSet ex = test::MakeExperts(DType::kQ8_0, 4, 64, 64, false, 800);
  const DeviceExperts dev(sim, ex);
  std::vector<float> nan(2 * 64);
  Poison(nan);
  const std::vector<int32_t> ids = {3, 1};
  const std::vector<float> w = {0.6f, 0.4f};
  const ExpertBuffers buf{.xe = ToDevice(sim, nan), .gate = ToDevice(sim, nan), .up = ToDevice(sim, nan), .rows = 2};
  float* out = ToDevice(sim, nan);
  sim.ClearTrace();
  sim.MoeExperts(MoeExpertsArgs{.experts = dev.views.data(), .n_expert = 4, .x = ToDevice(sim, RandomNormal(64, 1)),
                                .n_tok = 1, .ids = ToDevice(sim, ids), .weights = ToDevice(sim, w), .k = 2,
                                .buf = buf, .out = out});
  ASSERT_TRUE(sim.Synchronize(Stream::kCompute).ok());
  ASSERT_TRUE(sim.TakeError().ok());
  uint64_t bytes = 0;
  for (const TraceEvent& e : sim.Trace()) {
    if (e.op == "MoeExperts") bytes = e.bytes;
  }
  EXPECT_EQ(bytes, 2 * 3 * ex.matrices[0].bytes());  // experts 3 and 1, three matrices each
}

// Masked calls (runtime/ops.h), as on the CPU backend: skipped experts' slots +0.0f, the others the unmasked call's
// bit for bit, complementary masks adding up to it, and the host's one-by-one path's bits. The skipped experts'
// up, down and biases are host memory, which the sim would refuse if it looked at them; and the throttle charges
// only the computed experts' weights.
using SimMaskCase = std::tuple<DType, int64_t /*n_tok*/, test::ExpertMask>;

std::string SimMaskCaseName(const testing::TestParamInfo<SimMaskCase>& info) {
  const auto& [type, n_tok, mask] = info.param;
  return Cat(DTypeName(type), "_tok", n_tok, "_skip_", test::ExpertMaskName(mask));
}

class SimMoeExpertsMaskTest : public testing::TestWithParam<SimMaskCase> {};

TEST_P(SimMoeExpertsMaskTest, SkippedSlotsAreZerosAndUncharged) {
  const auto& [type, n_tok, mask] = GetParam();
  constexpr int kExperts = 8, kUsed = 4;
  const int64_t n_embd = 256, n_ff = 256;  // whole Q4_K blocks
  const int64_t buf_rows = std::max<int64_t>(n_tok, std::min<int64_t>(n_tok * kUsed, 64));
  SimBackend sim = MakeSim();
  ASSERT_TRUE(sim.ReserveWorkspace(WorkspaceSpec{.max_tokens = n_tok, .expert_rows = buf_rows, .max_cols = n_ff,
                                                 .max_rows = n_embd, .n_ctx = 8, .n_head = 1, .n_expert = kExperts,
                                                 .n_expert_used = kUsed})
                  .ok());
  const test::ExpertSet ex = test::MakeExperts(type, kExperts, n_embd, n_ff, /*with_biases=*/true, 550);
  const DeviceExperts dev(sim, ex);
  const std::vector<float> x = RandomNormal(static_cast<size_t>(n_tok * n_embd), 650 + n_tok);
  const test::Routing r = test::RandomRouting(n_tok, kExperts, kUsed, 750 + n_tok);
  const std::vector<bool> skip = test::SkippedExperts(mask, kExperts, r), other = test::Complement(skip);
  const std::vector<ExpertMatrices> masked = test::MaskedViews(dev.views, skip, ex.views);
  const std::vector<ExpertMatrices> complement = test::MaskedViews(dev.views, other, ex.views);
  const size_t out_elems = static_cast<size_t>(kUsed * n_tok * n_embd);
  std::vector<float> nan(out_elems);
  Poison(nan);
  std::vector<float> nan_buf(static_cast<size_t>(buf_rows * std::max(n_embd, n_ff)));
  Poison(nan_buf);
  const ExpertBuffers d_buf{.xe = ToDevice(sim, nan_buf), .gate = ToDevice(sim, nan_buf),
                            .up = ToDevice(sim, nan_buf), .rows = buf_rows};
  MoeExpertsArgs a{.n_expert = kExperts, .x = ToDevice(sim, x), .n_tok = n_tok, .ids = ToDevice(sim, r.ids),
                   .weights = ToDevice(sim, r.weights), .k = kUsed, .buf = d_buf, .n_embd = n_embd};
  // The output, and the weight bytes the trace says the throttle charged.
  auto run = [&](const std::vector<ExpertMatrices>& experts, uint64_t* bytes) {
    float* d_out = ToDevice(sim, nan);
    a.experts = experts.data();
    a.out = d_out;
    sim.ClearTrace();
    sim.MoeExperts(a);
    std::vector<float> out = ToHost(sim, d_out, out_elems);
    EXPECT_TRUE(sim.TakeError().ok());
    *bytes = 0;
    for (const TraceEvent& e : sim.Trace()) {
      if (e.op == "MoeExperts") *bytes = e.bytes;
    }
    return out;
  };
  // What a call that skips `s` should charge: the three matrices of each computed expert with pairs.
  auto charged = [&](const std::vector<bool>& s) {
    std::vector<bool> routed(kExperts);
    for (int32_t e : r.ids) routed[e] = true;
    uint64_t bytes = 0;
    for (int e = 0; e < kExperts; ++e) {
      if (routed[e] && !s[e]) bytes += 3 * ex.matrices[3 * e].bytes();
    }
    return bytes;
  };
  uint64_t full_bytes = 0, got_bytes = 0, other_bytes = 0;
  const std::vector<float> full = run(dev.views, &full_bytes);
  const std::vector<float> got = run(masked, &got_bytes);
  const std::vector<float> got_other = run(complement, &other_bytes);
  test::ExpectMaskedSlots(got, full, r, skip, n_tok, kUsed, n_embd);
  test::ExpectMaskedSlots(got_other, full, r, other, n_tok, kUsed, n_embd);
  test::ExpectSumsToFull(got, got_other, full);
  EXPECT_EQ(full_bytes, charged(std::vector<bool>(kExperts)));
  EXPECT_EQ(got_bytes, charged(skip));
  EXPECT_EQ(other_bytes, charged(other));

  // The same on the host: the one-by-one path, and the reference.
  const std::vector<ExpertMatrices> host_masked = test::MaskedViews(ex.views, skip, ex.views);
  test::HostExpertBuffers buf(buf_rows, n_embd, n_ff);
  std::vector<float> host(out_elems), want(out_elems);
  Poison(host);
  Poison(want);
  MoeExpertsArgs h{.experts = host_masked.data(), .n_expert = kExperts, .x = x.data(), .n_tok = n_tok,
                   .ids = r.ids.data(), .weights = r.weights.data(), .k = kUsed, .buf = buf.buf, .out = host.data(),
                   .n_embd = n_embd};
  test::RunOneByOne(h);
  EXPECT_TRUE(SameBits(got, host)) << "the sim differs from the host's one-by-one path";
  h.out = want.data();
  cpu::MoeExpertsRef(h);
  test::ExpectMatchesReference(type, got, want, n_embd);
}

INSTANTIATE_TEST_SUITE_P(Grid, SimMoeExpertsMaskTest,
                         testing::Combine(testing::Values(DType::kF32, DType::kQ4_0, DType::kQ8_0, DType::kQ4_K),
                                          testing::Values(int64_t{1}, int64_t{7}, int64_t{70}),
                                          testing::Values(test::ExpertMask::kNone, test::ExpertMask::kHalf,
                                                          test::ExpertMask::kOne, test::ExpertMask::kAll)),
                         SimMaskCaseName);

TEST(SimMoeExperts, EveryExpertSkippedNeedsTheWidth) {
  SimBackend sim = MakeSim();
  ASSERT_TRUE(sim.ReserveWorkspace(WorkspaceSpec{.max_tokens = 1, .expert_rows = 1, .max_cols = 64, .max_rows = 64,
                                                 .n_ctx = 8, .n_head = 1, .n_expert = 2, .n_expert_used = 1})
                  .ok());
  const std::vector<ExpertMatrices> none(2);
  std::vector<float> nan(64);
  Poison(nan);
  const ExpertBuffers buf{.xe = ToDevice(sim, nan), .gate = ToDevice(sim, nan), .up = ToDevice(sim, nan), .rows = 1};
  float* out = ToDevice(sim, nan);
  MoeExpertsArgs a{.experts = none.data(), .n_expert = 2, .x = ToDevice(sim, RandomNormal(64, 3)), .n_tok = 1,
                   .ids = ToDevice(sim, std::vector<int32_t>{1}), .weights = ToDevice(sim, std::vector<float>{1.0f}),
                   .k = 1, .buf = buf, .out = out};
  sim.MoeExperts(a);
  EXPECT_EQ(sim.TakeError().code(), absl::StatusCode::kInvalidArgument);
  a.n_embd = 64;
  sim.MoeExperts(a);
  for (float v : ToHost(sim, out, 64)) ASSERT_TRUE(v == 0.0f && !std::signbit(v)) << v;
  EXPECT_TRUE(sim.TakeError().ok());
}

// As on the CPU backend: more tokens on one expert than the workspace was reserved for is an error, found when the
// task runs (only then are the counts known), and nothing overruns.
TEST(SimMoeExperts, BeyondTheReservedTokensIsAnError) {
  SimBackend sim = MakeSim();
  ASSERT_TRUE(sim.ReserveWorkspace(WorkspaceSpec{.max_tokens = 2, .max_cols = 512, .max_rows = 512, .n_ctx = 8,
                                                 .n_head = 1, .n_expert = 2, .n_expert_used = 16})
                  .ok());
  const test::ExpertSet ex = test::MakeExperts(DType::kQ8_0, 2, 256, 512, false, 900);
  const DeviceExperts dev(sim, ex);
  const int64_t n_tok = 32;  // 32 pairs of k = 1 fit the grouping reserved for 2 tokens of k = 16
  const std::vector<int32_t> ids(n_tok, 0);
  const std::vector<float> w(n_tok, 1.0f);
  std::vector<float> zeros(static_cast<size_t>(n_tok * 512));
  const ExpertBuffers buf{.xe = ToDevice(sim, zeros), .gate = ToDevice(sim, zeros), .up = ToDevice(sim, zeros),
                          .rows = n_tok};
  sim.MoeExperts(MoeExpertsArgs{.experts = dev.views.data(), .n_expert = 2,
                                .x = ToDevice(sim, RandomNormal(static_cast<size_t>(n_tok * 256), 2)),
                                .n_tok = n_tok, .ids = ToDevice(sim, ids), .weights = ToDevice(sim, w), .k = 1,
                                .buf = buf, .out = ToDevice(sim, zeros)});
  ASSERT_TRUE(sim.Synchronize(Stream::kCompute).ok());
  EXPECT_EQ(sim.TakeError().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SimMoeExperts, HostBiasIsRejected) {
  SimBackend sim = MakeSim();
  ASSERT_TRUE(sim.ReserveWorkspace(WorkspaceSpec{.max_tokens = 1, .expert_rows = 1, .max_cols = 64, .max_rows = 64,
                                                 .n_ctx = 8, .n_head = 1, .n_expert = 1, .n_expert_used = 1})
                  .ok());
  const test::ExpertSet ex = test::MakeExperts(DType::kF32, 1, 64, 64, true, 1000);
  DeviceExperts dev(sim, ex);
  dev.views[0].up_bias = ex.biases[1].data();  // host memory
  std::vector<float> zeros(64);
  const ExpertBuffers buf{.xe = ToDevice(sim, zeros), .gate = ToDevice(sim, zeros), .up = ToDevice(sim, zeros),
                          .rows = 1};
  const std::vector<int32_t> ids = {0};
  sim.MoeExperts(MoeExpertsArgs{.experts = dev.views.data(), .n_expert = 1, .x = ToDevice(sim, zeros), .n_tok = 1,
                                .ids = ToDevice(sim, ids), .weights = ToDevice(sim, std::vector<float>{1.0f}),
                                .k = 1, .buf = buf, .out = ToDevice(sim, zeros)});
  const absl::Status s = sim.TakeError();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Message(s).find("up bias"), std::string::npos) << s;
}

// ---------------------------------------------------------------- ops with pointers in their parameters

TEST(SimOps, RopeWithFactorsAndYarnGivesTheKernelsBits) {
  SimBackend sim = MakeSim();
  const int n_head = 4, head_dim = 64;
  const int64_t n_tok = 5;
  const std::vector<float> x = RandomNormal(static_cast<size_t>(n_tok * n_head * head_dim), 1);
  const std::vector<int32_t> pos = {0, 3, 17, 200, 1000};
  std::vector<float> factors(head_dim / 2);
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.25f * static_cast<float>(i);
  RopeParams p{.n_head = n_head, .head_dim = head_dim, .n_rot = head_dim, .mode = RopeMode::kNeox,
               .freq_base = 500000.0f, .freq_scale = 0.25f, .ext_factor = 1.0f, .n_ctx_orig = 4096};
  std::vector<float> want = x;
  p.freq_factors = factors.data();
  cpu::Rope(want.data(), n_tok, pos.data(), p);

  float* dx = ToDevice(sim, x);
  p.freq_factors = ToDevice(sim, factors);
  sim.Rope(dx, n_tok, ToDevice(sim, pos), p);
  EXPECT_TRUE(SameBits(ToHost(sim, dx, x.size()), want));
  ASSERT_TRUE(sim.TakeError().ok());

  p.freq_factors = factors.data();  // host memory: refused before anything is queued
  sim.Rope(dx, n_tok, ToDevice(sim, pos), p);
  const absl::Status s = sim.TakeError();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Message(s).find("freq_factors"), std::string::npos) << s;
}

TEST(SimOps, AttentionWithWindowSinksAndCapGivesTheKernelsBits) {
  SimBackend sim = MakeSim();
  const int n_head = 8, n_head_kv = 2, head_dim = 64;
  const int64_t n_ctx = 32, n_tok = 6, pos0 = 20, kv_row = n_head_kv * head_dim;
  ASSERT_TRUE(sim.ReserveWorkspace(WorkspaceSpec{.max_tokens = n_tok, .max_cols = 64, .max_rows = 64,
                                                 .n_ctx = n_ctx, .n_head = n_head})
                  .ok());
  const std::vector<float> k = RandomNormal(static_cast<size_t>((pos0 + n_tok) * kv_row), 2, 2.0f);
  const std::vector<float> v = RandomNormal(k.size(), 3);
  const std::vector<float> q = RandomNormal(static_cast<size_t>(n_tok * n_head * head_dim), 4, 2.0f);
  const std::vector<float> sinks = RandomNormal(n_head, 5, 2.0f);
  for (DType type : {DType::kF32, DType::kF16}) {
    const size_t cache_bytes = static_cast<size_t>(n_ctx * kv_row) * (type == DType::kF16 ? 2 : 4);
    std::vector<uint8_t> hk(cache_bytes), hv(cache_bytes);
    const KvLayer host_kv{type, hk.data(), hv.data(), n_ctx, kv_row};
    cpu::KvStore(host_kv, k.data(), v.data(), pos0 + n_tok, 0);
    AttentionParams p{.n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim, .scale = 0.125f, .window = 8,
                      .sinks = sinks.data(), .softcap = 20.0f};
    std::vector<float> want(q.size());
    std::vector<uint8_t> scratch(cpu::AttentionScratchBytes(n_ctx, n_head, 0));
    cpu::Attention(q.data(), host_kv, n_tok, pos0, p, want.data(), scratch.data());

    const KvLayer kv{type, ToDevice(sim, hk), ToDevice(sim, hv), n_ctx, kv_row};
    float* dq = ToDevice(sim, q);
    float* dout = static_cast<float*>(sim.Alloc(q.size() * sizeof(float), "out").value());
    p.sinks = ToDevice(sim, sinks);
    sim.Attention(dq, kv, n_tok, pos0, p, dout);
    EXPECT_TRUE(SameBits(ToHost(sim, dout, q.size()), want)) << DTypeName(type);
    ASSERT_TRUE(sim.TakeError().ok());

    p.sinks = sinks.data();  // host memory
    sim.Attention(dq, kv, n_tok, pos0, p, dout);
    const absl::Status s = sim.TakeError();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(Message(s).find("sinks"), std::string::npos) << s;
  }
}

TEST(SimOps, MoeRouteWithBiasGivesTheKernelsResult) {
  SimBackend sim = MakeSim();
  const int n_expert = 16, k = 4;
  const int64_t n_tok = 9;
  const std::vector<float> logits = RandomNormal(static_cast<size_t>(n_tok * n_expert), 6, 2.0f);
  const std::vector<float> bias = RandomNormal(n_expert, 7, 0.3f);
  MoeRouteParams p{.n_expert = n_expert, .k = k, .gating = MoeGating::kSigmoid, .scale = 2.5f,
                   .selection_bias = bias.data()};
  std::vector<int32_t> want_ids(static_cast<size_t>(n_tok * k));
  std::vector<float> want_w(want_ids.size());
  cpu::MoeRoute(logits.data(), n_tok, p, want_ids.data(), want_w.data());

  auto* ids = static_cast<int32_t*>(sim.Alloc(want_ids.size() * sizeof(int32_t), "ids").value());
  auto* w = static_cast<float*>(sim.Alloc(want_w.size() * sizeof(float), "w").value());
  float* dl = ToDevice(sim, logits);
  p.selection_bias = ToDevice(sim, bias);
  sim.MoeRoute(dl, n_tok, p, ids, w);
  EXPECT_EQ(ToHost(sim, ids, want_ids.size()), want_ids);
  EXPECT_TRUE(SameBits(ToHost(sim, w, want_w.size()), want_w));
  ASSERT_TRUE(sim.TakeError().ok());

  p.selection_bias = bias.data();  // host memory
  sim.MoeRoute(dl, n_tok, p, ids, w);
  EXPECT_EQ(sim.TakeError().code(), absl::StatusCode::kFailedPrecondition);
  p.selection_bias = nullptr;
  p.k = n_expert + 1;
  sim.MoeRoute(dl, n_tok, p, ids, w);
  EXPECT_EQ(sim.TakeError().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SimOps, GluAndAddBiasGiveTheKernelsBits) {
  SimBackend sim = MakeSim();
  const int64_t n = 1000;
  const std::vector<float> g = RandomNormal(n, 8, 6.0f), u = RandomNormal(n, 9, 6.0f);
  float* dg = ToDevice(sim, g);
  float* du = ToDevice(sim, u);
  float* dy = static_cast<float*>(sim.Alloc(n * sizeof(float), "y").value());
  for (Activation act : {Activation::kSilu, Activation::kGelu, Activation::kSwigluOai}) {
    const GluParams p{.act = act, .alpha = 1.5f, .limit = 5.0f};
    for (bool gated : {true, false}) {
      if (!gated && act == Activation::kSwigluOai) continue;  // needs u
      std::vector<float> want(n);
      cpu::Glu(g.data(), gated ? u.data() : nullptr, n, p, want.data());
      sim.Glu(dg, gated ? du : nullptr, n, p, dy);
      EXPECT_TRUE(SameBits(ToHost(sim, dy, n), want)) << static_cast<int>(act) << " gated " << gated;
    }
  }
  // 10 rows of 100 plus a bias, in place.
  std::vector<float> want(n);
  cpu::AddBias(g.data(), u.data(), 10, 100, want.data());
  sim.AddBias(dg, du, 10, 100, dg);
  EXPECT_TRUE(SameBits(ToHost(sim, dg, n), want));
  // 100 rows of 10, each times the sigmoid of its gate.
  cpu::ScaleRows(want.data(), u.data(), 100, 10, RowScale::kSigmoid, want.data());
  sim.ScaleRows(dg, du, 100, 10, RowScale::kSigmoid, dy);
  EXPECT_TRUE(SameBits(ToHost(sim, dy, n), want));
  EXPECT_TRUE(sim.TakeError().ok());
  sim.ScaleRows(g.data(), du, 100, 10, RowScale::kSigmoid, dy);  // host memory is not the device's
  EXPECT_FALSE(sim.TakeError().ok());
}

}  // namespace
}  // namespace tandem

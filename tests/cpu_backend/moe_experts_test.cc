// MoeExperts through the CPU backend (runtime/ops.h's MoeExpertsArgs): every activation, with and without biases,
// the routing weight on the output or the input, decode and prefill batches, Q4_0, Q8_0, MXFP4 (gpt-oss's experts)
// and F32 experts (which have no packed layout and stay GGUF rows) in the packed and the GGUF layout. Each result is
// held to the reference (cpu::MoeExpertsRef over the GGUF rows), and the batched path of packed experts to the
// one-by-one path, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "cpu_backend/cpu_backend.h"
#include "cpu_backend/kernels.h"
#include "tests/cpu_backend/expert_fixture.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using test::Poison;
using test::RandomNormal;

// The backend repacks the quantized experts of the grids; F32's it reads as GGUF rows.
bool HasPackedLayout(DType t) { return t != DType::kF32; }

using ExpertsCase = std::tuple<Repack, DType, Activation, bool /*biases*/, bool /*weight_input*/, int64_t /*n_tok*/>;

std::string ExpertsCaseName(const testing::TestParamInfo<ExpertsCase>& info) {
  const auto& [repack, type, act, biases, weight_input, n_tok] = info.param;
  return Cat(repack == Repack::kOn ? "packed" : "gguf", "_", DTypeName(type), "_", ActivationName(act),
             biases ? "_biases" : "", weight_input ? "_winput" : "", "_tok", n_tok);
}

class MoeExpertsTest : public testing::TestWithParam<ExpertsCase> {};

TEST_P(MoeExpertsTest, MatchesReferenceAndOneByOne) {
  const auto& [repack, type, act, biases, weight_input, n_tok] = GetParam();
  constexpr int kExperts = 8, kUsed = 4;
  const int64_t n_embd = 128, n_ff = 96;  // multiples of 32 (blocks) and of 16 (packed row groups)
  // Rows as the executor sizes them (arch/activations.cc's ExpertRows): every pair of a decode step in one pass,
  // a prefill batch in passes of n_tok rows.
  const int64_t buf_rows = std::max<int64_t>(n_tok, std::min<int64_t>(n_tok * kUsed, 64));

  auto b = CreateCpuBackend(CpuBackendOptions{.n_threads = 2, .repack = repack});
  const test::ExpertSet ex = test::MakeExperts(type, kExperts, n_embd, n_ff, biases, 200);
  std::vector<WeightMatrix> prepared;
  for (const WeightMatrix& w : ex.matrices) {
    absl::StatusOr<WeightMatrix> p = b->PrepareMatMulWeights(w, "expert");
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(cpu::IsPacked(*p), repack == Repack::kOn && HasPackedLayout(type));
    prepared.push_back(*p);
  }
  const std::vector<ExpertMatrices> views = ex.ViewsOver(prepared, ex.BiasPointers());
  ASSERT_TRUE(b->ReserveWorkspace(WorkspaceSpec{.max_tokens = n_tok, .expert_rows = buf_rows,
                                                .max_cols = std::max(n_embd, n_ff), .max_rows = std::max(n_embd, n_ff),
                                                .n_ctx = 8, .n_head = 1, .n_expert = kExperts, .n_expert_used = kUsed})
                  .ok());

  const std::vector<float> x = RandomNormal(static_cast<size_t>(n_tok * n_embd), 300 + n_tok);
  const test::Routing r = test::RandomRouting(n_tok, kExperts, kUsed, 400 + n_tok);
  test::HostExpertBuffers buf(buf_rows, n_embd, n_ff);
  const size_t out_elems = static_cast<size_t>(kUsed * n_tok * n_embd);
  std::vector<float> got(out_elems), one_by_one(out_elems), want(out_elems);
  Poison(got);
  Poison(one_by_one);
  Poison(want);
  MoeExpertsArgs a{.experts = views.data(), .n_expert = kExperts, .x = x.data(), .n_tok = n_tok, .ids = r.ids.data(),
                   .weights = r.weights.data(), .k = kUsed, .act = GluParams{.act = act},
                   .weight_input = weight_input, .buf = buf.buf, .out = got.data()};
  b->MoeExperts(a);
  ASSERT_TRUE(b->TakeError().ok());

  a.out = one_by_one.data();
  test::RunOneByOne(a);
  EXPECT_EQ(std::memcmp(got.data(), one_by_one.data(), got.size() * sizeof(float)), 0)
      << "the backend's path differs from the one-by-one path";

  a.experts = ex.views.data();  // the GGUF rows
  a.out = want.data();
  cpu::MoeExpertsRef(a);
  test::ExpectMatchesReference(type, got, want, n_embd);  // the bounds are explained there
}

INSTANTIATE_TEST_SUITE_P(Grid, MoeExpertsTest,
                         testing::Combine(testing::Values(Repack::kOn, Repack::kOff),
                                          testing::Values(DType::kQ4_0, DType::kQ8_0, DType::kMXFP4, DType::kF32),
                                          testing::Values(Activation::kSilu, Activation::kGelu,
                                                          Activation::kSwigluOai),
                                          testing::Bool(), testing::Bool(), testing::Values(int64_t{1}, int64_t{37})),
                         ExpertsCaseName);

// Masked calls (runtime/ops.h): the experts with a null gate are skipped, their slots +0.0f, every other slot the
// unmasked call's bit for bit; complementary masks add up to the unmasked out; the masked fast path matches the
// masked reference. Skipped experts' up and down are null here (the call must not read them).
using MaskCase = std::tuple<Repack, DType, int64_t /*n_tok*/, test::ExpertMask>;

std::string MaskCaseName(const testing::TestParamInfo<MaskCase>& info) {
  const auto& [repack, type, n_tok, mask] = info.param;
  return Cat(repack == Repack::kOn ? "packed" : "gguf", "_", DTypeName(type), "_tok", n_tok, "_skip_",
             test::ExpertMaskName(mask));
}

class MoeExpertsMaskTest : public testing::TestWithParam<MaskCase> {};

TEST_P(MoeExpertsMaskTest, SkippedSlotsAreZerosAndTheRestUnchanged) {
  const auto& [repack, type, n_tok, mask] = GetParam();
  constexpr int kExperts = 8, kUsed = 4;
  const int64_t n_embd = 256, n_ff = 256;  // whole Q4_K blocks
  const int64_t buf_rows = std::max<int64_t>(n_tok, std::min<int64_t>(n_tok * kUsed, 64));
  const bool weight_input = n_tok == 7;  // the other placement of the routing weight, once

  auto b = CreateCpuBackend(CpuBackendOptions{.n_threads = 2, .repack = repack});
  const test::ExpertSet ex = test::MakeExperts(type, kExperts, n_embd, n_ff, /*with_biases=*/true, 250);
  std::vector<WeightMatrix> prepared;
  for (const WeightMatrix& w : ex.matrices) {
    absl::StatusOr<WeightMatrix> p = b->PrepareMatMulWeights(w, "expert");
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(cpu::IsPacked(*p), repack == Repack::kOn && HasPackedLayout(type));  // so both paths are masked
    prepared.push_back(*p);
  }
  const std::vector<ExpertMatrices> views = ex.ViewsOver(prepared, ex.BiasPointers());
  ASSERT_TRUE(b->ReserveWorkspace(WorkspaceSpec{.max_tokens = n_tok, .expert_rows = buf_rows, .max_cols = n_ff,
                                                .max_rows = n_embd, .n_ctx = 8, .n_head = 1, .n_expert = kExperts,
                                                .n_expert_used = kUsed})
                  .ok());

  const std::vector<float> x = RandomNormal(static_cast<size_t>(n_tok * n_embd), 310 + n_tok);
  const test::Routing r = test::RandomRouting(n_tok, kExperts, kUsed, 410 + n_tok);
  const std::vector<bool> skip = test::SkippedExperts(mask, kExperts, r), other = test::Complement(skip);
  // Elsewhere: nothing for the matrices, the biases left as they were.
  std::vector<ExpertMatrices> elsewhere = views;
  for (ExpertMatrices& m : elsewhere) m.up = m.down = nullptr;
  const std::vector<ExpertMatrices> masked = test::MaskedViews(views, skip, elsewhere);
  const std::vector<ExpertMatrices> complement = test::MaskedViews(views, other, elsewhere);
  test::HostExpertBuffers buf(buf_rows, n_embd, n_ff);
  const size_t out_elems = static_cast<size_t>(kUsed * n_tok * n_embd);
  auto run = [&](const std::vector<ExpertMatrices>& experts) {
    std::vector<float> out(out_elems);
    Poison(out);
    b->MoeExperts(MoeExpertsArgs{.experts = experts.data(), .n_expert = kExperts, .x = x.data(), .n_tok = n_tok,
                                 .ids = r.ids.data(), .weights = r.weights.data(), .k = kUsed,
                                 .weight_input = weight_input, .buf = buf.buf, .out = out.data(), .n_embd = n_embd});
    EXPECT_TRUE(b->TakeError().ok());
    return out;
  };
  const std::vector<float> full = run(views), got = run(masked), got_other = run(complement);
  test::ExpectMaskedSlots(got, full, r, skip, n_tok, kUsed, n_embd);
  test::ExpectMaskedSlots(got_other, full, r, other, n_tok, kUsed, n_embd);
  test::ExpectSumsToFull(got, got_other, full);

  // The one-by-one path, bit for bit; the reference, masked the same way, as the unmasked test holds it.
  MoeExpertsArgs a{.experts = masked.data(), .n_expert = kExperts, .x = x.data(), .n_tok = n_tok,
                   .ids = r.ids.data(), .weights = r.weights.data(), .k = kUsed, .weight_input = weight_input,
                   .buf = buf.buf, .n_embd = n_embd};
  std::vector<float> one_by_one(out_elems), want(out_elems), want_full(out_elems);
  Poison(one_by_one);
  a.out = one_by_one.data();
  test::RunOneByOne(a);
  EXPECT_EQ(std::memcmp(got.data(), one_by_one.data(), got.size() * sizeof(float)), 0)
      << "the backend's path differs from the one-by-one path";
  std::vector<ExpertMatrices> gguf_elsewhere = ex.views;
  for (ExpertMatrices& m : gguf_elsewhere) m.up = m.down = nullptr;
  const std::vector<ExpertMatrices> gguf_masked = test::MaskedViews(ex.views, skip, gguf_elsewhere);
  Poison(want);
  Poison(want_full);
  a.experts = gguf_masked.data();
  a.out = want.data();
  cpu::MoeExpertsRef(a);
  a.experts = ex.views.data();
  a.out = want_full.data();
  cpu::MoeExpertsRef(a);
  test::ExpectMaskedSlots(want, want_full, r, skip, n_tok, kUsed, n_embd);
  test::ExpectMatchesReference(type, got, want, n_embd);
}

INSTANTIATE_TEST_SUITE_P(Grid, MoeExpertsMaskTest,
                         testing::Combine(testing::Values(Repack::kOn, Repack::kOff),
                                          testing::Values(DType::kF32, DType::kQ4_0, DType::kQ8_0, DType::kQ4_K,
                                                          DType::kMXFP4),
                                          testing::Values(int64_t{1}, int64_t{7}, int64_t{70}),
                                          testing::Values(test::ExpertMask::kNone, test::ExpertMask::kHalf,
                                                          test::ExpertMask::kOne, test::ExpertMask::kAll)),
                         MaskCaseName);

// Skipping every expert needs n_embd (nothing else says how wide out's rows are); a wrong n_embd is an error.
TEST(MoeExpertsMask, EveryExpertSkippedNeedsTheWidth) {
  auto b = CreateCpuBackend(CpuBackendOptions{.n_threads = 1, .repack = Repack::kOff});
  ASSERT_TRUE(b->ReserveWorkspace(WorkspaceSpec{.max_tokens = 2, .expert_rows = 2, .max_cols = 64, .max_rows = 64,
                                                .n_ctx = 1, .n_head = 1, .n_expert = 2, .n_expert_used = 1})
                  .ok());
  const test::ExpertSet ex = test::MakeExperts(DType::kF32, 2, 64, 64, false, 260);
  const std::vector<ExpertMatrices> none(2);
  const std::vector<float> x = RandomNormal(2 * 64, 261);
  const std::vector<int32_t> ids = {1, 0};
  const std::vector<float> w = {1.0f, 1.0f};
  test::HostExpertBuffers buf(2, 64, 64);
  std::vector<float> out(2 * 64);
  MoeExpertsArgs a{.experts = none.data(), .n_expert = 2, .x = x.data(), .n_tok = 2, .ids = ids.data(),
                   .weights = w.data(), .k = 1, .buf = buf.buf, .out = out.data()};
  b->MoeExperts(a);
  EXPECT_EQ(b->TakeError().code(), absl::StatusCode::kInvalidArgument);
  a.n_embd = 64;
  Poison(out);
  b->MoeExperts(a);
  ASSERT_TRUE(b->TakeError().ok());
  for (float v : out) ASSERT_TRUE(v == 0.0f && !std::signbit(v)) << v;
  a.experts = ex.views.data();
  a.n_embd = 32;
  b->MoeExperts(a);
  EXPECT_EQ(b->TakeError().code(), absl::StatusCode::kInvalidArgument);
}

// The weight_input and bias options against a computation written here from the formula of runtime/ops.h, for one
// token and one F32 expert of 2 -> 2 -> 2 whose numbers can be followed by hand: gate = diag(1, 2), up = I,
// down = [[1, 1], [0, 1]], x = (1, -1), w = 0.5, biases gate (0.5, 0), up (0, 1), down (1, 0), SiLU:
//   weight on the output: h = silu(x_g + b_g) * (x_u + b_u) = silu(1.5, -2) * (1, 0) = (1.5 sigmoid(1.5), 0)
//                         out = 0.5 (down h + b_d) = 0.5 (1.5 sigmoid(1.5) + 1, 0)
//   weight on the input:  x' = (0.5, -0.5): h = silu(1, -1) * (0.5, 0.5) = (0.5 sigmoid(1), -0.5 sigmoid(-1))
//                         out = down h + b_d = (0.5 sigmoid(1) - 0.5 sigmoid(-1) + 1, -0.5 sigmoid(-1))
TEST(MoeExpertsHand, WeightPlacementAndBiases) {
  const float gate[4] = {1, 0, 0, 2}, up[4] = {1, 0, 0, 1}, down[4] = {1, 1, 0, 1};
  const WeightMatrix g{.type = DType::kF32, .data = gate, .rows = 2, .cols = 2, .row_stride = 8};
  const WeightMatrix u{.type = DType::kF32, .data = up, .rows = 2, .cols = 2, .row_stride = 8};
  const WeightMatrix d{.type = DType::kF32, .data = down, .rows = 2, .cols = 2, .row_stride = 8};
  const float bg[2] = {0.5f, 0}, bu[2] = {0, 1}, bd[2] = {1, 0};
  const ExpertMatrices m{.gate = &g, .up = &u, .down = &d, .gate_bias = bg, .up_bias = bu, .down_bias = bd};
  const float x[2] = {1, -1};
  const int32_t ids[1] = {0};
  const float w[1] = {0.5f};
  auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  auto b = CreateCpuBackend(CpuBackendOptions{.n_threads = 1, .repack = Repack::kOff});
  ASSERT_TRUE(b->ReserveWorkspace(WorkspaceSpec{.max_tokens = 1, .max_cols = 2, .max_rows = 2, .n_ctx = 1, .n_head = 1,
                                                .n_expert = 1, .n_expert_used = 1})
                  .ok());
  for (bool weight_input : {false, true}) {
    const double want[2] = {
        weight_input ? 0.5 * sigmoid(1) - 0.5 * sigmoid(-1) + 1 : 0.5 * (1.5 * sigmoid(1.5) + 1),
        weight_input ? -0.5 * sigmoid(-1) : 0.0};
    test::HostExpertBuffers buf(1, 2, 2);
    float out[2] = {std::nanf(""), std::nanf("")}, ref[2] = {std::nanf(""), std::nanf("")};
    MoeExpertsArgs a{.experts = &m, .n_expert = 1, .x = x, .n_tok = 1, .ids = ids, .weights = w, .k = 1,
                     .weight_input = weight_input, .buf = buf.buf, .out = out};
    b->MoeExperts(a);
    ASSERT_TRUE(b->TakeError().ok());
    a.out = ref;
    cpu::MoeExpertsRef(a);
    for (int i = 0; i < 2; ++i) {
      EXPECT_NEAR(out[i], want[i], 1e-6) << "weight_input " << weight_input << " [" << i << "]";
      EXPECT_NEAR(ref[i], want[i], 1e-6) << "reference, weight_input " << weight_input << " [" << i << "]";
    }
  }
}

}  // namespace
}  // namespace tandem

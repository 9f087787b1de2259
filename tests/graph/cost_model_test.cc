// The cost model on hand-built units, checked against the formulas worked by hand; and the profile's JSON.
#include "graph/cost_model.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "core/status.h"
#include "graph/profile.h"
#include "tests/graph/mixtral_units.h"

namespace tandem {
namespace {

// Relative tolerance for times computed from the same formula in a different order.
constexpr double kRel = 1e-9;

MachineProfile Profile() {
  MachineProfile p = test::CpuProfile(/*gemv_gbps=*/20, /*gemm_gflops=*/100);
  p.cpu_attn_gflops = 10;
  p.cpu_op_overhead_s = 1e-5;
  p.has_gpu = true;
  p.h2d_gbps = 10;
  p.gpu_gemv_gbps = 1000;
  p.gpu_gemm_gflops = 10000;
  p.gpu_launch_s = 2e-6;
  p.gpu_sync_s = 3e-5;
  return p;
}

// A dense FFN: 3 matrices of 1000 x 4000 in Q8_0 (34 bytes per 32 weights).
UnitSpec DenseFfn() {
  return UnitSpec{.name = "blk.0.ffn", .kind = UnitKind::kFfn, .layer = 0,
                  .weight_bytes = 3ull * 1000 * 4000 / 32 * 34, .dense_params = 3.0 * 1000 * 4000,
                  .main_type = DType::kQ8_0};
}

// 8 experts of 1000 weights (1000 bytes each), 2 used per token, and 50 dense weights (100 bytes: router, norm).
UnitSpec SmallMoe() {
  return UnitSpec{.kind = UnitKind::kFfn, .weight_bytes = 8000 + 100, .expert_bytes = 8000, .n_expert = 8,
                  .n_expert_used = 2, .dense_params = 50, .expert_params = 1000};
}

// 4 heads of 8, K/V rows of 16; 1000 weights in 4000 bytes, of which wk and wv hold 250.
UnitSpec SmallAttention() {
  return UnitSpec{.kind = UnitKind::kAttn, .weight_bytes = 4000, .dense_params = 1000, .kv_params = 250,
                  .n_head = 4, .head_dim = 8, .n_embd_kv = 16};
}

TEST(CostModel, ExpectedExpertsHit) {
  EXPECT_DOUBLE_EQ(ExpectedExpertsHit(8, 2, 1), 2.0);       // one token: exactly k
  EXPECT_DOUBLE_EQ(ExpectedExpertsHit(8, 2, 2), 3.5);       // 8 * (1 - 0.75^2)
  EXPECT_NEAR(ExpectedExpertsHit(8, 2, 512), 8.0, 1e-12);   // a prefill batch touches all of them
  EXPECT_DOUBLE_EQ(ExpectedExpertsHit(0, 2, 5), 0.0);
}

TEST(CostModel, DenseWork) {
  const UnitSpec u = DenseFfn();
  const UnitWork w1 = WorkOf(u, 1, 0, 2);
  EXPECT_DOUBLE_EQ(w1.weight_bytes_read, 3.0 * 1000 * 4000 / 32 * 34);
  EXPECT_DOUBLE_EQ(w1.flops, 2.0 * 12e6);
  const UnitWork w64 = WorkOf(u, 64, 0, 2);
  EXPECT_DOUBLE_EQ(w64.weight_bytes_read, w1.weight_bytes_read);  // weights are read once per batch
  EXPECT_DOUBLE_EQ(w64.flops, 64 * 2.0 * 12e6);
}

TEST(CostModel, MoeDecodeReadsOnlyRoutedExperts) {
  const UnitSpec u = SmallMoe();
  const UnitWork w = WorkOf(u, 1, 0, 2);
  EXPECT_DOUBLE_EQ(w.weight_bytes_read, 100 + 2000);  // 2 of 8 experts
  EXPECT_DOUBLE_EQ(w.flops, 2.0 * (50 + 2 * 1000));
}

TEST(CostModel, AttentionWork) {
  const UnitSpec u = SmallAttention();
  const UnitWork w = WorkOf(u, 1, 100, 2);
  EXPECT_DOUBLE_EQ(w.kv_bytes_read, 2.0 * 100 * 16 * 2);  // K and V rows, F16
  EXPECT_DOUBLE_EQ(w.attn_flops, 4.0 * 100 * 4 * 8);
  EXPECT_EQ(u.KvBytes(100, 2), 2u * 100 * 16 * 2);
}

// The last layer in prefill: every token is cached, only the live ones (those whose logits are asked for) go on.
TEST(CostModel, PastTheCacheStoreOnlyLiveTokensWork) {
  const UnitSpec attn = SmallAttention();
  const UnitWork cache_only = WorkOf(attn, 64, 100, 2, /*n_live=*/0);
  EXPECT_DOUBLE_EQ(cache_only.weight_bytes_read, 1000.0);  // wk and wv: a quarter of the bytes
  EXPECT_DOUBLE_EQ(cache_only.flops, 2.0 * 64 * 250);
  EXPECT_DOUBLE_EQ(cache_only.kv_bytes_read, 0.0);
  EXPECT_DOUBLE_EQ(cache_only.attn_flops, 0.0);
  const UnitWork one = WorkOf(attn, 64, 100, 2, /*n_live=*/1);
  EXPECT_DOUBLE_EQ(one.weight_bytes_read, 4000.0);
  EXPECT_DOUBLE_EQ(one.flops, 2.0 * (64 * 250 + 750));
  EXPECT_DOUBLE_EQ(one.attn_flops, 4.0 * 100 * 4 * 8);
  const UnitWork all = WorkOf(attn, 64, 100, 2);
  EXPECT_DOUBLE_EQ(all.flops, 2.0 * 64 * 1000);

  const UnitSpec ffn = DenseFfn();
  const UnitWork ffn_none = WorkOf(ffn, 64, 0, 2, 0);
  EXPECT_DOUBLE_EQ(ffn_none.weight_bytes_read, 0.0);
  EXPECT_DOUBLE_EQ(ffn_none.flops, 0.0);
  EXPECT_EQ(ffn_none.n_ops, 0);
  EXPECT_DOUBLE_EQ(WorkOf(ffn, 64, 0, 2, 1).flops, 2.0 * 12e6);

  // One live token reads the 2 experts it is routed to, not the 8 a 64-token batch would touch.
  EXPECT_DOUBLE_EQ(WorkOf(SmallMoe(), 64, 0, 2, 1).weight_bytes_read, 100 + 2000);

  UnitSpec head;
  head.kind = UnitKind::kOutput;
  head.dense_params = 5000;
  head.weight_bytes = 5000;
  EXPECT_DOUBLE_EQ(WorkOf(head, 64, 0, 2, 1).flops, 2.0 * 5000);
  EXPECT_DOUBLE_EQ(WorkOf(head, 64, 0, 2, 0).weight_bytes_read, 0.0);
}

TEST(CostModel, CpuDecodeIsBandwidthBound) {
  const MachineProfile p = Profile();
  const UnitSpec u = DenseFfn();
  const double t = UnitSeconds(u, Placement::kCpu, {.n_tok = 1, .ctx = 0, .kv_elem_bytes = 2}, p);
  const double bytes = 3.0 * 1000 * 4000 / 32 * 34;
  EXPECT_NEAR(t, bytes / 20e9 + 6 * 1e-5, kRel * t);
}

TEST(CostModel, CpuPrefillIsComputeBound) {
  const MachineProfile p = Profile();
  const UnitSpec u = DenseFfn();
  const double t = UnitSeconds(u, Placement::kCpu, {.n_tok = 512, .ctx = 0, .kv_elem_bytes = 2}, p);
  EXPECT_NEAR(t, 512 * 2.0 * 12e6 / 100e9 + 6 * 1e-5, kRel * t);
}

TEST(CostModel, StreamIsTheSlowerOfCopyAndCompute) {
  const MachineProfile p = Profile();
  const UnitSpec u = DenseFfn();
  const double bytes = 3.0 * 1000 * 4000 / 32 * 34;
  // Decode: the copy (bytes / 10 GB/s) dominates the GPU read (bytes / 1000 GB/s).
  const double dec = UnitSeconds(u, Placement::kStream, {.n_tok = 1, .ctx = 0, .kv_elem_bytes = 2}, p);
  EXPECT_NEAR(dec, bytes / 10e9 + 6 * 2e-6 + 3e-5, kRel * dec);
  // A huge batch: compute (n * 24 MFLOP / 10 TFLOP/s) dominates the copy.
  const double big = UnitSeconds(u, Placement::kStream, {.n_tok = 100000, .ctx = 0, .kv_elem_bytes = 2}, p);
  EXPECT_NEAR(big, 100000 * 2.0 * 12e6 / 10000e9 + 6 * 2e-6 + 3e-5, kRel * big);
  // Resident: no copy at all.
  const double gpu = UnitSeconds(u, Placement::kGpu, {.n_tok = 1, .ctx = 0, .kv_elem_bytes = 2}, p);
  EXPECT_NEAR(gpu, bytes / 1000e9 + 6 * 2e-6, kRel * gpu);
}

TEST(CostModel, TransferIsBytesOverLinkPlusSync) {
  const MachineProfile p = Profile();
  EXPECT_NEAR(TransferSeconds(16384, p), 16384 / 10e9 + 3e-5, 1e-15);
}

TEST(Profile, UnknownTypesFallBackToTheSlowest) {
  MachineProfile p;
  p.cpu_gemv_gbps = {{DType::kQ4_K, 30}, {DType::kF16, 12}};
  EXPECT_DOUBLE_EQ(p.CpuGemvGbps(DType::kQ4_K), 30);
  EXPECT_DOUBLE_EQ(p.CpuGemvGbps(DType::kQ2_K), 12);
}

TEST(Profile, JsonRoundTrip) {
  MachineProfile p = Profile();
  p.device = "sim:12GiB,pcie=10";
  p.gpu_capacity_bytes = 12ull << 30;
  p.cpu_gemv_gbps[DType::kQ6_K] = 17.5;
  const MachineProfile q = ProfileFromJson(ProfileToJson(p)).value();
  EXPECT_EQ(q.device, p.device);
  EXPECT_EQ(q.n_threads, p.n_threads);
  EXPECT_EQ(q.cpu_gemv_gbps, p.cpu_gemv_gbps);
  EXPECT_EQ(q.cpu_gemm_gflops, p.cpu_gemm_gflops);
  EXPECT_DOUBLE_EQ(q.cpu_attn_gflops, p.cpu_attn_gflops);
  EXPECT_DOUBLE_EQ(q.cpu_op_overhead_s, p.cpu_op_overhead_s);
  EXPECT_EQ(q.has_gpu, p.has_gpu);
  EXPECT_EQ(q.gpu_capacity_bytes, p.gpu_capacity_bytes);
  EXPECT_DOUBLE_EQ(q.h2d_gbps, p.h2d_gbps);
  EXPECT_DOUBLE_EQ(q.gpu_gemv_gbps, p.gpu_gemv_gbps);
  EXPECT_DOUBLE_EQ(q.gpu_gemm_gflops, p.gpu_gemm_gflops);
  EXPECT_DOUBLE_EQ(q.gpu_launch_s, p.gpu_launch_s);
  EXPECT_DOUBLE_EQ(q.gpu_sync_s, p.gpu_sync_s);
  EXPECT_EQ(q.gpu_library_workspace_bytes, p.gpu_library_workspace_bytes);
}

TEST(Profile, BadJsonIsAnError) {
  for (const char* bad : {"", "[]", R"({"h2d_gbps": 0})", R"({"h2d_gbps": "fast"})",
                          R"({"cpu_gemv_gbps": {"Q9_Z": 3}})", R"({"cpu_gemv_gbps": {"Q4_K": -1}})",
                          R"({"n_threads": 0})", R"({"gpu_capacity_bytes": -5})"}) {
    EXPECT_FALSE(ProfileFromJson(bad).ok()) << bad;
  }
  // Missing keys keep the defaults.
  const MachineProfile p = ProfileFromJson("{\"h2d_gbps\": 7}").value();
  EXPECT_DOUBLE_EQ(p.h2d_gbps, 7);
  EXPECT_DOUBLE_EQ(p.gpu_gemv_gbps, DefaultProfile(false).gpu_gemv_gbps);
}

TEST(Profile, SaveLoadAndCachePath) {
  const std::string dir = ::testing::TempDir() + "/tandem_profile_test";
  setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  EXPECT_EQ(ProfileCachePath("sim:12GiB,pcie=2"), dir + "/tandem/profile-sim_12GiB_pcie_2.v2.json");
  const std::string path = ProfileCachePath("cpu");
  MachineProfile p = Profile();
  ASSERT_TRUE(SaveProfile(path, p).ok());
  const MachineProfile q = LoadProfile(path).value();
  EXPECT_EQ(q.cpu_gemv_gbps, p.cpu_gemv_gbps);
  EXPECT_FALSE(LoadProfile(dir + "/missing.json").ok());
}

TEST(SimProfile, TakesLinkAndCapacityFromTheSpec) {
  const MachineProfile cpu = test::CpuProfile(33, 44);
  const MachineProfile p = SimProfile(cpu, ParseSimSpec("sim:12GiB,pcie=2,gpu_gbps=500").value());
  EXPECT_TRUE(p.has_gpu);
  EXPECT_EQ(p.gpu_capacity_bytes, 12ull << 30);
  EXPECT_DOUBLE_EQ(p.h2d_gbps, 2);
  EXPECT_DOUBLE_EQ(p.gpu_gemv_gbps, 500);
  EXPECT_EQ(p.cpu_gemv_gbps, cpu.cpu_gemv_gbps);  // CPU numbers kept
  EXPECT_EQ(p.gpu_library_workspace_bytes, 0u);
}

}  // namespace
}  // namespace tandem

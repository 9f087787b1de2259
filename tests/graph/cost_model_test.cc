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

// Units of small llama-family models, built from their tensor tables like any file's: what they do is counted by
// running the family's unit functions, and checked here against the arithmetic worked by hand.
std::vector<UnitSpec> UnitsOf(const ModelConfig& c, DType type) {
  const std::vector<GgufTensorInfo> tensors = test::ModelTensors(c, type);
  return BuildUnits(c, tensors).value();
}
ModelConfig SmallConfig(int n_embd, int n_ff, int n_head, int n_head_kv, int n_expert, int k) {
  ModelConfig c = test::MixtralConfig();
  c.n_layer = 1;
  c.n_embd = n_embd;
  c.n_ff = c.n_ff_expert = n_ff;
  c.n_head = n_head;
  c.n_head_kv = n_head_kv;
  c.head_dim = c.n_rot = n_embd / n_head;
  c.n_vocab = 256;
  c.n_expert = n_expert;
  c.n_expert_used = k;
  return c;
}

// A dense FFN: 3 matrices of 1024 x 4096 in Q8_0 (34 bytes per 32 weights), and a 1024-float norm.
constexpr double kFfnMatrixBytes = 3.0 * 1024 * 4096 / 32 * 34;
constexpr double kFfnNormBytes = 1024 * 4;
UnitSpec DenseFfn() { return UnitsOf(SmallConfig(1024, 4096, 8, 2, 0, 0), DType::kQ8_0)[2]; }

// 8 F32 experts of 3 x 64 x 128 weights, 2 used per token, a 64 x 8 router and a 64-float norm.
constexpr double kExpertParams = 3.0 * 64 * 128;
constexpr double kMoeDenseBytes = (64.0 * 8 + 64) * 4;
UnitSpec SmallMoe() { return UnitsOf(SmallConfig(64, 128, 4, 2, 8, 2), DType::kF32)[2]; }

// 4 heads of 8, 2 KV heads (rows of 16): q and o 32 x 32, k and v 32 x 16, in F32, and a 32-float norm.
constexpr double kAttnParams = 2.0 * 32 * 32 + 2.0 * 32 * 16;
constexpr double kKvParams = 2.0 * 32 * 16;
UnitSpec SmallAttention() { return UnitsOf(SmallConfig(32, 64, 4, 2, 0, 0), DType::kF32)[1]; }

TEST(CostModel, ExpectedExpertsHit) {
  EXPECT_DOUBLE_EQ(ExpectedExpertsHit(8, 2, 1), 2.0);       // one token: exactly k
  EXPECT_DOUBLE_EQ(ExpectedExpertsHit(8, 2, 2), 3.5);       // 8 * (1 - 0.75^2)
  EXPECT_NEAR(ExpectedExpertsHit(8, 2, 512), 8.0, 1e-12);   // a prefill batch touches all of them
  EXPECT_DOUBLE_EQ(ExpectedExpertsHit(0, 2, 5), 0.0);
}

TEST(CostModel, DenseWork) {
  const UnitSpec u = DenseFfn();
  EXPECT_EQ(u.weight_bytes, kFfnMatrixBytes + kFfnNormBytes);
  const UnitWork w1 = WorkOf(u, 1, 0, 2);
  EXPECT_DOUBLE_EQ(w1.weight_bytes_read, kFfnMatrixBytes + kFfnNormBytes);
  EXPECT_DOUBLE_EQ(w1.flops, 2.0 * 3 * 1024 * 4096);
  EXPECT_EQ(w1.n_ops, 6);  // norm, gate, up, activation, down, residual add
  const UnitWork w64 = WorkOf(u, 64, 0, 2);
  EXPECT_DOUBLE_EQ(w64.weight_bytes_read, w1.weight_bytes_read);  // weights are read once per batch
  EXPECT_DOUBLE_EQ(w64.flops, 64 * 2.0 * 3 * 1024 * 4096);
}

TEST(CostModel, MoeDecodeReadsOnlyRoutedExperts) {
  const UnitSpec u = SmallMoe();
  const UnitWork w = WorkOf(u, 1, 0, 2);
  EXPECT_DOUBLE_EQ(w.weight_bytes_read, kMoeDenseBytes + 2 * kExpertParams * 4);  // 2 of 8 experts
  EXPECT_DOUBLE_EQ(w.flops, 2.0 * (64 * 8 + 2 * kExpertParams));
  EXPECT_EQ(u.expert_bytes, 8 * kExpertParams * 4);
}

TEST(CostModel, AttentionWork) {
  const UnitSpec u = SmallAttention();
  const UnitWork w = WorkOf(u, 1, 100, 2);
  EXPECT_DOUBLE_EQ(w.kv_bytes_read, 2.0 * 100 * 16 * 2);  // K and V rows, F16
  EXPECT_DOUBLE_EQ(w.attn_flops, 4.0 * 100 * 4 * 8);
  EXPECT_DOUBLE_EQ(w.weight_bytes_read, kAttnParams * 4 + 32 * 4);
  EXPECT_EQ(w.n_ops, 10);  // norm, q, k, v, rope k, cache store, rope q, attention, o, residual add
  EXPECT_EQ(u.KvBytes(100, 2, 512), 2u * 100 * 16 * 2);
}

// The last layer in prefill: every token is cached, only the live ones (those whose logits are asked for) go on.
TEST(CostModel, PastTheCacheStoreOnlyLiveTokensWork) {
  const UnitSpec attn = SmallAttention();
  const UnitWork cache_only = WorkOf(attn, 64, 100, 2, /*n_live=*/0);
  EXPECT_DOUBLE_EQ(cache_only.weight_bytes_read, kKvParams * 4 + 32 * 4);  // wk, wv and the norm
  EXPECT_DOUBLE_EQ(cache_only.flops, 2.0 * 64 * kKvParams);
  EXPECT_DOUBLE_EQ(cache_only.kv_bytes_read, 0.0);
  EXPECT_DOUBLE_EQ(cache_only.attn_flops, 0.0);
  EXPECT_EQ(cache_only.n_ops, 5);  // norm, k, v, rope k, cache store
  const UnitWork one = WorkOf(attn, 64, 100, 2, /*n_live=*/1);
  EXPECT_DOUBLE_EQ(one.weight_bytes_read, kAttnParams * 4 + 32 * 4);
  EXPECT_DOUBLE_EQ(one.flops, 2.0 * (64 * kKvParams + (kAttnParams - kKvParams)));
  EXPECT_DOUBLE_EQ(one.attn_flops, 4.0 * 100 * 4 * 8);
  const UnitWork all = WorkOf(attn, 64, 100, 2);
  EXPECT_DOUBLE_EQ(all.flops, 2.0 * 64 * kAttnParams);

  const UnitSpec ffn = DenseFfn();
  const UnitWork ffn_none = WorkOf(ffn, 64, 0, 2, 0);
  EXPECT_DOUBLE_EQ(ffn_none.weight_bytes_read, 0.0);
  EXPECT_DOUBLE_EQ(ffn_none.flops, 0.0);
  EXPECT_EQ(ffn_none.n_ops, 0);
  EXPECT_DOUBLE_EQ(WorkOf(ffn, 64, 0, 2, 1).flops, 2.0 * 3 * 1024 * 4096);

  // One live token reads the 2 experts it is routed to, not the 8 a 64-token batch would touch.
  EXPECT_DOUBLE_EQ(WorkOf(SmallMoe(), 64, 0, 2, 1).weight_bytes_read, kMoeDenseBytes + 2 * kExpertParams * 4);

  const UnitSpec head = UnitsOf(SmallConfig(32, 64, 4, 2, 0, 0), DType::kF32).back();
  EXPECT_DOUBLE_EQ(WorkOf(head, 64, 0, 2, 1).flops, 2.0 * 32 * 256);
  EXPECT_DOUBLE_EQ(WorkOf(head, 64, 0, 2, 0).weight_bytes_read, 0.0);
}

// The ops a unit issues, for the partitioner to ask the devices about.
TEST(CostModel, UnitsListTheOpsTheyIssue) {
  const UnitSpec moe = SmallMoe();
  for (const std::pair<Op, DType>& want : {std::pair{Op::kRmsNorm, DType::kF32}, std::pair{Op::kMatMul, DType::kF32},
                                          std::pair{Op::kMoeRoute, DType::kF32},
                                          std::pair{Op::kMoeExperts, DType::kF32}}) {
    EXPECT_NE(std::find(moe.ops.begin(), moe.ops.end(), want), moe.ops.end()) << OpName(want.first);
  }
  const UnitSpec dense = DenseFfn();
  EXPECT_NE(std::find(dense.ops.begin(), dense.ops.end(), std::pair{Op::kMatMul, DType::kQ8_0}), dense.ops.end());
  EXPECT_NE(std::find(dense.ops.begin(), dense.ops.end(), std::pair{Op::kGlu, DType::kF32}), dense.ops.end());
}

TEST(CostModel, CpuDecodeIsBandwidthBound) {
  const MachineProfile p = Profile();
  const UnitSpec u = DenseFfn();
  const double t = UnitSeconds(u, Placement::kCpu, {.n_tok = 1, .ctx = 0, .kv_elem_bytes = 2}, p);
  const double bytes = kFfnMatrixBytes + kFfnNormBytes;
  EXPECT_NEAR(t, bytes / 20e9 + 6 * 1e-5, kRel * t);
}

TEST(CostModel, CpuPrefillIsComputeBound) {
  const MachineProfile p = Profile();
  const UnitSpec u = DenseFfn();
  const double t = UnitSeconds(u, Placement::kCpu, {.n_tok = 512, .ctx = 0, .kv_elem_bytes = 2}, p);
  EXPECT_NEAR(t, 512 * 2.0 * 3 * 1024 * 4096 / 100e9 + 6 * 1e-5, kRel * t);
}

TEST(CostModel, StreamIsTheSlowerOfCopyAndCompute) {
  const MachineProfile p = Profile();
  const UnitSpec u = DenseFfn();
  const double bytes = kFfnMatrixBytes + kFfnNormBytes;
  // Decode: the copy (bytes / 10 GB/s) dominates the GPU read (bytes / 1000 GB/s).
  const double dec = UnitSeconds(u, Placement::kStream, {.n_tok = 1, .ctx = 0, .kv_elem_bytes = 2}, p);
  EXPECT_NEAR(dec, bytes / 10e9 + 6 * 2e-6 + 3e-5, kRel * dec);
  // A huge batch: compute (n * 24 MFLOP / 10 TFLOP/s) dominates the copy.
  const double big = UnitSeconds(u, Placement::kStream, {.n_tok = 100000, .ctx = 0, .kv_elem_bytes = 2}, p);
  EXPECT_NEAR(big, 100000 * 2.0 * 3 * 1024 * 4096 / 10000e9 + 6 * 2e-6 + 3e-5, kRel * big);
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
  EXPECT_EQ(ProfileCachePath("sim:12GiB,pcie=2"), dir + "/tandem/profile-sim_12GiB_pcie_2.v3.json");
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

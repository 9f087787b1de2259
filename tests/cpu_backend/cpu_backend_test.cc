// CpuBackend: memory accounting under a capacity, the workspace, movement, and compute through the interface.
#include "cpu_backend/cpu_backend.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/quant.h"
#include "core/status.h"
#include "cpu_backend/repack.h"
#include "tests/cpu_backend/expert_fixture.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using test::Nmse;
using test::Poison;
using test::RandomNormal;

constexpr double kTolMatMulF32 = 1e-12;  // float accumulation against double; measured around 1e-14

std::unique_ptr<CpuBackendApi> MakeBackend(size_t capacity = SIZE_MAX) {
  return CreateCpuBackend(CpuBackendOptions{.n_threads = 0, .capacity = capacity});
}

TEST(CpuBackend, Basics) {
  auto b = MakeBackend();
  EXPECT_TRUE(b->host_memory());
  EXPECT_FALSE(b->name().empty());
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    for (DType t : {DType::kF32, DType::kF16, DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kMXFP4}) {
      EXPECT_TRUE(b->Supports(op, t));
    }
  }
  EXPECT_TRUE(b->TakeError().ok());
}

TEST(CpuBackend, CapacityIsEnforced) {
  auto b = MakeBackend(1000);
  EXPECT_EQ(b->capacity(), 1000u);
  auto a = b->Alloc(600, "first");
  ASSERT_TRUE(a.ok());
  auto too_big = b->Alloc(500, "blk.3.ffn_up");
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg = Message(too_big.status());
  for (const char* part : {"blk.3.ffn_up", "500", "600", "1000"}) {
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' missing from: " << msg;
  }
  EXPECT_EQ(b->bytes_in_use(), 600u);
  auto rest = b->Alloc(400, "exactly the rest");
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(b->bytes_in_use(), 1000u);
  EXPECT_FALSE(b->Alloc(1, "one more byte").ok());
  b->Free(*a);
  b->Free(*rest);
  EXPECT_EQ(b->bytes_in_use(), 0u);
  EXPECT_FALSE(b->Alloc(SIZE_MAX, "huge").ok());  // no overflow in the capacity arithmetic
}

TEST(CpuBackend, PeakAndAlignment) {
  auto b = MakeBackend();
  auto a = b->Alloc(100, "a");
  auto c = b->Alloc(200, "c");
  ASSERT_TRUE(a.ok() && c.ok());
  b->Free(*a);
  auto d = b->Alloc(50, "d");
  auto e = b->Alloc(0, "empty");
  ASSERT_TRUE(d.ok() && e.ok());
  EXPECT_EQ(b->bytes_in_use(), 250u);
  EXPECT_EQ(b->peak_bytes(), 300u);
  for (void* p : {*c, *d, *e}) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_NE(*d, *e);
  std::memset(*c, 1, 200);  // the memory is really there
  b->Free(*c);
  b->Free(*d);
  b->Free(*e);
  b->Free(nullptr);
  EXPECT_EQ(b->bytes_in_use(), 0u);
  EXPECT_EQ(b->peak_bytes(), 300u);

  // Pinned staging memory is the host's and outside the pool.
  auto pinned = b->AllocHostPinned(1 << 20);
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*pinned) % 64, 0u);
  EXPECT_EQ(b->bytes_in_use(), 0u);
  b->FreeHostPinned(*pinned);
}

TEST(CpuBackend, WorkspaceIsCountedAndReplaced) {
  auto b = MakeBackend();
  const WorkspaceSpec spec{.max_tokens = 8, .max_cols = 4096, .max_rows = 11008, .n_ctx = 512, .n_head = 32};
  ASSERT_TRUE(b->ReserveWorkspace(spec).ok());
  const size_t first = b->bytes_in_use();
  // Room for the widest matmul's activations in any weight type's dot-product format, plus a score row per thread.
  const size_t attention = cpu::AttentionScratchBytes(512, 32, omp_get_max_threads());
  for (DType t : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kMXFP4}) {
    EXPECT_GE(first, cpu::MatMulScratchBytes(t, 4096, 8) + attention) << DTypeName(t);
  }
  // Reserving again replaces the workspace instead of adding to it.
  ASSERT_TRUE(b->ReserveWorkspace(spec).ok());
  EXPECT_EQ(b->bytes_in_use(), first);
  WorkspaceSpec small = spec;
  small.max_tokens = 1;
  small.n_ctx = 16;
  ASSERT_TRUE(b->ReserveWorkspace(small).ok());
  EXPECT_LT(b->bytes_in_use(), first);

  auto tight = MakeBackend(1024);
  const absl::Status s = tight->ReserveWorkspace(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(Message(s).find("workspace"), std::string::npos) << Message(s);
  EXPECT_EQ(tight->bytes_in_use(), 0u);
}

TEST(CpuBackend, MovementAndEvents) {
  auto b = MakeBackend();
  const std::vector<float> src = {1, 2, 3, 4};
  auto dev = b->Alloc(16, "x");
  ASSERT_TRUE(dev.ok());
  ASSERT_TRUE(b->CopyHostToDevice(*dev, src.data(), 16, Stream::kCopy).ok());
  std::vector<float> back(4, 0.0f);
  ASSERT_TRUE(b->CopyDeviceToHost(back.data(), *dev, 16, Stream::kCompute).ok());
  EXPECT_EQ(back, src);
  auto e1 = b->CreateEvent();
  auto e2 = b->CreateEvent();
  ASSERT_TRUE(e1.ok() && e2.ok());
  EXPECT_NE(*e1, *e2);
  EXPECT_TRUE(b->RecordEvent(*e1, Stream::kCopy).ok());
  EXPECT_TRUE(b->WaitEvent(*e1, Stream::kCompute).ok());
  EXPECT_TRUE(b->Synchronize(Stream::kCompute).ok());
  EXPECT_EQ(b->RecordEvent(12345, Stream::kCopy).code(), absl::StatusCode::kInvalidArgument);
  b->Free(*dev);
}

TEST(CpuBackend, ComputeWithoutWorkspaceIsAStickyError) {
  auto b = MakeBackend();
  const std::vector<float> w(4 * 8, 1.0f), x(8, 1.0f);
  std::vector<float> y(4, -1.0f);
  b->MatMul(WeightMatrix{DType::kF32, w.data(), 4, 8, 8 * sizeof(float)}, x.data(), 1, y.data());
  const absl::Status s = b->TakeError();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(y, std::vector<float>(4, -1.0f));  // nothing ran
  EXPECT_TRUE(b->TakeError().ok());           // taking clears it
}

TEST(CpuBackend, MatMulAndAttentionUseTheWorkspace) {
  auto b = MakeBackend();
  const int64_t rows = 24, cols = 96, n_tok = 5;
  ASSERT_TRUE(b->ReserveWorkspace(
                     WorkspaceSpec{.max_tokens = n_tok, .max_cols = cols, .max_rows = rows, .n_ctx = 16, .n_head = 4})
                  .ok());
  const auto w = RandomNormal(rows * cols, 1);
  std::vector<f16_t> w16(w.size());
  for (size_t i = 0; i < w.size(); ++i) w16[i] = F32ToF16(w[i]);
  const auto x = RandomNormal(n_tok * cols, 2);
  for (DType type : {DType::kF32, DType::kF16}) {
    const void* data = type == DType::kF32 ? static_cast<const void*>(w.data()) : w16.data();
    const WeightMatrix m{type, data, rows, cols, RowBytes(type, cols)};
    std::vector<float> y(n_tok * rows), ref(y.size());
    Poison(y);
    b->MatMul(m, x.data(), n_tok, y.data());
    cpu::MatMulRef(m, x.data(), n_tok, ref.data());
    EXPECT_LT(Nmse(y, ref), kTolMatMulF32) << DTypeName(type);
  }

  // Attention through the backend is the kernel's result, bit for bit.
  const int n_head = 4, n_head_kv = 2, hd = 8;
  std::vector<float> k_cache(16 * n_head_kv * hd), v_cache(k_cache.size());
  const KvLayer kv{DType::kF32, k_cache.data(), v_cache.data(), 16, n_head_kv * hd};
  const auto k = RandomNormal(6 * n_head_kv * hd, 3);
  const auto v = RandomNormal(6 * n_head_kv * hd, 4);
  b->KvStore(kv, k.data(), v.data(), 6, 0);
  const auto q = RandomNormal(3 * n_head * hd, 5);
  const AttentionParams p{n_head, n_head_kv, hd, 0.35f};
  std::vector<float> out(q.size()), want(q.size());
  Poison(out);
  b->Attention(q.data(), kv, 3, 3, p, out.data());
  std::vector<uint8_t> scratch(cpu::AttentionScratchBytes(16, n_head, 0));
  cpu::Attention(q.data(), kv, 3, 3, p, want.data(), scratch.data());
  EXPECT_EQ(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)), 0);
  EXPECT_TRUE(b->TakeError().ok());
}

TEST(CpuBackend, RouterAndVectorOps) {
  auto b = MakeBackend();
  // The routing lands in this backend's memory, here the host's: logits 0, ln 3, ln 2 -> top 2 = experts 1, 2 with
  // weights 3/5, 2/5.
  const float logits[3] = {0.0f, std::log(3.0f), std::log(2.0f)};
  int32_t ids[2];
  float w[2];
  b->MoeRoute(logits, 1, MoeRouteParams{.n_expert = 3, .k = 2}, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_NEAR(w[0], 0.6f, 1e-6);
  EXPECT_NEAR(w[1], 0.4f, 1e-6);
  // A k the routing cannot pick is a sticky error, not a crash.
  b->MoeRoute(logits, 1, MoeRouteParams{.n_expert = 3, .k = 4}, ids, w);
  EXPECT_EQ(b->TakeError().code(), absl::StatusCode::kInvalidArgument);

  // Rows of 2 plus a bias, in place.
  float x[4] = {1, 2, 10, 20};
  const float bias[2] = {0.5f, -1};
  b->AddBias(x, bias, 2, 2, x);
  EXPECT_EQ(std::vector<float>(x, x + 4), (std::vector<float>{1.5f, 1, 10.5f, 19}));
  EXPECT_TRUE(b->TakeError().ok());
}

// Repacking through PrepareMatMulWeights: the packed copy is the backend's memory, gives the GGUF rows' products,
// and computing it node by node (SetThreadNodes / SetRowNodes, as under --numa shard) changes nothing.
TEST(CpuBackend, RepackedWeightsAndNumaRows) {
  for (Repack mode : {Repack::kOff, Repack::kOn}) {
    auto b = CreateCpuBackend(CpuBackendOptions{.n_threads = 2, .repack = mode});
    const int64_t rows = 64, cols = 256, n_tok = 3;
    const std::vector<float> wf = RandomNormal(static_cast<size_t>(rows * cols), 41);
    std::vector<uint8_t> q(RowBytes(DType::kQ4_0, cols) * rows);
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(QuantizeRow(DType::kQ4_0, wf.data() + r * cols, q.data() + r * RowBytes(DType::kQ4_0, cols), cols)
                      .ok());
    }
    const WeightMatrix w{.type = DType::kQ4_0, .data = q.data(), .rows = rows, .cols = cols,
                         .row_stride = RowBytes(DType::kQ4_0, cols)};
    const size_t before = b->bytes_in_use();
    absl::StatusOr<WeightMatrix> prepared = b->PrepareMatMulWeights(w, "test weight");
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    EXPECT_EQ(cpu::IsPacked(*prepared), mode == Repack::kOn);
    EXPECT_EQ(b->bytes_in_use() - before, mode == Repack::kOn ? cpu::PackedBytes(w) : 0u);
    ASSERT_TRUE(b->ReserveWorkspace(WorkspaceSpec{.max_tokens = n_tok, .max_cols = cols, .max_rows = rows,
                                                  .n_ctx = 8, .n_head = 1}).ok());
    const std::vector<float> x = RandomNormal(static_cast<size_t>(cols * n_tok), 42);
    std::vector<float> want(static_cast<size_t>(rows * n_tok)), got(want.size()), split(want.size());
    cpu::MatMulRef(w, x.data(), n_tok, want.data());
    Poison(got);
    b->MatMul(*prepared, x.data(), n_tok, got.data());
    EXPECT_LT(Nmse(got, want), 1e-11);
    b->SetThreadNodes({0, 1});
    b->SetRowNodes(prepared->data, {{0, 1, 1}, {1, 4, 0}});
    Poison(split);
    b->MatMul(*prepared, x.data(), n_tok, split.data());
    EXPECT_EQ(std::memcmp(split.data(), got.data(), got.size() * sizeof(float)), 0);
    EXPECT_TRUE(b->TakeError().ok());
  }
}

// q, k and v through MatMuls: the packed ones in one parallel region with one quantized input, bit for bit the
// products of one MatMul each, and against the reference kernel. As in a Q4_K_M file, v may be Q6_K (or Q5_K)
// next to Q4_K q and k. A matrix that cannot be repacked (24 rows) runs on its own in the same call.
TEST(CpuBackend, MatMulsEqualOneByOne) {
  auto b = CreateCpuBackend(CpuBackendOptions{.n_threads = 2, .repack = Repack::kOn});
  const int64_t cols = 512;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<WeightMatrix> raw, prepared;
  const std::pair<int64_t, DType> shapes[] = {
      {128, DType::kQ4_K}, {32, DType::kQ4_K}, {32, DType::kQ6_K}, {32, DType::kQ5_K}, {24, DType::kQ4_K}};
  for (const auto& [rows, type] : shapes) {
    const std::vector<float> wf = RandomNormal(static_cast<size_t>(rows * cols), 60 + rows);
    const size_t row_bytes = RowBytes(type, cols);
    bytes.emplace_back(row_bytes * rows);
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(QuantizeRow(type, wf.data() + r * cols, bytes.back().data() + r * row_bytes, cols).ok());
    }
    raw.push_back(WeightMatrix{.type = type, .data = bytes.back().data(), .rows = rows, .cols = cols,
                               .row_stride = row_bytes});
    absl::StatusOr<WeightMatrix> p = b->PrepareMatMulWeights(raw.back(), "test weight");
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(cpu::IsPacked(*p), rows % cpu::kPackRows == 0);
    prepared.push_back(*p);
  }
  for (int64_t n_tok : {1, 5}) {
    ASSERT_TRUE(b->ReserveWorkspace(WorkspaceSpec{.max_tokens = n_tok, .max_cols = cols, .max_rows = 128,
                                                  .n_ctx = 8, .n_head = 1}).ok());
    const std::vector<float> x = RandomNormal(static_cast<size_t>(cols * n_tok), 70 + n_tok);
    std::vector<std::vector<float>> together, alone;
    std::vector<MatMulOutput> outputs;
    for (const WeightMatrix& w : prepared) {
      together.emplace_back(static_cast<size_t>(w.rows * n_tok));
      alone.emplace_back(together.back().size());
      Poison(together.back());
      Poison(alone.back());
    }
    for (size_t i = 0; i < prepared.size(); ++i) outputs.push_back({.w = &prepared[i], .y = together[i].data()});
    b->MatMuls(outputs, x.data(), n_tok);
    for (size_t i = 0; i < prepared.size(); ++i) b->MatMul(prepared[i], x.data(), n_tok, alone[i].data());
    ASSERT_TRUE(b->TakeError().ok());
    for (size_t i = 0; i < prepared.size(); ++i) {
      EXPECT_EQ(std::memcmp(together[i].data(), alone[i].data(), alone[i].size() * sizeof(float)), 0)
          << "product " << i << " n_tok=" << n_tok;
      std::vector<float> want(alone[i].size());
      cpu::MatMulRef(raw[i], x.data(), n_tok, want.data());
      EXPECT_LT(Nmse(together[i], want), 1e-11) << "product " << i << " n_tok=" << n_tok;
    }
  }
}

// Q4_0 experts (gate, up, down) for the MoeExperts tests: the GGUF rows, and the backend's packed copies.
struct PreparedExperts {
  test::ExpertSet set;
  std::vector<WeightMatrix> packed;  // [3 * e + m], as set.matrices
  std::vector<ExpertMatrices> views;
};
PreparedExperts PrepareQ4Experts(Backend& b, int n_experts, int64_t n_embd, int64_t n_ff) {
  PreparedExperts ex{.set = test::MakeExperts(DType::kQ4_0, n_experts, n_embd, n_ff, /*with_biases=*/false, 100)};
  for (const WeightMatrix& w : ex.set.matrices) {
    absl::StatusOr<WeightMatrix> p = b.PrepareMatMulWeights(w, "expert");
    TANDEM_CHECK(p.ok() && cpu::IsPacked(*p));
    ex.packed.push_back(*p);
  }
  ex.views = ex.set.ViewsOver(ex.packed, ex.set.BiasPointers());
  return ex;
}

// Runs MoeExperts over the routing (ids, weights [n_tok][k]) with buffers of buf_rows rows and checks every output
// row: equal to the one-by-one path's (cpu::MoeExpertsOneByOne over the same packed experts) bit for bit, and to
// the reference (cpu::MoeExpertsRef over the GGUF rows) within test::ExpectMatchesReference's bounds.
void ExpectMoeExperts(Backend& b, const PreparedExperts& ex, const std::vector<int32_t>& ids,
                      const std::vector<float>& weights, int k, const std::vector<float>& x, int64_t buf_rows) {
  const int64_t n_embd = ex.set.n_embd, n_ff = ex.set.n_ff;
  const auto n_tok = static_cast<int64_t>(ids.size()) / k;
  test::HostExpertBuffers buf(buf_rows, n_embd, n_ff);
  std::vector<float> batched(static_cast<size_t>(k * n_tok * n_embd)), one_by_one(batched.size()), want(batched.size());
  Poison(batched);
  Poison(one_by_one);
  Poison(want);
  MoeExpertsArgs a{.experts = ex.views.data(), .n_expert = ex.set.n_expert, .x = x.data(), .n_tok = n_tok,
                   .ids = ids.data(), .weights = weights.data(), .k = k, .buf = buf.buf, .out = batched.data()};
  b.MoeExperts(a);
  ASSERT_TRUE(b.TakeError().ok());
  a.out = one_by_one.data();
  test::RunOneByOne(a);
  EXPECT_EQ(std::memcmp(batched.data(), one_by_one.data(), one_by_one.size() * sizeof(float)), 0);

  a.experts = ex.set.views.data();
  a.out = want.data();
  cpu::MoeExpertsRef(a);
  test::ExpectMatchesReference(ex.set.type, batched, want, n_embd);
}

// An MoE layer's experts through MoeExperts: the CPU runs packed experts in shared parallel regions, each thread
// taking its own node's experts first (two threads posing as two nodes here), in as many passes as its buffers
// hold.
TEST(CpuBackend, MoeExpertsBatchedEqualOneByOne) {
  const int64_t n_embd = 256, n_ff = 512, n_tok = 6;
  const int k = 2;
  auto b = CreateCpuBackend(CpuBackendOptions{.n_threads = 2, .repack = Repack::kOn});
  constexpr int kExperts = 4;
  const PreparedExperts ex = PrepareQ4Experts(*b, kExperts, n_embd, n_ff);
  b->SetThreadNodes({0, 1});
  for (int e = 0; e < kExperts; ++e) {
    for (int m = 0; m < 3; ++m) {
      const WeightMatrix& w = ex.packed[3 * e + m];
      b->SetRowNodes(w.data, {{0, w.rows / cpu::kPackRows, e % 2}});  // experts alternate between the nodes
    }
  }
  ASSERT_TRUE(b->ReserveWorkspace(WorkspaceSpec{.max_tokens = n_tok, .max_cols = n_ff, .max_rows = n_ff, .n_ctx = 8,
                                                .n_head = 1, .n_expert = kExperts, .n_expert_used = k})
                  .ok());
  const std::vector<float> x = RandomNormal(static_cast<size_t>(n_tok * n_embd), 7);
  // Experts 0..3 take 2, 3, 3 and 4 of the 12 (token, slot) pairs. Buffers of 6 rows: the passes take experts
  // {0, 1}, {2}, {3}.
  const std::vector<int32_t> ids = {0, 1, 0, 3, 1, 2, 1, 3, 2, 3, 3, 2};
  std::vector<float> weights;
  for (int i = 0; i < n_tok * k; ++i) weights.push_back(0.25f + 0.05f * static_cast<float>(i));
  ExpectMoeExperts(*b, ex, ids, weights, k, x, n_tok);
}

// A decode step: one token, its two experts in one pass, as the executor sizes the workspace (expert_rows): each
// expert's down projection quantizes its own activations into tiles of its own, while the gate and up products
// share the one token's quantized input.
TEST(CpuBackend, MoeExpertsOneTokenTwoExperts) {
  const int64_t n_embd = 256, n_ff = 512;
  auto b = CreateCpuBackend(CpuBackendOptions{.n_threads = 2, .repack = Repack::kOn});
  const PreparedExperts ex = PrepareQ4Experts(*b, 3, n_embd, n_ff);
  ASSERT_TRUE(b->ReserveWorkspace(WorkspaceSpec{.max_tokens = 1, .expert_rows = 2, .max_cols = n_ff,
                                                .max_rows = n_ff, .n_ctx = 8, .n_head = 1, .n_expert = 3,
                                                .n_expert_used = 2})
                  .ok());
  const std::vector<float> x = RandomNormal(static_cast<size_t>(n_embd), 9);
  ExpectMoeExperts(*b, ex, {2, 0}, {0.7f, 0.3f}, 2, x, 2);
}

// MoeExperts asks for a workspace sized for the routing; without one it is a sticky error and nothing runs.
TEST(CpuBackend, MoeExpertsWithoutWorkspaceIsAnError) {
  auto b = CreateCpuBackend(CpuBackendOptions{.n_threads = 1, .repack = Repack::kOff});
  const test::ExpertSet ex = test::MakeExperts(DType::kF32, 2, 32, 32, false, 5);
  const std::vector<float> x = RandomNormal(2 * 32, 6);
  const std::vector<int32_t> ids = {0, 1};
  const std::vector<float> w = {1.0f, 1.0f};
  test::HostExpertBuffers buf(2, 32, 32);
  std::vector<float> out(2 * 32, -1.0f);
  const MoeExpertsArgs a{.experts = ex.views.data(), .n_expert = 2, .x = x.data(), .n_tok = 2, .ids = ids.data(),
                         .weights = w.data(), .k = 1, .buf = buf.buf, .out = out.data()};
  b->MoeExperts(a);
  EXPECT_EQ(b->TakeError().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(out, std::vector<float>(2 * 32, -1.0f));
}

// A routing with fewer experts per token than the workspace was reserved for admits more tokens than its matmul
// scratch holds (the grouping counts pairs). An expert that takes more of them than that is refused with an
// error instead of overrunning the scratch, in both layouts.
TEST(CpuBackend, MoeExpertsBeyondTheReservedTokensIsAnError) {
  for (Repack mode : {Repack::kOff, Repack::kOn}) {
    auto b = CreateCpuBackend(CpuBackendOptions{.n_threads = 2, .repack = mode});
    const test::ExpertSet ex = test::MakeExperts(DType::kQ8_0, 2, 256, 512, false, 11);
    std::vector<WeightMatrix> prepared;
    for (const WeightMatrix& w : ex.matrices) prepared.push_back(b->PrepareMatMulWeights(w, "expert").value());
    const std::vector<ExpertMatrices> views = ex.ViewsOver(prepared, ex.BiasPointers());
    ASSERT_TRUE(b->ReserveWorkspace(WorkspaceSpec{.max_tokens = 2, .max_cols = 512, .max_rows = 512, .n_ctx = 8,
                                                  .n_head = 1, .n_expert = 2, .n_expert_used = 16})
                    .ok());
    const int64_t n_tok = 32;  // 32 pairs of k = 1 fit the grouping reserved for 2 tokens of k = 16
    const std::vector<float> x = RandomNormal(static_cast<size_t>(n_tok * 256), 12);
    const std::vector<int32_t> ids(n_tok, 0);  // all to expert 0
    const std::vector<float> w(n_tok, 1.0f);
    test::HostExpertBuffers buf(n_tok, 256, 512);
    std::vector<float> out(static_cast<size_t>(n_tok * 256));
    const MoeExpertsArgs a{.experts = views.data(), .n_expert = 2, .x = x.data(), .n_tok = n_tok, .ids = ids.data(),
                           .weights = w.data(), .k = 1, .buf = buf.buf, .out = out.data()};
    b->MoeExperts(a);
    EXPECT_EQ(b->TakeError().code(), absl::StatusCode::kFailedPrecondition)
        << (mode == Repack::kOn ? "packed" : "gguf");
  }
}

TEST(CpuBackend, ThreadOption) {
  const int before = omp_get_max_threads();
  auto b = CreateCpuBackend(CpuBackendOptions{.n_threads = 1});
  EXPECT_EQ(omp_get_max_threads(), 1);
  omp_set_num_threads(before);
}

}  // namespace
}  // namespace tandem

// The GPU's small ops against the CPU kernels and references: embedding lookup (every type; ids on the device,
// in pinned memory and in ordinary host memory), RMSNorm, RoPE (both modes, frequency factors, YaRN), the gated
// activations, AddBias, Add and KvStore. Outputs are poisoned (NaN) before every kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/quant.h"
#include "cpu_backend/kernels.h"
#include "tests/gpu_backend/gpu_test_util.h"
#include "tests/gpu_backend/random_weights.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

class GpuOpsTest : public test::CudaTest {};

// ---- GetRows ----

TEST_F(GpuOpsTest, GetRowsEveryTypeMatchesCpu) {
  const int64_t rows = 50, cols = 512;
  const std::vector<int32_t> ids = {0, 49, 7, 7, 23, 1, 48, 30, 2};
  const auto n_tok = static_cast<int64_t>(ids.size());
  for (DType t : test::AllWeightTypes()) {
    SCOPED_TRACE(DTypeName(t));
    const std::vector<uint8_t> table = test::RandomWeightRows(t, rows, cols, 11 + static_cast<uint64_t>(t));
    WeightMatrix w{t, table.data(), rows, cols, RowBytes(t, cols)};
    std::vector<float> ref(static_cast<size_t>(n_tok * cols));
    cpu::GetRows(w, ids.data(), n_tok, ref.data());

    w.data = Upload(table);
    // Host ids (passed by value to the kernel) and device ids (read by the kernel).
    for (bool device_ids : {false, true}) {
      float* y = PoisonedFloats(ref.size());
      gpu().GetRows(w, device_ids ? Upload(ids) : ids.data(), n_tok, y);
      const std::vector<float> got = Download(y, ref.size());
      ASSERT_TRUE(Error().ok());
      EXPECT_LT(test::Nmse(got, ref), 1e-12) << (device_ids ? "device ids" : "host ids");
    }
  }
}

TEST_F(GpuOpsTest, GetRowsPinnedIdsAndLongBatches) {
  const int64_t rows = 300, cols = 64;
  const std::vector<uint8_t> table = test::RandomWeightRows(DType::kF32, rows, cols, 2);
  // More ids than one kernel-parameter chunk holds.
  std::vector<int32_t> ids(1000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37) % rows);
  WeightMatrix w{DType::kF32, table.data(), rows, cols, RowBytes(DType::kF32, cols)};
  std::vector<float> ref(ids.size() * cols);
  cpu::GetRows(w, ids.data(), static_cast<int64_t>(ids.size()), ref.data());
  w.data = Upload(table);

  absl::StatusOr<void*> pinned = gpu().AllocHostPinned(ids.size() * sizeof(int32_t));
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  std::memcpy(*pinned, ids.data(), ids.size() * sizeof(int32_t));
  for (const int32_t* id_ptr : {static_cast<const int32_t*>(*pinned), static_cast<const int32_t*>(ids.data())}) {
    float* y = PoisonedFloats(ref.size());
    gpu().GetRows(w, id_ptr, static_cast<int64_t>(ids.size()), y);
    EXPECT_EQ(test::MaxAbsDiff(Download(y, ref.size()), ref), 0.0);
  }
  ASSERT_TRUE(Error().ok());
  gpu().FreeHostPinned(*pinned);
}

TEST_F(GpuOpsTest, GetRowsBadIdIsAnErrorNotACrash) {
  const int64_t rows = 10, cols = 32;
  const std::vector<uint8_t> table = test::RandomWeightRows(DType::kQ8_0, rows, cols, 1);
  WeightMatrix w{DType::kQ8_0, Upload(table), rows, cols, RowBytes(DType::kQ8_0, cols)};
  const std::vector<int32_t> ids = {3, 10};  // 10 is one past the end
  float* y = PoisonedFloats(2 * cols);
  gpu().GetRows(w, ids.data(), 2, y);  // host ids: rejected before launch
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
  gpu().GetRows(w, Upload(ids), 2, y);  // device ids: the kernel flags it
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<float> got = Download(y, 2 * cols);
  EXPECT_TRUE(std::isnan(got[cols]));  // the bad row is NaN, not stale data
  // The backend stays usable.
  gpu().GetRows(w, Upload(std::vector<int32_t>{9}), 1, y);
  EXPECT_TRUE(Error().ok());
}

// ---- RmsNorm ----

TEST_F(GpuOpsTest, RmsNormMatchesReference) {
  for (int64_t n : {64, 172, 4096}) {
    for (int64_t n_tok : {1, 7}) {
      for (bool with_weight : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " n_tok " << n_tok << " weight " << with_weight);
        const std::vector<float> x = test::RandomNormal(static_cast<size_t>(n * n_tok), 21, 3.0f);
        std::vector<float> w = test::RandomNormal(static_cast<size_t>(n), 22);
        for (float& v : w) v = 1.0f + 0.1f * v;
        std::vector<float> ref(x.size());
        cpu::RmsNormRef(x.data(), with_weight ? w.data() : nullptr, n_tok, n, 1e-5f, ref.data());
        float* y = PoisonedFloats(x.size());
        gpu().RmsNorm(Upload(x), with_weight ? Upload(w) : nullptr, n_tok, n, 1e-5f, y);
        EXPECT_LT(test::Nmse(Download(y, x.size()), ref), 1e-12);
      }
    }
  }
  ASSERT_TRUE(Error().ok());
}

TEST_F(GpuOpsTest, RmsNormInPlace) {
  const int64_t n = 256, n_tok = 3;
  const std::vector<float> x = test::RandomNormal(static_cast<size_t>(n * n_tok), 5);
  const std::vector<float> w(static_cast<size_t>(n), 2.0f);
  std::vector<float> ref(x.size());
  cpu::RmsNormRef(x.data(), w.data(), n_tok, n, 1e-6f, ref.data());
  float* xy = Upload(x);
  gpu().RmsNorm(xy, Upload(w), n_tok, n, 1e-6f, xy);
  EXPECT_LT(test::Nmse(Download(xy, x.size()), ref), 1e-12);
  ASSERT_TRUE(Error().ok());
}

// ---- Rope ----

struct RopeCase {
  const char* name;
  RopeParams p;
  bool freq_factors = false;
};

// The shapes of the families: Llama-style pairs, NeoX halves, partial rotation, scaled positions, Llama 3.x
// frequency factors, and YaRN (Qwen/gpt-oss style: extrapolation mix and attention factor).
std::vector<RopeCase> RopeCases() {
  std::vector<RopeCase> cases;
  auto add = [&](const char* name, int n_head, int head_dim, int n_rot, RopeMode mode, float base, float scale) {
    RopeCase c{name, {}};
    c.p.n_head = n_head;
    c.p.head_dim = head_dim;
    c.p.n_rot = n_rot;
    c.p.mode = mode;
    c.p.freq_base = base;
    c.p.freq_scale = scale;
    cases.push_back(c);
    return &cases.back();
  };
  add("stories260K", 8, 8, 8, RopeMode::kNorm, 10000.0f, 1.0f);
  add("synthetic", 8, 32, 32, RopeMode::kNorm, 1e6f, 1.0f);
  add("partial, scaled", 4, 128, 64, RopeMode::kNorm, 500000.0f, 0.25f);
  add("neox", 8, 64, 64, RopeMode::kNeox, 1e6f, 1.0f);
  add("neox partial", 4, 128, 32, RopeMode::kNeox, 10000.0f, 1.0f);
  add("freq factors", 4, 128, 128, RopeMode::kNorm, 500000.0f, 1.0f)->freq_factors = true;
  add("neox freq factors", 4, 64, 64, RopeMode::kNeox, 10000.0f, 1.0f)->freq_factors = true;
  for (RopeMode mode : {RopeMode::kNorm, RopeMode::kNeox}) {
    RopeCase* c = add(mode == RopeMode::kNorm ? "yarn" : "neox yarn", 4, 64, 64, mode, 150000.0f, 0.25f);
    c->p.ext_factor = 1.0f;
    c->p.attn_factor = 1.1f;
    c->p.beta_fast = 32.0f;
    c->p.beta_slow = 1.0f;
    c->p.n_ctx_orig = 4096;
  }
  RopeCase* partial_mix = add("yarn half mix, factors", 2, 64, 48, RopeMode::kNeox, 10000.0f, 0.5f);
  partial_mix->p.ext_factor = 0.5f;
  partial_mix->p.n_ctx_orig = 2048;
  partial_mix->freq_factors = true;
  return cases;
}

// Float angles in the CPU kernel's order: the GPU matches cpu::Rope to sin/cos rounding, and is as far from the
// double reference as the CPU kernel is. Positions on the device and on the host (more than one by-value chunk).
TEST_F(GpuOpsTest, RopeMatchesCpuInEveryMode) {
  for (const RopeCase& c : RopeCases()) {
    for (int64_t n_tok : {int64_t{1}, int64_t{7}, int64_t{1000}}) {
      for (bool device_pos : {false, true}) {
        SCOPED_TRACE(::testing::Message() << c.name << " n_tok " << n_tok << " device pos " << device_pos);
        std::vector<int32_t> pos(static_cast<size_t>(n_tok));
        const int32_t picks[] = {0, 1, 2, 17, 255, 1000, 4095, 30000};
        for (size_t i = 0; i < pos.size(); ++i) pos[i] = i < 8 ? picks[i] : static_cast<int32_t>((i * 7919) % 32768);
        RopeParams p = c.p;
        std::vector<float> factors;
        if (c.freq_factors) {
          for (int i = 0; i < p.n_rot / 2; ++i) factors.push_back(1.0f + 0.37f * static_cast<float>(i % 5));
          p.freq_factors = factors.data();
        }
        const std::vector<float> x = test::RandomNormal(static_cast<size_t>(n_tok * p.n_head * p.head_dim), 8);
        std::vector<float> fast = x, ref = x;
        cpu::Rope(fast.data(), n_tok, pos.data(), p);
        cpu::RopeRef(ref.data(), n_tok, pos.data(), p);

        float* dev = Upload(x);
        if (c.freq_factors) p.freq_factors = Upload(factors);
        gpu().Rope(dev, n_tok, device_pos ? Upload(pos) : pos.data(), p);
        const std::vector<float> got = Download(dev, x.size());
        ASSERT_TRUE(Error().ok());
        EXPECT_LT(test::MaxAbsDiff(got, fast), 2e-5);
        EXPECT_LE(test::Nmse(got, ref), 4 * test::Nmse(fast, ref) + 1e-12);
      }
    }
  }
}

TEST_F(GpuOpsTest, RopeRejectsOddRotation) {
  const std::vector<float> x(64, 1.0f);
  const std::vector<int32_t> pos = {0};
  gpu().Rope(Upload(x), 1, pos.data(), RopeParams{2, 32, 31, RopeMode::kNorm, 10000.0f, 1.0f});
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
}

// ---- Glu ----

struct GluCase {
  GluParams p;
  bool with_u;
};

std::string GluName(const GluCase& c) {
  const char* names[] = {"silu", "gelu", "swiglu_oai"};
  return std::string(names[static_cast<int>(c.p.act)]) + (c.with_u ? " * u" : "");
}

// Every activation with and without u (gpt-oss's always has one), over sizes that are no multiple of a block,
// with inputs wide enough to reach gpt-oss's clamps; out of place and in place.
TEST_F(GpuOpsTest, GluMatchesReference) {
  std::vector<GluCase> cases;
  for (Activation act : {Activation::kSilu, Activation::kGelu}) {
    for (bool with_u : {true, false}) cases.push_back({GluParams{act}, with_u});
  }
  cases.push_back({GluParams{Activation::kSwigluOai, 1.702f, 7.0f}, true});
  cases.push_back({GluParams{Activation::kSwigluOai, 1.0f, 3.0f}, true});
  for (const GluCase& c : cases) {
    for (int64_t n : {1, 1000, 100003}) {
      SCOPED_TRACE(::testing::Message() << GluName(c) << " n " << n);
      const std::vector<float> g = test::RandomNormal(static_cast<size_t>(n), 1, 4.0f);
      const std::vector<float> u = test::RandomNormal(static_cast<size_t>(n), 2, 5.0f);
      const float* uh = c.with_u ? u.data() : nullptr;
      std::vector<float> ref(g.size()), fast(g.size());
      cpu::GluRef(g.data(), uh, n, c.p, ref.data());
      cpu::Glu(g.data(), uh, n, c.p, fast.data());

      const float* dg = Upload(g);
      const float* du = c.with_u ? Upload(u) : nullptr;
      float* y = PoisonedFloats(g.size());
      gpu().Glu(dg, du, n, c.p, y);
      const std::vector<float> got = Download(y, g.size());
      EXPECT_LT(test::Nmse(got, ref), 1e-12);
      // The CPU's float kernel, to a few ulp of the largest value.
      double largest = 1.0;
      for (float v : fast) largest = std::max(largest, static_cast<double>(std::fabs(v)));
      EXPECT_LT(test::MaxAbsDiff(got, fast), 1e-6 * largest);

      float* in_place = Upload(g);
      gpu().Glu(in_place, du, n, c.p, in_place);
      EXPECT_EQ(test::MaxAbsDiff(Download(in_place, g.size()), got), 0.0) << "in place";
      ASSERT_TRUE(Error().ok());
    }
  }
}

TEST_F(GpuOpsTest, GluOaiWithoutUIsAnError) {
  const std::vector<float> g(16, 1.0f);
  gpu().Glu(Upload(g), nullptr, 16, GluParams{Activation::kSwigluOai}, PoisonedFloats(16));
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
  gpu().Glu(Upload(g), nullptr, 16, GluParams{static_cast<Activation>(7)}, PoisonedFloats(16));
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
}

// ---- AddBias, Add ----

TEST_F(GpuOpsTest, AddBiasMatchesCpu) {
  for (int64_t n_tok : {1, 7, 100}) {
    for (int64_t n : {1, 64, 1000, 4097}) {
      SCOPED_TRACE(::testing::Message() << "n_tok " << n_tok << " n " << n);
      const std::vector<float> x = test::RandomNormal(static_cast<size_t>(n_tok * n), 3);
      const std::vector<float> b = test::RandomNormal(static_cast<size_t>(n), 4);
      std::vector<float> ref(x.size());
      cpu::AddBias(x.data(), b.data(), n_tok, n, ref.data());
      const float* db = Upload(b);
      float* y = PoisonedFloats(x.size());
      gpu().AddBias(Upload(x), db, n_tok, n, y);
      EXPECT_EQ(test::MaxAbsDiff(Download(y, x.size()), ref), 0.0);
      float* xy = Upload(x);
      gpu().AddBias(xy, db, n_tok, n, xy);
      EXPECT_EQ(test::MaxAbsDiff(Download(xy, x.size()), ref), 0.0) << "in place";
    }
  }
  gpu().AddBias(nullptr, nullptr, 0, 16, nullptr);  // nothing to do, not an error
  ASSERT_TRUE(Error().ok());
}

TEST_F(GpuOpsTest, ScaleRowsMatchesCpu) {
  for (int64_t n_tok : {1, 7, 100}) {
    for (int64_t n : {1, 1000, 4097}) {
      SCOPED_TRACE(::testing::Message() << "n_tok " << n_tok << " n " << n);
      const std::vector<float> x = test::RandomNormal(static_cast<size_t>(n_tok * n), 5);
      const std::vector<float> s = test::RandomNormal(static_cast<size_t>(n_tok), 6, 4.0f);
      for (RowScale f : {RowScale::kLinear, RowScale::kSigmoid}) {
        std::vector<float> ref(x.size());
        cpu::ScaleRows(x.data(), s.data(), n_tok, n, f, ref.data());
        float* y = PoisonedFloats(x.size());
        gpu().ScaleRows(Upload(x), Upload(s), n_tok, n, f, y);
        // expf on the device and std::exp on the host may differ in the last bit.
        EXPECT_LE(test::MaxAbsDiff(Download(y, x.size()), ref), 1e-6 * 8) << static_cast<int>(f);
      }
    }
  }
  gpu().ScaleRows(nullptr, nullptr, 0, 16, RowScale::kSigmoid, nullptr);  // nothing to do, not an error
  ASSERT_TRUE(Error().ok());
}

TEST_F(GpuOpsTest, AddMatchesCpu) {
  const int64_t n = 100003;  // not a multiple of any block size
  const std::vector<float> a = test::RandomNormal(n, 1, 4.0f);
  const std::vector<float> b = test::RandomNormal(n, 2);
  std::vector<float> ref(n);
  cpu::Add(a.data(), b.data(), n, ref.data());
  float* y = PoisonedFloats(n);
  gpu().Add(Upload(a), Upload(b), n, y);
  EXPECT_EQ(test::MaxAbsDiff(Download(y, n), ref), 0.0);
  ASSERT_TRUE(Error().ok());
}

TEST_F(GpuOpsTest, AddInPlaceAndEmpty) {
  const std::vector<float> a = {1, 2, 3};
  const std::vector<float> b = {10, 20, 30};
  float* da = Upload(a);
  gpu().Add(da, Upload(b), 3, da);
  EXPECT_EQ(Download(da, 3), (std::vector<float>{11, 22, 33}));
  gpu().Add(da, da, 0, da);  // nothing to do, not an error
  ASSERT_TRUE(Error().ok());
}

// ---- KvStore ----

TEST_F(GpuOpsTest, KvStoreWritesTheSameCacheBytesAsCpu) {
  const int64_t n_ctx = 64, row = 96, n_tok = 5, pos0 = 17;
  const std::vector<float> k = test::RandomNormal(static_cast<size_t>(n_tok * row), 3);
  const std::vector<float> v = test::RandomNormal(static_cast<size_t>(n_tok * row), 4);
  for (DType t : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(DTypeName(t));
    const size_t bytes = static_cast<size_t>(n_ctx * row) * (t == DType::kF32 ? 4 : 2);
    std::vector<uint8_t> host_k(bytes, 0xAB), host_v(bytes, 0xCD);
    KvLayer host{t, host_k.data(), host_v.data(), n_ctx, row};
    KvLayer dev{t, Upload(host_k), Upload(host_v), n_ctx, row};
    cpu::KvStore(host, k.data(), v.data(), n_tok, pos0);
    gpu().KvStore(dev, Upload(k), Upload(v), n_tok, pos0);
    EXPECT_EQ(Download(static_cast<const uint8_t*>(dev.k), bytes), host_k);
    EXPECT_EQ(Download(static_cast<const uint8_t*>(dev.v), bytes), host_v);
  }
  ASSERT_TRUE(Error().ok());
}

TEST_F(GpuOpsTest, KvStorePastTheEndIsAnError) {
  const std::vector<float> k(8, 1.0f);
  KvLayer kv{DType::kF32, AllocBytes(4 * 8 * 4), AllocBytes(4 * 8 * 4), 4, 8};
  gpu().KvStore(kv, Upload(k), Upload(k), 1, 4);
  EXPECT_EQ(Error().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem

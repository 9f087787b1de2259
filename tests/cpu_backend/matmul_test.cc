// MatMul against MatMulRef for every weight type, on every ISA this CPU has; MatMulRef against the exact
// float64 product; thread-count independence; scratch bounds.
#include <omp.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/quant.h"
#include "cpu_backend/kernels.h"
#include "cpu_backend/repack.h"
#include "cpu_backend/vec_dot.h"
#include "gtest/gtest.h"
#include "tests/testutil.h"

namespace tandem::cpu {
namespace {

using test::Nmse;
using test::Poison;
using test::RandomNormal;

const DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                              DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                              DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4};

// Fast vs reference NMSE over all outputs of all shapes of one (type, ISA). Both see the same rounded operands,
// so what is left is float (fast) vs double (reference) accumulation order, plus for Q4_1/Q5_1 the fp16-rounded
// s = d * sum(q) of the Q8_1 activation block, which the reference (using the dequantized x) does not round.
// The SIMD K-quant kernels convert per-lane integer sums to float before adding lanes, a little looser than the
// scalar per-block integer sums. Measured on Zen 4, worst of scalar / AVX2 / AVX-512, all shapes together:
// F32 6e-13, F16 5e-13, BF16 1.2e-13 (the scalar loops; SIMD <= 4e-14), Q4_0/Q5_0/Q8_0 <= 2.3e-14,
// Q4_1 1.2e-9, Q2_K/Q3_K <= 3.1e-14, Q4_K/Q5_K/Q6_K <= 9e-14 (the test prints them); MXFP4 on the Intel host
// 1.5e-14 (scalar; AVX2 and AVX-512 <= 3.1e-15). Q5_1 is quantized from N(0,1), whose block offsets (about -2)
// make the rounded s weigh more than random blocks' small ones did: 2.6e-7 on every ISA alike (Intel Xeon,
// 2026-12-02), as a step of 2^-12 in s predicts.
const std::map<DType, double> kTol = {
    {DType::kF32, 1e-11},  {DType::kF16, 1e-11},  {DType::kBF16, 1e-11}, {DType::kQ4_0, 1e-11},
    {DType::kQ4_1, 1e-8},  {DType::kQ5_0, 1e-11}, {DType::kQ5_1, 1e-6},  {DType::kQ8_0, 1e-11},
    {DType::kQ2_K, 1e-10}, {DType::kQ3_K, 1e-10}, {DType::kQ4_K, 1e-10}, {DType::kQ5_K, 1e-10},
    {DType::kQ6_K, 1e-10}, {DType::kMXFP4, 1e-11},
};
// Each shape alone: a shape with a single output whose terms nearly cancel has a larger relative error than the
// whole set (measured worst: 9e-11 for a 1x512 Q6_K product on AVX2, 2.2e-6 for Q5_1), so the per-shape bound is
// looser; a wrong kernel gives NMSE ~1 either way.
constexpr double kShapeTolFactor = 1000;

// MatMulRef vs the exact product with unrounded x: the activation rounding error of the vec-dot type. For
// N(0,1) data an 8-bit block quantizer with step max|x|/127 gives NMSE ~ step^2/12: ~2.5e-5 for Q8_0/Q8_1
// (max over 32 ~ 2.1 sigma), ~5e-5 for Q8_K (max over 256 ~ 2.9 sigma); fp16 ~ 2^-24/3, bf16 ~ 2^-16/3.
const std::map<DType, double> kActTol = {
    {DType::kF32, 1e-13}, {DType::kF16, 1e-7},  {DType::kBF16, 2e-5},
    {DType::kQ8_0, 1e-4}, {DType::kQ8_1, 1e-4}, {DType::kQ8_K, 2e-4},
};

std::string IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

// Byte offsets of the fp16 scale fields in one block; random bytes elsewhere are valid quants.
std::vector<size_t> F16FieldOffsets(DType t) {
  switch (t) {
    case DType::kQ4_0: return {0};
    case DType::kQ4_1: return {0, 2};
    case DType::kQ5_0: return {0};
    case DType::kQ5_1: return {0, 2};
    case DType::kQ8_0: return {0};
    case DType::kQ2_K: return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
    case DType::kQ3_K: return {offsetof(BlockQ3_K, d)};
    case DType::kQ4_K: return {0, 2};
    case DType::kQ5_K: return {0, 2};
    case DType::kQ6_K: return {offsetof(BlockQ6_K, d)};
    default: return {};
  }
}

// A rows x cols weight matrix with `pad` spare bytes after each row: quantized from N(0,1) where the core has a
// quantizer, else random blocks whose fp16 scales are sane.
struct Weights {
  std::vector<uint8_t> bytes;
  WeightMatrix m;
};

Weights MakeWeights(DType type, int64_t rows, int64_t cols, size_t pad, uint64_t seed) {
  Weights w;
  const size_t row_bytes = RowBytes(type, cols);
  const size_t stride = row_bytes + pad;
  w.bytes.assign(stride * rows, 0xEE);  // padding holds junk the kernels must not read as data
  std::mt19937_64 rng(seed);
  if (CanQuantize(type)) {
    const std::vector<float> f = RandomNormal(static_cast<size_t>(rows * cols), seed);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_TRUE(QuantizeRow(type, f.data() + r * cols, w.bytes.data() + r * stride, cols).ok());
    }
  } else {
    const DTypeTraits& tr = Traits(type);
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    for (int64_t r = 0; r < rows; ++r) {
      uint8_t* row = w.bytes.data() + r * stride;
      for (size_t i = 0; i < row_bytes; ++i) row[i] = static_cast<uint8_t>(rng());
      for (int64_t b = 0; b < cols / tr.block_elems; ++b) {
        for (size_t off : F16FieldOffsets(type)) {
          const f16_t h = F32ToF16(scale(rng));
          std::memcpy(row + b * tr.block_bytes + off, &h, 2);
        }
      }
    }
  }
  w.m = WeightMatrix{type, w.bytes.data(), rows, cols, stride};
  return w;
}

// MatMul into a NaN-poisoned y, with a scratch buffer of exactly MatMulScratchBytes followed by guard bytes.
std::vector<float> RunMatMul(const WeightMatrix& w, const std::vector<float>& x, int64_t n_tok) {
  constexpr size_t kGuard = 64;
  const size_t scratch_bytes = MatMulScratchBytes(w.type, w.cols, n_tok);
  std::vector<uint8_t> scratch(scratch_bytes + kGuard, 0xA5);
  std::vector<float> y(static_cast<size_t>(w.rows * n_tok));
  Poison(y);
  MatMul(w, x.data(), n_tok, y.data(), scratch.data());
  for (size_t i = scratch_bytes; i < scratch.size(); ++i) {
    if (scratch[i] != 0xA5) {
      ADD_FAILURE() << "MatMul wrote past MatMulScratchBytes at +" << (i - scratch_bytes);
      break;
    }
  }
  return y;
}

std::vector<float> RunRef(const WeightMatrix& w, const std::vector<float>& x, int64_t n_tok) {
  std::vector<float> y(static_cast<size_t>(w.rows * n_tok));
  Poison(y);
  MatMulRef(w, x.data(), n_tok, y.data());
  return y;
}

// One test problem: weights, activations and the reference product. Building them (quantizing, the double
// reference) costs more than the kernels under test, so each is made once and shared by the per-ISA instances.
struct Problem {
  Weights w;
  std::vector<float> x;  // [n_tok][cols]
  std::vector<float> ref;
};

const Problem& GetProblem(DType type, int64_t rows, int64_t cols, int64_t n_tok, size_t pad, uint64_t seed) {
  static std::map<std::tuple<DType, int64_t, int64_t, int64_t, size_t, uint64_t>, Problem> cache;
  const auto key = std::make_tuple(type, rows, cols, n_tok, pad, seed);
  auto it = cache.find(key);
  if (it == cache.end()) {
    Problem p;
    p.w = MakeWeights(type, rows, cols, pad, seed);
    p.x = RandomNormal(static_cast<size_t>(cols * n_tok), seed + 1000);
    p.ref = RunRef(p.w.m, p.x, n_tok);
    it = cache.emplace(key, std::move(p)).first;
    it->second.w.m.data = it->second.w.bytes.data();  // the matrix views the bytes where they now live
  }
  return it->second;
}

// Column counts: 1, 2, 3 blocks, or odd lengths for the plain float types (any length is allowed there).
std::vector<int64_t> SmallCols(DType t) {
  const int64_t b = Traits(t).block_elems;
  if (b == 1) return {1, 3, 17, 67, 259};
  return {b, 2 * b, 3 * b};
}
int64_t LargeCols(DType t) { return Traits(t).block_elems == 1 ? 4096 + 13 : 4096; }

// Kernels run on one thread here (the many small products would mostly measure thread wake-ups on a busy CI
// machine); OneAndTwoThreadsAgree covers the threaded split for every type and ISA.
class MatMulTest : public testing::TestWithParam<std::tuple<DType, Isa>> {
 protected:
  void SetUp() override {
    if (std::get<1>(GetParam()) > DetectedIsa()) GTEST_SKIP() << "CPU lacks " << IsaName(std::get<1>(GetParam()));
    SetIsa(std::get<1>(GetParam()));
    saved_threads_ = omp_get_max_threads();
    omp_set_num_threads(1);
  }
  void TearDown() override {
    SetIsa(Isa::kAvx512);
    omp_set_num_threads(saved_threads_);
  }
  int saved_threads_ = 1;
};

TEST_P(MatMulTest, MatchesReference) {
  const DType type = std::get<0>(GetParam());
  struct Shape {
    int64_t rows, cols, n_tok;
    size_t pad;
  };
  std::vector<Shape> shapes;
  for (int64_t rows : {1, 7, 64, 300}) {
    for (int64_t cols : SmallCols(type)) {
      for (int64_t n_tok : {1, 3, 8, 33}) {
        if (rows == 300 && n_tok == 33 && cols > 2 * Traits(type).block_elems) continue;  // keep it quick
        shapes.push_back({rows, cols, n_tok, 0});
      }
    }
  }
  shapes.push_back({64, LargeCols(type), 1, 0});
  shapes.push_back({64, LargeCols(type), 5, 0});
  shapes.push_back({37, 2 * Traits(type).block_elems * 32, 6, 32});  // padded rows

  double worst = 0;
  uint64_t seed = 1;
  std::vector<float> all_fast, all_ref;
  for (const Shape& s : shapes) {
    const Problem& p = GetProblem(type, s.rows, s.cols, s.n_tok, s.pad, seed++);
    const std::vector<float> fast = RunMatMul(p.w.m, p.x, s.n_tok);
    const double e = Nmse(fast, p.ref);
    worst = std::max(worst, e);
    EXPECT_LT(e, kTol.at(type) * kShapeTolFactor) << DTypeName(type) << " rows=" << s.rows << " cols=" << s.cols
                                                  << " n_tok=" << s.n_tok << " pad=" << s.pad;
    all_fast.insert(all_fast.end(), fast.begin(), fast.end());
    all_ref.insert(all_ref.end(), p.ref.begin(), p.ref.end());
  }
  const double total = Nmse(all_fast, all_ref);
  EXPECT_LT(total, kTol.at(type));
  std::printf("  %s/%s: NMSE vs reference %.3g over all shapes, worst shape %.3g\n",
              std::string(DTypeName(type)).c_str(), IsaName(std::get<1>(GetParam())).c_str(), total, worst);
}

// Results must not depend on how rows are shared among threads.
TEST_P(MatMulTest, OneAndTwoThreadsAgree) {
  const DType type = std::get<0>(GetParam());
  const int64_t rows = 300, cols = 1024 + (Traits(type).block_elems == 1 ? 3 : 0), n_tok = 9;
  const Problem& p = GetProblem(type, rows, cols, n_tok, 0, 77);
  omp_set_num_threads(1);
  const std::vector<float> one = RunMatMul(p.w.m, p.x, n_tok);
  omp_set_num_threads(2);
  const std::vector<float> two = RunMatMul(p.w.m, p.x, n_tok);
  ASSERT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
  EXPECT_LT(Nmse(one, p.ref), kTol.at(type));  // and not merely equal NaNs
}

// Decode's software prefetch, within rows (DecodePrefetchBytes) and of the rows ahead (RowPrefetchBytes), changes
// no bit, up to past the matrix's end.
TEST_P(MatMulTest, DecodePrefetchChangesNoBit) {
  const DType type = std::get<0>(GetParam());
  const Problem& p = GetProblem(type, 300, LargeCols(type), 1, 0, 78);
  const size_t saved_decode = DecodePrefetchBytes();
  const size_t saved_row = RowPrefetchBytes();
  SetDecodePrefetchBytes(0);
  SetRowPrefetchBytes(0);
  const std::vector<float> plain = RunMatMul(p.w.m, p.x, 1);
  for (void (*set)(size_t) : {&SetDecodePrefetchBytes, &SetRowPrefetchBytes}) {
    for (size_t ahead : {size_t{64}, size_t{4096}, size_t{1} << 20}) {
      set(ahead);
      const std::vector<float> fetched = RunMatMul(p.w.m, p.x, 1);
      ASSERT_EQ(std::memcmp(plain.data(), fetched.data(), plain.size() * sizeof(float)), 0) << "ahead=" << ahead;
    }
    set(0);
  }
  SetDecodePrefetchBytes(saved_decode);
  SetRowPrefetchBytes(saved_row);
  EXPECT_LT(Nmse(plain, p.ref), kTol.at(type));
}

// Packed weights (repack.h, the CPU backend's layout for Q4_0, Q8_0, MXFP4 and the K-quants Q4_K, Q5_K, Q6_K) give the
// reference's products on every ISA: the VNNI kernels on AVX-512, the portable packed kernel below it. Same
// operands and bounds as the GGUF layout; token counts straddle the 8-token tile. The outputs start poisoned.
class PackedMatMulTest : public MatMulTest {};

TEST_P(PackedMatMulTest, MatchesReference) {
  const DType type = std::get<0>(GetParam());
  const int64_t block = Traits(type).block_elems;
  ASSERT_TRUE(CanRepack(WeightMatrix{.type = type, .rows = kPackRows, .cols = block}));
  uint64_t seed = 500;
  std::vector<float> all_fast, all_ref;
  for (int64_t rows : {16, 48, 320}) {
    for (int64_t nb : {1, 3, 16}) {
      for (int64_t n_tok : {1, 2, 7, 8, 9, 33}) {
        if (rows == 320 && nb == 16 && n_tok == 33) continue;  // keep it quick
        const size_t pad = rows == 48 ? 32 : 0;
        const Problem& p = GetProblem(type, rows, nb * block, n_tok, pad, seed++);
        std::vector<uint8_t> packed(PackedBytes(p.w.m));
        const WeightMatrix pm = Repack(p.w.m, packed.data());
        ASSERT_TRUE(IsPacked(pm));
        const std::vector<float> fast = RunMatMul(pm, p.x, n_tok);
        EXPECT_LT(Nmse(fast, p.ref), kTol.at(type) * kShapeTolFactor)
            << DTypeName(type) << " rows=" << rows << " blocks=" << nb << " n_tok=" << n_tok << " pad=" << pad;
        all_fast.insert(all_fast.end(), fast.begin(), fast.end());
        all_ref.insert(all_ref.end(), p.ref.begin(), p.ref.end());
      }
    }
  }
  EXPECT_LT(Nmse(all_fast, all_ref), kTol.at(type));
  std::printf("  %s/%s packed: NMSE vs reference %.3g over all shapes\n", std::string(DTypeName(type)).c_str(),
              IsaName(std::get<1>(GetParam())).c_str(), Nmse(all_fast, all_ref));

  // Decode reads a thread's range of row groups as runs side by side (Q4_0 four, two blocks at a time; K-quants two;
  // Q8_0 two, four blocks at a time; what is left at a range's end one by one): rows enough for runs of 2 and 3
  // groups, with and without a remainder. Six blocks end Q8_0's runs on two single blocks; odd block counts
  // (nb = 3 above) end Q4_0's on one.
  for (int64_t rows : {16 * 64, 16 * 75, 16 * 99}) {
    const Problem& p = GetProblem(type, rows, 6 * block, 1, 0, seed++);
    std::vector<uint8_t> packed(PackedBytes(p.w.m));
    const std::vector<float> fast = RunMatMul(Repack(p.w.m, packed.data()), p.x, 1);
    EXPECT_LT(Nmse(fast, p.ref), kTol.at(type) * kShapeTolFactor) << DTypeName(type) << " decode rows=" << rows;
  }

  // Decode's software prefetch (on by default on Intel, off elsewhere) does not change a bit, at distances within
  // a block, a few blocks on and past the end of the weights.
  {
    const Problem& p = GetProblem(type, 16 * 75, 6 * block, 1, 0, seed++);
    std::vector<uint8_t> packed(PackedBytes(p.w.m));
    const WeightMatrix pm = Repack(p.w.m, packed.data());
    const size_t saved = DecodePrefetchBytes();
    SetDecodePrefetchBytes(0);
    const std::vector<float> plain = RunMatMul(pm, p.x, 1);
    for (size_t ahead : {size_t{64}, size_t{4096}, packed.size()}) {
      SetDecodePrefetchBytes(ahead);
      const std::vector<float> fetched = RunMatMul(pm, p.x, 1);
      ASSERT_EQ(std::memcmp(plain.data(), fetched.data(), plain.size() * sizeof(float)), 0) << "ahead=" << ahead;
    }
    SetDecodePrefetchBytes(saved);
    EXPECT_LT(Nmse(plain, p.ref), kTol.at(type));
  }

  // The threaded split over row groups does not change a bit, in prefill or decode.
  for (int64_t n_tok : {9, 1}) {
    const Problem& p = GetProblem(type, 16 * 75, 1024, n_tok, 0, 77);
    std::vector<uint8_t> packed(PackedBytes(p.w.m));
    const WeightMatrix pm = Repack(p.w.m, packed.data());
    omp_set_num_threads(1);
    const std::vector<float> one = RunMatMul(pm, p.x, n_tok);
    omp_set_num_threads(2);
    const std::vector<float> two = RunMatMul(pm, p.x, n_tok);
    ASSERT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0) << "n_tok=" << n_tok;
    EXPECT_LT(Nmse(one, p.ref), kTol.at(type));
  }
}

std::string TypeIsaName(const testing::TestParamInfo<std::tuple<DType, Isa>>& info) {
  return std::string(DTypeName(std::get<0>(info.param))) + "_" + IsaName(std::get<1>(info.param));
}
// Under a NUMA affinity each thread computes its own node's row groups first; the products do not change.
TEST(MatMulAffinity, RangeOrderServesOwnNodeThenOrphans) {
  const RowNodeRange ranges[] = {{0, 10, 0}, {10, 20, 1}, {20, 30, 2}, {30, 40, 0}};
  const int thread_node[] = {0, 1};
  const MatMulAffinity a{.ranges = ranges, .n_ranges = 4, .thread_node = thread_node, .n_thread_nodes = 2};
  const std::vector<std::vector<int>> order = AffinityRangeOrder(a, 2);
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], (std::vector<int>{0, 3, 2}));  // node 0's ranges, then node 2's, which has no thread
  EXPECT_EQ(order[1], (std::vector<int>{1, 2}));
}

TEST(MatMulAffinity, SameProductsWhoeverComputesThem) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const int64_t rows = 20 * kPackRows, cols = 2 * Traits(type).block_elems * 8;
    for (int64_t n_tok : {1, 9}) {
      const Problem& p = GetProblem(type, rows, cols, n_tok, 0, 900);
      std::vector<uint8_t> packed(PackedBytes(p.w.m));
      const WeightMatrix pm = Repack(p.w.m, packed.data());
      std::vector<uint8_t> scratch(MatMulScratchBytes(type, cols, n_tok));
      std::vector<float> plain(static_cast<size_t>(rows * n_tok));
      MatMul(pm, p.x.data(), n_tok, plain.data(), scratch.data());
      const RowNodeRange split[] = {{0, 7, 1}, {7, 20, 0}};
      const RowNodeRange whole_on_one[] = {{0, 20, 1}};
      const RowNodeRange orphan[] = {{0, 5, 0}, {5, 20, 3}};
      const int two_nodes[] = {0, 1};
      const int one_node[] = {0, 0};
      const MatMulAffinity cases[] = {{split, 2, two_nodes, 2}, {whole_on_one, 1, two_nodes, 2},
                                      {orphan, 2, two_nodes, 2}, {split, 2, one_node, 2}};
      for (const MatMulAffinity& a : cases) {
        std::vector<float> y(plain.size());
        Poison(y);
        MatMul(pm, p.x.data(), n_tok, y.data(), scratch.data(), &a);
        EXPECT_EQ(std::memcmp(y.data(), plain.data(), y.size() * sizeof(float)), 0)
            << DTypeName(type) << " n_tok=" << n_tok << " ranges=" << a.n_ranges;
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST(MatMulAffinity, RangeOfNoNodeIsAnyones) {
  const RowNodeRange ranges[] = {{0, 10, -1}, {10, 20, 1}};
  const int thread_node[] = {0, 1};
  const MatMulAffinity a{.ranges = ranges, .n_ranges = 2, .thread_node = thread_node, .n_thread_nodes = 2};
  const std::vector<std::vector<int>> order = AffinityRangeOrder(a, 2);
  EXPECT_EQ(order[0], (std::vector<int>{0}));
  EXPECT_EQ(order[1], (std::vector<int>{0, 1}));
}

// Several products in one parallel region, as an MoE layer's experts go: each equals MatMul of its job alone, bit
// for bit, whichever node's threads take it, for one token (the decode runs) and for tiles; consecutive jobs on the
// same x (an expert's gate and up) share its quantized tiles.
TEST(MatMulBatch, EachProductEqualsMatMulAlone) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  const int two_nodes[] = {0, 1};
  const RowNodeRange on_node0[] = {{0, 24, 0}};
  const RowNodeRange on_node1[] = {{0, 24, 1}};
  const RowNodeRange split[] = {{0, 5, 1}, {5, 12, 0}};
  for (int64_t n_tok : {1, 5, 20}) {
    const Problem& a = GetProblem(DType::kQ4_0, 24 * kPackRows, 512, n_tok, 0, 1200);
    const Problem& b = GetProblem(DType::kQ4_0, 24 * kPackRows, 512, n_tok, 0, 1201);  // takes a's x
    const Problem& c = GetProblem(DType::kQ8_0, 12 * kPackRows, 256, n_tok, 0, 1202);
    const Problem& d = GetProblem(DType::kQ4_K, 8 * kPackRows, 1024, n_tok, 0, 1203);
    const Problem* problems[] = {&a, &b, &c, &d};
    const float* xs[] = {a.x.data(), a.x.data(), c.x.data(), d.x.data()};
    std::vector<std::vector<uint8_t>> packed;
    std::vector<WeightMatrix> pm;
    for (const Problem* p : problems) {
      packed.emplace_back(PackedBytes(p->w.m));
      pm.push_back(Repack(p->w.m, packed.back().data()));
    }
    std::vector<std::vector<float>> got(4), alone(4);
    for (int i = 0; i < 4; ++i) {
      got[i].resize(static_cast<size_t>(pm[i].rows * n_tok));
      alone[i].resize(got[i].size());
      Poison(got[i]);
      std::vector<uint8_t> scratch(MatMulScratchBytes(pm[i].type, pm[i].cols, n_tok));
      MatMul(pm[i], xs[i], n_tok, alone[i].data(), scratch.data());
    }
    const MatMulJob jobs[] = {
        {.w = &pm[0], .x = xs[0], .n_tok = n_tok, .y = got[0].data(), .ranges = on_node0, .n_ranges = 1},
        {.w = &pm[1], .x = xs[1], .n_tok = n_tok, .y = got[1].data(), .ranges = on_node1, .n_ranges = 1},
        {.w = &pm[2], .x = xs[2], .n_tok = n_tok, .y = got[2].data(), .ranges = split, .n_ranges = 2},
        {.w = &pm[3], .x = xs[3], .n_tok = n_tok, .y = got[3].data()},
    };
    const size_t bytes = MatMulBatchScratchBytes(jobs, 4);
    EXPECT_LT(bytes, MatMulBatchScratchBytes(jobs, 1) + MatMulBatchScratchBytes(jobs + 1, 3));  // a and b share
    std::vector<uint8_t> scratch(bytes);
    MatMulBatch(jobs, 4, scratch.data(), two_nodes, 2);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(std::memcmp(got[i].data(), alone[i].data(), got[i].size() * sizeof(float)), 0)
          << "job " << i << " n_tok=" << n_tok;
      EXPECT_LT(Nmse(got[i], i == 1 ? RunRef(problems[1]->w.m, a.x, n_tok) : problems[i]->ref),
                kTol.at(pm[i].type));
    }
  }
  omp_set_num_threads(saved);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatMulTest,
                         testing::Combine(testing::ValuesIn(kWeightTypes),
                                          testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512)),
                         TypeIsaName);
INSTANTIATE_TEST_SUITE_P(PackedTypes, PackedMatMulTest,
                         testing::Combine(testing::Values(DType::kQ4_0, DType::kQ8_0, DType::kMXFP4, DType::kQ4_K,
                                                          DType::kQ5_K, DType::kQ6_K),
                                          testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512)),
                         TypeIsaName);

// The reference itself: against the float64 product of the dequantized weights with the unrounded x, it may
// only differ by the activation rounding of the vec-dot type.
class MatMulRefTest : public testing::TestWithParam<DType> {};

TEST_P(MatMulRefTest, CloseToExactProduct) {
  const DType type = GetParam();
  const int64_t rows = 48, cols = 2048, n_tok = 3;
  const Weights w = MakeWeights(type, rows, cols, 0, 5);
  const std::vector<float> x = RandomNormal(static_cast<size_t>(cols * n_tok), 6);
  const std::vector<float> ref = RunRef(w.m, x, n_tok);
  std::vector<float> exact(static_cast<size_t>(rows * n_tok));
  std::vector<float> wr(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(type, w.bytes.data() + r * w.m.row_stride, wr.data(), cols);
    for (int64_t t = 0; t < n_tok; ++t) {
      double s = 0;
      for (int64_t i = 0; i < cols; ++i) s += static_cast<double>(wr[i]) * x[t * cols + i];
      exact[t * rows + r] = static_cast<float>(s);
    }
  }
  const double e = Nmse(ref, exact);
  std::printf("  %s: reference vs exact NMSE %.3g\n", std::string(DTypeName(type)).c_str(), e);
  EXPECT_LT(e, kActTol.at(VecDotType(type)));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatMulRefTest, testing::ValuesIn(kWeightTypes),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// MatMul's activation conversion: the SIMD paths must give the same bytes as the portable path, which goes
// through the core quantizers. Inputs include rounding ties, zero blocks, magnitude ties of opposite sign (Q8_K
// picks the first), fp16 subnormals and overflow.
std::vector<float> AwkwardActivations(int64_t n, uint64_t seed) {
  std::vector<float> x = RandomNormal(static_cast<size_t>(n), seed);
  for (int64_t i = 0; i < n; ++i) {
    switch ((i / 256) % 5) {
      case 0: break;
      case 1: x[i] = (i % 32 == 0) ? 127.0f : static_cast<float>(i % 255 - 127) + 0.5f; break;  // q ties
      case 2: x[i] = (i % 256 < 32) ? 0.0f : (i % 2 ? 3.0f : -3.0f); break;  // zero block, +-max ties
      case 3: x[i] *= 1e-6f; break;                                        // fp16 subnormals
      case 4: x[i] = i % 7 == 0 ? 1.0f + 1.0f / 2048 : x[i] * 3e4f; break;   // fp16 ties, overflow
    }
  }
  return x;
}

TEST(MatMulActivations, SimdConversionMatchesPortable) {
  if (DetectedIsa() < Isa::kAvx2) GTEST_SKIP() << "no SIMD conversion on this CPU";
  const int64_t n = 5 * 256 * 2;
  const std::vector<float> x = AwkwardActivations(n, 11);
  // One weight type per activation layout: F16, BF16, Q8_0, Q8_0 with the c array (Q4_0, Q5_0, MXFP4), Q8_1, Q8_K.
  for (DType wtype : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kMXFP4,
                      DType::kQ4_1, DType::kQ4_K}) {
    for (int64_t len : {n, int64_t{256}, int64_t{32 * 3}}) {
      if (len % Traits(wtype).block_elems != 0) continue;
      const size_t bytes = internal::ActivationRowBytes(wtype, len);
      std::vector<uint8_t> portable(bytes, 0x11), simd(bytes, 0x22);
      internal::QuantizeActivationRow(wtype, x.data(), portable.data(), len, Isa::kScalar);
      internal::QuantizeActivationRow(wtype, x.data(), simd.data(), len, Isa::kAvx2);
      EXPECT_EQ(std::memcmp(portable.data(), simd.data(), bytes), 0) << DTypeName(wtype) << " n=" << len;
    }
  }
  // Plain float types take any length: the SIMD conversion's scalar tail.
  for (DType wtype : {DType::kF16, DType::kBF16}) {
    const size_t bytes = internal::ActivationRowBytes(wtype, 37);
    std::vector<uint8_t> portable(bytes), simd(bytes);
    internal::QuantizeActivationRow(wtype, x.data() + 1000, portable.data(), 37, Isa::kScalar);
    internal::QuantizeActivationRow(wtype, x.data() + 1000, simd.data(), 37, Isa::kAvx2);
    EXPECT_EQ(std::memcmp(portable.data(), simd.data(), bytes), 0) << DTypeName(wtype);
  }
}

// The packed kernels' activation tiles (repack.h): the one-pass SIMD quantizer writes the same bytes as the portable
// block-by-block path, for a one-token tile and for a slot of a many-token one. Slots not written keep the poison.
TEST(PackedActivations, SimdTileMatchesPortable) {
  if (DetectedIsa() < Isa::kAvx2) GTEST_SKIP() << "no SIMD conversion on this CPU";
  const int64_t n = 14336;  // Mixtral's n_ff: a one-token down projection's row
  const std::vector<float> x = AwkwardActivations(n, 5);
  for (DType wtype : {DType::kQ4_0, DType::kQ8_0, DType::kMXFP4, DType::kQ4_K, DType::kQ6_K}) {
    for (int capacity : {1, internal::kPackedTokTile}) {
      for (int64_t len : {n, int64_t{256}}) {
        const int slot = capacity - 1;
        const size_t bytes = internal::PackedActTileBytes(wtype, len, capacity);
        std::vector<uint8_t> portable(bytes, 0xA5), simd(bytes, 0xA5);
        internal::QuantizePackedAct(wtype, x.data(), len, portable.data(), capacity, slot, Isa::kScalar);
        internal::QuantizePackedAct(wtype, x.data(), len, simd.data(), capacity, slot, Isa::kAvx2);
        EXPECT_EQ(std::memcmp(portable.data(), simd.data(), bytes), 0)
            << DTypeName(wtype) << " capacity " << capacity << " n=" << len;
        EXPECT_NE(std::memcmp(portable.data(), std::vector<uint8_t>(bytes, 0xA5).data(), bytes), 0);
      }
    }
  }
}

// The portable conversion is the core quantizer's output, laid out as vec_dot.h describes: split (Q8_0/Q8_1),
// in nibble order with the c array for Q4_0 weights, as stored for Q8_K.
TEST(MatMulActivations, PortableConversionIsTheCoreQuantizer) {
  const int64_t n = 512;
  const std::vector<float> x = AwkwardActivations(n, 12);
  std::vector<uint8_t> packed(internal::ActivationRowBytes(DType::kQ4_1, n));
  internal::QuantizeActivationRow(DType::kQ4_1, x.data(), packed.data(), n, Isa::kScalar);
  std::vector<BlockQ8_1> core(n / 32);
  QuantizeRowQ8_1(x.data(), core.data(), n);
  const internal::Act32 view = internal::ViewAct32(packed.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) {
    EXPECT_EQ(std::memcmp(view.qs + 32 * b, core[b].qs, 32), 0) << "block " << b;
    EXPECT_EQ(view.d[b], F16ToF32(core[b].d)) << "block " << b;
    EXPECT_EQ(view.s[b], F16ToF32(core[b].s)) << "block " << b;
  }

  // Q4_0 and MXFP4 weights: nibble order, checked on a row whose last group has 3 blocks; c takes off the
  // offset their SIMD kernels add (8, kMxfp4Offset).
  for (const auto& [wtype, offset] : {std::pair{DType::kQ4_0, 8}, std::pair{DType::kMXFP4, internal::kMxfp4Offset}})
  for (int64_t len : {n, int64_t{n - 32}}) {
    const int64_t nb = len / 32;
    std::vector<uint8_t> q4(internal::ActivationRowBytes(wtype, len));
    internal::QuantizeActivationRow(wtype, x.data(), q4.data(), len, Isa::kScalar);
    std::vector<BlockQ8_0> core0(static_cast<size_t>(nb));
    QuantizeRowQ8_0(x.data(), core0.data(), len);
    const internal::Act32 view0 = internal::ViewAct32(q4.data(), len);
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* lo = view0.qs + internal::NibbleHalfOffset(nb, b, 0);
      const int8_t* hi = view0.qs + internal::NibbleHalfOffset(nb, b, 1);
      EXPECT_EQ(std::memcmp(lo, core0[b].qs, 16), 0) << "block " << b;
      EXPECT_EQ(std::memcmp(hi, core0[b].qs + 16, 16), 0) << "block " << b;
      EXPECT_EQ(view0.d[b], F16ToF32(core0[b].d)) << "block " << b;
      for (int j = 0; j < 4; ++j) {
        const int8_t* q = core0[b].qs;
        const int sum = q[4 * j] + q[4 * j + 1] + q[4 * j + 2] + q[4 * j + 3] + q[16 + 4 * j] + q[17 + 4 * j] +
                        q[18 + 4 * j] + q[19 + 4 * j];
        EXPECT_EQ(view0.c[4 * b + j], -offset * sum) << DTypeName(wtype) << " block " << b << " lane " << j;
      }
    }
  }

  std::vector<uint8_t> k_packed(internal::ActivationRowBytes(DType::kQ4_K, n));
  std::vector<BlockQ8_K> k_core(n / 256);
  internal::QuantizeActivationRow(DType::kQ4_K, x.data(), k_packed.data(), n, Isa::kScalar);
  QuantizeRowQ8_K(x.data(), k_core.data(), n);
  EXPECT_EQ(std::memcmp(k_packed.data(), k_core.data(), k_packed.size()), 0);
}

// A hand-built case: Q8_0 weights and inputs exactly representable, so the answer is known.
TEST(MatMulHandBuilt, Q8_0Identity) {
  // Two blocks per row, all scales 1. Row r of W has q = 2 at column r; row 3 also has q = -128 (the one value
  // whose magnitude does not fit int8) at column 63. x[t] is t + 1 except 127 at columns 31 and 63, so its
  // Q8_0 scales are exactly 1 and its quants are the values: y[t][r] = 2(t + 1), minus 128 * 127 for row 3.
  constexpr int64_t rows = 4, cols = 64, n_tok = 2;
  std::vector<BlockQ8_0> w(rows * 2);
  for (BlockQ8_0& b : w) {
    b.d = F32ToF16(1.0f);
    std::memset(b.qs, 0, sizeof(b.qs));
  }
  for (int64_t r = 0; r < rows; ++r) w[2 * r].qs[r] = 2;
  w[2 * 3 + 1].qs[31] = -128;
  std::vector<float> x(cols * n_tok);
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t i = 0; i < cols; ++i) x[t * cols + i] = static_cast<float>(i % 32 == 31 ? 127 : t + 1);
  }
  const WeightMatrix m{DType::kQ8_0, w.data(), rows, cols, 2 * sizeof(BlockQ8_0)};
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > DetectedIsa()) continue;
    SetIsa(isa);
    const std::vector<float> y = RunMatMul(m, x, n_tok);
    for (int64_t t = 0; t < n_tok; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        EXPECT_EQ(y[t * rows + r], 2.0f * (t + 1) - (r == 3 ? 128.0f * 127.0f : 0.0f)) << IsaName(isa);
      }
    }
  }
  SetIsa(Isa::kAvx512);
}

// Hand-built MXFP4 rows whose products are exact: x is integers with 127 in each block (Q8_0 scale exactly 1, quants
// the values), so y = sum over blocks of 2^(e - 128) * sum(kMxfp4Values[q] * x), exact in float on every ISA. Rows
// of 4 blocks (one nibble-order group) and of 7 (a group and a 3-block tail, which the SIMD kernels walk one block
// at a time); row 2's scales are the subnormals 2^-128 and 2^-127 (e = 0, 1), row 3's the largest used, 2^100.
// 16 rows, one group of the packed layout (repack.h), which must give the same exact values.
TEST(MatMulHandBuilt, Mxfp4Exact) {
  for (int64_t nb : {4, 7}) {
    constexpr int64_t rows = kPackRows, n_tok = 3;
    const int64_t cols = 32 * nb;
    std::vector<BlockMXFP4> w(static_cast<size_t>(rows * nb));
    std::vector<float> x(static_cast<size_t>(cols * n_tok));
    for (int64_t t = 0; t < n_tok; ++t) {
      for (int64_t i = 0; i < cols; ++i) {
        x[t * cols + i] = i % 32 == 5 ? 127.0f : static_cast<float>((i * 7 + t * 3) % 61 - 30);
      }
    }
    std::vector<double> want(static_cast<size_t>(rows * n_tok), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < nb; ++b) {
        BlockMXFP4& blk = w[r * nb + b];
        blk.e = static_cast<uint8_t>(r == 2 ? b % 2 : r == 3 ? 228 : 125 + (r + b) % 5);
        for (int j = 0; j < 16; ++j) {
          blk.qs[j] = static_cast<uint8_t>((r * 5 + b * 3 + j) % 16 | ((j * 11 + b) % 16) << 4);
        }
        for (int64_t t = 0; t < n_tok; ++t) {
          int64_t sum = 0;
          for (int j = 0; j < 32; ++j) {
            const int q = j < 16 ? blk.qs[j] & 0xF : blk.qs[j - 16] >> 4;
            sum += kMxfp4Values[q] * static_cast<int64_t>(x[t * cols + 32 * b + j]);
          }
          want[t * rows + r] += std::ldexp(static_cast<double>(sum), blk.e - 128);
        }
      }
    }
    const WeightMatrix m{DType::kMXFP4, w.data(), rows, cols, static_cast<size_t>(nb) * sizeof(BlockMXFP4)};
    std::vector<uint8_t> packed(PackedBytes(m));
    const WeightMatrix pm = Repack(m, packed.data());
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (isa > DetectedIsa()) continue;
      SetIsa(isa);
      for (const WeightMatrix* wm : {&m, &pm}) {
        const std::vector<float> y = RunMatMul(*wm, x, n_tok);
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_EQ(static_cast<double>(y[i]), want[i])
              << IsaName(isa) << (IsPacked(*wm) ? " packed" : "") << " blocks " << nb << " output " << i;
          ASSERT_NE(y[i], 0.0f) << "a row whose value happens to be 0 tests nothing";
        }
      }
    }
    SetIsa(Isa::kAvx512);
  }
}

// MXFP4 blocks of random bytes with every scale byte from 0 to 200 (subnormal 2^-128 up to 2^72), on every ISA,
// against the reference: the scale arithmetic of each kernel over the whole exponent range the products stay
// finite in. The outputs are dominated by their largest blocks, so the bound is that of the Gaussian grid. The
// packed layout (repack.h) on the first 64 rows, its whole groups, as well.
TEST(MatMulMxfp4, EveryExponentMatchesReference) {
  const int64_t rows = 67, cols = 32 * 45, n_tok = 6;
  std::vector<BlockMXFP4> w(static_cast<size_t>(rows * cols / 32));
  std::mt19937_64 rng(39);
  for (size_t i = 0; i < w.size(); ++i) {
    w[i].e = static_cast<uint8_t>(i % 201);
    for (uint8_t& q : w[i].qs) q = static_cast<uint8_t>(rng());
  }
  const WeightMatrix m{DType::kMXFP4, w.data(), rows, cols, static_cast<size_t>(cols / 32) * sizeof(BlockMXFP4)};
  const std::vector<float> x = RandomNormal(static_cast<size_t>(cols * n_tok), 40);
  const std::vector<float> ref = RunRef(m, x, n_tok);
  WeightMatrix m64 = m;
  m64.rows = 64;
  const std::vector<float> ref64 = RunRef(m64, x, n_tok);
  std::vector<uint8_t> packed(PackedBytes(m64));
  const WeightMatrix pm = Repack(m64, packed.data());
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > DetectedIsa()) continue;
    SetIsa(isa);
    const std::vector<float> y = RunMatMul(m, x, n_tok);
    const double e = Nmse(y, ref);
    const double e_packed = Nmse(RunMatMul(pm, x, n_tok), ref64);
    std::printf("  MXFP4/%s, every exponent: NMSE vs reference %.3g, packed %.3g\n", IsaName(isa).c_str(), e,
                e_packed);
    EXPECT_LT(e, kTol.at(DType::kMXFP4)) << IsaName(isa);
    EXPECT_LT(e_packed, kTol.at(DType::kMXFP4)) << IsaName(isa) << " packed";
  }
  SetIsa(Isa::kAvx512);
}

TEST(MatMulIsa, SetIsaIsCappedByTheCpu) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    SetIsa(isa);
    EXPECT_EQ(ActiveIsa(), isa > DetectedIsa() ? DetectedIsa() : isa);
  }
  SetIsa(Isa::kAvx512);
}

}  // namespace
}  // namespace tandem::cpu

// The dequantizers against real llama-quantize output: tiny-llama-{Q8_0,Q4_0,Q4_K_M}.gguf were quantized from
// the same F32 weights as tiny-llama-F16.gguf, so every tensor, dequantized, must be close to its F16 twin. A
// wrong nibble order or scale packing shows up as an NMSE near or above 1, far over these bounds.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/gguf.h"
#include "core/quant.h"
#include "core/status.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

// NMSE(dequantized, F16) per stored type. Measured worst tensor per type over the three files:
// Q8_0 2.9e-5, Q4_0 7.5e-3, Q4_K 5.2e-3, Q6_K 3.2e-4, F32 0 (identical copies). Q5_K does not occur.
const std::map<DType, double> kMaxNmse = {
    {DType::kF32, 1e-12}, {DType::kF16, 1e-12}, {DType::kQ8_0, 1e-4}, {DType::kQ6_K, 1e-3},
    {DType::kQ5_K, 3e-3}, {DType::kQ4_K, 2e-2}, {DType::kQ4_0, 2e-2},
};

// Our weight quantizers' NMSE may exceed llama-quantize's on the same tensor by at most this factor. Measured
// ratios ours / llama-quantize, worst tensor: Q8_0 1.00, Q4_0 0.93, Q4_K 0.99, Q6_K 0.90.
constexpr double kOursVsLlama = 1.25;

std::unique_ptr<GgufFile> OpenModel(const std::string& name) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(test::DataPath("models/" + name));
  EXPECT_TRUE(f.ok()) << name << ": " << Message(f.status());
  return f.ok() ? std::move(*f) : nullptr;
}

std::vector<float> Dequantized(const GgufFile& f, const GgufTensorInfo& t) {
  std::vector<float> y(static_cast<size_t>(t.n_elements()));
  test::Poison(y);
  DequantizeRow(t.type, f.TensorData(t), y.data(), t.n_elements());
  return y;
}

class QuantModelsTest : public testing::TestWithParam<const char*> {};

TEST_P(QuantModelsTest, EveryTensorMatchesF16Twin) {
  const std::unique_ptr<GgufFile> ref = OpenModel("tiny-llama-F16.gguf");
  const std::unique_ptr<GgufFile> quant = OpenModel(GetParam());
  ASSERT_TRUE(ref && quant);
  ASSERT_EQ(quant->tensors().size(), ref->tensors().size());
  std::map<DType, double> worst;
  for (const GgufTensorInfo& t : quant->tensors()) {
    const GgufTensorInfo* r = ref->FindTensor(t.name);
    ASSERT_NE(r, nullptr) << t.name;
    ASSERT_EQ(r->ne, t.ne) << t.name;
    ASSERT_TRUE(kMaxNmse.count(t.type)) << t.name << " has unexpected type " << DTypeName(t.type);
    ASSERT_EQ(t.ne[0] % Traits(t.type).block_elems, 0) << t.name;
    const double nmse = test::Nmse(Dequantized(*quant, t), Dequantized(*ref, *r));
    EXPECT_LT(nmse, kMaxNmse.at(t.type)) << t.name << " (" << DTypeName(t.type) << ")";
    worst[t.type] = std::max(worst[t.type], nmse);
  }
  for (const auto& [type, nmse] : worst) {
    std::printf("%s: worst %s tensor NMSE %.2e\n", GetParam(), std::string(DTypeName(type)).c_str(), nmse);
  }
}

INSTANTIATE_TEST_SUITE_P(Files, QuantModelsTest,
                         testing::Values("tiny-llama-Q8_0.gguf", "tiny-llama-Q4_0.gguf", "tiny-llama-Q4_K_M.gguf"));

// Our weight quantizers against llama-quantize on the same weights: quantizing each F16 tensor to the type
// llama-quantize chose must not be much worse than llama-quantize's own result.
TEST_P(QuantModelsTest, OurQuantizerIsComparableToLlamaQuantize) {
  const std::unique_ptr<GgufFile> ref = OpenModel("tiny-llama-F16.gguf");
  const std::unique_ptr<GgufFile> quant = OpenModel(GetParam());
  ASSERT_TRUE(ref && quant);
  std::map<DType, double> worst_ratio;  // type -> max over tensors of our NMSE / llama's NMSE
  for (const GgufTensorInfo& t : quant->tensors()) {
    if (!CanQuantize(t.type) || t.type == DType::kF32) continue;
    const GgufTensorInfo* r = ref->FindTensor(t.name);
    ASSERT_NE(r, nullptr) << t.name;
    const std::vector<float> x = Dequantized(*ref, *r);
    std::vector<uint8_t> ours(RowBytes(t.type, t.n_elements()));
    ASSERT_TRUE(QuantizeRow(t.type, x.data(), ours.data(), t.n_elements()).ok()) << t.name;
    std::vector<float> y(x.size());
    test::Poison(y);
    DequantizeRow(t.type, ours.data(), y.data(), t.n_elements());
    const double our_nmse = test::Nmse(y, x);
    const double llama_nmse = test::Nmse(Dequantized(*quant, t), x);
    EXPECT_LT(our_nmse, kOursVsLlama * llama_nmse) << t.name << " (" << DTypeName(t.type) << ")";
    worst_ratio[t.type] = std::max(worst_ratio[t.type], our_nmse / llama_nmse);
  }
  for (const auto& [type, ratio] : worst_ratio) {
    std::printf("%s: %s NMSE ours / llama-quantize, worst tensor: %.3f\n", GetParam(),
                std::string(DTypeName(type)).c_str(), ratio);
  }
}

// The quantized files must actually exercise the K-quant decoders, or the test above proves less than it says.
TEST(QuantModelsTest, Q4_K_MUsesKQuants) {
  const std::unique_ptr<GgufFile> f = OpenModel("tiny-llama-Q4_K_M.gguf");
  ASSERT_TRUE(f);
  std::map<DType, int> count;
  for (const GgufTensorInfo& t : f->tensors()) ++count[t.type];
  EXPECT_GT(count[DType::kQ4_K], 0);
  EXPECT_GT(count[DType::kQ6_K], 0);
}

}  // namespace
}  // namespace tandem

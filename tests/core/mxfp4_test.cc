// MXFP4 (GGUF type 39): the registry entry, the E8M0 scale, hand-built blocks, and the dequantizer and quantizer
// bit for bit against gguf-py's (tests/data/quant/mxfp4-gguf-py.json, tools/make_mxfp4_vectors.py), plus the inputs
// where ggml's quantizer is undefined and tandem clamps; the GGUF reader on a file gguf-py wrote.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/gguf.h"
#include "core/quant.h"
#include "core/status.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

std::vector<uint8_t> FromHex(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

std::vector<float> FloatsFromHex(const std::string& hex) {
  const std::vector<uint8_t> bytes = FromHex(hex);
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

const nlohmann::json& Vectors() {
  static const nlohmann::json j = test::ReadJson(test::DataPath("quant/mxfp4-gguf-py.json"));
  return j;
}

std::vector<uint8_t> Quantize(const std::vector<float>& x, QuantizeEffort effort = QuantizeEffort::kBest) {
  std::vector<uint8_t> q(RowBytes(DType::kMXFP4, static_cast<int64_t>(x.size())), 0xEE);
  const absl::Status st = QuantizeRow(DType::kMXFP4, x.data(), q.data(), static_cast<int64_t>(x.size()), effort);
  EXPECT_TRUE(st.ok()) << Message(st);
  return q;
}

TEST(Mxfp4Registry, TraitsNameAndVecDotType) {
  const std::optional<DTypeTraits> tr = TraitsOf(39);
  ASSERT_TRUE(tr.has_value());
  EXPECT_EQ(tr->type, DType::kMXFP4);
  EXPECT_EQ(tr->name, "MXFP4");
  EXPECT_EQ(tr->block_elems, 32);
  EXPECT_EQ(tr->block_bytes, 17u);
  EXPECT_EQ(DTypeName(DType::kMXFP4), "MXFP4");
  EXPECT_EQ(DTypeFromName("mxfp4"), DType::kMXFP4);
  EXPECT_EQ(RowBytes(DType::kMXFP4, 2880), 90u * 17);  // a gpt-oss expert row
  EXPECT_EQ(VecDotType(DType::kMXFP4), DType::kQ8_0);   // ggml's vec_dot_type for MXFP4
  EXPECT_TRUE(CanQuantize(DType::kMXFP4));
}

TEST(Mxfp4Scale, E8M0HalfIsTwoToTheEMinus128) {
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(E8M0HalfToF32(static_cast<uint8_t>(e)), std::ldexp(1.0f, e - 128)) << "e=" << e;
  }
  EXPECT_EQ(Bits(E8M0HalfToF32(0)), 0x00200000u);  // the subnormal 2^-128
  EXPECT_EQ(Bits(E8M0HalfToF32(1)), 0x00400000u);
  EXPECT_EQ(E8M0HalfToF32(128), 1.0f);
  EXPECT_EQ(E8M0HalfToF32(255), std::ldexp(1.0f, 127));  // ggml's value; the OCP spec's NaN
}

TEST(Mxfp4Dequantize, HandBuiltBlock) {
  BlockMXFP4 b{};
  b.e = 127;  // d = 0.5
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
  float y[32];
  test::Poison(y);
  DequantizeRow(DType::kMXFP4, &b, y, 32);
  const float want_low[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], want_low[j]) << j;
    EXPECT_EQ(y[16 + j], want_low[15 - j]) << 16 + j;  // high nibbles: 15 - j
  }
  EXPECT_FALSE(std::signbit(y[8]));  // q = 8, the format's negative zero, decodes as +0 (ggml's int8 table)
}

TEST(Mxfp4Dequantize, BitExactWithGgufPy) {
  const nlohmann::json& c = Vectors()["dequantize"];
  const std::vector<uint8_t> blocks = FromHex(c["blocks"]);
  const std::vector<float> want = FloatsFromHex(c["y"]);
  ASSERT_EQ(blocks.size() % 17, 0u);
  ASSERT_EQ(want.size(), blocks.size() / 17 * 32);
  ASSERT_GE(blocks.size() / 17, 256u);  // every exponent byte
  std::vector<float> got(want.size());
  test::Poison(got);
  DequantizeRow(DType::kMXFP4, blocks.data(), got.data(), static_cast<int64_t>(got.size()));
  int mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (Bits(got[i]) != Bits(want[i]) && ++mismatches <= 5) {
      ADD_FAILURE() << "element " << i << " (block " << i / 32 << "): " << got[i] << " vs gguf-py " << want[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Mxfp4Quantize, BitExactWithGgufPy) {
  int cases = 0;
  for (const nlohmann::json& c : Vectors()["quantize"]) {
    const std::string name = c["name"];
    const std::vector<float> x = FloatsFromHex(c["x"]);
    const std::vector<uint8_t> want = FromHex(c["blocks"]);
    ASSERT_EQ(want.size(), RowBytes(DType::kMXFP4, static_cast<int64_t>(x.size()))) << name;
    const std::vector<uint8_t> got = Quantize(x);
    int bad_blocks = 0;
    for (size_t b = 0; b < want.size() / 17; ++b) {
      if (std::memcmp(got.data() + 17 * b, want.data() + 17 * b, 17) != 0 && ++bad_blocks <= 3) {
        ADD_FAILURE() << name << ": block " << b << " e " << int{got[17 * b]} << " vs gguf-py " << int{want[17 * b]};
      }
    }
    EXPECT_EQ(bad_blocks, 0) << name;
    // There is no scale search: the fast effort writes the same bytes.
    EXPECT_EQ(Quantize(x, QuantizeEffort::kFast), got) << name;
    ++cases;
  }
  EXPECT_GE(cases, 14);
}

// Every level, every midpoint between neighbours (ties to the lower index: the smaller magnitude), and values past
// the top level, at d = 0.5 (amax 6: e = floor(log2 6) - 2 + 127 = 127).
TEST(Mxfp4Quantize, LevelsMidpointsAndClipping) {
  std::vector<float> x = {6.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.25f, -0.75f, -5.0f,
                          -0.0f, 0.26f, -0.26f, 4.9f, 5.1f};
  x.resize(32, 0.0f);
  BlockMXFP4 b;
  ASSERT_TRUE(QuantizeRow(DType::kMXFP4, x.data(), &b, 32).ok());
  EXPECT_EQ(b.e, 127);
  const int want[16] = {7, 0, 1, 2, 3, 4, 5, 6, 0, 9, 14, 0, 1, 9, 6, 7};
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j] & 0xF, want[j]) << "element " << j << " = " << x[j];
  // amax 7.99 still gives e = 127, and 7.99 clips to the top level 6 (q = 7).
  x[0] = 7.99f;
  ASSERT_TRUE(QuantizeRow(DType::kMXFP4, x.data(), &b, 32).ok());
  EXPECT_EQ(b.e, 127);
  EXPECT_EQ(b.qs[0] & 0xF, 7);
  // amax 8: the scale doubles.
  x[0] = -8.0f;
  ASSERT_TRUE(QuantizeRow(DType::kMXFP4, x.data(), &b, 32).ok());
  EXPECT_EQ(b.e, 128);
  EXPECT_EQ(b.qs[0] & 0xF, 14);  // -8 = -8 * 1
}

// Where ggml's uint8 conversion of floor(log2(amax)) - 2 + 127 is undefined, tandem clamps (quant_quantize.cc).
TEST(Mxfp4Quantize, ClampsTheExponentWhereGgmlIsUndefined) {
  std::vector<float> x(64, 0.0f);
  // Block 0: amax 2^-127 (e would be -2) gets e = 0, d = 2^-128: 2^-130 is a quarter of d, nearest 0; 3 * 2^-130
  // is nearest d (q = 1); -2^-127 is -2d (q = 10); the smallest subnormal is 0.
  x[0] = std::ldexp(1.0f, -130);
  x[1] = 3 * std::ldexp(1.0f, -130);
  x[2] = -std::ldexp(1.0f, -127);
  x[3] = std::numeric_limits<float>::denorm_min();
  // Block 1: an infinite amax gets e = 254 (a finite one at most 253); NaN does not take part in amax.
  x[32] = std::numeric_limits<float>::infinity();
  x[33] = std::numeric_limits<float>::quiet_NaN();
  x[34] = 1.0f;
  std::vector<uint8_t> q = Quantize(x);
  const auto* b = reinterpret_cast<const BlockMXFP4*>(q.data());
  EXPECT_EQ(b[0].e, 0);
  EXPECT_EQ(b[0].qs[0] & 0xF, 0);
  EXPECT_EQ(b[0].qs[1] & 0xF, 1);
  EXPECT_EQ(b[0].qs[2] & 0xF, 10);
  EXPECT_EQ(b[0].qs[3] & 0xF, 0);
  EXPECT_EQ(b[1].e, 254);
  EXPECT_EQ(b[1].qs[2] & 0xF, 0);  // 1.0 against d = 2^126
  // The largest finite magnitude: log2f rounds up to 128, e = 128 - 2 + 127 = 253, d = 2^125, and the levels 8d and
  // 12d overflow to infinity (as ggml's products do), so -max goes to -6d = -1.5 * 2^127 (q = 13).
  std::vector<float> big(32, 0.0f);
  big[5] = -std::numeric_limits<float>::max();
  q = Quantize(big);
  EXPECT_EQ(q[0], 253);
  EXPECT_EQ(q[1 + 5] & 0xF, 13);
}

TEST(Mxfp4Quantize, RoundTripKeepsLevelsExactly) {
  // Values that are levels of their block's scale come back unchanged.
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) {
    const int b = i / 32;
    x[i] = static_cast<float>(kMxfp4Values[(i * 7) % 16]) * std::ldexp(1.0f, 3 * b - 10);
    if (i % 32 == 0) x[i] = 12.0f * std::ldexp(1.0f, 3 * b - 10);  // the top level sets the scale
  }
  const std::vector<uint8_t> q = Quantize(x);
  std::vector<float> y(x.size());
  test::Poison(y);
  DequantizeRow(DType::kMXFP4, q.data(), y.data(), 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], x[i]) << i;
}

// A GGUF file gguf-py's GGUFWriter wrote with one MXFP4 tensor: the reader takes the type id, sizes its rows as
// 17 bytes per 32 elements and finds the bytes gguf-py quantized.
TEST(Mxfp4Gguf, ReadsGgufPyFile) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(test::DataPath("quant/mxfp4-tensor.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufTensorInfo* t = (*f)->FindTensor("experts.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, DType::kMXFP4);
  EXPECT_EQ(t->n_dims, 3);
  EXPECT_EQ(t->ne[0], 64);
  EXPECT_EQ(t->ne[1], 3);
  EXPECT_EQ(t->ne[2], 2);
  EXPECT_EQ(t->nbytes, 12u * 17);
  const std::vector<uint8_t> want = FromHex(Vectors()["quantize"][0]["blocks"]);
  EXPECT_EQ(std::memcmp((*f)->TensorData(*t), want.data(), t->nbytes), 0);

  // And tandem's writer round-trips it.
  absl::StatusOr<std::vector<uint8_t>> bytes = SerializeGguf(
      {}, {GgufWriteTensor{.name = "w", .type = DType::kMXFP4, .n_dims = 2, .ne = {64, 6, 1, 1},
                           .data = std::span<const uint8_t>((*f)->TensorData(*t), t->nbytes)}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::unique_ptr<GgufFile>> g = GgufFile::FromBytes(*bytes);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->tensors()[0].type, DType::kMXFP4);
  EXPECT_EQ((*g)->tensors()[0].nbytes, 12u * 17);
  // A row that is not whole blocks is refused.
  EXPECT_FALSE(SerializeGguf({}, {GgufWriteTensor{.name = "w", .type = DType::kMXFP4, .n_dims = 1, .ne = {48, 1, 1, 1},
                                                  .zeros = true}})
                   .ok());
}

}  // namespace
}  // namespace tandem

// GGUF reader and writer on the shared models: counts, shapes and types from tests/data/README.md, metadata
// values, every value type through the writer and back, and byte-identical rewrites of every model.
#include "core/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "core/status.h"
#include "tests/core/tiny_gguf.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using test::DataPath;
using test::ModelPath;

struct ModelFacts {
  std::string path;
  size_t n_tensors;
  uint64_t file_size;  // from the README's table
};

std::vector<ModelFacts> AllModels() {
  return {
      {ModelPath("stories260K.gguf"), 48, 1185376},
      {ModelPath("stories260K-moe4.gguf"), 53, 3172736},
      {DataPath("models/tiny-llama-F16.gguf"), 39, 5266080},
      {DataPath("models/tiny-llama-Q8_0.gguf"), 39, 2808512},
      {DataPath("models/tiny-llama-Q4_0.gguf"), 39, 1531584},
      {DataPath("models/tiny-llama-Q4_K_M.gguf"), 39, 1616064},
      {DataPath("models/tiny-mixtral-Q4_0.gguf"), 43, 4350144},
      {DataPath("models/tiny-mixtral-Q4_K_M.gguf"), 43, 4653248},
  };
}

std::unique_ptr<GgufFile> MustOpen(const std::string& path) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
  EXPECT_TRUE(f.ok()) << path << ": " << f.status();
  return f.ok() ? *std::move(f) : nullptr;
}

TEST(GgufRead, EveryModelOpensWithConsistentLayout) {
  for (const ModelFacts& m : AllModels()) {
    SCOPED_TRACE(m.path);
    std::unique_ptr<GgufFile> f = MustOpen(m.path);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_EQ(f->file_size(), m.file_size);
    EXPECT_EQ(f->tensors().size(), m.n_tensors);
    EXPECT_EQ(f->data_offset() % 32, 0u);
    // These files pack tensors back to back, each padded to 32: the data section is exactly their padded sum.
    uint64_t padded_sum = 0;
    for (const GgufTensorInfo& t : f->tensors()) {
      EXPECT_EQ(t.offset % 32, 0u) << t.name;
      EXPECT_EQ(f->FindTensor(t.name), &t);
      padded_sum += (t.nbytes + 31) / 32 * 32;
    }
    EXPECT_EQ(padded_sum, f->file_size() - f->data_offset());
  }
}

// Shapes and types from tests/data/README.md; bytes computed by hand from the block sizes.
TEST(GgufRead, KnownTensorShapesTypesAndBytes) {
  struct Want {
    std::string file, tensor;
    DType type;
    std::vector<int64_t> shape;
    uint64_t nbytes;
  };
  const std::vector<Want> wants = {
      {"models/tiny-llama-Q4_0.gguf", "token_embd.weight", DType::kQ4_0, {256, 512}, 256 * 512 / 32 * 18},
      {"models/tiny-llama-Q4_0.gguf", "output.weight", DType::kQ6_K, {256, 512}, 256 * 512 / 256 * 210},
      {"models/tiny-llama-Q4_0.gguf", "blk.0.attn_k.weight", DType::kQ4_0, {256, 128}, 256 * 128 / 32 * 18},
      {"models/tiny-llama-Q4_0.gguf", "blk.3.ffn_down.weight", DType::kQ4_0, {512, 256}, 512 * 256 / 32 * 18},
      {"models/tiny-llama-Q4_0.gguf", "blk.0.attn_norm.weight", DType::kF32, {256}, 256 * 4},
      {"models/tiny-llama-F16.gguf", "blk.2.ffn_gate.weight", DType::kF16, {256, 512}, 256 * 512 * 2},
      {"models/tiny-llama-Q8_0.gguf", "blk.1.attn_q.weight", DType::kQ8_0, {256, 256}, 256 * 256 / 32 * 34},
      {"models/tiny-llama-Q4_K_M.gguf", "blk.0.attn_v.weight", DType::kQ4_K, {256, 128}, 256 * 128 / 256 * 144},
      {"models/tiny-llama-Q4_K_M.gguf", "blk.2.attn_v.weight", DType::kQ6_K, {256, 128}, 256 * 128 / 256 * 210},
      {"models/tiny-llama-Q4_K_M.gguf", "blk.3.ffn_down.weight", DType::kQ6_K, {512, 256}, 512 * 256 / 256 * 210},
      {"models/tiny-mixtral-Q4_0.gguf", "blk.0.attn_k.weight", DType::kQ8_0, {256, 128}, 256 * 128 / 32 * 34},
      {"models/tiny-mixtral-Q4_0.gguf", "blk.1.ffn_gate_inp.weight", DType::kF32, {256, 8}, 256 * 8 * 4},
      {"models/tiny-mixtral-Q4_0.gguf",
       "blk.1.ffn_up_exps.weight",
       DType::kQ4_0,
       {256, 256, 8},
       256 * 256 * 8 / 32 * 18},
      {"models/tiny-mixtral-Q4_K_M.gguf", "blk.0.attn_output.weight", DType::kQ5_K, {256, 256}, 256 * 256 / 256 * 176},
      {"models/tiny-mixtral-Q4_K_M.gguf",
       "blk.3.ffn_down_exps.weight",
       DType::kQ6_K,
       {256, 256, 8},
       256 * 256 * 8 / 256 * 210},
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(w.file + " " + w.tensor);
    std::unique_ptr<GgufFile> f = MustOpen(DataPath(w.file));
    ASSERT_NE(f, nullptr);
    const GgufTensorInfo* t = f->FindTensor(w.tensor);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, w.type);
    ASSERT_EQ(t->n_dims, static_cast<int>(w.shape.size()));
    for (size_t d = 0; d < w.shape.size(); ++d) EXPECT_EQ(t->ne[d], w.shape[d]) << "dim " << d;
    EXPECT_EQ(t->nbytes, w.nbytes);
  }
  // stories260K is all F32, 292,800 parameters.
  std::unique_ptr<GgufFile> f = MustOpen(ModelPath("stories260K.gguf"));
  ASSERT_NE(f, nullptr);
  int64_t params = 0;
  for (const GgufTensorInfo& t : f->tensors()) {
    EXPECT_EQ(t.type, DType::kF32) << t.name;
    EXPECT_EQ(t.nbytes, static_cast<uint64_t>(t.n_elements()) * 4) << t.name;
    params += t.n_elements();
  }
  EXPECT_EQ(params, 292800);
  std::unique_ptr<GgufFile> moe = MustOpen(ModelPath("stories260K-moe4.gguf"));
  ASSERT_NE(moe, nullptr);
  const GgufTensorInfo* down = moe->FindTensor("blk.2.ffn_down_exps.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->ne, (std::array<int64_t, 4>{172, 64, 4, 1}));
}

TEST(GgufRead, Stories260KMetadata) {
  std::unique_ptr<GgufFile> f = MustOpen(ModelPath("stories260K.gguf"));
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->metadata().size(), 19u);
  auto u = [&](const char* key) { return f->Find(key) ? f->Find(key)->AsUint() : std::nullopt; };
  EXPECT_EQ(u("llama.block_count"), 5u);
  EXPECT_EQ(u("llama.embedding_length"), 64u);
  EXPECT_EQ(u("llama.feed_forward_length"), 172u);
  EXPECT_EQ(u("llama.attention.head_count"), 8u);
  EXPECT_EQ(u("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(u("llama.context_length"), 2048u);
  EXPECT_EQ(u("tokenizer.ggml.seperator_token_id"), 4294967295u);
  EXPECT_EQ(f->Find("llama.rope.freq_base"), nullptr);
  EXPECT_EQ(f->Find("general.file_type"), nullptr);
  ASSERT_NE(f->Find("general.name"), nullptr);
  ASSERT_NE(f->Find("general.name")->AsString(), nullptr);
  EXPECT_EQ(*f->Find("general.name")->AsString(), "llama");
  const GgufValue* eps = f->Find("llama.attention.layer_norm_rms_epsilon");
  ASSERT_NE(eps, nullptr);
  EXPECT_EQ(eps->type, GgufType::kFloat32);
  EXPECT_EQ(eps->AsFloat(), static_cast<double>(1e-5f));
  EXPECT_EQ(eps->AsInt(), std::nullopt);

  const GgufArray* tokens = f->Find("tokenizer.ggml.tokens")->AsArray();
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->elem_type, GgufType::kString);
  ASSERT_EQ(tokens->items.size(), 512u);
  EXPECT_EQ(*tokens->items[0].AsString(), "<unk>");
  EXPECT_EQ(*tokens->items[1].AsString(), "<s>");
  EXPECT_EQ(*tokens->items[3].AsString(), "<0x00>");
  EXPECT_EQ(*tokens->items[410].AsString(), "\xe2\x96\x81");  // the lone U+2581
  // Normal pieces have score -(id - 259); control/byte tokens have type 3/6.
  const GgufArray* scores = f->Find("tokenizer.ggml.scores")->AsArray();
  const GgufArray* types = f->Find("tokenizer.ggml.token_type")->AsArray();
  ASSERT_NE(scores, nullptr);
  ASSERT_NE(types, nullptr);
  EXPECT_EQ(scores->elem_type, GgufType::kFloat32);
  EXPECT_EQ(types->elem_type, GgufType::kInt32);
  EXPECT_EQ(scores->items[300].AsFloat(), -41.0);
  EXPECT_EQ(types->items[1].AsInt(), 3);
  EXPECT_EQ(types->items[100].AsInt(), 6);
  EXPECT_EQ(types->items[400].AsInt(), 1);
}

TEST(GgufRead, LargeVocabOnlyFile) {
  std::unique_ptr<GgufFile> f = MustOpen(DataPath("tokenizer/ggml-vocab-llama-spm.gguf"));
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->data_offset(), f->file_size());  // no padding after the metadata of a tensor-less file
  const GgufArray* tokens = f->Find("tokenizer.ggml.tokens")->AsArray();
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->items.size(), 32000u);
  EXPECT_EQ(*tokens->items[1].AsString(), "<s>");
  EXPECT_EQ(f->Find("tokenizer.ggml.add_bos_token")->type, GgufType::kBool);
  EXPECT_EQ(f->Find("tokenizer.ggml.add_bos_token")->AsInt(), 1);
  EXPECT_EQ(f->Find("tokenizer.ggml.add_eos_token")->AsInt(), 0);
  EXPECT_EQ(*f->Find("tokenizer.ggml.pre")->AsString(), "default");
}

TEST(GgufRead, TensorDataPointsIntoTheFile) {
  std::unique_ptr<GgufFile> f = MustOpen(ModelPath("stories260K.gguf"));
  ASSERT_NE(f, nullptr);
  const std::string raw = test::ReadFile(ModelPath("stories260K.gguf"));
  ASSERT_EQ(raw.size(), f->file_size());
  for (const GgufTensorInfo& t : f->tensors()) {
    const size_t at = f->data_offset() + t.offset;
    ASSERT_EQ(std::memcmp(f->TensorData(t), raw.data() + at, t.nbytes), 0) << t.name;
  }
  // RMSNorm weights of a trained model are finite and positive-ish; garbage offsets would not be.
  const GgufTensorInfo* norm = f->FindTensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  const float* w = reinterpret_cast<const float*>(f->TensorData(*norm));
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(std::isfinite(w[i]) && std::fabs(w[i]) < 100.0f) << i;
}

// Released pages (the CPU backend drops the mapped copy of weights it repacked) read back from the file unchanged.
TEST(GgufRead, ReleasedPagesReadBackUnchanged) {
  std::unique_ptr<GgufFile> f = MustOpen(ModelPath("stories260K.gguf"));
  ASSERT_NE(f, nullptr);
  const std::string raw = test::ReadFile(ModelPath("stories260K.gguf"));
  const uint8_t* data = f->base() + f->data_offset();
  const size_t n = f->file_size() - f->data_offset();
  f->ReleasePages(data, n);
  ASSERT_EQ(std::memcmp(data, raw.data() + f->data_offset(), n), 0);
  // Ranges outside the mapping, or empty, are ignored.
  f->ReleasePages(raw.data(), raw.size());
  f->ReleasePages(data, 0);
  ASSERT_EQ(std::memcmp(f->base(), raw.data(), raw.size()), 0);
}

// Every model, rewritten from what was read, is byte-identical to the original (same layout: gguf-py and
// llama-quantize pad each tensor to the alignment, as the writer does).
TEST(GgufWrite, EveryModelRoundTripsByteIdentical) {
  for (const ModelFacts& m : AllModels()) {
    SCOPED_TRACE(m.path);
    std::unique_ptr<GgufFile> f = MustOpen(m.path);
    ASSERT_NE(f, nullptr);
    std::vector<GgufWriteTensor> tensors;
    for (const GgufTensorInfo& t : f->tensors()) {
      tensors.push_back({t.name, t.type, t.n_dims, t.ne, std::span<const uint8_t>(f->TensorData(t), t.nbytes)});
    }
    GgufWriteOptions opts;
    opts.version = f->version();
    opts.alignment = f->alignment();
    absl::StatusOr<std::vector<uint8_t>> bytes = SerializeGguf(f->metadata(), tensors, opts);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    const std::string raw = test::ReadFile(m.path);
    ASSERT_EQ(bytes->size(), raw.size());
    EXPECT_EQ(std::memcmp(bytes->data(), raw.data(), raw.size()), 0);

    // WriteGguf streams the same bytes to disk.
    const std::string tmp = testing::TempDir() + "/roundtrip.gguf";
    ASSERT_TRUE(WriteGguf(tmp, f->metadata(), tensors, opts).ok());
    EXPECT_EQ(test::ReadFile(tmp), raw);
    std::remove(tmp.c_str());
  }
  // The vocab-only file has no trailing padding; the writer adds it, so only the metadata must agree.
  std::unique_ptr<GgufFile> v = MustOpen(DataPath("tokenizer/ggml-vocab-llama-spm.gguf"));
  ASSERT_NE(v, nullptr);
  absl::StatusOr<std::vector<uint8_t>> vb = SerializeGguf(v->metadata(), {});
  ASSERT_TRUE(vb.ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> back = GgufFile::FromBytes(*vb);
  ASSERT_TRUE(back.ok()) << back.status();
  const std::string raw = test::ReadFile(DataPath("tokenizer/ggml-vocab-llama-spm.gguf"));
  EXPECT_EQ(std::string(vb->begin(), vb->begin() + raw.size()), raw);
  EXPECT_EQ((*back)->metadata().size(), v->metadata().size());
}

void ExpectSameValue(const GgufValue& a, const GgufValue& b, const std::string& where) {
  ASSERT_EQ(a.type, b.type) << where;
  ASSERT_EQ(a.v.index(), b.v.index()) << where;
  if (const GgufArray* aa = a.AsArray()) {
    const GgufArray* ba = b.AsArray();
    ASSERT_EQ(aa->elem_type, ba->elem_type) << where;
    ASSERT_EQ(aa->items.size(), ba->items.size()) << where;
    for (size_t i = 0; i < aa->items.size(); ++i) ExpectSameValue(aa->items[i], ba->items[i], where + "[]");
  } else if (const double* d = std::get_if<double>(&a.v)) {
    const double e = std::get<double>(b.v);
    if (std::isnan(*d)) {
      EXPECT_TRUE(std::isnan(e)) << where;
    } else {
      EXPECT_EQ(std::memcmp(d, &e, sizeof e), 0) << where << ": " << *d << " vs " << e;  // -0.0 stays -0.0
    }
  } else {
    EXPECT_TRUE(a.v == b.v) << where;
  }
}

TEST(GgufWrite, EveryValueTypeRoundTrips) {
  static constexpr char kText[] = "h\xc3\xa9llo \xe2\x96\x81 with\nnewline and \0 nul";  // UTF-8 and a NUL
  auto val = [](GgufType t, auto x) { return GgufValue{t, x}; };
  std::vector<GgufKV> kvs = {
      {"u8", val(GgufType::kUint8, uint64_t{255})},
      {"i8", val(GgufType::kInt8, int64_t{-128})},
      {"u16", val(GgufType::kUint16, uint64_t{65535})},
      {"i16", val(GgufType::kInt16, int64_t{-32768})},
      {"u32", GgufU32(4294967295u)},
      {"i32", GgufI32(std::numeric_limits<int32_t>::min())},
      {"u64", val(GgufType::kUint64, std::numeric_limits<uint64_t>::max())},
      {"i64", val(GgufType::kInt64, std::numeric_limits<int64_t>::min())},
      {"f32", GgufF32(-0.0f)},
      {"f32_tiny", GgufF32(std::numeric_limits<float>::denorm_min())},
      {"f32_inf", GgufF32(std::numeric_limits<float>::infinity())},
      {"f32_nan", GgufF32(std::numeric_limits<float>::quiet_NaN())},
      {"f64", val(GgufType::kFloat64, 3.141592653589793)},
      {"bool_t", GgufBool(true)},
      {"bool_f", GgufBool(false)},
      {"str", GgufStr(std::string(kText, sizeof kText - 1))},
      {"str_empty", GgufStr("")},
      {"arr_empty", GgufArr(GgufType::kUint32, {})},
      {"arr_i16", GgufArr(GgufType::kInt16, {val(GgufType::kInt16, int64_t{-1}), val(GgufType::kInt16, int64_t{7})})},
      {"arr_str", GgufArr(GgufType::kString, {GgufStr("a"), GgufStr(""), GgufStr("ccc")})},
      {"arr_bool", GgufArr(GgufType::kBool, {GgufBool(true), GgufBool(false)})},
      {"arr_f64", GgufArr(GgufType::kFloat64, {val(GgufType::kFloat64, -1e300)})},
      {"arr_nested", GgufArr(GgufType::kArray, {GgufArr(GgufType::kString, {GgufStr("x")}),
                                                GgufArr(GgufType::kUint8, {val(GgufType::kUint8, uint64_t{9})}),
                                                GgufArr(GgufType::kArray, {GgufArr(GgufType::kInt64, {})})})},
  };
  for (uint32_t version : {2u, 3u}) {
    GgufWriteOptions opts;
    opts.version = version;
    absl::StatusOr<std::vector<uint8_t>> bytes = SerializeGguf(kvs, {}, opts);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(*bytes);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->version(), version);
    ASSERT_EQ((*f)->metadata().size(), kvs.size());
    for (size_t i = 0; i < kvs.size(); ++i) {
      EXPECT_EQ((*f)->metadata()[i].key, kvs[i].key);  // same order
      ExpectSameValue((*f)->metadata()[i].value, kvs[i].value, kvs[i].key);
    }
    // Writing what was read gives the same bytes again.
    absl::StatusOr<std::vector<uint8_t>> again = SerializeGguf((*f)->metadata(), {}, opts);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *bytes);
  }
  // Hand-checked layout of one value: u16 65535 under key "k" is 4+4+8+8 header, 8+1 key, 4 type, 2 value.
  absl::StatusOr<std::vector<uint8_t>> one = SerializeGguf({{"k", val(GgufType::kUint16, uint64_t{65535})}}, {});
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 64u);  // 39 bytes padded to 32
  const std::vector<uint8_t> want = {'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0, 0,   0, 0, 0, 1, 0,    0,   0,
                                     0,   0,   0,   0,   1, 0, 0, 0, 0, 0, 0, 0, 'k', 2, 0, 0, 0, 0xff, 0xff};
  EXPECT_EQ(std::vector<uint8_t>(one->begin(), one->begin() + 39), want);
}

TEST(GgufValueTest, AccessorsConvertOnlyWithoutLoss) {
  const GgufValue big{GgufType::kUint64, std::numeric_limits<uint64_t>::max()};
  EXPECT_EQ(big.AsInt(), std::nullopt);
  EXPECT_EQ(big.AsUint(), std::numeric_limits<uint64_t>::max());
  const GgufValue neg = GgufI32(-5);
  EXPECT_EQ(neg.AsInt(), -5);
  EXPECT_EQ(neg.AsUint(), std::nullopt);
  EXPECT_EQ(neg.AsFloat(), -5.0);
  const GgufValue s = GgufStr("7");
  EXPECT_EQ(s.AsInt(), std::nullopt);
  EXPECT_EQ(s.AsFloat(), std::nullopt);
  EXPECT_EQ(s.AsArray(), nullptr);
  EXPECT_EQ(GgufF32(2.5f).AsInt(), std::nullopt);
  EXPECT_EQ(GgufBool(true).AsInt(), 1);
  EXPECT_EQ(GgufTypeName(GgufType::kFloat64), "FLOAT64");
}

TEST(GgufWrite, AlignmentOptionAndVersion2) {
  const test::TinyModel m = test::MakeTinyModel();
  GgufWriteOptions opts;
  opts.alignment = 64;
  opts.version = 2;
  absl::StatusOr<std::vector<uint8_t>> bytes = SerializeGguf(m.metadata, m.WriteList(), opts);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(*bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->version(), 2u);
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->data_offset() % 64, 0u);
  ASSERT_NE((*f)->Find("general.alignment"), nullptr);
  EXPECT_EQ((*f)->Find("general.alignment")->type, GgufType::kUint32);
  ASSERT_EQ((*f)->tensors().size(), m.tensors.size());
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const GgufTensorInfo& t = (*f)->tensors()[i];
    EXPECT_EQ(t.name, m.tensors[i].name);
    EXPECT_EQ(t.offset % 64, 0u);
    ASSERT_EQ(t.nbytes, m.tensors[i].data.size());
    EXPECT_EQ(std::memcmp((*f)->TensorData(t), m.tensors[i].data.data(), t.nbytes), 0) << t.name;
  }
}

// A produced tensor (filled by a callback just before it is written) gives the same file as one passed as data.
TEST(GgufWrite, ProducedTensorsMatchDataTensors) {
  const test::TinyModel m = test::MakeTinyModel();
  const std::vector<GgufWriteTensor> plain = m.WriteList();
  std::vector<GgufWriteTensor> produced = plain;
  int calls = 0;
  for (size_t i = 0; i < produced.size(); ++i) {
    produced[i].data = {};
    produced[i].produce = [&, i](uint8_t* dst, size_t bytes) -> absl::Status {
      ++calls;
      if (bytes != m.tensors[i].data.size()) return absl::InternalError("wrong size");
      std::memcpy(dst, m.tensors[i].data.data(), bytes);
      return absl::OkStatus();
    };
  }
  absl::StatusOr<std::vector<uint8_t>> want = SerializeGguf(m.metadata, plain);
  absl::StatusOr<std::vector<uint8_t>> got = SerializeGguf(m.metadata, produced);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status();
  EXPECT_EQ(*got, *want);
  EXPECT_EQ(calls, static_cast<int>(plain.size()));
  const std::string tmp = testing::TempDir() + "/produced.gguf";
  ASSERT_TRUE(WriteGguf(tmp, m.metadata, produced).ok());
  EXPECT_EQ(test::ReadFile(tmp), std::string(want->begin(), want->end()));
  // A failing producer fails the write.
  produced[3].produce = [](uint8_t*, size_t) { return absl::InternalError("producer failed"); };
  EXPECT_FALSE(WriteGguf(tmp, m.metadata, produced).ok());
  EXPECT_FALSE(SerializeGguf(m.metadata, produced).ok());
  std::remove(tmp.c_str());
}

TEST(GgufWrite, RejectsInconsistentInput) {
  test::TinyModel m = test::MakeTinyModel();
  std::vector<GgufWriteTensor> ts = m.WriteList();
  ts[0].data = ts[0].data.subspan(1);  // one byte short
  EXPECT_FALSE(SerializeGguf(m.metadata, ts).ok());
  ts = m.WriteList();
  ts[1].name = ts[0].name;
  EXPECT_FALSE(SerializeGguf(m.metadata, ts).ok());
  ts = m.WriteList();
  ts[0].n_dims = 5;
  EXPECT_FALSE(SerializeGguf(m.metadata, ts).ok());
  std::vector<GgufKV> dup = m.metadata;
  dup.push_back(dup[0]);
  EXPECT_FALSE(SerializeGguf(dup, {}).ok());
  GgufWriteOptions bad;
  bad.alignment = 48;
  EXPECT_FALSE(SerializeGguf(m.metadata, {}, bad).ok());
  // An array item whose type differs from the array's element type.
  EXPECT_FALSE(SerializeGguf({{"a", GgufArr(GgufType::kUint32, {GgufI32(1)})}}, {}).ok());
  // general.alignment that disagrees with the option.
  EXPECT_FALSE(SerializeGguf({{"general.alignment", GgufU32(64)}}, {}).ok());
  EXPECT_TRUE(SerializeGguf({{"general.alignment", GgufU32(32)}}, {}).ok());
}

TEST(GgufRead, OpenErrorsNameThePath) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open("/nonexistent/x.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(std::string(f.status().message()).find("/nonexistent/x.gguf"), std::string::npos);
  const std::string empty = testing::TempDir() + "/empty.gguf";
  std::fclose(std::fopen(empty.c_str(), "wb"));
  f = GgufFile::Open(empty);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(std::string(f.status().message()).find("empty"), std::string::npos);
  std::remove(empty.c_str());
  f = GgufFile::Open(testing::TempDir());
  EXPECT_FALSE(f.ok());
}

}  // namespace
}  // namespace tandem

// Hostile input: a table of malformed files, each made from a small valid file by truncating it or patching
// one field. Each must be rejected with a message naming what is wrong, and `tandem inspect` on it must exit
// non-zero with exactly one `error: ` line on stderr. Then truncations and byte flips of a real model.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <random>

#include "core/gguf.h"
#include "arch/model_config.h"
#include "core/status.h"
#include "tests/core/tiny_gguf.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using Bytes = std::vector<uint8_t>;
using test::MakeTinyModel;
using test::TinyModel;

// Byte offsets of every field of a well-formed file (only ever run on files the writer made).
struct Layout {
  std::vector<uint64_t> kv_key, kv_type, kv_value;
  std::vector<uint64_t> ti_name, ti_ndims, ti_ne, ti_type, ti_offset;
  uint64_t infos_end = 0, data_offset = 0;
};

template <typename T>
T Get(const Bytes& b, uint64_t at) {
  T x;
  std::memcpy(&x, b.data() + at, sizeof x);
  return x;
}
template <typename T>
void Put(Bytes& b, uint64_t at, T x) {
  std::memcpy(b.data() + at, &x, sizeof x);
}

uint64_t SkipValue(const Bytes& b, uint32_t type, uint64_t at) {
  static constexpr uint64_t kSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  if (type == 8) return at + 8 + Get<uint64_t>(b, at);
  if (type == 9) {
    const uint32_t et = Get<uint32_t>(b, at);
    const uint64_t n = Get<uint64_t>(b, at + 4);
    at += 12;
    for (uint64_t i = 0; i < n; ++i) at = SkipValue(b, et, at);
    return at;
  }
  return at + kSize[type];
}

Layout Map(const Bytes& b) {
  Layout L;
  const uint64_t n_tensors = Get<uint64_t>(b, 8), n_kv = Get<uint64_t>(b, 16);
  uint64_t at = 24;
  for (uint64_t i = 0; i < n_kv; ++i) {
    L.kv_key.push_back(at);
    at += 8 + Get<uint64_t>(b, at);
    L.kv_type.push_back(at);
    const uint32_t t = Get<uint32_t>(b, at);
    at += 4;
    L.kv_value.push_back(at);
    at = SkipValue(b, t, at);
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    L.ti_name.push_back(at);
    at += 8 + Get<uint64_t>(b, at);
    L.ti_ndims.push_back(at);
    const uint32_t nd = Get<uint32_t>(b, at);
    at += 4;
    L.ti_ne.push_back(at);
    at += 8 * nd;
    L.ti_type.push_back(at);
    at += 4;
    L.ti_offset.push_back(at);
    at += 8;
  }
  L.infos_end = at;
  L.data_offset = (at + 31) / 32 * 32;
  return L;
}

// The base: a 2-layer dense model with a vocab, a bool key and an explicit general.alignment, with a general.name
// padded so that the tensor infos end mid-way through an alignment block (the padding is then >= 2 bytes).
struct Base {
  TinyModel model;
  Bytes bytes;
  Layout at;
  size_t Key(const std::string& k) const {
    for (size_t i = 0; i < model.metadata.size(); ++i) {
      if (model.metadata[i].key == k) return i;
    }
    ADD_FAILURE() << "no key " << k;
    return 0;
  }
  size_t Tensor(const std::string& n) const {
    for (size_t i = 0; i < model.tensors.size(); ++i) {
      if (model.tensors[i].name == n) return i;
    }
    ADD_FAILURE() << "no tensor " << n;
    return 0;
  }
};

const Base& TheBase() {
  static const Base* base = [] {
    auto* b = new Base;
    b->model = MakeTinyModel();
    b->model.SetKey("general.alignment", GgufU32(32));
    b->model.SetKey("tokenizer.ggml.add_bos_token", GgufBool(true));
    std::string name = "tiny-test";
    do {
      b->model.SetKey("general.name", GgufStr(name));
      b->bytes = b->model.Bytes();
      b->at = Map(b->bytes);
      name += "x";
    } while (b->at.infos_end % 32 < 8 || b->at.infos_end % 32 > 24);
    return b;
  }();
  return *base;
}

Bytes Cut(uint64_t n) {
  const Bytes& b = TheBase().bytes;
  return Bytes(b.begin(), b.begin() + static_cast<long>(n));
}
template <typename T>
Bytes Patched(uint64_t at, T v) {
  Bytes b = TheBase().bytes;
  Put<T>(b, at, v);
  return b;
}
Bytes FromModel(const std::function<void(TinyModel&)>& mutate, test::TinySpec spec = {}) {
  TinyModel m = MakeTinyModel(spec);
  mutate(m);
  return m.Bytes();
}

// Either the reader rejects the bytes, or the config check does: returns that message ("" if both accept).
std::string RejectionOf(const Bytes& b) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(b);
  if (!f.ok()) return Message(f.status());
  absl::StatusOr<ModelConfig> c = LoadModelConfig(**f);
  if (!c.ok()) return Message(c.status());
  return "";
}

struct Case {
  std::string name;
  std::function<Bytes()> make;
  std::string expect;
};

std::vector<Case> Cases() {
  const Base& B = TheBase();
  const Layout& L = B.at;
  const size_t tok = B.Key("tokenizer.ggml.tokens"), name = B.Key("general.name");
  const size_t blocks = B.Key("llama.block_count"), align = B.Key("general.alignment");
  const size_t boolkey = B.Key("tokenizer.ggml.add_bos_token"), eos = B.Key("tokenizer.ggml.eos_token_id");
  const size_t k = B.Tensor("blk.0.attn_k.weight"), q = B.Tensor("blk.0.attn_q.weight");
  const size_t norm = B.Tensor("blk.0.attn_norm.weight"), last = L.ti_name.size() - 1;
  const uint64_t data_size = B.bytes.size() - L.data_offset;
  test::TinySpec moe;
  moe.n_expert = 4;
  moe.n_expert_used = 2;
  std::vector<Case> cases = {
      // ---- truncated inside every section ----
      {"cut_magic", [] { return Cut(2); }, "header: magic"},
      {"cut_version", [] { return Cut(6); }, "header: version"},
      {"cut_tensor_count", [] { return Cut(12); }, "header: tensor_count"},
      {"cut_kv_count", [] { return Cut(20); }, "header: kv_count"},
      {"cut_kv_key_length", [=] { return Cut(L.kv_key[1] + 3); }, "metadata entry 1: key length"},
      {"cut_kv_key", [=] { return Cut(L.kv_key[1] + 8 + 3); }, "metadata entry 1: key"},
      {"cut_kv_type", [=] { return Cut(L.kv_type[blocks] + 2); }, "key 'llama.block_count': value type"},
      {"cut_kv_value", [=] { return Cut(L.kv_value[blocks] + 1); }, "key 'llama.block_count'"},
      {"cut_string_value", [=] { return Cut(L.kv_value[name] + 8 + 2); }, "key 'general.name': string"},
      {"cut_array_header", [=] { return Cut(L.kv_value[tok] + 6); }, "key 'tokenizer.ggml.tokens': array count"},
      {"cut_array_items", [=] { return Cut(L.kv_value[tok] + 12 + 200); }, "key 'tokenizer.ggml.tokens'"},
      {"cut_tensor_name", [=] { return Cut(L.ti_name[k] + 8 + 4); }, Cat("tensor info ", k, ": name")},
      {"cut_tensor_ndims", [=] { return Cut(L.ti_ndims[k] + 2); }, "tensor 'blk.0.attn_k.weight': n_dims"},
      {"cut_tensor_ne", [=] { return Cut(L.ti_ne[k] + 9); }, "tensor 'blk.0.attn_k.weight': ne[1]"},
      {"cut_tensor_type", [=] { return Cut(L.ti_type[k] + 1); }, "tensor 'blk.0.attn_k.weight': type"},
      {"cut_tensor_offset", [=] { return Cut(L.ti_offset[last] + 3); }, "tensor 'output.weight': offset"},
      {"cut_padding", [=] { return Cut(L.infos_end + 1); }, "padding"},
      {"cut_data", [=] { return Cut(L.data_offset + 100); }, "runs past end of file"},
      {"cut_last_byte", [=] { return Cut(TheBase().bytes.size() - 1); }, "runs past end of file"},
      // ---- huge counts and lengths ----
      {"huge_kv_count", [] { return Patched<uint64_t>(16, uint64_t{1} << 62); }, "header: kv_count"},
      {"huge_tensor_count", [] { return Patched<uint64_t>(8, ~uint64_t{0}); }, "header: tensor_count"},
      {"huge_key_length", [=] { return Patched<uint64_t>(L.kv_key[0], ~uint64_t{0}); }, "metadata entry 0: key"},
      {"long_key", [=] { return Patched<uint64_t>(L.kv_key[0], 70000); }, "exceeds the limit"},
      {"huge_string_length", [=] { return Patched<uint64_t>(L.kv_value[name], uint64_t{1} << 40); },
       "key 'general.name': string"},
      {"huge_array_count", [=] { return Patched<uint64_t>(L.kv_value[tok] + 4, uint64_t{1} << 61); },
       "key 'tokenizer.ggml.tokens': array count"},
      {"huge_name_length", [=] { return Patched<uint64_t>(L.ti_name[0], uint64_t{1} << 50); }, "tensor info 0: name"},
      // ---- invalid type ids ----
      {"bad_value_type", [=] { return Patched<uint32_t>(L.kv_type[blocks], 13); }, "unknown value type 13"},
      {"bad_array_elem_type", [=] { return Patched<uint32_t>(L.kv_value[tok], 99); }, "unknown array element type 99"},
      {"bad_tensor_type", [=] { return Patched<uint32_t>(L.ti_type[q], 4); },
       "tensor 'blk.0.attn_q.weight': unknown or unsupported type id 4"},
      {"bad_tensor_type_max", [=] { return Patched<uint32_t>(L.ti_type[q], ~uint32_t{0}); }, "type id 4294967295"},
      {"bad_bool", [=] { return Patched<uint8_t>(L.kv_value[boolkey], 2); }, "bool value 2"},
      {"bad_magic", [] { return Patched<uint32_t>(0, 0x46554747u ^ 0x20); }, "bad magic"},
      {"version_1", [] { return Patched<uint32_t>(4, 1); }, "version 1"},
      {"version_4", [] { return Patched<uint32_t>(4, 4); }, "unknown GGUF version 4"},
      {"big_endian", [] { return Patched<uint32_t>(4, 0x03000000u); }, "big-endian"},
      // ---- offsets ----
      {"offset_past_end", [=] { return Patched<uint64_t>(L.ti_offset[last], (data_size + 31) / 32 * 32 + 32); },
       "runs past end of file"},
      {"offset_misaligned",
       [=] { return Patched<uint64_t>(L.ti_offset[q], Get<uint64_t>(TheBase().bytes, L.ti_offset[q]) + 4); },
       "not a multiple of the alignment 32"},
      {"offset_wraps", [=] { return Patched<uint64_t>(L.ti_offset[q], ~uint64_t{31}); }, "wraps around"},
      {"overlap", [=] { return Patched<uint64_t>(L.ti_offset[q], Get<uint64_t>(TheBase().bytes, L.ti_offset[norm])); },
       "overlaps"},
      // ---- dimensions ----
      {"ndims_0", [=] { return Patched<uint32_t>(L.ti_ndims[q], 0); }, "n_dims 0"},
      {"ndims_5", [=] { return Patched<uint32_t>(L.ti_ndims[q], 5); }, "n_dims 5"},
      {"ne_0", [=] { return Patched<uint64_t>(L.ti_ne[q] + 8, 0); }, "tensor 'blk.0.attn_q.weight': ne[1] is 0"},
      {"ne_product_overflow",
       [=] {
         Bytes b = Patched<uint64_t>(L.ti_ne[q], uint64_t{1} << 40);
         Put<uint64_t>(b, L.ti_ne[q] + 8, uint64_t{1} << 40);
         return b;
       },
       "element count overflows"},
      {"ne_over_int64", [=] { return Patched<uint64_t>(L.ti_ne[norm], uint64_t{1} << 63); }, "overflows"},
      {"nbytes_overflow", [=] { return Patched<uint64_t>(L.ti_ne[norm], uint64_t{1} << 62); }, "byte size overflows"},
      {"row_not_block_multiple",
       [=] {
         Bytes b = Patched<uint32_t>(L.ti_type[norm], 8);  // Q8_0, block 32
         Put<uint64_t>(b, L.ti_ne[norm], 48);
         return b;
       },
       "not a multiple of Q8_0's block size 32"},
      // ---- duplicates ----
      {"duplicate_tensor",
       [=] {
         Bytes b = TheBase().bytes;
         b[L.ti_name[k] + 8 + std::strlen("blk.0.attn_")] = 'q';  // attn_k -> attn_q
         return b;
       },
       "tensor 'blk.0.attn_q.weight': duplicate tensor name"},
      {"duplicate_key",
       [=] {
         Bytes b = TheBase().bytes;
         b[L.kv_key[eos] + 8 + std::strlen("tokenizer.ggml.")] = 'b';  // eos_token_id -> bos_token_id
         return b;
       },
       "key 'tokenizer.ggml.bos_token_id': duplicate key"},
      // ---- general.alignment ----
      {"alignment_type", [=] { return Patched<uint32_t>(L.kv_type[align], 5); },
       "key 'general.alignment': type INT32, expected UINT32"},
      {"alignment_48", [=] { return Patched<uint32_t>(L.kv_value[align], 48); }, "not a power of two"},
      {"alignment_0", [=] { return Patched<uint32_t>(L.kv_value[align], 0); }, "not a power of two"},
      {"alignment_1M", [=] { return Patched<uint32_t>(L.kv_value[align], 1u << 20); },
       "not a multiple of the alignment 1048576"},
      // ---- structure the writer cannot make ----
      {"nested_too_deep",
       [] {
         Bytes b = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
         auto u32 = [&](uint32_t x) {
           b.insert(b.end(), reinterpret_cast<uint8_t*>(&x), reinterpret_cast<uint8_t*>(&x) + 4);
         };
         auto u64 = [&](uint64_t x) {
           b.insert(b.end(), reinterpret_cast<uint8_t*>(&x), reinterpret_cast<uint8_t*>(&x) + 8);
         };
         u64(0);  // tensors
         u64(1);  // kvs
         u64(1);
         b.push_back('k');
         u32(9);  // array
         for (int i = 0; i < 20; ++i) {
           u32(9);  // of arrays
           u64(1);
         }
         u32(0);
         u64(0);
         return b;
       },
       "nested deeper"},
      // ---- hyperparameters and tensors (the file parses; the config check rejects it) ----
      {"heads_not_dividing",
       [] { return FromModel([](TinyModel& m) { m.SetKey("llama.attention.head_count", GgufU32(5)); }); },
       "llama.attention.head_count"},
      {"kv_heads_not_dividing",
       [] { return FromModel([](TinyModel& m) { m.SetKey("llama.attention.head_count_kv", GgufU32(3)); }); },
       "llama.attention.head_count_kv"},
      {"expert_used_gt_count",
       [moe] { return FromModel([](TinyModel& m) { m.SetKey("llama.expert_used_count", GgufU32(9)); }, moe); },
       "llama.expert_used_count"},
      {"bos_out_of_range",
       [] { return FromModel([](TinyModel& m) { m.SetKey("tokenizer.ggml.bos_token_id", GgufU32(1000)); }); },
       "tokenizer.ggml.bos_token_id"},
      {"missing_tensor", [] { return FromModel([](TinyModel& m) { m.EraseTensor("blk.1.attn_v.weight"); }); },
       "missing tensor 'blk.1.attn_v.weight'"},
      {"missing_key", [] { return FromModel([](TinyModel& m) { m.EraseKey("llama.embedding_length"); }); },
       "missing required key 'llama.embedding_length'"},
      {"wrong_shape",
       [] { return FromModel([](TinyModel& m) {
              m.SetTensor("blk.1.ffn_up.weight", DType::kF32, {64, 32});
            }); },
       "tensor 'blk.1.ffn_up.weight': shape [64, 32], expected [32, 64]"},
      {"vocab_length",
       [] {
         return FromModel([](TinyModel& m) { m.SetKey("tokenizer.ggml.scores", GgufArr(GgufType::kFloat32, {})); });
       },
       "tokenizer.ggml.scores"},
  };
  return cases;
}

TEST(GgufHostile, BaseFileIsValid) {
  const Base& B = TheBase();
  ASSERT_FALSE(B.bytes.empty());
  EXPECT_EQ(RejectionOf(B.bytes), "");
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(B.bytes);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->data_offset(), B.at.data_offset);  // the test's own layout map agrees with the reader
  EXPECT_GE(B.at.data_offset - B.at.infos_end, 8u);
}

TEST(GgufHostile, EveryMalformedFileIsRejectedByReaderAndInspect) {
  const std::string dir = testing::TempDir();
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const Bytes bytes = c.make();
    ASSERT_FALSE(bytes.empty());
    const std::string why = RejectionOf(bytes);
    ASSERT_NE(why, "") << "accepted";
    EXPECT_NE(why.find(c.expect), std::string::npos) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;

    const std::string path = dir + "/hostile_" + c.name + ".gguf";
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
    for (const char* flags : {"", " --json"}) {
      const test::CmdResult r = test::RunCommand(test::TandemBin() + " inspect '" + path + "'" + flags);
      EXPECT_NE(r.exit_code, 0) << flags;
      EXPECT_EQ(r.out, "") << flags;
      ASSERT_FALSE(r.err.empty()) << flags;
      EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
      EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "exactly one line: " << r.err;
      EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
    }
    std::remove(path.c_str());
  }
}

// Every byte of stories260K is needed (its data ends at the end of the file), so every proper prefix must be
// rejected: the first 4 KiB byte by byte, the rest of the metadata and tensor infos every 3 bytes, then a
// spread through the data.
TEST(GgufHostile, TruncatedRealModelIsAlwaysRejected) {
  const std::string raw = test::ReadFile(test::ModelPath("stories260K.gguf"));
  ASSERT_EQ(raw.size(), 1185376u);
  const auto* p = reinterpret_cast<const uint8_t*>(raw.data());
  absl::StatusOr<std::unique_ptr<GgufFile>> whole = GgufFile::FromBytes({p, raw.size()});
  ASSERT_TRUE(whole.ok());
  const uint64_t head = (*whole)->data_offset();
  std::vector<uint64_t> cuts;
  for (uint64_t n = 0; n <= head + 64; n += (n < 4096 ? 1 : 3)) cuts.push_back(n);
  for (uint64_t n = head + 64; n < raw.size(); n += 9973) cuts.push_back(n);
  cuts.push_back(raw.size() - 1);
  for (uint64_t n : cuts) {
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes({p, n});
    ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes accepted";
    ASSERT_FALSE(f.status().message().empty());
  }
}

// Random byte flips in the header, metadata and tensor infos of the tiny base file: any outcome but a crash is
// fine; whatever parses must still hold consistent tensors and pass or fail the config check cleanly.
TEST(GgufHostile, ByteFlipsNeverCrash) {
  Bytes b = TheBase().bytes;
  const uint64_t head = TheBase().at.data_offset;
  std::mt19937_64 rng(260);
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 4000; ++i) {
    const int n_flips = 1 + static_cast<int>(rng() % 4);
    std::vector<std::pair<uint64_t, uint8_t>> undo;
    for (int j = 0; j < n_flips; ++j) {
      const uint64_t at = rng() % head;
      undo.push_back({at, b[at]});
      b[at] = static_cast<uint8_t>(rng());
    }
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(b);
    if (f.ok()) {
      ++accepted;
      for (const GgufTensorInfo& t : (*f)->tensors()) {
        ASSERT_LE(t.offset + t.nbytes, (*f)->file_size() - (*f)->data_offset()) << t.name;
      }
      absl::StatusOr<ModelConfig> c = LoadModelConfig(**f);
      EXPECT_TRUE(c.ok() || !c.status().message().empty());
    } else {
      ++rejected;
      EXPECT_EQ(Message(f.status()).find('\n'), std::string::npos);
    }
    for (auto it = undo.rbegin(); it != undo.rend(); ++it) b[it->first] = it->second;
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(accepted, 0);  // flips inside token strings and float values are harmless
}

}  // namespace
}  // namespace tandem

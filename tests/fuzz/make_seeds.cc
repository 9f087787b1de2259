// Writes the fuzzer's seed files: tiny valid models of each layout (dense, merged MoE, per-expert MoE, quantized,
// tied output, v2 with alignment 64), a metadata-only file with every value type, and a few truncated files.
// Usage: gguf_fuzz_seeds OUT_DIR
#include <cstdio>
#include <string>
#include <vector>

#include "tests/core/tiny_gguf.h"

namespace {

using namespace tandem;
using tandem::test::MakeTinyModel;
using tandem::test::TinySpec;

bool Save(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

TinySpec Small() {
  TinySpec s;  // the smallest shapes that still exercise GQA, RoPE and a vocab
  s.n_layer = 1;
  s.n_embd = 8;
  s.n_ff = 16;
  s.n_head = 2;
  s.n_head_kv = 1;
  s.n_vocab = 8;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 1;
  }
  const std::string dir = argv[1];
  std::vector<std::pair<std::string, std::vector<uint8_t>>> seeds;

  const std::vector<uint8_t> dense = MakeTinyModel(Small()).Bytes();
  seeds.push_back({"dense-f32.gguf", dense});
  TinySpec moe = Small();
  moe.n_expert = 2;
  moe.n_expert_used = 1;
  seeds.push_back({"moe-merged.gguf", MakeTinyModel(moe).Bytes()});
  moe.legacy_experts = true;
  seeds.push_back({"moe-legacy.gguf", MakeTinyModel(moe).Bytes()});
  TinySpec tied = Small();
  tied.tied_output = true;
  tied.with_vocab = false;
  seeds.push_back({"tied-novocab.gguf", MakeTinyModel(tied).Bytes()});
  TinySpec q = Small();
  q.n_embd = 32;
  q.n_ff = 32;
  q.n_head = 4;
  q.n_head_kv = 2;
  q.weight_type = DType::kQ8_0;
  seeds.push_back({"dense-q8_0.gguf", MakeTinyModel(q).Bytes()});
  GgufWriteOptions v2;
  v2.version = 2;
  v2.alignment = 64;
  seeds.push_back({"dense-v2-align64.gguf", MakeTinyModel(Small()).Bytes(v2)});

  auto val = [](GgufType t, auto x) { return GgufValue{t, x}; };
  const std::vector<GgufKV> all_types = {
      {"u8", val(GgufType::kUint8, uint64_t{200})},
      {"i8", val(GgufType::kInt8, int64_t{-3})},
      {"u16", val(GgufType::kUint16, uint64_t{7})},
      {"i16", val(GgufType::kInt16, int64_t{-7})},
      {"u32", GgufU32(9)},
      {"i32", GgufI32(-9)},
      {"u64", val(GgufType::kUint64, uint64_t{1} << 40)},
      {"i64", val(GgufType::kInt64, int64_t{-1})},
      {"f32", GgufF32(0.5f)},
      {"f64", val(GgufType::kFloat64, 0.25)},
      {"b", GgufBool(true)},
      {"s", GgufStr("text")},
      {"nested", GgufArr(GgufType::kArray, {GgufArr(GgufType::kString, {GgufStr("x"), GgufStr("")}),
                                            GgufArr(GgufType::kInt8, {val(GgufType::kInt8, int64_t{1})})})},
  };
  absl::StatusOr<std::vector<uint8_t>> meta = SerializeGguf(all_types, {});
  if (!meta.ok()) return 1;
  seeds.push_back({"metadata-all-types.gguf", *meta});

  // Truncated copies of the dense model: in the header, in the metadata, in the tensor infos, in the data.
  for (size_t cut : {size_t{20}, dense.size() / 8, dense.size() / 3, dense.size() - 5}) {
    seeds.push_back({"dense-cut-" + std::to_string(cut) + ".gguf",
                     std::vector<uint8_t>(dense.begin(), dense.begin() + static_cast<long>(cut))});
  }
  size_t total = 0;
  for (const auto& [name, bytes] : seeds) {
    if (bytes.empty() || !Save(dir + "/" + name, bytes)) {
      std::fprintf(stderr, "cannot write %s\n", name.c_str());
      return 1;
    }
    total += bytes.size();
  }
  std::printf("%zu seeds, %zu bytes\n", seeds.size(), total);
  return 0;
}

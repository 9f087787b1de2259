#include "tools/synth.h"

#include <omp.h>

#include <cmath>
#include <functional>
#include <vector>

#include "arch/arch.h"
#include "runtime/rope_scaling.h"
#include "core/gguf.h"
#include "core/quant.h"
#include "core/status.h"

namespace tandem::cli {
namespace {

// splitmix64: a fast, well-mixed stream per (seed, tensor, row), so files are identical for any thread count.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Approximately N(0, 1): four U(0,1) sum to mean 2 and variance 1/3; centre and scale by sqrt(3).
  float Normal() {
    const uint64_t a = Next(), b = Next();
    const float u = static_cast<float>(a & 0xffffffffu) + static_cast<float>(a >> 32) +
                    static_cast<float>(b & 0xffffffffu) + static_cast<float>(b >> 32);
    return (u * (1.0f / 4294967296.0f) - 2.0f) * 1.7320508f;
  }
};

uint64_t HashName(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

struct TensorSpec {
  std::string name;
  int n_dims;
  std::array<int64_t, 4> ne;
  DType type;
  TensorRole role;
};

// Fills `dst` (the tensor's bytes) row by row: N(0, 1/fan_in) matrices, 1 + 0.05 N norms, 0.02 N biases, then
// quantized.
absl::Status Produce(const TensorSpec& t, uint64_t seed, uint8_t* dst) {
  const int64_t cols = t.ne[0];
  const int64_t rows = t.ne[1] * t.ne[2] * t.ne[3];
  const size_t row_bytes = RowBytes(t.type, cols);
  const bool norm = t.role == TensorRole::kNorm || t.role == TensorRole::kRopeFactors;
  const float scale = norm ? 0.05f : t.role == TensorRole::kBias ? 0.02f : 1.0f / std::sqrt(static_cast<float>(cols));
  const uint64_t base = seed ^ HashName(t.name);
  absl::Status first_error;
#pragma omp parallel
  {
    std::vector<float> row(cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      Rng rng{base + static_cast<uint64_t>(r) * 0x632be59bd9b4e019ull};
      for (int64_t c = 0; c < cols; ++c) row[c] = (norm ? 1.0f : 0.0f) + scale * rng.Normal();
      absl::Status st = QuantizeRow(t.type, row.data(), dst + r * row_bytes, cols, QuantizeEffort::kFast);
      if (!st.ok()) {
#pragma omp critical
        first_error = st;
      }
    }
  }
  return first_error;
}

// A SentencePiece-style vocab llama.cpp accepts: <unk>, <s>, </s>, the 256 byte tokens, then filler pieces.
void AddVocab(std::vector<GgufKV>& kv, int n_vocab) {
  std::vector<GgufValue> tokens, scores, types;
  tokens.reserve(n_vocab);
  auto add = [&](std::string piece, float score, int32_t type) {
    tokens.push_back(GgufStr(std::move(piece)));
    scores.push_back(GgufF32(score));
    types.push_back(GgufI32(type));
  };
  add("<unk>", 0, 2);
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  for (int b = 0; b < 256 && static_cast<int>(tokens.size()) < n_vocab; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0, 6);
  }
  for (int i = 0; static_cast<int>(tokens.size()) < n_vocab; ++i) {
    add(Cat("\xE2\x96\x81t", i), -static_cast<float>(i), 1);
  }
  kv.push_back({"tokenizer.ggml.model", GgufStr("llama")});
  kv.push_back({"tokenizer.ggml.tokens", GgufArr(GgufType::kString, std::move(tokens))});
  kv.push_back({"tokenizer.ggml.scores", GgufArr(GgufType::kFloat32, std::move(scores))});
  kv.push_back({"tokenizer.ggml.token_type", GgufArr(GgufType::kInt32, std::move(types))});
  kv.push_back({"tokenizer.ggml.bos_token_id", GgufU32(1)});
  kv.push_back({"tokenizer.ggml.eos_token_id", GgufU32(2)});
  kv.push_back({"tokenizer.ggml.unknown_token_id", GgufU32(0)});
}

}  // namespace

SynthOptions SynthDefaults(const std::string& arch) {
  SynthOptions o;
  o.arch = arch;
  if (arch == "llama") {  // Llama-2-7B
    o.n_ff = 11008;
    o.n_head_kv = 32;
    o.n_expert = 0;
    o.n_expert_used = 0;
    o.n_ctx = 4096;
    o.rope_freq_base = 10000.0f;
  }
  return o;
}

absl::Status WriteSyntheticModel(const SynthOptions& o) {
  if (o.arch != "llama" && o.arch != "mixtral") return InvalidArgument("--arch must be llama or mixtral");
  if (o.output.empty()) return InvalidArgument("synth needs -o FILE");
  if (o.n_layer < 1 || o.n_embd < 1 || o.n_ff < 1 || o.n_head < 1 || o.n_head_kv < 1 || o.n_vocab < 259) {
    return InvalidArgument("synth: layers, sizes and heads must be positive and the vocab at least 259");
  }
  if (o.n_embd % o.n_head != 0 || o.n_head % o.n_head_kv != 0) {
    return InvalidArgument("synth: --embd ", o.n_embd, " must divide by --heads ", o.n_head,
                           ", which must divide by --kv-heads ", o.n_head_kv);
  }
  const bool moe = o.arch == "mixtral";
  if (moe && (o.n_expert < 1 || o.n_expert_used < 1 || o.n_expert_used > o.n_expert)) {
    return InvalidArgument("synth: need 1 <= --experts-used <= --experts");
  }
  if (!CanQuantize(o.type)) return InvalidArgument("synth cannot write type ", DTypeName(o.type));
  const int64_t block = Traits(o.type).block_elems;
  if (o.n_embd % block != 0 || o.n_ff % block != 0) {
    return InvalidArgument("synth: --embd and --ff must be multiples of ", block, " for ", DTypeName(o.type));
  }

  // The model as its family sees it; the family's keys and schema say what the file holds.
  const Architecture& arch = *FindArchitecture("llama");  // Mixtral files are llama-family files with experts
  ModelConfig c;
  c.arch = std::string(arch.name());
  c.n_layer = o.n_layer;
  c.n_embd = o.n_embd;
  c.n_ff = o.n_ff;
  c.n_ff_expert = moe ? o.n_ff : 0;
  c.n_head = o.n_head;
  c.n_head_kv = o.n_head_kv;
  c.head_dim = o.n_embd / o.n_head;
  c.n_rot = c.head_dim;
  c.n_ctx_train = o.n_ctx;
  c.n_vocab = o.n_vocab;
  c.n_expert = moe ? o.n_expert : 0;
  c.n_expert_used = moe ? o.n_expert_used : 0;
  c.rms_eps = 1e-5f;
  c.rope_freq_base = o.rope_freq_base;

  std::vector<GgufKV> kv;
  const uint32_t file_type = o.type == DType::kF32 ? 0 : o.type == DType::kF16 ? 1 : o.type == DType::kQ4_0 ? 2
                           : o.type == DType::kQ8_0 ? 7 : o.type == DType::kQ4_K ? 15 : o.type == DType::kQ5_K ? 17
                           : o.type == DType::kQ6_K ? 18 : o.type == DType::kBF16 ? 32 : 0;
  kv.push_back({"general.architecture", GgufStr(c.arch)});
  kv.push_back({"general.name", GgufStr(Cat("tandem-synth-", o.arch, "-", o.n_layer, "L-", DTypeName(o.type)))});
  kv.push_back({"general.file_type", GgufU32(file_type)});
  kv.push_back({"general.quantization_version", GgufU32(2)});
  for (const HParam& p : arch.hparams()) {
    double v = 0;
    if (!HParamWritten(p, c, &v)) continue;
    const std::string key = Cat(c.arch, ".", p.key);
    kv.push_back({key, p.int_field != nullptr ? GgufU32(static_cast<uint32_t>(v)) : GgufF32(static_cast<float>(v))});
  }
  kv.push_back({Cat(c.arch, ".vocab_size"), GgufU32(o.n_vocab)});
  AddVocab(kv, o.n_vocab);

  // Every tensor the schema wants, the head untied, in unit order: embeddings, each layer's, the output's. The
  // RoPE factors when asked for: Llama 3.1's scaling, computed as the converter computes them.
  const std::vector<float> rope_factors =
      o.llama3_rope ? Llama3RopeFreqFactors(c.n_rot, c.rope_freq_base, 8.0f, 1.0f, 4.0f, 8192) : std::vector<float>();
  std::vector<TensorSpec> specs;
  auto add = [&](const TensorEntry& e, int layer) {
    const bool extra = e.role == TensorRole::kRopeFactors && o.llama3_rope;
    if (!EntryWanted(e, c) && e.fallback.empty() && !extra) return;
    TensorSpec t{.name = TensorName(e.name, layer), .n_dims = e.n_dims, .ne = {1, 1, 1, 1},
                 .type = e.role == TensorRole::kMatrix ? o.type : DType::kF32, .role = e.role};
    for (int d = 0; d < e.n_dims; ++d) t.ne[d] = DimValue(e.shape[d], c);
    specs.push_back(std::move(t));
  };
  for (const TensorEntry& e : arch.schema()) {
    if (!e.per_layer() && e.unit != UnitKind::kOutput) add(e, -1);
  }
  for (int il = 0; il < o.n_layer; ++il) {
    for (const TensorEntry& e : arch.schema()) {
      if (e.per_layer()) add(e, il);
    }
  }
  for (const TensorEntry& e : arch.schema()) {
    if (!e.per_layer() && e.unit == UnitKind::kOutput) add(e, -1);
  }

  std::vector<GgufWriteTensor> tensors;
  tensors.reserve(specs.size());
  for (const TensorSpec& s : specs) {
    GgufWriteTensor t{.name = s.name, .type = s.type, .n_dims = s.n_dims, .ne = s.ne};
    if (s.role == TensorRole::kRopeFactors) {
      t.data = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(rope_factors.data()),
                                        rope_factors.size() * sizeof(float));
    } else if (o.zeros) {
      t.zeros = true;
    } else {
      t.produce = [&s, seed = o.seed](uint8_t* dst, size_t) { return Produce(s, seed, dst); };
    }
    tensors.push_back(std::move(t));
  }
  return WriteGguf(o.output, kv, tensors);
}

}  // namespace tandem::cli

#include "tools/synth.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
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
absl::Status Produce(const TensorSpec& t, uint64_t seed, float router_skew, uint8_t* dst) {
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
      // A router row's spread sets how often its expert wins the top-k: a wider one, more often.
      const float skew = t.role == TensorRole::kRouter && rows > 1
                             ? 1.0f + router_skew * (1.0f - static_cast<float>(r) / static_cast<float>(rows - 1))
                             : 1.0f;
      for (int64_t c = 0; c < cols; ++c) row[c] = (norm ? 1.0f : 0.0f) + skew * scale * rng.Normal();
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

// The tokenizer keys of a real vocabulary's vocab-only GGUF, its token arrays padded to n_vocab as llama.cpp's
// converter pads them ("[PAD<id>]", unused), ids from vocab_keep on padded too.
absl::Status AddRealVocab(std::vector<GgufKV>& kv, const SynthOptions& o) {
  std::string path = o.vocab_file;
  if (path.empty()) {
    const char* dir = std::getenv("TANDEM_VOCAB_DIR");
    path = Cat(dir != nullptr ? dir : TANDEM_VOCAB_DIR, "/", o.vocab, ".gguf");
  }
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  if (!file.ok()) {
    return FailedPrecondition("synth --arch ", o.shape, " writes the real '", o.vocab, "' vocabulary, read from ", path, ": ",
                    file.status().message(), " (tools/make_vocab_gguf.py --out DIR builds it; the build puts it in ",
                    TANDEM_VOCAB_DIR, "; --vocab-file or TANDEM_VOCAB_DIR point elsewhere)");
  }
  const GgufValue* tokens = (*file)->Find("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->AsArray() == nullptr) return InvalidArgument(path, ": no tokenizer.ggml.tokens");
  const size_t n_file = tokens->AsArray()->items.size();
  const size_t keep = o.vocab_keep > 0 ? static_cast<size_t>(o.vocab_keep) : n_file;
  if (keep > n_file || keep > static_cast<size_t>(o.n_vocab)) {
    return InvalidArgument("synth: the vocabulary in ", path, " has ", n_file, " tokens, the shape keeps ", keep,
                           " of them in ", o.n_vocab);
  }
  for (const GgufKV& k : (*file)->metadata()) {
    if (!k.key.starts_with("tokenizer.")) continue;
    GgufValue v = k.value;
    const bool per_token = k.key == "tokenizer.ggml.tokens" || k.key == "tokenizer.ggml.token_type" ||
                           k.key == "tokenizer.ggml.scores";
    if (per_token && v.AsArray() != nullptr) {
      std::vector<GgufValue> items = v.AsArray()->items;
      const GgufType elem = v.AsArray()->elem_type;
      items.resize(keep);
      for (size_t id = keep; id < static_cast<size_t>(o.n_vocab); ++id) {
        items.push_back(k.key == "tokenizer.ggml.tokens"       ? GgufStr(Cat("[PAD", id, "]"))
                        : k.key == "tokenizer.ggml.token_type" ? GgufI32(5)
                                                               : GgufF32(0));
      }
      v = GgufArr(elem, std::move(items));
    } else if (k.key.ends_with("_token_id") && v.AsInt() && *v.AsInt() >= static_cast<int64_t>(keep)) {
      continue;  // a special token the smaller vocabulary lacks
    }
    kv.push_back({k.key, std::move(v)});
  }
  return absl::OkStatus();
}

}  // namespace

// Real shapes, from the models' config.json files. The Llama 3 ones carry Llama 3's RoPE scaling (factor 8 for 3.1,
// 32 for 3.2); Qwen2.5 keeps the 151665 tokens it has of the Qwen3 vocabulary and pads to its 152064 rows.
const SynthShape kShapes[] = {
    {"mixtral-8x7b", "mixtral",
     {.shape = "mixtral-8x7b", .arch = "llama", .n_layer = 32, .n_embd = 4096, .n_ff = 14336,
      .n_head = 32, .n_head_kv = 8, .n_expert = 8, .n_expert_used = 2, .n_vocab = 32000, .n_ctx = 32768,
      .rope_freq_base = 1e6f}},
    {"llama-2-7b", "llama",
     {.shape = "llama-2-7b", .arch = "llama", .n_layer = 32, .n_embd = 4096, .n_ff = 11008, .n_head = 32,
      .n_head_kv = 32, .n_vocab = 32000, .n_ctx = 4096, .rope_freq_base = 1e4f}},
    {"llama-3.1-8b", "llama3",
     {.shape = "llama-3.1-8b", .arch = "llama", .n_layer = 32, .n_embd = 4096, .n_ff = 14336, .n_head = 32,
      .n_head_kv = 8, .n_vocab = 128256, .n_ctx = 131072, .rope_freq_base = 5e5f, .llama3_rope_factor = 8,
      .vocab = "llama3"}},
    {"llama-3.1-70b", "",
     {.shape = "llama-3.1-70b", .arch = "llama", .n_layer = 80, .n_embd = 8192, .n_ff = 28672, .n_head = 64,
      .n_head_kv = 8, .n_vocab = 128256, .n_ctx = 131072, .rope_freq_base = 5e5f, .llama3_rope_factor = 8,
      .vocab = "llama3"}},
    {"llama-3.2-1b", "",
     {.shape = "llama-3.2-1b", .arch = "llama", .n_layer = 16, .n_embd = 2048, .n_ff = 8192, .n_head = 32,
      .n_head_kv = 8, .head_dim = 64, .n_vocab = 128256, .n_ctx = 131072, .rope_freq_base = 5e5f,
      .llama3_rope_factor = 32, .tied_output = true, .vocab = "llama3"}},
    {"qwen2.5-7b", "qwen2",
     {.shape = "qwen2.5-7b", .arch = "qwen2", .n_layer = 28, .n_embd = 3584, .n_ff = 18944, .n_head = 28,
      .n_head_kv = 4, .head_dim = 128, .n_vocab = 152064, .n_ctx = 32768, .rope_freq_base = 1e6f, .rms_eps = 1e-6f,
      .vocab = "qwen3", .vocab_keep = 151665}},
    {"qwen3-8b", "qwen3",
     {.shape = "qwen3-8b", .arch = "qwen3", .n_layer = 36, .n_embd = 4096, .n_ff = 12288, .n_head = 32,
      .n_head_kv = 8, .head_dim = 128, .n_vocab = 151936, .n_ctx = 40960, .rope_freq_base = 1e6f, .rms_eps = 1e-6f,
      .vocab = "qwen3"}},
    {"qwen3-30b-a3b", "qwen3moe",
     {.shape = "qwen3-30b-a3b", .arch = "qwen3moe", .n_layer = 48, .n_embd = 2048, .n_ff = 6144, .n_ff_expert = 768,
      .n_head = 32, .n_head_kv = 4, .head_dim = 128, .n_expert = 128, .n_expert_used = 8, .n_vocab = 151936,
      .n_ctx = 40960, .rope_freq_base = 1e6f, .rms_eps = 1e-6f, .vocab = "qwen3"}},
    {"qwen1.5-moe-a2.7b", "qwen2moe",
     {.shape = "qwen1.5-moe-a2.7b", .arch = "qwen2moe", .n_layer = 24, .n_embd = 2048, .n_ff = 5632,
      .n_ff_expert = 1408, .n_ff_shexp = 5632, .n_head = 16, .n_head_kv = 16, .n_expert = 60, .n_expert_used = 4,
      .n_vocab = 151936, .n_ctx = 8192, .rope_freq_base = 1e6f, .rms_eps = 1e-6f, .vocab = "qwen3",
      .vocab_keep = 151646}},
    {"qwen2-57b-a14b", "",
     {.shape = "qwen2-57b-a14b", .arch = "qwen2moe", .n_layer = 28, .n_embd = 3584, .n_ff = 18944,
      .n_ff_expert = 2560, .n_ff_shexp = 20480, .n_head = 28, .n_head_kv = 4, .n_expert = 64, .n_expert_used = 8,
      .n_vocab = 151936, .n_ctx = 32768, .rope_freq_base = 1e6f, .rms_eps = 1e-6f, .vocab = "qwen3",
      .vocab_keep = 151646}},
    {"gpt-oss-20b", "gpt-oss",
     {.shape = "gpt-oss-20b", .arch = "gpt-oss", .n_layer = 24, .n_embd = 2880, .n_ff = 2880, .n_ff_expert = 2880,
      .n_head = 64, .n_head_kv = 8, .head_dim = 64, .n_expert = 32, .n_expert_used = 4, .n_vocab = 201088,
      .n_ctx = 131072, .rope_freq_base = 150000.0f, .yarn_factor = 32, .yarn_orig_ctx = 4096, .n_swa = 128,
      .vocab = "o200k_harmony"}},
    {"gpt-oss-120b", "",
     {.shape = "gpt-oss-120b", .arch = "gpt-oss", .n_layer = 36, .n_embd = 2880, .n_ff = 2880, .n_ff_expert = 2880,
      .n_head = 64, .n_head_kv = 8, .head_dim = 64, .n_expert = 128, .n_expert_used = 4, .n_vocab = 201088,
      .n_ctx = 131072, .rope_freq_base = 150000.0f, .yarn_factor = 32, .yarn_orig_ctx = 4096, .n_swa = 128,
      .vocab = "o200k_harmony"}},
    {"qwen3-235b-a22b", "",
     {.shape = "qwen3-235b-a22b", .arch = "qwen3moe", .n_layer = 94, .n_embd = 4096, .n_ff = 12288,
      .n_ff_expert = 1536, .n_head = 64, .n_head_kv = 4, .head_dim = 128, .n_expert = 128, .n_expert_used = 8,
      .n_vocab = 151936, .n_ctx = 40960, .rope_freq_base = 1e6f, .rms_eps = 1e-6f, .vocab = "qwen3"}},
};

std::span<const SynthShape> SynthShapes() { return kShapes; }

const SynthShape* FindSynthShape(std::string_view name) {
  for (const SynthShape& s : kShapes) {
    if (s.name == name || (!s.alias.empty() && s.alias == name)) return &s;
  }
  return nullptr;
}

absl::StatusOr<SynthWritten> WriteSyntheticModel(const SynthOptions& o) {
  const Architecture* family = FindArchitecture(o.arch);
  if (family == nullptr) return InvalidArgument("synth: no architecture module '", o.arch, "'");
  if (o.output.empty()) return InvalidArgument("synth needs -o FILE");
  const int head_dim = o.head_dim > 0 ? o.head_dim : o.n_head > 0 ? o.n_embd / o.n_head : 0;
  if (o.n_layer < 1 || o.n_embd < 1 || o.n_ff < 1 || o.n_head < 1 || o.n_head_kv < 1 || head_dim < 1 ||
      (o.vocab.empty() && o.n_vocab < 259)) {
    return InvalidArgument("synth: layers, sizes and heads must be positive and the vocab at least 259");
  }
  if ((o.head_dim == 0 && o.n_embd % o.n_head != 0) || o.n_head % o.n_head_kv != 0) {
    return InvalidArgument("synth: --embd ", o.n_embd, " must divide by --heads ", o.n_head,
                           " (or give --head-dim), which must divide by --kv-heads ", o.n_head_kv);
  }
  const bool moe = o.n_expert > 0;
  if (moe && (o.n_expert_used < 1 || o.n_expert_used > o.n_expert)) {
    return InvalidArgument("synth: need 1 <= --experts-used <= --experts");
  }
  if (!CanQuantize(o.type)) return InvalidArgument("synth cannot write type ", DTypeName(o.type));
  // A mix picks each matrix's type and falls back where a block does not divide a row, as llama.cpp does.
  const int64_t block = o.mix ? 1 : Traits(o.type).block_elems;
  const int n_ff_expert = moe ? (o.n_ff_expert > 0 ? o.n_ff_expert : o.n_ff) : 0;
  const bool shared_expert = std::any_of(family->schema().begin(), family->schema().end(), [](const TensorEntry& e) {
    return std::find(e.shape.begin(), e.shape.end(), Dim::kFfShexp) != e.shape.end();
  });
  const int n_ff_shexp = shared_expert ? (o.n_ff_shexp > 0 ? o.n_ff_shexp : o.n_ff) : 0;
  if (o.n_embd % block != 0 || o.n_ff % block != 0 || n_ff_expert % block != 0 || n_ff_shexp % block != 0 ||
      (static_cast<int64_t>(o.n_head) * head_dim) % block != 0) {
    return InvalidArgument("synth: --embd, --ff, --expert-ff, --shared-ff and heads * head_dim must be multiples of ",
                           block,
                           " for ", DTypeName(o.type));
  }

  // The model as its family sees it; the family's keys and schema say what the file holds.
  const Architecture& arch = *family;
  ModelConfig c;
  c.arch = std::string(arch.name());
  c.n_layer = o.n_layer;
  c.n_embd = o.n_embd;
  c.n_ff = o.n_ff;
  c.n_ff_expert = n_ff_expert;
  c.n_ff_shexp = n_ff_shexp;
  c.n_head = o.n_head;
  c.n_head_kv = o.n_head_kv;
  c.head_dim = head_dim;
  c.n_rot = c.head_dim;
  c.n_ctx_train = o.n_ctx;
  c.n_vocab = o.n_vocab;
  c.n_expert = moe ? o.n_expert : 0;
  c.n_expert_used = moe ? o.n_expert_used : 0;
  c.rms_eps = o.rms_eps;
  c.n_swa = o.n_swa;
  c.rope_freq_base = o.rope_freq_base;
  std::vector<GgufKV> kv;
  const uint32_t file_type = o.mix ? QuantMixFileType(*o.mix) : o.type == DType::kF32 ? 0 : o.type == DType::kF16 ? 1 : o.type == DType::kQ4_0 ? 2
                           : o.type == DType::kQ8_0 ? 7 : o.type == DType::kQ4_K ? 15 : o.type == DType::kQ5_K ? 17
                           : o.type == DType::kQ6_K ? 18 : o.type == DType::kBF16 ? 32
                           : o.type == DType::kMXFP4 ? 38 : 0;  // llama.cpp's LLAMA_FTYPE_MOSTLY_MXFP4_MOE
  kv.push_back({"general.architecture", GgufStr(c.arch)});
  kv.push_back({"general.name", GgufStr(Cat("tandem-synth-", o.shape, "-", o.n_layer, "L-",
                                            o.mix ? QuantMixName(*o.mix) : DTypeName(o.type)))});
  kv.push_back({"general.file_type", GgufU32(file_type)});
  kv.push_back({"general.quantization_version", GgufU32(2)});
  for (const HParam& p : arch.hparams()) {
    double v = 0;
    if (!HParamWritten(p, c, &v)) continue;
    const std::string key = Cat(c.arch, ".", p.key);
    kv.push_back({key, p.int_field != nullptr ? GgufU32(static_cast<uint32_t>(v)) : GgufF32(static_cast<float>(v))});
  }
  if (o.yarn_factor > 0) {
    kv.push_back({Cat(c.arch, ".rope.scaling.type"), GgufStr("yarn")});
    kv.push_back({Cat(c.arch, ".rope.scaling.factor"), GgufF32(o.yarn_factor)});
    if (o.yarn_orig_ctx > 0) {
      kv.push_back({Cat(c.arch, ".rope.scaling.original_context_length"), GgufU32(o.yarn_orig_ctx)});
    }
  }
  // Values as wide as keys: llama.cpp reads their width apart and defaults it to n_embd / n_head.
  kv.push_back({Cat(c.arch, ".attention.value_length"), GgufU32(static_cast<uint32_t>(c.head_dim))});
  kv.push_back({Cat(c.arch, ".vocab_size"), GgufU32(o.n_vocab)});
  if (o.vocab.empty()) {
    AddVocab(kv, o.n_vocab);
  } else {
    TANDEM_RETURN_IF_ERROR(AddRealVocab(kv, o));
  }

  // Every tensor the schema wants, in unit order: embeddings, each layer's, the output's; the head unless tied. The
  // RoPE factors when asked for: Llama 3's scaling (low 1, high 4, original context 8192), computed as the
  // converter computes them.
  const bool llama3_rope = o.llama3_rope_factor > 0;
  const std::vector<float> rope_factors =
      llama3_rope ? Llama3RopeFreqFactors(c.n_rot, c.rope_freq_base, o.llama3_rope_factor, 1.0f, 4.0f, 8192)
                  : std::vector<float>();
  std::vector<TensorSpec> specs;
  auto add = [&](const TensorEntry& e, int layer) {
    const bool extra = e.role == TensorRole::kRopeFactors && llama3_rope;
    if (!EntryWanted(e, c) && (e.fallback.empty() || o.tied_output) && !extra) return;
    TensorSpec t{.name = TensorName(e.name, layer), .n_dims = e.n_dims, .ne = {1, 1, 1, 1},
                 .type = e.role == TensorRole::kMatrix ? o.type : DType::kF32, .role = e.role};
    for (int d = 0; d < e.n_dims; ++d) t.ne[d] = DimValue(e.shape[d], c);
    if (o.mix && e.role == TensorRole::kMatrix) {
      // As ggml counts them: trailing dimensions of 1 do not count ([n_embd, 1] is a vector to the quantizer).
      int n_dims = e.n_dims;
      while (n_dims > 1 && t.ne[n_dims - 1] == 1) --n_dims;
      t.type = QuantMixType(*o.mix, {.name = t.name, .layer = layer, .n_layer = c.n_layer, .n_expert = c.n_expert,
                                     .n_head = c.n_head, .n_head_kv = c.n_head_kv, .row_elems = t.ne[0],
                                     .n_dims = n_dims, .arch = c.arch, .tied_output = o.tied_output});
    }
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

  SynthWritten written{.n_tensors = specs.size()};
  for (const TensorSpec& s : specs) written.tensor_bytes += RowBytes(s.type, s.ne[0]) * s.ne[1] * s.ne[2] * s.ne[3];
  uint64_t done = 0;
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
      t.produce = [&s, &o, &done, &written](uint8_t* dst, size_t bytes) {
        absl::Status st = Produce(s, o.seed, o.router_skew, dst);
        done += bytes;
        if (st.ok() && o.progress) o.progress(done, written.tensor_bytes);
        return st;
      };
    }
    tensors.push_back(std::move(t));
  }
  TANDEM_RETURN_IF_ERROR(WriteGguf(o.output, kv, tensors));
  // Zero-filled and given tensors are written without a call: the bar ends at 100 % all the same.
  if (o.progress && done < written.tensor_bytes) o.progress(written.tensor_bytes, written.tensor_bytes);
  return written;
}

}  // namespace tandem::cli

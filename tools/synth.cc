#include "tools/synth.h"

#include <omp.h>

#include <cmath>
#include <functional>
#include <vector>

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
  enum Init { kMatrix, kNorm } init;
};

// Fills `dst` (the tensor's bytes) row by row: N(0, 1/fan_in) matrices or 1 + 0.05 N norms, then quantized.
absl::Status Produce(const TensorSpec& t, uint64_t seed, uint8_t* dst) {
  const int64_t cols = t.ne[0];
  const int64_t rows = t.ne[1] * t.ne[2] * t.ne[3];
  const size_t row_bytes = RowBytes(t.type, cols);
  const float scale = t.init == TensorSpec::kNorm ? 0.05f : 1.0f / std::sqrt(static_cast<float>(cols));
  const uint64_t base = seed ^ HashName(t.name);
  absl::Status first_error;
#pragma omp parallel
  {
    std::vector<float> row(cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      Rng rng{base + static_cast<uint64_t>(r) * 0x632be59bd9b4e019ull};
      for (int64_t c = 0; c < cols; ++c) {
        row[c] = (t.init == TensorSpec::kNorm ? 1.0f : 0.0f) + scale * rng.Normal();
      }
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
  const int head_dim = o.n_embd / o.n_head;
  const int64_t kv_dim = static_cast<int64_t>(o.n_head_kv) * head_dim;

  std::vector<GgufKV> kv;
  const uint32_t file_type = o.type == DType::kF32 ? 0 : o.type == DType::kF16 ? 1 : o.type == DType::kQ4_0 ? 2
                           : o.type == DType::kQ8_0 ? 7 : o.type == DType::kQ4_K ? 15 : o.type == DType::kQ5_K ? 17
                           : o.type == DType::kQ6_K ? 18 : o.type == DType::kBF16 ? 32 : 0;
  kv.push_back({"general.architecture", GgufStr("llama")});
  kv.push_back({"general.name", GgufStr(Cat("tandem-synth-", o.arch, "-", o.n_layer, "L-", DTypeName(o.type)))});
  kv.push_back({"general.file_type", GgufU32(file_type)});
  kv.push_back({"general.quantization_version", GgufU32(2)});
  kv.push_back({"llama.block_count", GgufU32(o.n_layer)});
  kv.push_back({"llama.context_length", GgufU32(o.n_ctx)});
  kv.push_back({"llama.embedding_length", GgufU32(o.n_embd)});
  kv.push_back({"llama.feed_forward_length", GgufU32(o.n_ff)});
  kv.push_back({"llama.attention.head_count", GgufU32(o.n_head)});
  kv.push_back({"llama.attention.head_count_kv", GgufU32(o.n_head_kv)});
  kv.push_back({"llama.rope.dimension_count", GgufU32(head_dim)});
  kv.push_back({"llama.rope.freq_base", GgufF32(o.rope_freq_base)});
  kv.push_back({"llama.attention.layer_norm_rms_epsilon", GgufF32(1e-5f)});
  kv.push_back({"llama.vocab_size", GgufU32(o.n_vocab)});
  if (moe) {
    kv.push_back({"llama.expert_count", GgufU32(o.n_expert)});
    kv.push_back({"llama.expert_used_count", GgufU32(o.n_expert_used)});
  }
  AddVocab(kv, o.n_vocab);

  std::vector<TensorSpec> specs;
  auto mat = [&](std::string name, int64_t in, int64_t out, int64_t n_exp = 1) {
    specs.push_back({std::move(name), n_exp > 1 ? 3 : 2, {in, out, n_exp, 1}, o.type, TensorSpec::kMatrix});
  };
  auto norm = [&](std::string name, int64_t n) {
    specs.push_back({std::move(name), 1, {n, 1, 1, 1}, DType::kF32, TensorSpec::kNorm});
  };
  mat("token_embd.weight", o.n_embd, o.n_vocab);
  for (int il = 0; il < o.n_layer; ++il) {
    const std::string b = Cat("blk.", il, ".");
    norm(b + "attn_norm.weight", o.n_embd);
    mat(b + "attn_q.weight", o.n_embd, o.n_embd);
    mat(b + "attn_k.weight", o.n_embd, kv_dim);
    mat(b + "attn_v.weight", o.n_embd, kv_dim);
    mat(b + "attn_output.weight", o.n_embd, o.n_embd);
    norm(b + "ffn_norm.weight", o.n_embd);
    if (moe) {
      specs.push_back({b + "ffn_gate_inp.weight", 2, {o.n_embd, o.n_expert, 1, 1}, DType::kF32, TensorSpec::kMatrix});
      mat(b + "ffn_gate_exps.weight", o.n_embd, o.n_ff, o.n_expert);
      mat(b + "ffn_up_exps.weight", o.n_embd, o.n_ff, o.n_expert);
      mat(b + "ffn_down_exps.weight", o.n_ff, o.n_embd, o.n_expert);
    } else {
      mat(b + "ffn_gate.weight", o.n_embd, o.n_ff);
      mat(b + "ffn_up.weight", o.n_embd, o.n_ff);
      mat(b + "ffn_down.weight", o.n_ff, o.n_embd);
    }
  }
  norm("output_norm.weight", o.n_embd);
  mat("output.weight", o.n_embd, o.n_vocab);

  std::vector<GgufWriteTensor> tensors;
  tensors.reserve(specs.size());
  for (const TensorSpec& s : specs) {
    GgufWriteTensor t{.name = s.name, .type = s.type, .n_dims = s.n_dims, .ne = s.ne};
    if (o.zeros) {
      t.zeros = true;
    } else {
      t.produce = [&s, seed = o.seed](uint8_t* dst, size_t) { return Produce(s, seed, dst); };
    }
    tensors.push_back(std::move(t));
  }
  return WriteGguf(o.output, kv, tensors);
}

}  // namespace tandem::cli

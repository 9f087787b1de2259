// Llama-family hyperparameters: read from metadata, then checked against every tensor the model needs, so that
// later code can index weights by these numbers without re-checking.
#include "core/model_config.h"

#include <cmath>
#include <optional>
#include <set>

#include "absl/strings/numbers.h"
#include "core/status.h"

namespace tandem {
namespace {

constexpr int64_t kMaxCount = int64_t{1} << 20;  // layers, widths, heads, experts
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxContext = int64_t{1} << 24;

class Reader {
 public:
  Reader(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}
  std::string Key(std::string_view suffix) const { return Cat(arch_, ".", suffix); }

  // An integer key, stored as any integer type, in [lo, hi]. nullopt when absent.
  absl::StatusOr<std::optional<int64_t>> Int(const std::string& key, int64_t lo, int64_t hi) const {
    const GgufValue* v = f_.Find(key);
    if (!v) return std::optional<int64_t>();
    const std::optional<int64_t> x = v->AsInt();
    if (!x) {
      if (v->AsUint())
        return InvalidArgument("key '", key, "': ", *v->AsUint(), " is out of range [", lo, ", ", hi, "]");
      return InvalidArgument("key '", key, "': type ", GgufTypeName(v->type), ", expected an integer");
    }
    if (*x < lo || *x > hi) return InvalidArgument("key '", key, "': ", *x, " is out of range [", lo, ", ", hi, "]");
    return std::optional<int64_t>(*x);
  }
  absl::StatusOr<int> RequiredInt(const std::string& key, int64_t lo, int64_t hi) const {
    TANDEM_ASSIGN_OR_RETURN(std::optional<int64_t> x, Int(key, lo, hi));
    if (!x) return InvalidArgument("missing required key '", key, "'");
    return static_cast<int>(*x);
  }
  absl::StatusOr<int> OptionalInt(const std::string& key, int64_t lo, int64_t hi, int def) const {
    TANDEM_ASSIGN_OR_RETURN(std::optional<int64_t> x, Int(key, lo, hi));
    return x ? static_cast<int>(*x) : def;
  }
  // A float key (float32/float64; integers accepted), finite and in (lo, hi).
  absl::StatusOr<std::optional<double>> Float(const std::string& key, double lo, double hi) const {
    const GgufValue* v = f_.Find(key);
    if (!v) return std::optional<double>();
    const std::optional<double> x = v->AsFloat();
    if (!x) return InvalidArgument("key '", key, "': type ", GgufTypeName(v->type), ", expected a number");
    if (!std::isfinite(*x) || *x <= lo || *x >= hi) {
      return InvalidArgument("key '", key, "': ", *x, " is out of range (", lo, ", ", hi, ")");
    }
    return std::optional<double>(*x);
  }

 private:
  const GgufFile& f_;
  std::string arch_;
};

std::string ShapeStr(const std::array<int64_t, 4>& ne, int n_dims) {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) s += Cat(d ? ", " : "", ne[d]);
  return s + "]";
}

enum class Want { kF32, kAny };

// Checks that `name` exists with shape `shape` (ggml order; trailing 1s ignored) and, for norms/routers, F32.
class TensorChecker {
 public:
  explicit TensorChecker(const GgufFile& f) : f_(f) {}
  bool Has(const std::string& name) const { return f_.FindTensor(name) != nullptr; }

  absl::Status Check(const std::string& name, std::initializer_list<int64_t> shape, Want want, bool optional = false) {
    const GgufTensorInfo* t = f_.FindTensor(name);
    if (!t) {
      if (optional) return absl::OkStatus();
      return InvalidArgument("missing tensor '", name, "'");
    }
    used_.insert(name);
    std::array<int64_t, 4> expect = {1, 1, 1, 1};
    int i = 0;
    for (int64_t x : shape) expect[i++] = x;
    if (t->ne != expect) {
      return InvalidArgument("tensor '", name, "': shape ", ShapeStr(t->ne, t->n_dims), ", expected ",
                             ShapeStr(expect, static_cast<int>(shape.size())));
    }
    if (want == Want::kF32 && t->type != DType::kF32) {
      return InvalidArgument("tensor '", name, "': type ", DTypeName(t->type), ", expected F32");
    }
    // Q8_K is an activation format and Q8_1 has no weight kernels anywhere; neither appears in weight files.
    if (t->type == DType::kQ8_K || t->type == DType::kQ8_1) {
      return InvalidArgument("tensor '", name, "': type ", DTypeName(t->type), " is not supported for weights");
    }
    return absl::OkStatus();
  }
  absl::Status CheckAllUsed() const {
    for (const GgufTensorInfo& t : f_.tensors()) {
      if (!used_.count(t.name)) return InvalidArgument("unexpected tensor '", t.name, "'");
    }
    return absl::OkStatus();
  }

 private:
  const GgufFile& f_;
  std::set<std::string, std::less<>> used_;
};

absl::Status CheckVocabArrays(const GgufFile& file, int n_vocab) {
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
    const GgufValue* v = file.Find(key);
    if (!v) continue;
    const GgufArray* a = v->AsArray();
    if (!a) return InvalidArgument("key '", key, "': type ", GgufTypeName(v->type), ", expected an array");
    if (a->items.size() != static_cast<size_t>(n_vocab)) {
      return InvalidArgument("key '", key, "': ", a->items.size(),
                             " entries but token_embd.weight has n_vocab = ", n_vocab);
    }
  }
  const GgufValue* tokens = file.Find("tokenizer.ggml.tokens");
  if (tokens && tokens->AsArray()->elem_type != GgufType::kString) {
    return InvalidArgument("key 'tokenizer.ggml.tokens': element type ", GgufTypeName(tokens->AsArray()->elem_type),
                           ", expected STRING");
  }
  return absl::OkStatus();
}

absl::Status CheckTokenId(const GgufFile& file, const char* key, int n_vocab, int* out) {
  const GgufValue* v = file.Find(key);
  if (!v) return absl::OkStatus();
  const std::optional<int64_t> id = v->AsInt();
  if (!id) {
    if (v->AsUint())
      return InvalidArgument("key '", key, "': token id ", *v->AsUint(), " is out of range [0, ", n_vocab, ")");
    return InvalidArgument("key '", key, "': type ", GgufTypeName(v->type), ", expected an integer");
  }
  if (*id < 0 || *id >= n_vocab) {
    return InvalidArgument("key '", key, "': token id ", *id, " is out of range [0, ", n_vocab, ")");
  }
  *out = static_cast<int>(*id);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> LoadModelConfig(const GgufFile& file) {
  ModelConfig c;
  const GgufValue* arch = file.Find("general.architecture");
  if (!arch) return InvalidArgument("missing required key 'general.architecture'");
  if (!arch->AsString()) {
    return InvalidArgument("key 'general.architecture': type ", GgufTypeName(arch->type), ", expected STRING");
  }
  c.arch = *arch->AsString();
  if (c.arch != "llama") {
    return Unimplemented("key 'general.architecture': '", c.arch, "' is not supported (only 'llama')");
  }
  if (const GgufValue* name = file.Find("general.name"); name && name->AsString()) c.name = *name->AsString();

  const Reader r(file, c.arch);
  TANDEM_ASSIGN_OR_RETURN(c.n_layer, r.RequiredInt(r.Key("block_count"), 1, 4096));
  TANDEM_ASSIGN_OR_RETURN(c.n_embd, r.RequiredInt(r.Key("embedding_length"), 1, kMaxCount));
  TANDEM_ASSIGN_OR_RETURN(c.n_ff, r.RequiredInt(r.Key("feed_forward_length"), 1, kMaxCount));
  TANDEM_ASSIGN_OR_RETURN(c.n_head, r.RequiredInt(r.Key("attention.head_count"), 1, kMaxCount));
  TANDEM_ASSIGN_OR_RETURN(c.n_head_kv, r.OptionalInt(r.Key("attention.head_count_kv"), 1, kMaxCount, c.n_head));
  TANDEM_ASSIGN_OR_RETURN(c.n_ctx_train, r.RequiredInt(r.Key("context_length"), 1, kMaxContext));
  if (c.n_embd % c.n_head != 0) {
    return InvalidArgument("key '", r.Key("attention.head_count"), "': ", c.n_head,
                           " heads do not divide embedding_length ", c.n_embd);
  }
  if (c.n_head % c.n_head_kv != 0) {
    return InvalidArgument("key '", r.Key("attention.head_count_kv"), "': ", c.n_head_kv,
                           " KV heads do not divide head_count ", c.n_head);
  }
  c.head_dim = c.n_embd / c.n_head;
  TANDEM_ASSIGN_OR_RETURN(c.n_rot, r.OptionalInt(r.Key("rope.dimension_count"), 1, kMaxCount, c.head_dim));
  if (c.n_rot % 2 != 0 || c.n_rot > c.head_dim) {
    return InvalidArgument("key '", r.Key("rope.dimension_count"), "': ", c.n_rot,
                           " must be even and at most head_dim ", c.head_dim);
  }

  {
    TANDEM_ASSIGN_OR_RETURN(std::optional<double> eps, r.Float(r.Key("attention.layer_norm_rms_epsilon"), 0.0, 1.0));
    if (!eps) return InvalidArgument("missing required key '", r.Key("attention.layer_norm_rms_epsilon"), "'");
    c.rms_eps = static_cast<float>(*eps);
    TANDEM_ASSIGN_OR_RETURN(std::optional<double> base, r.Float(r.Key("rope.freq_base"), 0.0, 1e12));
    if (base) c.rope_freq_base = static_cast<float>(*base);
    TANDEM_ASSIGN_OR_RETURN(std::optional<double> scale, r.Float(r.Key("rope.scale_linear"), 0.0, 1e6));
    if (scale) c.rope_freq_scale = static_cast<float>(1.0 / *scale);
    // Newer files spell linear scaling rope.scaling.type = "linear" + rope.scaling.factor. Other kinds (yarn,
    // longrope) change RoPE in ways the engine does not implement, so they are refused rather than ignored.
    if (const GgufValue* type = file.Find(r.Key("rope.scaling.type"))) {
      const std::string* t = type->AsString();
      if (!t)
        return InvalidArgument("key '", r.Key("rope.scaling.type"), "': type ", GgufTypeName(type->type),
                               ", expected STRING");
      if (*t == "linear") {
        TANDEM_ASSIGN_OR_RETURN(std::optional<double> factor, r.Float(r.Key("rope.scaling.factor"), 0.0, 1e6));
        if (factor) c.rope_freq_scale = static_cast<float>(1.0 / *factor);
      } else if (*t != "none") {
        return Unimplemented("key '", r.Key("rope.scaling.type"), "': RoPE scaling '", *t, "' is not supported");
      }
    }
  }

  TANDEM_ASSIGN_OR_RETURN(c.n_expert, r.OptionalInt(r.Key("expert_count"), 0, 1 << 16, 0));
  TANDEM_ASSIGN_OR_RETURN(c.n_expert_used, r.OptionalInt(r.Key("expert_used_count"), 0, 1 << 16, 0));
  if (c.n_expert > 0 && (c.n_expert_used < 1 || c.n_expert_used > c.n_expert)) {
    return InvalidArgument("key '", r.Key("expert_used_count"), "': ", c.n_expert_used, " must be in [1, expert_count ",
                           c.n_expert, "]");
  }
  if (c.n_expert == 0 && c.n_expert_used != 0) {
    return InvalidArgument("key '", r.Key("expert_used_count"), "': ", c.n_expert_used, " without an expert_count");
  }

  // ---- tensors ----
  const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  if (!embd) return InvalidArgument("missing tensor 'token_embd.weight'");
  if (embd->n_dims != 2 || embd->ne[0] != c.n_embd) {
    return InvalidArgument("tensor 'token_embd.weight': shape ", ShapeStr(embd->ne, embd->n_dims), ", expected [",
                           c.n_embd, ", n_vocab]");
  }
  if (embd->ne[1] > kMaxVocab) {
    return InvalidArgument("tensor 'token_embd.weight': n_vocab ", embd->ne[1], " exceeds ", kMaxVocab);
  }
  c.n_vocab = static_cast<int>(embd->ne[1]);
  if (const GgufValue* vs = file.Find(r.Key("vocab_size"))) {
    if (vs->AsInt() != std::optional<int64_t>(c.n_vocab)) {
      return InvalidArgument("key '", r.Key("vocab_size"), "' disagrees with token_embd.weight's n_vocab ", c.n_vocab);
    }
  }

  TensorChecker tc(file);
  const int64_t E = c.n_embd, V = c.n_vocab, F = c.n_ff, X = c.n_expert;
  const int64_t Q = int64_t{c.n_head} * c.head_dim, KV = c.n_embd_kv();
  TANDEM_RETURN_IF_ERROR(tc.Check("token_embd.weight", {E, V}, Want::kAny));
  bool any_legacy = false, any_merged = false;
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = Cat("blk.", l, ".");
    TANDEM_RETURN_IF_ERROR(tc.Check(p + "attn_norm.weight", {E}, Want::kF32));
    TANDEM_RETURN_IF_ERROR(tc.Check(p + "attn_q.weight", {E, Q}, Want::kAny));
    TANDEM_RETURN_IF_ERROR(tc.Check(p + "attn_k.weight", {E, KV}, Want::kAny));
    TANDEM_RETURN_IF_ERROR(tc.Check(p + "attn_v.weight", {E, KV}, Want::kAny));
    TANDEM_RETURN_IF_ERROR(tc.Check(p + "attn_output.weight", {Q, E}, Want::kAny));
    TANDEM_RETURN_IF_ERROR(tc.Check(p + "ffn_norm.weight", {E}, Want::kF32));
    if (!c.is_moe()) {
      TANDEM_RETURN_IF_ERROR(tc.Check(p + "ffn_gate.weight", {E, F}, Want::kAny));
      TANDEM_RETURN_IF_ERROR(tc.Check(p + "ffn_up.weight", {E, F}, Want::kAny));
      TANDEM_RETURN_IF_ERROR(tc.Check(p + "ffn_down.weight", {F, E}, Want::kAny));
      continue;
    }
    TANDEM_RETURN_IF_ERROR(tc.Check(p + "ffn_gate_inp.weight", {E, X}, Want::kF32));
    if (tc.Has(p + "ffn_gate_exps.weight") || !tc.Has(p + "ffn_gate.0.weight")) {
      any_merged = true;
      TANDEM_RETURN_IF_ERROR(tc.Check(p + "ffn_gate_exps.weight", {E, F, X}, Want::kAny));
      TANDEM_RETURN_IF_ERROR(tc.Check(p + "ffn_up_exps.weight", {E, F, X}, Want::kAny));
      TANDEM_RETURN_IF_ERROR(tc.Check(p + "ffn_down_exps.weight", {F, E, X}, Want::kAny));
    } else {
      any_legacy = true;
      for (int e = 0; e < c.n_expert; ++e) {
        TANDEM_RETURN_IF_ERROR(tc.Check(Cat(p, "ffn_gate.", e, ".weight"), {E, F}, Want::kAny));
        TANDEM_RETURN_IF_ERROR(tc.Check(Cat(p, "ffn_up.", e, ".weight"), {E, F}, Want::kAny));
        TANDEM_RETURN_IF_ERROR(tc.Check(Cat(p, "ffn_down.", e, ".weight"), {F, E}, Want::kAny));
      }
    }
    if (any_legacy && any_merged) {
      return InvalidArgument("layer ", l, ": mixes merged ffn_*_exps and per-expert ffn_*.E tensors across layers");
    }
  }
  c.legacy_experts = any_legacy;
  TANDEM_RETURN_IF_ERROR(tc.Check("output_norm.weight", {E}, Want::kF32));
  c.tied_output = !tc.Has("output.weight");
  TANDEM_RETURN_IF_ERROR(tc.Check("output.weight", {E, V}, Want::kAny, /*optional=*/true));
  // Llama 3.x files carry rope frequency factors; accepted so such files load, see the report on rope scaling.
  TANDEM_RETURN_IF_ERROR(tc.Check("rope_freqs.weight", {c.n_rot / 2}, Want::kF32, /*optional=*/true));
  TANDEM_RETURN_IF_ERROR(tc.CheckAllUsed());

  // ---- vocab ----
  TANDEM_RETURN_IF_ERROR(CheckVocabArrays(file, c.n_vocab));
  TANDEM_RETURN_IF_ERROR(CheckTokenId(file, "tokenizer.ggml.bos_token_id", c.n_vocab, &c.bos_id));
  TANDEM_RETURN_IF_ERROR(CheckTokenId(file, "tokenizer.ggml.eos_token_id", c.n_vocab, &c.eos_id));
  return c;
}

}  // namespace tandem

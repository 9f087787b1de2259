#include "arch/hparams.h"

#include <cmath>
#include <optional>

#include "core/status.h"

namespace tandem {
namespace {

// An integer key, stored as any integer type, in [lo, hi]. nullopt when absent.
absl::StatusOr<std::optional<int64_t>> IntKey(const GgufFile& f, const std::string& key, int64_t lo, int64_t hi) {
  const GgufValue* v = f.Find(key);
  if (!v) return std::optional<int64_t>();
  const std::optional<int64_t> x = v->AsInt();
  if (!x) {
    if (v->AsUint()) return InvalidArgument("key '", key, "': ", *v->AsUint(), " is out of range [", lo, ", ", hi, "]");
    return InvalidArgument("key '", key, "': type ", GgufTypeName(v->type), ", expected an integer");
  }
  if (*x < lo || *x > hi) return InvalidArgument("key '", key, "': ", *x, " is out of range [", lo, ", ", hi, "]");
  return std::optional<int64_t>(*x);
}

absl::Status CheckTokenId(const GgufFile& file, const char* key, int n_vocab, int* out) {
  const GgufValue* v = file.Find(key);
  if (!v) return absl::OkStatus();
  const std::optional<int64_t> id = v->AsInt();
  if (!id) {
    if (v->AsUint()) return InvalidArgument("key '", key, "': token id ", *v->AsUint(), " is out of range [0, ", n_vocab, ")");
    return InvalidArgument("key '", key, "': type ", GgufTypeName(v->type), ", expected an integer");
  }
  if (*id < 0 || *id >= n_vocab) {
    return InvalidArgument("key '", key, "': token id ", *id, " is out of range [0, ", n_vocab, ")");
  }
  *out = static_cast<int>(*id);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<const std::string*> StringKey(const GgufFile& file, const std::string& key) {
  const GgufValue* v = file.Find(key);
  if (!v) return static_cast<const std::string*>(nullptr);
  if (!v->AsString()) return InvalidArgument("key '", key, "': type ", GgufTypeName(v->type), ", expected STRING");
  return v->AsString();
}

absl::StatusOr<std::optional<double>> FloatKey(const GgufFile& file, const std::string& key, double lo, double hi) {
  const GgufValue* v = file.Find(key);
  if (!v) return std::optional<double>();
  const std::optional<double> x = v->AsFloat();
  if (!x) return InvalidArgument("key '", key, "': type ", GgufTypeName(v->type), ", expected a number");
  if (!std::isfinite(*x) || *x <= lo || *x >= hi) {
    return InvalidArgument("key '", key, "': ", *x, " is out of range (", lo, ", ", hi, ")");
  }
  return std::optional<double>(*x);
}

absl::Status ReadHParams(const GgufFile& file, std::span<const HParam> params, ModelConfig& cfg) {
  for (const HParam& p : params) {
    const std::string key = Cat(cfg.arch, ".", p.key);
    if (p.int_field != nullptr) {
      TANDEM_ASSIGN_OR_RETURN(std::optional<int64_t> x,
                              IntKey(file, key, static_cast<int64_t>(p.lo), static_cast<int64_t>(p.hi)));
      if (!x && p.required) return InvalidArgument("missing required key '", key, "'");
      cfg.*p.int_field = x ? static_cast<int>(*x) : static_cast<int>(p.def);
    } else {
      TANDEM_ASSIGN_OR_RETURN(std::optional<double> x, FloatKey(file, key, p.lo, p.hi));
      if (!x && p.required) return InvalidArgument("missing required key '", key, "'");
      const double v = x ? *x : p.def;
      cfg.*p.float_field = static_cast<float>(p.reciprocal && x ? 1.0 / v : v);
    }
  }
  return absl::OkStatus();
}

bool HParamWritten(const HParam& p, const ModelConfig& cfg, double* value) {
  if (p.int_field != nullptr) {
    *value = cfg.*p.int_field;
  } else {
    const double v = cfg.*p.float_field;
    *value = p.reciprocal ? 1.0 / v : v;
  }
  // An integer left at 0 is one the family derives (or does not use); a float is written when not its default.
  const double def = p.reciprocal && p.def != 0 ? 1.0 / p.def : p.def;
  return p.required || (p.int_field != nullptr ? *value != 0 : *value != def);
}

absl::Status ReadVocabKeys(const GgufFile& file, ModelConfig& c) {
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
    const GgufValue* v = file.Find(key);
    if (!v) continue;
    const GgufArray* a = v->AsArray();
    if (!a) return InvalidArgument("key '", key, "': type ", GgufTypeName(v->type), ", expected an array");
    if (a->items.size() != static_cast<size_t>(c.n_vocab)) {
      return InvalidArgument("key '", key, "': ", a->items.size(), " entries but the token embeddings have n_vocab = ",
                             c.n_vocab);
    }
  }
  const GgufValue* tokens = file.Find("tokenizer.ggml.tokens");
  if (tokens && tokens->AsArray()->elem_type != GgufType::kString) {
    return InvalidArgument("key 'tokenizer.ggml.tokens': element type ", GgufTypeName(tokens->AsArray()->elem_type),
                           ", expected STRING");
  }
  if (const GgufValue* vs = file.Find(Cat(c.arch, ".vocab_size"))) {
    if (vs->AsInt() != std::optional<int64_t>(c.n_vocab)) {
      return InvalidArgument("key '", c.arch, ".vocab_size' disagrees with the token embeddings' n_vocab ", c.n_vocab);
    }
  }
  TANDEM_RETURN_IF_ERROR(CheckTokenId(file, "tokenizer.ggml.bos_token_id", c.n_vocab, &c.bos_id));
  TANDEM_RETURN_IF_ERROR(CheckTokenId(file, "tokenizer.ggml.eos_token_id", c.n_vocab, &c.eos_id));
  return absl::OkStatus();
}

}  // namespace tandem

// A family's hyper-parameter keys: each GGUF key with its field of ModelConfig, its range and its default. The one
// reader below serves every family, and `tandem synth` writes the same keys back.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "arch/model_config.h"
#include "core/gguf.h"

namespace tandem {

struct HParam {
  std::string_view key;              // after "{arch}.", e.g. "attention.head_count"
  int ModelConfig::*int_field = nullptr;
  float ModelConfig::*float_field = nullptr;
  bool required = false;
  double lo = 0, hi = 0;             // integers in [lo, hi]; floats in (lo, hi), finite
  double def = 0;                    // when absent: 0 for a field the family derives (n_head_kv = n_head, ...)
  bool reciprocal = false;           // the field holds 1 / the value (a scaling factor stored as a frequency scale)
};

// Reads every key of `params` under "{cfg.arch}." into cfg, or fails naming the key.
absl::Status ReadHParams(const GgufFile& file, std::span<const HParam> params, ModelConfig& cfg);
// The value to write for a parameter (synth), and whether to write it at all: required keys always, optional ones
// when they differ from their default.
bool HParamWritten(const HParam& p, const ModelConfig& cfg, double* value);

// Reads a string key, nullptr when absent; an error when it is not a string.
absl::StatusOr<const std::string*> StringKey(const GgufFile& file, const std::string& key);
// A float key (float32/float64; integers accepted), finite and in (lo, hi); nullopt when absent.
absl::StatusOr<std::optional<double>> FloatKey(const GgufFile& file, const std::string& key, double lo, double hi);

// The tokenizer keys every family shares: the vocabulary arrays' lengths against n_vocab, and bos/eos in range.
absl::Status ReadVocabKeys(const GgufFile& file, ModelConfig& cfg);

}  // namespace tandem

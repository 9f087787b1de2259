// Random-weight GGUF files of real model shapes, for benchmarks that need no download.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/dtype.h"

namespace tandem::cli {

struct SynthOptions {
  std::string arch = "mixtral";  // llama | mixtral
  int n_layer = 32;
  int n_embd = 4096;
  int n_ff = 14336;      // per expert for mixtral
  int n_head = 32;
  int n_head_kv = 8;
  int n_expert = 8;      // mixtral only
  int n_expert_used = 2;
  int n_vocab = 32000;
  int n_ctx = 32768;
  float rope_freq_base = 1e6f;
  DType type = DType::kQ4_0;  // matrices; norms and the router stay F32
  uint64_t seed = 1;
  bool zeros = false;    // all-zero weights left as file holes: instant, for plan and load tests
  bool llama3_rope = false;  // rope_freqs.weight with Llama 3.1's frequency factors
  std::string output;
};

// Defaults of Mixtral-8x7B (arch "mixtral") or Llama-2-7B (arch "llama"); the caller then applies overrides.
SynthOptions SynthDefaults(const std::string& arch);

// Writes the file, generating and quantizing each tensor just before it is written (memory stays at one tensor).
absl::Status WriteSyntheticModel(const SynthOptions& o);

}  // namespace tandem::cli

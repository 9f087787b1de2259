// Random-weight GGUF files of real model shapes, for benchmarks and goldens that need no download.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "tools/quant_mix.h"

namespace tandem::cli {

struct SynthOptions {
  std::string shape = "mixtral-8x7b";  // the preset the fields below started from (SynthShapes)
  std::string arch = "llama";  // general.architecture: the module whose keys and schema the file follows
  int n_layer = 32;
  int n_embd = 4096;
  int n_ff = 14336;          // the dense FFN's width
  int n_ff_expert = 0;       // one expert's width; 0: --ff's (Mixtral's experts are its FFN), or dense
  int n_ff_shexp = 0;        // the shared expert's width (families that have one); 0: --ff's
  int n_head = 32;
  int n_head_kv = 8;
  int head_dim = 0;          // 0 = n_embd / n_head
  int n_expert = 0;          // 0 = dense
  int n_expert_used = 0;
  int n_vocab = 32000;
  int n_ctx = 32768;
  float rope_freq_base = 1e6f;
  float rms_eps = 1e-5f;
  float llama3_rope_factor = 0;  // > 0: rope_freqs.weight with Llama 3's frequency factors for this factor
  float yarn_factor = 0;         // > 0: rope.scaling.type "yarn" with this factor
  int yarn_orig_ctx = 0;         // YaRN's rope.scaling.original_context_length; 0: not written (n_ctx_train)
  int n_swa = 0;                 // sliding window of the windowed layers (families that have them)
  bool tied_output = false;      // no output.weight: the head reuses the token embeddings
  // The real vocabulary written into the file ("llama3", "qwen3": a vocab-only GGUF that tools/make_vocab_gguf.py
  // builds), or "" for a SentencePiece filler vocab of n_vocab pieces. Ids from vocab_keep on become padding.
  std::string vocab;
  int vocab_keep = 0;        // 0 = every token of the vocabulary file
  std::string vocab_file;    // overrides where the vocabulary is read from
  DType type = DType::kQ4_0;  // matrices; norms, biases and the router stay F32
  std::optional<QuantMix> mix;  // a llama.cpp type mix such as Q4_K_M: each matrix's type by its rule, not `type`
  uint64_t seed = 1;
  // MoE: expert e's router row is drawn with (1 + router_skew * (1 - e / (n_expert - 1))) times the spread, so the
  // low experts win the top-k more often: the hot experts real routers have. 0: every expert alike.
  float router_skew = 0;
  bool zeros = false;    // all-zero weights left as file holes: instant, for plan and load tests
  std::string output;
  // Called after each generated tensor with the tensor bytes written so far and in all; null: nothing.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// What WriteSyntheticModel wrote.
struct SynthWritten {
  size_t n_tensors = 0;
  uint64_t tensor_bytes = 0;
};

// A named real model shape: its family, widths and vocabulary.
struct SynthShape {
  std::string_view name;   // "llama-3.1-8b"
  std::string_view alias;  // the --arch name it is the default of, or ""
  SynthOptions options;
};
std::span<const SynthShape> SynthShapes();
// The preset for a shape name or an --arch alias, or null.
const SynthShape* FindSynthShape(std::string_view name);

// Writes the file, generating and quantizing each tensor just before it is written (memory stays at one tensor).
absl::StatusOr<SynthWritten> WriteSyntheticModel(const SynthOptions& o);

}  // namespace tandem::cli

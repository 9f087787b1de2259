// `tandem run`'s flags (spec/cli.md, llama.cpp's spellings beside tandem's own), parsed into an options struct.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/sampler.h"
#include "tools/placement_flags.h"

namespace tandem::cli {

extern const char* const kRunUsage;

struct RunFlags {
  std::string model;
  std::string prompt;            // escapes processed unless --no-escape
  int n_predict = 128;
  int n_threads = 0;
  int n_ctx = 0;
  int n_batch = 512;
  bool add_bos = true;
  bool json = false;
  bool display_prompt = true;    // --no-display-prompt: stdout holds the continuation alone
  bool ignore_eos = false;       // --ignore-eos: end-of-generation tokens are never sampled
  std::vector<std::string> reverse_prompts;  // -r TEXT: generation stops once the text ends with one of them
  std::optional<uint64_t> seed;  // -s / --seed N; unset (or -1): a random seed, printed at the end
  std::string logits_out;
  std::string routing_out;       // --routing-out FILE
  bool routing_append = false;   // --routing-append: add to FILE's counts instead of replacing them
  DType kv_type = DType::kF16;
  SamplerOptions sampling;
  PlacementFlags placement;
};

// Sets *help and returns early for -h / --help. Errors are one line, naming the flag.
absl::StatusOr<RunFlags> ParseRunFlags(std::span<const std::string> argv, bool* help);

// llama.cpp's escapes (-e, its default): \n \r \t \' \" \\ and \xHH; any other backslash stays as written.
std::string ProcessEscapes(std::string_view s);

}  // namespace tandem::cli

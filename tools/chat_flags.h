// `tandem chat`'s flags (spec/cli.md), parsed into an options struct; sampling and placement are run's parsers.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/sampler.h"
#include "tools/placement_flags.h"

namespace tandem::cli {

extern const char* const kChatUsage;

struct ChatFlags {
  std::string model;
  std::string chat_template;     // NAME or FILE; empty: the model's own
  std::string system_prompt;     // -sys: the conversation's first message, when given
  int n_predict = -1;            // tokens per answer; -1: until the end of the turn or a full context
  int n_ctx = 0;
  int n_batch = 512;
  int n_threads = 0;
  bool ignore_eos = false;
  DType kv_type = DType::kF16;
  SamplerOptions sampling;
  std::optional<uint64_t> seed;  // unset: random, printed at the end
  PlacementFlags placement;
};

// Sets *help and returns early for -h / --help. Errors are one line, naming the flag.
absl::StatusOr<ChatFlags> ParseChatFlags(std::span<const std::string> argv, bool* help);

}  // namespace tandem::cli

// The sampling flags `run` and `chat` share (llama.cpp's spellings and defaults), parsed into SamplerOptions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/sampler.h"
#include "tools/cli_util.h"

namespace tandem::cli {

// The help lines, ending in a newline.
extern const char* const kSamplingHelp;

// Parses `flag` (already read from `args`) if it is a sampling flag, consuming its value: true when it was one.
// -s/--seed sets *seed; -1 leaves it unset (a random seed).
absl::StatusOr<bool> ParseSamplingFlag(const std::string& flag, ArgReader& args, SamplerOptions& sampling,
                                       std::optional<uint64_t>* seed);

}  // namespace tandem::cli

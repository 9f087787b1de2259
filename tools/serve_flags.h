// `tandem serve`'s flags (spec/cli.md), parsed into an options struct. The placement flags are run's own parser.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "tools/placement_flags.h"

namespace tandem::cli {

extern const char* const kServeUsage;

struct ServeFlags {
  std::string model;
  std::string alias;                  // the model's id in the API; default: the file's name
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0: any free port (the line saying where it listens tells which)
  int parallel = 1;
  int max_queue = 8;
  std::string api_key;                // empty: no key asked for
  std::string chat_template;          // NAME or FILE; empty: the model's own
  uint64_t max_body_bytes = uint64_t{4} << 20;
  int n_ctx = 0;
  int n_batch = 512;
  int n_threads = 0;
  DType kv_type = DType::kF16;
  PlacementFlags placement;
};

// Sets *help and returns early for -h / --help. Errors are one line, naming the flag.
absl::StatusOr<ServeFlags> ParseServeFlags(std::span<const std::string> argv, bool* help);

}  // namespace tandem::cli

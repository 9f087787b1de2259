// Placement flags shared by run, plan, bench and sweep (see spec/cli.md), parsed into an options struct.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/cli_util.h"

namespace tandem::cli {

struct PlacementFlags {
  std::string device = "auto";          // auto|none, or accelerators joined by '+': cuda[:I], sim:VRAM[,...]
  std::optional<int> gpu_layers;        // --gpu-layers N, or -ngl / --n-gpu-layers N
  bool gpu_layers_at_most = false;      // given as -ngl / --n-gpu-layers: N at or over the layers means all
  std::optional<int> cpu_layers;        // --cpu-layers N
  std::optional<int> stream_layers;     // --stream-layers N
  std::optional<uint64_t> vram_budget;  // --vram-budget SIZE
  std::optional<uint64_t> host_ram;     // --host-ram SIZE
  std::vector<std::string> place;       // --place REGEX=cpu|gpu|stream, in order (-ot rules among them)
  std::optional<int> cpu_moe_layers;    // --n-cpu-moe N; --cpu-moe: every layer
  std::string numa = "auto";            // --numa auto|off|interleave|shard
  bool expert_level = true;             // --expert-level on|off
  std::optional<uint64_t> expert_cache; // --expert-cache SIZE
  std::string routing;                  // --routing FILE: recorded routing statistics (MoE hot experts)
  bool any_count() const { return gpu_layers || cpu_layers || stream_layers; }
};

// --cpu-moe's layer count: more than any model has.
inline constexpr int kAllLayers = 100000;

// -ot / --override-tensor "REGEX=BUFFER[,REGEX=BUFFER...]" (llama.cpp's syntax, buffers CPU and CUDA0 in any
// case) as --place rules "REGEX=cpu" / "REGEX=gpu", in order; other buffers are a one-line error.
absl::StatusOr<std::vector<std::string>> OverrideTensorRules(std::string_view value);

// If `flag` is a placement flag, consumes its value from `args` into `out` and returns true (or an error).
// Returns false when `flag` is not a placement flag.
absl::StatusOr<bool> ParsePlacementFlag(const std::string& flag, ArgReader& args, PlacementFlags& out);

// Usage lines for --help.
const char* PlacementFlagsHelp();

}  // namespace tandem::cli

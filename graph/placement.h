// What the user asked for: layer counts (--gpu-layers/--cpu-layers/--stream-layers), --place rules and the VRAM
// budget. The partitioner turns this into a Plan; this file only parses, validates and resolves the request.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <regex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/plan.h"

namespace tandem {

// --place REGEX=cpu|gpu|stream. The regex is searched (not anchored) in each GGUF tensor name, so
// 'ffn_.*_exps' matches "blk.3.ffn_up_exps.weight". A rule that matches any tensor of a unit places the whole
// unit, in both phases. Per tensor the first rule matching it decides, so rules that decide different places for
// tensors of one unit are an error (an MoE layer's experts are placed apart with @EXPERTS, below); between an
// expert rule and a whole-unit rule for the same layer, the earlier wins.
// --place REGEX@EXPERTS=cpu|gpu|stream, EXPERTS a list of indices and ranges ("0-15", "1,5,9", "0-3,8"): in each
// MoE layer with an expert tensor the regex matches, those experts go to the target and the layer's router stays
// resident; its experts no rule names compute on the CPU.
struct PlaceRule {
  std::string pattern;
  Placement target = Placement::kCpu;
  std::vector<int> experts;  // the expert selector, ascending; empty: whole units
  std::shared_ptr<const std::regex> re;  // compiled pattern (shared: rules are copied around)
  bool Matches(std::string_view tensor_name) const;
};
// Parses "REGEX=cpu". The target is after the LAST '=', so a regex may contain '='.
absl::StatusOr<PlaceRule> ParsePlaceRule(std::string_view spec);

struct PlacementRequest {
  // Layer counts. Unset counts take the rest: --cpu-layers when unset, else --gpu-layers when unset; when all
  // three are given they must add up to the model's layers. No count at all means auto placement.
  std::optional<int> gpu_layers;
  std::optional<int> cpu_layers;
  std::optional<int> stream_layers;
  // -ngl / --n-gpu-layers, llama.cpp's spelling of --gpu-layers: a count at or over the layers the other counts
  // leave means all of them (-ngl 99), where --gpu-layers would be an error.
  bool gpu_layers_at_most = false;
  std::vector<PlaceRule> rules;         // in order; for each unit, the first rule that matches wins
  // --n-cpu-moe N (--cpu-moe: every layer): the FFN units of the first N MoE layers, experts and router, on the
  // CPU, as llama.cpp's overrides of their expert tensors put them; a unit a rule places keeps the rule's place.
  std::optional<int> cpu_moe_layers;
  std::optional<uint64_t> vram_budget;  // explicit --vram-budget: a hard cap with no headroom taken off
  std::optional<uint64_t> host_ram;     // --host-ram: RAM to plan for instead of this machine's MemAvailable
  // --expert-level: MoE layers place their experts one by one (router resident, hot experts resident, the rest on
  // the CPU or streamed when routed). Off: whole FFN units, the layer-level plan (a streamed layer copies every
  // expert).
  bool expert_level = true;
  // --expert-cache SIZE: VRAM for an LRU cache of the experts decode streams (each copied once while it stays hot).
  std::optional<uint64_t> expert_cache;

  bool counts_given() const { return gpu_layers || cpu_layers || stream_layers; }
  // "--gpu-layers 30 --stream-layers 2" ("-ngl 99" for gpu_layers_at_most), for messages.
  std::string DescribeCounts() const;
};

// Layers per placement. Convention (llama.cpp's, where the LAST layers go to the GPU): layers
// [0, cpu) run on the CPU, then [cpu, cpu + stream) are streamed, then the last `gpu` layers are resident.
struct LayerCounts {
  int cpu = 0;
  int stream = 0;
  int gpu = 0;
  Placement For(int layer) const {
    if (layer < cpu) return Placement::kCpu;
    if (layer < cpu + stream) return Placement::kStream;
    return Placement::kGpu;
  }
};

// Fills in unset counts and checks them against n_layer and the device: errors say what would add up.
absl::StatusOr<LayerCounts> ResolveCounts(const PlacementRequest& req, int n_layer, bool has_gpu);

// Index of the first rule that matches any of `tensors`, or nullopt.
std::optional<size_t> FirstMatchingRule(std::span<const PlaceRule> rules, std::span<const std::string> tensors);

// The GPU memory the partitioner may fill: an explicit --vram-budget as is (never above a known capacity), else
// the capacity less 10% headroom. 0 when there is no GPU.
uint64_t EffectiveVramCap(const PlacementRequest& req, bool has_gpu, uint64_t capacity);

// "12 GiB", "10.8 GiB", "512 MiB", "96 KiB", "17 B": one decimal, binary units.
std::string FormatBytes(uint64_t bytes);

}  // namespace tandem

// `tandem sweep`: the placements it runs, what it records for each, and the knee. Pure: no engine, no files, so
// tests/tools/sweep_test.cc checks it directly. cmd_sweep.cc measures; sweep_output.cc and sweep_svg.cc write.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/plan.h"
#include "tools/placement_flags.h"

namespace tandem::cli {

// What the x axis counts. kLayers: --gpu-layers N, the rest on the CPU. kExperts: every layer's attention (and the
// output) resident, and the FFN/experts of the last N layers resident, the rest of the experts on the CPU
// (llama.cpp's --n-cpu-moe, written as --place rules: experts are placed a layer's worth at a time).
enum class SweepAxis { kLayers, kExperts };
const char* SweepAxisName(SweepAxis axis);      // "layers", "experts"
const char* SweepAxisTitle(SweepAxis axis);     // the x axis label

struct SweepPoint {
  std::string label;         // "gpu-layers 4", "expert-layers 2", "auto"
  bool is_auto = false;
  int count = 0;             // layers (or expert layers) on the GPU; unused for auto
  PlacementFlags placement;  // the user's flags plus this point's counts and rules
};

// The counts swept: 0, step, 2*step, ... and always n_layer, with the step the smallest that keeps them to at most
// max_points (at least 2).
std::vector<int> SweepCounts(int n_layer, int max_points);

// The points: SweepCounts along `axis`, then the auto plan. `base` holds the user's flags; they must give no layer
// counts (the sweep sets them). kExperts needs an MoE model.
absl::StatusOr<std::vector<SweepPoint>> MakeSweepPoints(const PlacementFlags& base, SweepAxis axis, int n_layer,
                                                        bool is_moe, int max_points);

// Where a plan sits on the x axis: n_layer times the share of the swept units' weight bytes (attention and FFN of
// every layer; kExperts: the FFN units) held resident on the GPU. For a --gpu-layers N plan of equal layers it is N;
// for the auto plan, which may place attention and FFN apart and stream some, it is its "resident layers' worth".
double PlanPosition(const Plan& plan, SweepAxis axis, int n_layer);

struct SweepResult {
  SweepPoint point;
  double x = 0;                  // position on the x axis (count, or PlanPosition for auto)
  bool ok = false;               // planned and measured; false: `note` says why not (did not fit, failed)
  std::string note;
  std::string plan_why;          // Plan::why
  // Measured (ThroughputMeter): tokens/s mean and stdev over the repetitions.
  double prefill_tps = 0, prefill_tps_sd = 0;
  double decode_tps = 0, decode_tps_sd = 0;
  uint64_t peak_vram_bytes = 0;  // the accelerators' allocator peak
  uint64_t pcie_bytes_per_decode_token = 0;
  uint64_t pcie_bytes_per_prefill_token = 0;
  // The planner's prediction for the same placement.
  double predicted_prefill_tps = 0, predicted_decode_tps = 0;
  uint64_t predicted_vram_bytes = 0;
  uint64_t predicted_pcie_bytes_per_decode_token = 0;
  uint64_t predicted_pcie_bytes_per_prefill_token = 0;
  uint64_t vram_budget_bytes = 0;
};

// The knee, among the measured non-auto points: the fewest GPU layers whose decode tokens/s comes within
// `tolerance` (5%) of the best swept point's. Past it, more layers on the GPU buy less than that. nullopt when no
// swept point was measured.
std::optional<size_t> FindKnee(const std::vector<SweepResult>& results, double tolerance = 0.05);
// The measured non-auto point with the highest decode tokens/s.
std::optional<size_t> BestSwept(const std::vector<SweepResult>& results);

struct SweepReport {
  std::string model;             // general.name, else the file name
  std::string device;            // the --device spec
  SweepAxis axis = SweepAxis::kLayers;
  int n_layer = 0;
  int n_prompt = 0, n_gen = 0, reps = 0, n_threads = 0;
  std::vector<SweepResult> results;  // the swept points in order, then auto
  std::optional<size_t> knee;
  std::optional<size_t> best;
  std::optional<size_t> auto_index;
};

// Fills knee, best and auto_index from results.
void MarkSweep(SweepReport& report);

}  // namespace tandem::cli

#include "tools/sweep.h"

#include <algorithm>

#include "core/status.h"

namespace tandem::cli {

const char* SweepAxisName(SweepAxis axis) { return axis == SweepAxis::kLayers ? "layers" : "experts"; }

const char* SweepAxisTitle(SweepAxis axis) {
  return axis == SweepAxis::kLayers ? "layers resident on the GPU (the rest on the CPU)"
                                    : "layers with their experts resident on the GPU (all attention on the GPU)";
}

std::vector<int> SweepCounts(int n_layer, int max_points) {
  max_points = std::max(max_points, 2);
  int step = 1;
  while ((n_layer + step - 1) / step + 1 > max_points) ++step;
  std::vector<int> counts;
  for (int n = 0; n < n_layer; n += step) counts.push_back(n);
  counts.push_back(n_layer);
  return counts;
}

namespace {

// "^blk\.(0|1|2)\.ffn_.*_exps": the expert tensors of the first n layers, which place those layers' FFN units.
std::string FirstLayersExpertsRegex(int n) {
  std::string alt;
  for (int l = 0; l < n; ++l) alt += Cat(l == 0 ? "" : "|", l);
  return Cat("^blk\\.(", alt, ")\\.ffn_.*_exps");
}

}  // namespace

absl::StatusOr<std::vector<SweepPoint>> MakeSweepPoints(const PlacementFlags& base, SweepAxis axis, int n_layer,
                                                        bool is_moe, int max_points) {
  if (base.any_count()) {
    return absl::InvalidArgumentError(
        "sweep sets the layer counts itself; drop --gpu-layers/--cpu-layers/--stream-layers");
  }
  if (axis == SweepAxis::kExperts && !is_moe) {
    return absl::InvalidArgumentError("--over experts needs a model with experts (MoE); this one has none");
  }
  std::vector<SweepPoint> points;
  for (int n : SweepCounts(n_layer, max_points)) {
    SweepPoint p{.count = n, .placement = base};
    if (axis == SweepAxis::kLayers) {
      p.label = Cat("gpu-layers ", n);
      p.placement.gpu_layers = n;
    } else {
      p.label = Cat("expert-layers ", n);
      p.placement.gpu_layers = n_layer;
      // After the user's rules: the first matching rule wins, and theirs should.
      if (n < n_layer) p.placement.place.push_back(Cat(FirstLayersExpertsRegex(n_layer - n), "=cpu"));
    }
    points.push_back(std::move(p));
  }
  points.push_back(SweepPoint{.label = "auto", .is_auto = true, .placement = base});
  return points;
}

double PlanPosition(const Plan& plan, SweepAxis axis, int n_layer) {
  double total = 0, resident = 0;
  for (const UnitPlan& u : plan.units) {
    const bool swept = axis == SweepAxis::kLayers ? u.layer >= 0 : u.kind == UnitKind::kFfn;
    if (!swept) continue;
    total += static_cast<double>(u.weight_bytes);
    if (u.resident()) resident += static_cast<double>(u.weight_bytes);
  }
  return total > 0 ? n_layer * resident / total : 0.0;
}

std::optional<size_t> BestSwept(const std::vector<SweepResult>& results) {
  std::optional<size_t> best;
  for (size_t i = 0; i < results.size(); ++i) {
    const SweepResult& r = results[i];
    if (!r.ok || r.point.is_auto) continue;
    if (!best || r.decode_tps > results[*best].decode_tps) best = i;
  }
  return best;
}

std::optional<size_t> FindKnee(const std::vector<SweepResult>& results, double tolerance) {
  const std::optional<size_t> best = BestSwept(results);
  if (!best) return std::nullopt;
  const double enough = results[*best].decode_tps * (1 - tolerance);
  std::optional<size_t> knee;
  for (size_t i = 0; i < results.size(); ++i) {
    const SweepResult& r = results[i];
    if (!r.ok || r.point.is_auto || r.decode_tps < enough) continue;
    if (!knee || r.x < results[*knee].x) knee = i;
  }
  return knee;
}

void MarkSweep(SweepReport& report) {
  report.knee = FindKnee(report.results);
  report.best = BestSwept(report.results);
  report.auto_index.reset();
  for (size_t i = 0; i < report.results.size(); ++i) {
    if (report.results[i].point.is_auto) report.auto_index = i;
  }
}

}  // namespace tandem::cli

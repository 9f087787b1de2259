#include "graph/placement.h"

#include <algorithm>
#include <cstdio>

#include "core/status.h"

namespace tandem {

bool PlaceRule::Matches(std::string_view tensor_name) const {
  if (!re) return false;
  return std::regex_search(tensor_name.begin(), tensor_name.end(), *re);
}

absl::StatusOr<PlaceRule> ParsePlaceRule(std::string_view spec) {
  const size_t eq = spec.rfind('=');
  if (eq == std::string_view::npos || eq == 0) {
    return InvalidArgument("--place expects REGEX=cpu|gpu|stream, got '", spec, "'");
  }
  PlaceRule rule;
  rule.pattern = std::string(spec.substr(0, eq));
  const std::string_view target = spec.substr(eq + 1);
  if (target == "cpu") {
    rule.target = Placement::kCpu;
  } else if (target == "gpu") {
    rule.target = Placement::kGpu;
  } else if (target == "stream") {
    rule.target = Placement::kStream;
  } else {
    return InvalidArgument("--place '", spec, "': the target must be cpu, gpu or stream, got '", target, "'");
  }
  try {
    rule.re = std::make_shared<const std::regex>(rule.pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return InvalidArgument("--place '", spec, "': invalid regular expression '", rule.pattern, "': ", e.what());
  }
  return rule;
}

std::string PlacementRequest::DescribeCounts() const {
  std::string s;
  auto add = [&](const char* flag, const std::optional<int>& v) {
    if (!v) return;
    if (!s.empty()) s += ' ';
    s += Cat(flag, " ", *v);
  };
  add("--gpu-layers", gpu_layers);
  add("--cpu-layers", cpu_layers);
  add("--stream-layers", stream_layers);
  return s;
}

absl::StatusOr<LayerCounts> ResolveCounts(const PlacementRequest& req, int n_layer, bool has_gpu) {
  for (const auto& [flag, v] : {std::pair{"--gpu-layers", req.gpu_layers}, std::pair{"--cpu-layers", req.cpu_layers},
                                std::pair{"--stream-layers", req.stream_layers}}) {
    if (v && *v < 0) return InvalidArgument(flag, " must be >= 0, got ", *v);
  }
  const int64_t given = int64_t{req.gpu_layers.value_or(0)} + req.cpu_layers.value_or(0) +
                        req.stream_layers.value_or(0);
  if (given > n_layer) {
    return InvalidArgument(req.DescribeCounts(), " asks for ", given, " layers but the model has ", n_layer,
                           "; the counts must add up to ", n_layer);
  }
  LayerCounts c;
  c.gpu = req.gpu_layers.value_or(0);
  c.cpu = req.cpu_layers.value_or(0);
  c.stream = req.stream_layers.value_or(0);
  const int rest = n_layer - static_cast<int>(given);
  if (!req.cpu_layers) {
    c.cpu += rest;
  } else if (!req.gpu_layers) {
    c.gpu += rest;
  } else if (!req.stream_layers) {
    c.stream += rest;
  } else if (rest != 0) {
    return InvalidArgument(req.DescribeCounts(), " adds up to ", given, " layers but the model has ", n_layer,
                           "; e.g. --cpu-layers ", *req.cpu_layers + rest, " would add up");
  }
  if (!has_gpu && (c.gpu > 0 || c.stream > 0)) {
    return InvalidArgument(req.DescribeCounts(), " puts ", c.gpu + c.stream,
                           " layers on the GPU side but there is no GPU device (--device sim:12GiB simulates one)");
  }
  return c;
}

std::optional<size_t> FirstMatchingRule(std::span<const PlaceRule> rules, std::span<const std::string> tensors) {
  for (size_t i = 0; i < rules.size(); ++i) {
    for (const std::string& t : tensors) {
      if (rules[i].Matches(t)) return i;
    }
  }
  return std::nullopt;
}

uint64_t EffectiveVramCap(const PlacementRequest& req, bool has_gpu, uint64_t capacity) {
  if (!has_gpu) return 0;
  if (req.vram_budget) return capacity > 0 ? std::min(*req.vram_budget, capacity) : *req.vram_budget;
  return capacity - capacity / 10;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
    std::string s(buf);
    const size_t dot0 = s.find(".0 ");
    if (dot0 != std::string::npos) s.erase(dot0, 2);
    return s;
  }
  return buf;
}

}  // namespace tandem

#include "graph/placement.h"

#include <algorithm>
#include <cstdio>

#include "core/status.h"

namespace tandem {

bool PlaceRule::Matches(std::string_view tensor_name) const {
  if (!re) return false;
  return std::regex_search(tensor_name.begin(), tensor_name.end(), *re);
}

namespace {

// "0-15", "1,5,9", "0-3,8": ascending, no repeats.
absl::StatusOr<std::vector<int>> ParseExpertList(std::string_view list, std::string_view spec) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string_view item = list.substr(pos, comma - pos);
    const size_t dash = item.find('-');
    int lo = 0, hi = 0;
    auto number = [](std::string_view s, int* v) {
      if (s.empty() || s.size() > 6) return false;
      *v = 0;
      for (char ch : s) *v = *v * 10 + (ch - '0');
      return true;
    };
    const bool ok = dash == std::string_view::npos
                        ? number(item, &lo) && (hi = lo, true)
                        : number(item.substr(0, dash), &lo) && number(item.substr(dash + 1), &hi) && lo <= hi;
    if (!ok) {
      return InvalidArgument("--place '", spec, "': bad expert list '", list,
                             "' (expected indices and ranges such as 0-15 or 1,5,9)");
    }
    for (int e = lo; e <= hi; ++e) out.push_back(e);
    pos = comma + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

absl::StatusOr<PlaceRule> ParsePlaceRule(std::string_view spec) {
  const size_t eq = spec.rfind('=');
  if (eq == std::string_view::npos || eq == 0) {
    return InvalidArgument("--place expects REGEX=cpu|gpu|stream, got '", spec, "'");
  }
  PlaceRule rule;
  rule.pattern = std::string(spec.substr(0, eq));
  // A trailing @EXPERTS selects experts: digits, ',' and '-' only, so a regex's own '@' is left alone.
  if (const size_t at = rule.pattern.rfind('@'); at != std::string::npos && at + 1 < rule.pattern.size() &&
      rule.pattern.find_first_not_of("0123456789,-", at + 1) == std::string::npos) {
    TANDEM_ASSIGN_OR_RETURN(rule.experts, ParseExpertList(std::string_view(rule.pattern).substr(at + 1), spec));
    rule.pattern.resize(at);
  }
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
  add(gpu_layers_at_most ? "-ngl" : "--gpu-layers", gpu_layers);
  add("--cpu-layers", cpu_layers);
  add("--stream-layers", stream_layers);
  return s;
}

absl::StatusOr<LayerCounts> ResolveCounts(const PlacementRequest& req, int n_layer, bool has_gpu) {
  for (const auto& [flag, v] : {std::pair{"--gpu-layers", req.gpu_layers}, std::pair{"--cpu-layers", req.cpu_layers},
                                std::pair{"--stream-layers", req.stream_layers}}) {
    if (v && *v < 0) return InvalidArgument(flag, " must be >= 0, got ", *v);
  }
  const int64_t others = int64_t{req.cpu_layers.value_or(0)} + req.stream_layers.value_or(0);
  int64_t gpu_asked = req.gpu_layers.value_or(0);
  if (req.gpu_layers_at_most) gpu_asked = std::min<int64_t>(gpu_asked, std::max<int64_t>(n_layer - others, 0));
  const int64_t given = gpu_asked + others;
  if (given > n_layer) {
    return InvalidArgument(req.DescribeCounts(), " asks for ", given, " layers but the model has ", n_layer,
                           "; the counts must add up to ", n_layer);
  }
  LayerCounts c;
  c.gpu = static_cast<int>(gpu_asked);
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

#include "tools/placement_request.h"

#include "core/status.h"

namespace tandem::cli {

absl::StatusOr<PlacementRequest> ToPlacementRequest(const PlacementFlags& flags) {
  PlacementRequest req;
  req.gpu_layers = flags.gpu_layers;
  req.cpu_layers = flags.cpu_layers;
  req.stream_layers = flags.stream_layers;
  req.vram_budget = flags.vram_budget;
  req.host_ram = flags.host_ram;
  for (const std::string& spec : flags.place) {
    TANDEM_ASSIGN_OR_RETURN(PlaceRule rule, ParsePlaceRule(spec));
    req.rules.push_back(std::move(rule));
  }
  return req;
}

}  // namespace tandem::cli

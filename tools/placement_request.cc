#include "tools/placement_request.h"

#include "core/gguf.h"
#include "core/status.h"

namespace tandem::cli {

absl::StatusOr<PlacementRequest> ToPlacementRequest(const PlacementFlags& flags) {
  PlacementRequest req;
  req.gpu_layers = flags.gpu_layers;
  req.cpu_layers = flags.cpu_layers;
  req.stream_layers = flags.stream_layers;
  req.gpu_layers_at_most = flags.gpu_layers_at_most;
  req.cpu_moe_layers = flags.cpu_moe_layers;
  req.vram_budget = flags.vram_budget;
  req.host_ram = flags.host_ram;
  req.expert_level = flags.expert_level;
  req.expert_cache = flags.expert_cache;
  for (const std::string& spec : flags.place) {
    TANDEM_ASSIGN_OR_RETURN(PlaceRule rule, ParsePlaceRule(spec));
    req.rules.push_back(std::move(rule));
  }
  return req;
}

absl::StatusOr<std::shared_ptr<const RoutingStats>> LoadRoutingFlag(const PlacementFlags& flags,
                                                                     const ModelConfig& cfg) {
  if (flags.routing.empty()) return nullptr;
  TANDEM_ASSIGN_OR_RETURN(RoutingStats stats, LoadRoutingStats(flags.routing));
  if (absl::Status st = CheckRoutingMatches(stats, cfg.n_layer, cfg.n_expert, cfg.n_expert_used); !st.ok()) {
    return InvalidArgument("--routing ", flags.routing, ": ", st.message());
  }
  return std::make_shared<const RoutingStats>(std::move(stats));
}

absl::StatusOr<std::shared_ptr<const RoutingStats>> LoadRoutingFlag(const PlacementFlags& flags,
                                                                     const std::string& model_path) {
  if (flags.routing.empty()) return nullptr;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(model_path));
  TANDEM_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(*file));
  return LoadRoutingFlag(flags, cfg);
}

}  // namespace tandem::cli

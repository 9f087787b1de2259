// PlacementFlags (what the user typed) -> PlacementRequest and routing statistics (what the partitioner takes).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "arch/model_config.h"
#include "graph/placement.h"
#include "graph/routing_stats.h"
#include "tools/placement_flags.h"

namespace tandem::cli {

// Compiles the --place rules; errors name the bad rule.
absl::StatusOr<PlacementRequest> ToPlacementRequest(const PlacementFlags& flags);

// --routing FILE: the recorded statistics, checked against the model they are to place (a file recorded on another
// model is an error naming both shapes); null when the flag was not given.
absl::StatusOr<std::shared_ptr<const RoutingStats>> LoadRoutingFlag(const PlacementFlags& flags,
                                                                     const ModelConfig& cfg);
// The same for the model file at `model_path`, opened for its config only.
absl::StatusOr<std::shared_ptr<const RoutingStats>> LoadRoutingFlag(const PlacementFlags& flags,
                                                                     const std::string& model_path);

}  // namespace tandem::cli

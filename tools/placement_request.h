// PlacementFlags (what the user typed) -> PlacementRequest (what the partitioner takes).
#pragma once

#include "absl/status/statusor.h"
#include "graph/placement.h"
#include "tools/placement_flags.h"

namespace tandem::cli {

// Compiles the --place rules; errors name the bad rule.
absl::StatusOr<PlacementRequest> ToPlacementRequest(const PlacementFlags& flags);

}  // namespace tandem::cli

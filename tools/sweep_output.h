// The sweep's table: CSV (one row per point) or JSON, and the closing summary line.
#pragma once

#include <string>

#include "nlohmann/json.hpp"
#include "tools/sweep.h"

namespace tandem::cli {

// The CSV columns, in order (the header row).
extern const char* const kSweepCsvColumns[];
// Header plus one row per point (swept points, then auto); infeasible points keep their row with status
// "infeasible" and the reason in `note`.
std::string SweepCsv(const SweepReport& report);
nlohmann::json SweepJson(const SweepReport& report);
// "auto: 12.3 tok/s decode, 98% of the best swept point (gpu-layers 4: 12.6); knee: gpu-layers 3"
std::string SweepSummary(const SweepReport& report);

}  // namespace tandem::cli

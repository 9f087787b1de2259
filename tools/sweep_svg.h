// The sweep's picture, written by hand as SVG text: four panels sharing the x axis (decode tok/s, prefill tok/s,
// VRAM, PCIe bytes per decoded token), measured as solid lines and the planner's prediction dashed, with the auto
// plan as a red diamond and the knee as a vertical line. Every series is a <g id="..."> so tests can find it.
#pragma once

#include <string>

#include "tools/sweep.h"

namespace tandem::cli {

std::string SweepSvg(const SweepReport& report);

}  // namespace tandem::cli

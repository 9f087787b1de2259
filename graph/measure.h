// Figures a noisy machine cannot fool: each calibration figure is taken as several trials, kept as their median
// and spread, and held to a bound that physics sets (a GEMV cannot read faster than memory reads alongside it; a
// GEMM cannot compute faster than the ISA's peak at the measured clock). A trial over its bound is taken again; a
// figure whose trials keep breaking it is refused, never stored. Pure logic over a sampling function, so tests can
// inject the noise.
#pragma once

#include <functional>
#include <limits>
#include <string>

#include "absl/status/statusor.h"

namespace tandem {

struct Figure {
  double median = 0;  // of the kept trials
  double spread = 0;  // (max - min) / median of the kept trials
  int trials = 0;     // kept
  int retaken = 0;    // trials over their bound, taken again
};

// One trial: the value measured and the most it may be (infinity when nothing bounds it).
struct Trial {
  double value = 0;
  double upper = std::numeric_limits<double>::infinity();
};

struct MeasureOptions {
  std::string what;          // "Q4_0 GEMV", for messages
  std::string unit;          // "GB/s"
  std::string bound_reason;  // "the memory read alongside", for messages
  int trials = 5;            // trials kept
  int max_retakes = 4;       // implausible trials taken again before the figure is refused
  // A spread over this takes up to `trials` more trials (the median of more trials is steadier); the figure is
  // kept either way, with its spread.
  double wide_spread = 0.5;
};

// Takes trials of `sample` until `trials` of them are plausible (value finite, > 0 and <= upper). Fails, naming
// the figure, the worst value and its bound, when more than max_retakes trials were not.
absl::StatusOr<Figure> MeasureFigure(const MeasureOptions& opts, const std::function<Trial()>& sample);

}  // namespace tandem

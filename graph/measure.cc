#include "graph/measure.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/status.h"

namespace tandem {
namespace {

bool Plausible(const Trial& t) { return std::isfinite(t.value) && t.value > 0 && t.value <= t.upper; }

}  // namespace

absl::StatusOr<Figure> MeasureFigure(const MeasureOptions& opts, const std::function<Trial()>& sample) {
  Figure f;
  std::vector<double> kept;
  Trial worst;  // the implausible trial furthest over its bound
  double worst_ratio = 0;
  auto take = [&](int wanted) -> absl::Status {
    while (static_cast<int>(kept.size()) < wanted) {
      const Trial t = sample();
      if (Plausible(t)) {
        kept.push_back(t.value);
        continue;
      }
      const double ratio = t.value > 0 ? t.value / t.upper : std::numeric_limits<double>::infinity();
      if (f.retaken == 0 || !(ratio <= worst_ratio)) {
        worst = t;
        worst_ratio = ratio;
      }
      if (++f.retaken > opts.max_retakes) {
        const std::string got =
            std::isfinite(worst.value) && worst.value > 0
                ? Cat(" measured ", worst.value, " ", opts.unit, ", more than the ", worst.upper, " ", opts.unit,
                      " ", opts.bound_reason, " allows,")
                : Cat(" gave no usable value (", worst.value, ")");
        return absl::FailedPreconditionError(Cat("calibrate: ", opts.what, got, " in ", f.retaken, " of ",
                                                 f.retaken + kept.size(), " trials; not stored (is the machine busy?)"));
      }
    }
    return absl::OkStatus();
  };
  auto summarize = [&] {
    std::vector<double> v = kept;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    f.median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    f.spread = (v.back() - v.front()) / f.median;
    f.trials = static_cast<int>(n);
  };
  const int trials = std::max(1, opts.trials);
  TANDEM_RETURN_IF_ERROR(take(trials));
  summarize();
  if (f.spread > opts.wide_spread && trials > 1) {
    TANDEM_RETURN_IF_ERROR(take(2 * trials));
    summarize();
  }
  return f;
}

}  // namespace tandem

#include "core/cpu_load.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/status.h"

namespace tandem {

absl::StatusOr<CpuTimes> ParseProcStat(std::string_view text, double ticks_per_s) {
  if (!(ticks_per_s > 0)) return InvalidArgument("/proc/stat: ticks per second must be positive");
  CpuTimes t;
  bool have_total = false;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    if (line.substr(0, 3) != "cpu") continue;
    const std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f[0] != "cpu") {
      ++t.n_cpus;  // cpu0, cpu1, ...
      continue;
    }
    // cpu user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is already in user.
    if (f.size() < 9) return InvalidArgument("/proc/stat: the cpu line has ", f.size() - 1, " fields, expected 8+");
    double busy = 0;
    for (size_t i : {1, 2, 3, 6, 7, 8}) {
      double v = 0;
      if (!absl::SimpleAtod(f[i], &v) || v < 0) return InvalidArgument("/proc/stat: bad cpu field '", f[i], "'");
      busy += v;
    }
    t.machine_busy_s = busy / ticks_per_s;
    have_total = true;
  }
  if (!have_total) return InvalidArgument("/proc/stat: no aggregate cpu line");
  t.n_cpus = std::max(t.n_cpus, 1);
  return t;
}

absl::StatusOr<CpuTimes> ReadCpuTimes() {
  std::ifstream in("/proc/stat");
  if (!in) return absl::UnavailableError("cannot read /proc/stat");
  std::stringstream ss;
  ss << in.rdbuf();
  TANDEM_ASSIGN_OR_RETURN(CpuTimes t, ParseProcStat(ss.str(), static_cast<double>(sysconf(_SC_CLK_TCK))));
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  t.self_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
             static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  return t;
}

double OthersBusyShare(const CpuTimes& before, const CpuTimes& after, double wall_s) {
  const double capacity = std::max(after.n_cpus, 1) * wall_s;
  if (!(capacity > 0)) return 0;
  const double others = (after.machine_busy_s - before.machine_busy_s) - (after.self_s - before.self_s);
  return std::clamp(others / capacity, 0.0, 1.0);
}

}  // namespace tandem

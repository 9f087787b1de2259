// How busy the machine's CPUs are, and how much of that is this process: calibration uses it to say when other
// programs ran while it measured, since rates taken on a busy machine are low and plans made from them mislead.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"

namespace tandem {

struct CpuTimes {
  double machine_busy_s = 0;  // all CPUs together: user, nice, system, irq, softirq and steal time since boot
  double self_s = 0;          // this process's user and system time
  int n_cpus = 0;             // the "cpuN" lines
};

// Parses /proc/stat's text: its aggregate "cpu" line (in ticks of 1/ticks_per_s) and the cpuN lines.
absl::StatusOr<CpuTimes> ParseProcStat(std::string_view text, double ticks_per_s);

// This machine's /proc/stat, and this process's time from getrusage.
absl::StatusOr<CpuTimes> ReadCpuTimes();

// The share of the machine's CPU capacity (n_cpus x wall_s) that processes other than this one used between two
// readings `wall_s` apart, in [0, 1].
double OthersBusyShare(const CpuTimes& before, const CpuTimes& after, double wall_s);

}  // namespace tandem

// How much RAM this machine has, and how much a new process can use without pushing others out: what plans check
// their host memory account against.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem {

struct HostMemory {
  uint64_t total = 0;      // physical RAM
  uint64_t available = 0;  // what can be had without swapping: free memory plus reclaimable page cache
};

// Parses the text of /proc/meminfo ("MemTotal:  24576000 kB" lines). MemAvailable is used when present; kernels
// before 3.14 lack it, and then MemFree + Cached stands in for it.
absl::StatusOr<HostMemory> ParseMeminfo(std::string_view text);

// This machine's: /proc/meminfo, else sysconf (total and free pages, which undercounts reclaimable cache).
absl::StatusOr<HostMemory> ReadHostMemory();

}  // namespace tandem

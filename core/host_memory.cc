#include "core/host_memory.h"

#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status.h"

namespace tandem {

absl::StatusOr<HostMemory> ParseMeminfo(std::string_view text) {
  std::map<std::string, uint64_t, std::less<>> kib;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    absl::ConsumeSuffix(&value, "kB");
    uint64_t n = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(value), &n)) kib[std::string(line.substr(0, colon))] = n;
  }
  auto get = [&](const char* key) -> uint64_t {
    const auto it = kib.find(key);
    return it == kib.end() ? 0 : it->second * 1024;
  };
  HostMemory m;
  m.total = get("MemTotal");
  if (m.total == 0) return InvalidArgument("meminfo: no MemTotal line");
  m.available = kib.contains("MemAvailable") ? get("MemAvailable") : get("MemFree") + get("Cached");
  return m;
}

absl::StatusOr<HostMemory> ReadHostMemory() {
  if (std::ifstream in("/proc/meminfo"); in) {
    std::stringstream ss;
    ss << in.rdbuf();
    if (absl::StatusOr<HostMemory> m = ParseMeminfo(ss.str()); m.ok()) return m;
  }
  const long page = sysconf(_SC_PAGESIZE);
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long free_pages = sysconf(_SC_AVPHYS_PAGES);
  if (page <= 0 || pages <= 0) return FailedPrecondition("cannot tell how much RAM this machine has");
  HostMemory m;
  m.total = static_cast<uint64_t>(page) * static_cast<uint64_t>(pages);
  m.available = free_pages > 0 ? static_cast<uint64_t>(page) * static_cast<uint64_t>(free_pages) : m.total;
  return m;
}

}  // namespace tandem

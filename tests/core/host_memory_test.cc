// The host RAM reader: /proc/meminfo parsing with and without MemAvailable, bad text, and this machine.
#include "core/host_memory.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

TEST(HostMemory, ParsesMemAvailableInKib) {
  const absl::StatusOr<HostMemory> m = ParseMeminfo(
      "MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\nCached:  5 kB\n");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->total, 24576000ull * 1024);
  EXPECT_EQ(m->available, 20000000ull * 1024);
}

TEST(HostMemory, OldKernelsUseFreePlusCached) {
  const absl::StatusOr<HostMemory> m = ParseMeminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 7 kB\nCached: 300 kB\n");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->available, 400ull * 1024);
}

TEST(HostMemory, TextWithoutTotalIsAnError) {
  EXPECT_FALSE(ParseMeminfo("").ok());
  EXPECT_FALSE(ParseMeminfo("MemFree: 100 kB\nMemTotal: lots\n").ok());
}

TEST(HostMemory, ThisMachineHasSomeAvailable) {
  const absl::StatusOr<HostMemory> m = ReadHostMemory();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_GT(m->total, 0u);
  EXPECT_GT(m->available, 0u);
  EXPECT_LE(m->available, m->total);
}

}  // namespace
}  // namespace tandem

// Host blocks: alignment by size class, blocks that never overlap and keep what was written, freed in any order,
// and prefaulting that makes every page resident without changing what it holds.
#include "cpu_backend/host_block.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

namespace tandem::cpu {
namespace {

uintptr_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(HostBlock, AlignsEachSizeClass) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, size_t{65535}, size_t{65536}, size_t{900} << 10,
                       kHugePage - 1, kHugePage, kHugePage + 1, size_t{33} << 20}) {
    void* p = AllocHostBlock(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(Addr(p) % 64, 0u) << bytes;
    if (bytes >= (size_t{64} << 10)) {
      EXPECT_EQ(Addr(p) % 4096, 0u) << bytes;
    }
    if (bytes >= kHugePage) {
      EXPECT_EQ(Addr(p) % kHugePage, 0u) << bytes;
    }
    std::memset(p, 0x5A, bytes);
    FreeHostBlock(p);
  }
  FreeHostBlock(nullptr);
}

// Many small experts' worth of blocks, as a Qwen3-MoE layer allocates them: distinct, holding what was written,
// freed in a random order, then allocated again.
TEST(HostBlock, SlabBlocksNeverOverlapAndComeBack) {
  std::mt19937 rng(7);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::pair<uint8_t*, size_t>> blocks;
    for (int i = 0; i < 200; ++i) {
      const size_t bytes = (size_t{64} << 10) + rng() % (size_t{1900} << 10);
      auto* p = static_cast<uint8_t*>(AllocHostBlock(bytes));
      ASSERT_NE(p, nullptr);
      std::memset(p, i & 0xFF, bytes);
      blocks.emplace_back(p, bytes);
    }
    std::vector<std::pair<uint8_t*, size_t>> sorted = blocks;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 1; i < sorted.size(); ++i) {
      EXPECT_GE(Addr(sorted[i].first), Addr(sorted[i - 1].first) + sorted[i - 1].second);
    }
    for (size_t i = 0; i < blocks.size(); ++i) {
      const auto [p, bytes] = blocks[i];
      const auto want = static_cast<uint8_t>(i & 0xFF);
      EXPECT_TRUE(p[0] == want && p[bytes / 2] == want && p[bytes - 1] == want) << i;
    }
    std::shuffle(blocks.begin(), blocks.end(), rng);
    for (auto [p, bytes] : blocks) FreeHostBlock(p);
  }
}

// Pages of [p, p + bytes) that mincore reports resident.
size_t ResidentPages(const void* p, size_t bytes) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = Addr(p) / page * page;
  const size_t n = (Addr(p) + bytes - start + page - 1) / page;
  std::vector<unsigned char> in_core(n);
  if (mincore(reinterpret_cast<void*>(start), n * page, in_core.data()) != 0) return 0;
  return static_cast<size_t>(std::count_if(in_core.begin(), in_core.end(), [](unsigned char c) { return c & 1; }));
}

// After prefaulting, every page of a block is resident and what it held survives. A block of its own mapping
// (2 MiB on) is not resident before; a slab's pages may be, from earlier blocks of this process.
TEST(HostBlock, PrefaultMakesEveryPageResidentAndKeepsTheContents) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (size_t bytes : {size_t{64} << 10, size_t{900} << 10, kHugePage, (size_t{9} << 20) + 12345}) {
    auto* p = static_cast<uint8_t*>(AllocHostBlock(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    const size_t pages = (bytes + page - 1) / page;
    const bool own_mapping = bytes >= kHugePage;
    if (own_mapping) {
      EXPECT_LT(ResidentPages(p, bytes), pages) << bytes << ": resident before any touch";
    }
    p[0] = 0x11;
    p[bytes / 2] = 0x22;
    p[bytes - 1] = 0x33;
    PrefaultHostBlock(p, bytes);
    EXPECT_EQ(ResidentPages(p, bytes), pages) << bytes;
    EXPECT_EQ(p[0], 0x11);
    EXPECT_EQ(p[bytes / 2], 0x22);
    EXPECT_EQ(p[bytes - 1], 0x33);
    if (own_mapping) {
      EXPECT_EQ(p[1], 0) << "a fresh mapping reads zero";
    }
    FreeHostBlock(p);
  }
  PrefaultHostBlock(nullptr, 100);  // ignored
}

TEST(HostBlockDeathTest, FreeingForeignMemoryIsABug) {
  int on_stack = 0;
  EXPECT_DEATH(FreeHostBlock(&on_stack), "");
}

}  // namespace
}  // namespace tandem::cpu

// Host blocks: alignment by size class, blocks that never overlap and keep what was written, freed in any order.
#include "cpu_backend/host_block.h"

#include <gtest/gtest.h>

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

TEST(HostBlockDeathTest, FreeingForeignMemoryIsABug) {
  int on_stack = 0;
  EXPECT_DEATH(FreeHostBlock(&on_stack), "");
}

}  // namespace
}  // namespace tandem::cpu

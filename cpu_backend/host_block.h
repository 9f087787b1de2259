// Large host blocks (weights the CPU computes with, the read probe's buffer) on transparent huge pages where the
// system allows them (THP "madvise" or "always"). A one-token matmul streams its weights once per token, and on
// 4 KiB pages whole-model decode was 8-16 % slower (docs/performance.md). TANDEM_THP=0 keeps 4 KiB pages, for
// comparisons; the probe follows the same switch, so decode is always held to a roof on the same pages.
#pragma once

#include <cstddef>

namespace tandem::cpu {

constexpr size_t kHugePage = size_t{2} << 20;

// At least `bytes`, aligned to a huge page; only the huge pages the bytes fill are advised, so a partial last one
// costs no memory. Release with std::free. Null when the allocation fails.
void* AllocHostBlock(size_t bytes);

}  // namespace tandem::cpu

// Host blocks (weights the CPU computes with, workspaces, the read probe's buffer) on transparent huge pages where
// the system allows them (THP "madvise" or "always"). A one-token matmul streams its weights once per token, and on
// 4 KiB pages whole-model decode was 8-16 % slower (docs/performance.md). A block of 2 MiB or more gets its own
// mapping; a block of 64 KiB to 2 MiB (one small expert: Qwen3-MoE's are 0.9 MiB) is carved out of a shared
// 32 MiB slab, where malloc would have put it on its heap's 4 KiB pages; anything smaller comes from malloc.
// TANDEM_THP=0 keeps 4 KiB pages, for comparisons; the probe follows the same switch, so decode is always held to
// a roof on the same pages.
#pragma once

#include <cstddef>

namespace tandem::cpu {

constexpr size_t kHugePage = size_t{2} << 20;

// At least `bytes`, aligned to 64 bytes; from 64 KiB on, to 4 KiB, and from 2 MiB on to a huge page. Only the huge
// pages the bytes fill are advised, so a partial last one costs no memory. Release with FreeHostBlock. Null when
// the allocation fails.
void* AllocHostBlock(size_t bytes);
// Releases a block of AllocHostBlock; null is ignored.
void FreeHostBlock(void* p);

// Makes the pages of [p, p + bytes) resident now, keeping what they hold, so that the first kernel to use them
// does not pay the kernel's page faults and zeroing: a 511-token Mixtral prefill on our VM host spent 0.05-0.25 s
// of about 0.9 in its 210 MiB of workspaces' first touch (docs/performance.md). MADV_POPULATE_WRITE where the
// kernel has it (Linux 5.14), else a write per 4 KiB page.
void PrefaultHostBlock(void* p, size_t bytes);

// A deleter for std::unique_ptr.
struct HostBlockDeleter {
  void operator()(void* p) const { FreeHostBlock(p); }
};

}  // namespace tandem::cpu

#include "cpu_backend/host_block.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "core/status.h"

namespace tandem::cpu {
namespace {

constexpr size_t kSlabMin = size_t{64} << 10;  // below this, malloc
constexpr size_t kSlabBytes = size_t{32} << 20;
constexpr size_t kPage = 4096;

bool HugePagesWanted() {
  static const bool huge = [] {
    const char* env = std::getenv("TANDEM_THP");
    return env == nullptr || std::string_view(env) != "0";
  }();
  return huge;
}

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A huge-page-aligned anonymous mapping of `bytes` (a multiple of kHugePage), advised before first touch so that
// its faults take huge pages. Null on failure.
void* MapAligned(size_t bytes) {
  const size_t len = bytes + kHugePage;
  void* raw = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = RoundUp(base, kHugePage);
  if (aligned > base) munmap(raw, aligned - base);
  if (const uintptr_t tail = base + len - (aligned + bytes); tail > 0) {
    munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  }
  return reinterpret_cast<void*>(aligned);
}

struct Slab {
  uint8_t* base = nullptr;
  size_t used = 0;  // bump offset
  size_t live = 0;  // blocks not yet freed
};

// Where each block came from, for FreeHostBlock.
struct Block {
  enum Kind : uint8_t { kMalloc, kMapping, kSlab } kind;
  size_t bytes = 0;   // the mapping's length (kMapping)
  Slab* slab = nullptr;
};

struct Registry {
  std::mutex mu;
  absl::flat_hash_map<void*, Block> blocks;
  Slab* current = nullptr;  // the slab new blocks are carved from
};

Registry& Blocks() {
  static Registry* r = new Registry;  // never destroyed: blocks may be freed from static destructors
  return *r;
}

}  // namespace

void* AllocHostBlock(size_t bytes) {
  Registry& r = Blocks();
  if (bytes < kSlabMin) {
    void* p = std::aligned_alloc(64, RoundUp(std::max<size_t>(bytes, 1), 64));
    if (p == nullptr) return nullptr;
    std::lock_guard<std::mutex> lock(r.mu);
    r.blocks[p] = {.kind = Block::kMalloc};
    return p;
  }
  if (bytes >= kHugePage) {
    const size_t len = RoundUp(bytes, kHugePage);
    void* p = MapAligned(len);
    if (p == nullptr) return nullptr;
    if (HugePagesWanted()) madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
    std::lock_guard<std::mutex> lock(r.mu);
    r.blocks[p] = {.kind = Block::kMapping, .bytes = len};
    return p;
  }
  const size_t len = RoundUp(bytes, kPage);
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.current == nullptr || r.current->used + len > kSlabBytes) {
    auto* base = static_cast<uint8_t*>(MapAligned(kSlabBytes));
    if (base == nullptr) return nullptr;
    if (HugePagesWanted()) madvise(base, kSlabBytes, MADV_HUGEPAGE);
    r.current = new Slab{.base = base};  // the one left behind holds blocks; its last one unmaps it
  }
  Slab* s = r.current;
  void* p = s->base + s->used;
  s->used += len;
  ++s->live;
  r.blocks[p] = {.kind = Block::kSlab, .slab = s};
  return p;
}

void FreeHostBlock(void* p) {
  if (p == nullptr) return;
  Registry& r = Blocks();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.blocks.find(p);
  TANDEM_CHECK(it != r.blocks.end());  // not a block of ours: a bug
  const Block b = it->second;
  r.blocks.erase(it);
  switch (b.kind) {
    case Block::kMalloc:
      std::free(p);
      break;
    case Block::kMapping:
      munmap(p, b.bytes);
      break;
    case Block::kSlab:
      if (--b.slab->live == 0 && b.slab != r.current) {
        munmap(b.slab->base, kSlabBytes);
        delete b.slab;
      } else if (b.slab->live == 0) {
        b.slab->used = 0;  // the current slab, empty again: reuse it from the start
      }
      break;
  }
}

void PrefaultHostBlock(void* p, size_t bytes) {
  if (p == nullptr || bytes == 0) return;
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14's value; older headers lack the name
#endif
  // madvise wants a page-aligned start; blocks of 64 KiB and more are, and smaller ones are malloc's, already
  // touched more often than not. Chunks of 2 MiB go to the threads: each fault zeroes its page, and two
  // threads populate about twice as fast as one.
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / kPage * kPage, end = reinterpret_cast<uintptr_t>(p) + bytes;
  const auto n_chunks = static_cast<int64_t>((end - begin + kHugePage - 1) / kHugePage);
  std::atomic<bool> unsupported{false};
#pragma omp parallel for schedule(dynamic) if (n_chunks > 1)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const uintptr_t from = begin + static_cast<uintptr_t>(c) * kHugePage;
    const uintptr_t to = std::min(end, from + kHugePage);
    // Only a kernel (or gVisor) without it (EINVAL) is worked around: where memory ran out (ENOMEM), touching
    // the pages would only bring the OOM killer sooner.
    if (madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE) != 0 && errno == EINVAL) {
      unsupported = true;
    }
  }
  if (!unsupported) return;
  // Write each page's first byte back to itself.
  auto* bytes_at = static_cast<volatile uint8_t*>(p);
  for (size_t i = 0; i < bytes; i += kPage) bytes_at[i] = bytes_at[i];
  bytes_at[bytes - 1] = bytes_at[bytes - 1];
}

}  // namespace tandem::cpu

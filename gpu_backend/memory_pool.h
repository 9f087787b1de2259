// A memory pool with a hard capacity that tracks its peak. It owns the accounting only; the raw allocator
// (cudaMalloc on the GPU, malloc in tests) is injected, so the budget logic is tested without a device.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::gpu {

class MemoryPool {
 public:
  using RawAlloc = std::function<absl::StatusOr<void*>(size_t bytes)>;
  using RawFree = std::function<void(void* p)>;

  // Sizes are charged rounded up to kGranule, the alignment every allocation gets.
  static constexpr size_t kGranule = 256;

  // `device` names the pool in error messages ("cuda:0").
  MemoryPool(std::string device, size_t capacity, RawAlloc raw_alloc, RawFree raw_free);
  ~MemoryPool();  // frees whatever is still allocated
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // ResourceExhausted when the charge would pass the capacity or the raw allocator fails. A zero-byte request
  // still gets a distinct pointer (charged one granule) so Free() stays uniform.
  absl::StatusOr<void*> Alloc(size_t bytes, std::string_view what);
  // InvalidArgument for a pointer this pool did not hand out (nothing is freed then). Null is a no-op.
  absl::Status Free(void* p);

  size_t capacity() const { return capacity_; }
  size_t bytes_in_use() const;
  size_t peak_bytes() const;
  size_t live_allocations() const;

  static size_t Charge(size_t bytes) { return bytes == 0 ? kGranule : (bytes + kGranule - 1) / kGranule * kGranule; }

 private:
  struct Block {
    size_t charged = 0;
    std::string what;
  };
  const std::string device_;
  const size_t capacity_;
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mu_;
  std::unordered_map<void*, Block> blocks_;
  size_t in_use_ = 0;
  size_t peak_ = 0;
};

// "1.50 GiB", "12.0 MiB", "512 B": for messages.
std::string FormatBytes(size_t bytes);

}  // namespace tandem::gpu

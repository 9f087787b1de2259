#include "gpu_backend/memory_pool.h"

#include <algorithm>
#include <utility>

#include "core/status.h"

namespace tandem::gpu {

MemoryPool::MemoryPool(std::string device, size_t capacity, RawAlloc raw_alloc, RawFree raw_free)
    : device_(std::move(device)),
      capacity_(capacity),
      raw_alloc_(std::move(raw_alloc)),
      raw_free_(std::move(raw_free)) {}

MemoryPool::~MemoryPool() {
  for (auto& [p, block] : blocks_) raw_free_(p);
}

absl::StatusOr<void*> MemoryPool::Alloc(size_t bytes, std::string_view what) {
  const size_t charge = Charge(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (charge < bytes || charge > capacity_ - std::min(in_use_, capacity_)) {
    return ResourceExhausted(device_, ": out of budget allocating ", FormatBytes(bytes), " for ", what, ": ",
                             FormatBytes(in_use_), " of ", FormatBytes(capacity_), " already in use");
  }
  absl::StatusOr<void*> p = raw_alloc_(charge);
  if (!p.ok()) {
    return ResourceExhausted(device_, ": allocating ", FormatBytes(bytes), " for ", what, " failed (",
                             FormatBytes(in_use_), " of ", FormatBytes(capacity_), " in use): ", p.status().message());
  }
  if (*p == nullptr) return ResourceExhausted(device_, ": allocator returned null for ", what);
  blocks_[*p] = Block{charge, std::string(what)};
  in_use_ += charge;
  peak_ = std::max(peak_, in_use_);
  return *p;
}

absl::Status MemoryPool::Free(void* p) {
  if (p == nullptr) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(p);
  if (it == blocks_.end()) return InvalidArgument(device_, ": Free of a pointer this pool did not allocate");
  in_use_ -= it->second.charged;
  blocks_.erase(it);
  raw_free_(p);
  return absl::OkStatus();
}

size_t MemoryPool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}
size_t MemoryPool::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}
size_t MemoryPool::live_allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return blocks_.size();
}

std::string FormatBytes(size_t bytes) {
  constexpr double kKiB = 1024.0;
  const double b = static_cast<double>(bytes);
  if (b >= kKiB * kKiB * kKiB) return absl::StrFormat("%.2f GiB", b / (kKiB * kKiB * kKiB));
  if (b >= kKiB * kKiB) return absl::StrFormat("%.1f MiB", b / (kKiB * kKiB));
  if (b >= kKiB) return absl::StrFormat("%.1f KiB", b / kKiB);
  return absl::StrFormat("%zu B", bytes);
}

}  // namespace tandem::gpu

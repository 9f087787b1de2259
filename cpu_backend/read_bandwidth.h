// A streaming-read probe: the memory-bandwidth roof that decode kernels are held against.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::cpu {

// Owns a buffer much larger than the caches; Run() reads all of it with every OpenMP thread.
class ReadBandwidthProbe {
 public:
  explicit ReadBandwidthProbe(size_t bytes = size_t{1} << 30);
  ~ReadBandwidthProbe();
  ReadBandwidthProbe(const ReadBandwidthProbe&) = delete;
  ReadBandwidthProbe& operator=(const ReadBandwidthProbe&) = delete;
  double Run();  // GB/s of one full pass
  size_t bytes() const { return bytes_; }

 private:
  uint8_t* buf_ = nullptr;
  size_t bytes_ = 0;
  volatile uint64_t sink_ = 0;
};

}  // namespace tandem::cpu

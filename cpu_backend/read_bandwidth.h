// A streaming-read probe: the memory-bandwidth roof that decode kernels are held against. Used by
// `tandem bench` and bench/matmul_bench.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::cpu {

// Owns a buffer much larger than the caches, read by every OpenMP thread in 2 MiB chunks handed out
// dynamically (as MatMul hands out rows). Each Run reads the next slice, so what it reads was last touched
// many runs ago and is not in cache.
class ReadBandwidthProbe {
 public:
  static constexpr size_t kChunk = size_t{2} << 20;
  explicit ReadBandwidthProbe(size_t bytes = size_t{1} << 30);
  ~ReadBandwidthProbe();
  ReadBandwidthProbe(const ReadBandwidthProbe&) = delete;
  ReadBandwidthProbe& operator=(const ReadBandwidthProbe&) = delete;
  // Reads about `slice` bytes (whole chunks, at least one; 0 = the whole buffer) and returns GB/s. A slice about
  // the size of the kernel's weights makes probe and kernel last about as long on a shared machine.
  double Run(size_t slice = 0);
  // The bytes Run(slice) reads.
  size_t SliceBytes(size_t slice = 0) const;
  size_t bytes() const { return bytes_; }

 private:
  uint8_t* buf_ = nullptr;
  size_t bytes_ = 0;
  size_t next_ = 0;  // chunk where the next run starts
  volatile uint64_t sink_ = 0;
};

}  // namespace tandem::cpu

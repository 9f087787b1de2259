#include "cpu_backend/read_bandwidth.h"

#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

namespace tandem::cpu {
namespace {

// Sums 64-byte lines with AVX2 loads so the probe is bound by memory, not by the adder.
__attribute__((target("avx2"))) uint64_t SumAvx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
  __m256i a2 = _mm256_setzero_si256(), a3 = _mm256_setzero_si256();
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  return static_cast<uint64_t>(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1) +
                               _mm256_extract_epi64(s, 2) + _mm256_extract_epi64(s, 3));
}

uint64_t SumScalar(const uint8_t* p, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i + 8 <= n; i += 64) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    s += v;
  }
  return s;
}

}  // namespace

ReadBandwidthProbe::ReadBandwidthProbe(size_t bytes) : bytes_(bytes / 4096 * 4096) {
  buf_ = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes_));
  // First touch from every thread, so pages land where the readers run.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(bytes_ / 4096); ++i) std::memset(buf_ + i * 4096, i & 0xFF, 4096);
}

ReadBandwidthProbe::~ReadBandwidthProbe() { std::free(buf_); }

double ReadBandwidthProbe::Run() {
  const bool avx2 = __builtin_cpu_supports("avx2");
  uint64_t total = 0;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : total)
  {
    const size_t nth = omp_get_num_threads(), me = omp_get_thread_num();
    const size_t per = bytes_ / nth / 128 * 128;
    const uint8_t* p = buf_ + me * per;
    total += avx2 ? SumAvx2(p, per) : SumScalar(p, per);
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  sink_ = sink_ + total;
  return static_cast<double>(bytes_) / dt * 1e-9;
}

}  // namespace tandem::cpu

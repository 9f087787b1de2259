// Which SIMD kernel family MatMul may use: what the CPU has, capped by env TANDEM_ISA and by SetIsa; and how far
// the one-token kernels prefetch.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cpu_backend/kernels.h"

namespace tandem::cpu {
namespace {

Isa Detect() {
  __builtin_cpu_init();
  // The AVX-512 kernels use F, BW, VL, DQ and VNNI (dpbusd/dpwssd); BF16 is checked separately when the BF16
  // kernel is picked, since a CPU may have VNNI without it.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    return Isa::kAvx2;
  }
  return Isa::kScalar;
}

Isa CapFromEnv(Isa detected) {
  const char* env = std::getenv("TANDEM_ISA");
  if (env == nullptr) return detected;
  Isa cap = detected;
  if (std::strcmp(env, "scalar") == 0) cap = Isa::kScalar;
  if (std::strcmp(env, "avx2") == 0) cap = Isa::kAvx2;
  if (std::strcmp(env, "avx512") == 0) cap = Isa::kAvx512;
  return static_cast<int>(cap) < static_cast<int>(detected) ? cap : detected;
}

Isa Min(Isa a, Isa b) { return static_cast<int>(a) < static_cast<int>(b) ? a : b; }

// -1 until first use; then the active Isa as an int.
std::atomic<int> g_active{-1};

}  // namespace

Isa DetectedIsa() {
  static const Isa detected = Detect();
  return detected;
}

Isa ActiveIsa() {
  int v = g_active.load(std::memory_order_relaxed);
  if (v < 0) {
    v = static_cast<int>(CapFromEnv(DetectedIsa()));
    int expected = -1;
    if (!g_active.compare_exchange_strong(expected, v)) v = expected;
  }
  return static_cast<Isa>(v);
}

void SetIsa(Isa isa) { g_active.store(static_cast<int>(Min(isa, DetectedIsa())), std::memory_order_relaxed); }

namespace {
constexpr size_t kIntelDecodePrefetch = 4096;
// SIZE_MAX until first use.
std::atomic<size_t> g_decode_prefetch{SIZE_MAX};
std::atomic<size_t> g_row_prefetch{SIZE_MAX};

// The setting's value, decided on first use: the vendor default, or the environment's `env` where it holds a byte
// count up to 1 MiB.
size_t PrefetchSetting(std::atomic<size_t>& setting, const char* env) {
  size_t v = setting.load(std::memory_order_relaxed);
  if (v == SIZE_MAX) {
    __builtin_cpu_init();
    v = __builtin_cpu_is("intel") ? kIntelDecodePrefetch : 0;
    if (const char* text = std::getenv(env); text != nullptr) {
      char* end = nullptr;
      const unsigned long long bytes = std::strtoull(text, &end, 10);
      if (end != text && *end == '\0' && bytes <= (size_t{1} << 20)) v = static_cast<size_t>(bytes);
    }
    size_t expected = SIZE_MAX;
    if (!setting.compare_exchange_strong(expected, v)) v = expected;
  }
  return v;
}
}  // namespace

size_t DecodePrefetchBytes() { return PrefetchSetting(g_decode_prefetch, "TANDEM_DECODE_PREFETCH"); }
void SetDecodePrefetchBytes(size_t bytes) { g_decode_prefetch.store(bytes, std::memory_order_relaxed); }
size_t RowPrefetchBytes() { return PrefetchSetting(g_row_prefetch, "TANDEM_ROW_PREFETCH"); }
void SetRowPrefetchBytes(size_t bytes) { g_row_prefetch.store(bytes, std::memory_order_relaxed); }

}  // namespace tandem::cpu

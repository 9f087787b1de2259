// How the shape of a plain read sets the DRAM bandwidth it gets: the read probe's own pattern (ReadBandwidthProbe:
// chunks of 2 MiB taken dynamically, each read as two runs with 256-bit loads; here summed in 512-bit lanes)
// against the same bytes read with 512-bit loads, with one or four runs a chunk, in other chunk sizes, and in the
// guided chunks of cpu::MatMulBatch. No arithmetic beyond a sum, so what differs is only the pattern of loads. This
// is the measurement behind the Q8_0 decode kernel's 256-bit loads (docs/performance.md).
//
//   read_pattern_bench [--mib M] [--rounds N]
//
// Threads: OMP_NUM_THREADS. Every pattern reads the next of 16 copies of M MiB (default 33, the size of one
// Mixtral expert matrix at Q4_0), between two runs of cpu::ReadBandwidthProbe over slices of the same size; each
// line is the pattern's GB/s and its percentage of the mean of those two probes. Patterns run in turn, round after
// round, so that all of them meet the host's bandwidth swings alike; compare them within a round or by medians
// over many.
// GCC 12's AVX-512 headers build some results from a deliberately uninitialized register (see
// cpu_backend/vec_dot_avx512.cc).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cpu_backend/host_block.h"
#include "cpu_backend/read_bandwidth.h"

namespace {

// The sum of [p, p + bytes) read as S runs side by side (run s starts at p + s * bytes / S), 64 bytes per run per
// step, as one 512-bit load or two 256-bit loads.
template <int S, bool k512>
__attribute__((target("avx512f"), noinline)) uint64_t SumRuns(const uint8_t* p, size_t bytes) {
  const size_t len = bytes / S;
  __m512i acc[S];
  for (int s = 0; s < S; ++s) acc[s] = _mm512_setzero_si512();
  for (size_t i = 0; i < len; i += 64) {
    for (int s = 0; s < S; ++s) {
      const uint8_t* q = p + s * len + i;
      if constexpr (k512) {
        acc[s] = _mm512_add_epi64(acc[s], _mm512_load_si512(q));
      } else {
        const __m256i lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
        const __m256i hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32));
        acc[s] = _mm512_add_epi64(acc[s], _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
      }
    }
  }
  uint64_t total = 0;
  for (int s = 0; s < S; ++s) total += static_cast<uint64_t>(_mm512_reduce_add_epi64(acc[s]));
  return total;
}

using SumFn = uint64_t (*)(const uint8_t*, size_t);
volatile uint64_t g_sink = 0;

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Chunks of `chunk` bytes handed out one at a time; GB/s.
double Dynamic(const uint8_t* p, size_t bytes, size_t chunk, SumFn sum) {
  const auto n = static_cast<int64_t>(bytes / chunk);
  uint64_t total = 0;
  const double t0 = Now();
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : total)
  for (int64_t c = 0; c < n; ++c) total += sum(p + static_cast<size_t>(c) * chunk, chunk);
  const double dt = Now() - t0;
  g_sink = g_sink + total;
  return static_cast<double>(n) * static_cast<double>(chunk) / dt * 1e-9;
}

// As cpu::MatMulBatch hands out a one-token job: a share of what is left, at most `cap`, in whole 4 KiB units;
// GB/s.
double Guided(const uint8_t* p, size_t bytes, size_t cap, SumFn sum) {
  constexpr size_t kUnit = 4096;
  std::atomic<size_t> next{0};
  uint64_t total = 0;
  const double t0 = Now();
#pragma omp parallel reduction(+ : total)
  {
    const auto threads = static_cast<size_t>(omp_get_num_threads());
    size_t g0 = next.load(std::memory_order_relaxed);
    while (g0 < bytes) {
      const size_t take = std::clamp((bytes - g0) / (2 * threads) / kUnit * kUnit, kUnit, cap);
      if (next.compare_exchange_weak(g0, g0 + take, std::memory_order_relaxed)) {
        total += sum(p + g0, (std::min(bytes, g0 + take) - g0) / kUnit * kUnit);
        g0 = next.load(std::memory_order_relaxed);
      }
    }
  }
  const double dt = Now() - t0;
  g_sink = g_sink + total;
  return static_cast<double>(bytes) / dt * 1e-9;
}

struct Pattern {
  const char* name;
  double (*run)(const uint8_t* p, size_t bytes);
};

constexpr size_t kMiB = size_t{1} << 20;

template <size_t kChunk, int S, bool k512>
double DynamicRuns(const uint8_t* p, size_t bytes) {
  return Dynamic(p, bytes, kChunk, SumRuns<S, k512>);
}
template <size_t kCap, int S, bool k512>
double GuidedRuns(const uint8_t* p, size_t bytes) {
  return Guided(p, bytes, kCap, SumRuns<S, k512>);
}

const Pattern kPatterns[] = {
    {"probe: 2 MiB dynamic, 2 runs, 256-bit", DynamicRuns<2 * kMiB, 2, false>},
    {"2 MiB dynamic, 2 runs, 512-bit", DynamicRuns<2 * kMiB, 2, true>},
    {"2 MiB dynamic, 4 runs, 512-bit", DynamicRuns<2 * kMiB, 4, true>},
    {"2 MiB dynamic, 1 run, 512-bit", DynamicRuns<2 * kMiB, 1, true>},
    {"512 KiB dynamic, 2 runs, 512-bit", DynamicRuns<kMiB / 2, 2, true>},
    {"8 MiB guided, 2 runs, 512-bit", GuidedRuns<8 * kMiB, 2, true>},
    {"8 MiB guided, 4 runs, 512-bit", GuidedRuns<8 * kMiB, 4, true>},
    {"8 MiB guided, 4 runs, 256-bit", GuidedRuns<8 * kMiB, 4, false>},
};

using Block = std::unique_ptr<uint8_t, tandem::cpu::HostBlockDeleter>;

// On the backend's weight pages, first touched by the threads that read them.
Block Touched(size_t bytes) {
  Block b(static_cast<uint8_t*>(tandem::cpu::AllocHostBlock(bytes)));
  if (b == nullptr) return b;
  uint8_t* p = b.get();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(bytes / 4096); ++i) {
    std::memset(p + i * 4096, static_cast<int>(i & 0xFF), 4096);
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 33;
  int rounds = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mib" && i + 1 < argc) {
      mib = std::strtoul(argv[++i], nullptr, 10);
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: read_pattern_bench [--mib M] [--rounds N]\n");
      return 2;
    }
  }
  if (!__builtin_cpu_supports("avx512f") || mib < 2 || mib > 1024 || rounds < 1) {
    std::fprintf(stderr, "read_pattern_bench: needs AVX-512, 2 <= --mib <= 1024 and --rounds >= 1\n");
    return 2;
  }
  const size_t bytes = mib / 2 * 2 * kMiB;  // whole 2 MiB chunks
  constexpr int kCopies = 16;
  tandem::cpu::ReadBandwidthProbe probe;
  std::vector<Block> copies;
  for (int i = 0; i < kCopies; ++i) {
    copies.push_back(Touched(bytes));
    if (copies.back() == nullptr) {
      std::fprintf(stderr, "read_pattern_bench: out of memory\n");
      return 1;
    }
  }
  auto run_probe = [&] { return probe.Run(bytes); };
  std::printf("round | pattern | GB/s | probe GB/s | %% of probe\n");
  int copy = 0;
  for (int r = 0; r < rounds; ++r) {
    for (const Pattern& pat : kPatterns) {
      const double before = run_probe();
      const double gbps = pat.run(copies[copy].get(), bytes);
      copy = (copy + 1) % kCopies;
      const double probe_gbps = (before + run_probe()) / 2;
      std::printf("%d | %s | %.1f | %.1f | %.1f\n", r, pat.name, gbps, probe_gbps, 100 * gbps / probe_gbps);
    }
  }
  return 0;
}

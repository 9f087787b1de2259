// MatMul throughput per weight type against a measured memory read bandwidth.
//
//   matmul_bench [--rows R] [--cols C] [--types Q4_0,Q8_0,...] [--ntok 1,8,32,512] [--reps N] [--probe-mib M]
//                [--layout gguf|packed|both]
//
// Threads: OMP_NUM_THREADS. Kernel family: TANDEM_ISA=scalar|avx2|avx512 (default: the best the CPU has).
//
// Each timed kernel run follows a run of the read probe (a slice about the matrix's size of a buffer much
// larger than the caches) and uses the next of several copies of the matrix (up to 768 MiB together), so
// weights come from DRAM, as in real decoding, where every layer's matrices are read once per token, and probe
// and kernel see the same machine load.
//
// Columns: the medians (kernel time, weight GB/s, GFLOP/s, probe GB/s, their ratio); the bests (kernel time,
// weight GB/s, probe GB/s, ratio); the median CPU time per thread, which on a busy machine is closer to what a
// quiet one would show; the median over runs of each run's GB/s against the probe run just before it, which
// follows the host's swings better than the ratio of medians. On a shared machine also set
// OMP_WAIT_POLICY=passive: threads spinning at a barrier while their partner waits for a core stretch every
// parallel region by whole scheduler slices.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cpu_backend/repack.h"
#include "cpu_backend/host_block.h"
#include "cpu_backend/kernels.h"
#include "cpu_backend/read_bandwidth.h"

namespace {

using tandem::DType;
using tandem::WeightMatrix;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds used by all threads of the process: on a shared machine, wall time also counts the time our
// threads wait for a core, CPU time does not.
double CpuNow() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Random weights: plain floats from N(0, 1); quantized types as random bytes with small fp16 scales
// (the kernels' speed does not depend on the values, and real quantizers are slow at this size).
std::vector<uint8_t> RandomWeights(DType type, int64_t rows, int64_t cols, uint64_t seed) {
  const size_t bytes = tandem::RowBytes(type, cols) * rows;
  std::vector<uint8_t> w(bytes);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = rows * cols;
  if (type == DType::kF32) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = normal(rng);
      std::memcpy(w.data() + 4 * i, &v, 4);
    }
    return w;
  }
  if (type == DType::kF16 || type == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = normal(rng);
      const uint16_t h = type == DType::kF16 ? tandem::F32ToF16(v) : tandem::F32ToBf16(v);
      std::memcpy(w.data() + 2 * i, &h, 2);
    }
    return w;
  }
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t r = rng();
    std::memcpy(w.data() + i, &r, 8);
  }
  // Every fp16 field of these formats: clamp its exponent so scales are small normal numbers, not inf/NaN.
  const tandem::DTypeTraits& tr = tandem::Traits(type);
  std::vector<size_t> f16_fields;
  switch (type) {
    case DType::kQ4_0: case DType::kQ5_0: case DType::kQ8_0: f16_fields = {0}; break;
    case DType::kQ4_1: case DType::kQ5_1: case DType::kQ4_K: case DType::kQ5_K: f16_fields = {0, 2}; break;
    case DType::kQ2_K: f16_fields = {80, 82}; break;
    case DType::kQ3_K: f16_fields = {108}; break;
    case DType::kQ6_K: f16_fields = {208}; break;
    default: break;
  }
  for (size_t b = 0; b < bytes / tr.block_bytes; ++b) {
    for (size_t off : f16_fields) {
      const uint16_t h = tandem::F32ToF16(0.01f * normal(rng));
      std::memcpy(w.data() + b * tr.block_bytes + off, &h, 2);
    }
    // MXFP4's power-of-two scale byte: 2^-9..2^-6, not random exponents, whose subnormal and infinite products
    // would time the FPU's slow paths instead of the kernel.
    if (type == DType::kMXFP4) w[b * tr.block_bytes] = static_cast<uint8_t>(119 + rng() % 4);
  }
  return w;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const size_t end = comma == std::string::npos ? s.size() : comma;
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

const char* IsaName(tandem::cpu::Isa isa) {
  switch (isa) {
    case tandem::cpu::Isa::kScalar: return "scalar";
    case tandem::cpu::Isa::kAvx2: return "avx2";
    case tandem::cpu::Isa::kAvx512: return "avx512";
  }
  return "?";
}

int Usage() {
  std::fprintf(stderr,
               "usage: matmul_bench [--rows R] [--cols C] [--types T1,T2] [--ntok 1,8,32,512] [--reps N] "
               "[--layout gguf|packed|both] "
               "[--probe-mib M]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 14336, cols = 4096;
  int reps = 9;
  size_t probe_mib = 1024;
  std::vector<std::string> type_names = {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                         "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "MXFP4"};
  std::vector<int64_t> ntoks = {1, 8, 32, 512};
  // --layout packed: the CPU backend's repacked copy (repack.h) where the type has one; both: each type in the GGUF
  // layout, then packed, so the two meet the same minutes of the host's bandwidth swings.
  std::vector<bool> layouts = {false};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Usage();
    const std::string v = argv[++i];
    if (a == "--rows") {
      rows = std::atoll(v.c_str());
    } else if (a == "--cols") {
      cols = std::atoll(v.c_str());
    } else if (a == "--reps") {
      reps = std::max(1, std::atoi(v.c_str()));
    } else if (a == "--probe-mib") {
      probe_mib = static_cast<size_t>(std::max(16, std::atoi(v.c_str())));
    } else if (a == "--types") {
      type_names = Split(v);
    } else if (a == "--layout") {
      if (v != "gguf" && v != "packed" && v != "both") return Usage();
      layouts = v == "both" ? std::vector<bool>{false, true} : std::vector<bool>{v == "packed"};
    } else if (a == "--ntok") {
      ntoks.clear();
      for (const std::string& t : Split(v)) ntoks.push_back(std::atoll(t.c_str()));
    } else {
      return Usage();
    }
  }
  if (rows <= 0 || cols <= 0 || cols % 256 != 0) {
    std::fprintf(stderr, "rows must be > 0 and cols a positive multiple of 256\n");
    return 2;
  }

  tandem::cpu::ReadBandwidthProbe probe(probe_mib << 20);
  std::printf("# matmul_bench: %lld x %lld (rows x cols), %d threads, isa %s, probe buffer %zu MiB, %d reps\n",
              static_cast<long long>(rows), static_cast<long long>(cols), omp_get_max_threads(),
              IsaName(tandem::cpu::ActiveIsa()), probe_mib, reps);
  std::printf("%-6s %5s %9s %8s %9s %8s %7s | %9s %8s %8s %7s | %9s %7s\n", "type", "n_tok", "ms", "GB/s", "GFLOP/s",
              "probe", "%probe", "best_ms", "GB/s", "probe", "%probe", "cpu_ms/th", "run%");

  const int64_t max_tok = *std::max_element(ntoks.begin(), ntoks.end());
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(max_tok * cols));
  for (float& v : x) v = normal(rng);
  std::vector<float> y(static_cast<size_t>(max_tok * rows));

  for (const std::string& name : type_names) {
    const auto type = tandem::DTypeFromName(name);
    if (!type) {
      std::fprintf(stderr, "unknown type %s\n", name.c_str());
      return 2;
    }
    const std::vector<uint8_t> w = RandomWeights(*type, rows, cols, 2);
    const size_t row_bytes = tandem::RowBytes(*type, cols);
    // Copies of the matrix, used in turn, so consecutive runs never find their weights in a cache: a 1 GiB
    // probe alone does not evict a matrix of a few tens of MB from a large L3 (measured: a 48 MB buffer read
    // right after the probe came back at ~3x DRAM speed). Like a real model, where each layer has its own.
    const size_t n_copies = std::max<size_t>(1, std::min<size_t>(16, (size_t{768} << 20) / w.size()));
    // Allocated as the backend allocates weights (huge pages where allowed; TANDEM_THP=0 for 4 KiB ones), so the
    // bench, the probe and the model read the same kind of pages.
    const WeightMatrix gguf_view{*type, w.data(), rows, cols, row_bytes};
    for (const bool packed : layouts) {
      const bool pack = packed && tandem::cpu::CanRepack(gguf_view);
      const size_t w_bytes = pack ? tandem::cpu::PackedBytes(gguf_view) : w.size();
      std::vector<std::unique_ptr<uint8_t, tandem::cpu::HostBlockDeleter>> copies;
      for (size_t i = 0; i < n_copies; ++i) {
        copies.emplace_back(static_cast<uint8_t*>(tandem::cpu::AllocHostBlock(w_bytes)));
        if (copies.back() == nullptr) {
          std::fprintf(stderr, "out of memory for %zu copies of %zu bytes\n", n_copies, w_bytes);
          return 1;
        }
        if (pack) {
          tandem::cpu::Repack(gguf_view, copies.back().get());
        } else {
          std::memcpy(copies.back().get(), w.data(), w_bytes);
        }
      }
      const std::string label = pack ? name + "p" : name;
      std::vector<uint8_t> scratch(tandem::cpu::MatMulScratchBytes(*type, cols, max_tok));
      for (int64_t n_tok : ntoks) {
        // Prefill-sized runs take long; fewer repetitions keep the whole table to minutes.
        const int n_reps = n_tok >= 256 ? std::max(1, reps / 3) : reps;
        const auto layout = pack ? tandem::cpu::kPackedLayout : tandem::kGgufLayout;
        const WeightMatrix first{.type = *type, .data = copies[0].get(), .rows = rows, .cols = cols,
                                 .row_stride = row_bytes, .layout = layout};
        tandem::cpu::MatMul(first, x.data(), n_tok, y.data(), scratch.data());  // warm-up: threads, page tables
        std::vector<double> times, cpu_times, probes, ratios;
        for (int r = 0; r < n_reps; ++r) {
          probes.push_back(probe.Run(w_bytes));
          const double t0 = Now(), c0 = CpuNow();
          const WeightMatrix m{.type = *type, .data = copies[(r + 1) % n_copies].get(), .rows = rows, .cols = cols,
                               .row_stride = row_bytes, .layout = layout};
          tandem::cpu::MatMul(m, x.data(), n_tok, y.data(), scratch.data());
          cpu_times.push_back(CpuNow() - c0);
          times.push_back(Now() - t0);
          ratios.push_back(static_cast<double>(w_bytes) / times.back() * 1e-9 / probes.back());
        }
        const double t = Median(times), bw = Median(probes);
        const double best = *std::min_element(times.begin(), times.end());
        const double best_bw = *std::max_element(probes.begin(), probes.end());
        const double best_gbs = static_cast<double>(w_bytes) / best * 1e-9;
        const double cpu_per_thread = Median(cpu_times) / omp_get_max_threads();
        const double gbs = static_cast<double>(w_bytes) / t * 1e-9;
        const double gflops = 2.0 * static_cast<double>(rows) * cols * n_tok / t * 1e-9;
        std::printf("%-6s %5lld %9.3f %8.2f %9.1f %8.2f %6.1f%% | %9.3f %8.2f %8.2f %6.1f%% | %9.3f %6.1f%%\n",
                    label.c_str(), static_cast<long long>(n_tok), t * 1e3, gbs, gflops, bw, 100.0 * gbs / bw,
                    best * 1e3, best_gbs, best_bw, 100.0 * best_gbs / best_bw, cpu_per_thread * 1e3,
                    100.0 * Median(ratios));
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

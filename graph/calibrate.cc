#include "graph/calibrate.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>
#include <functional>
#include <memory>
#include <random>

#include "core/quant.h"
#include "core/cpu_load.h"
#include "core/status.h"
#include "cpu_backend/host_block.h"
#include "cpu_backend/kernels.h"
#include "cpu_backend/onednn_matmul.h"
#include "cpu_backend/read_bandwidth.h"
#include "cpu_backend/repack.h"
#include "graph/measure.h"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;

// A GEMV's weights this size come from memory, not from the last-level cache: twice the L3, within 64 MiB to 1 GiB.
// A 2-vCPU Xeon VM with a 480 MiB L3 read a 64 MiB GEMV at 56 GB/s against the probe's 34 (256 MiB: 31-40 GB/s,
// 1 GiB: 28-32), and chose the decode prefetch by cache reads (2026-12-06).
size_t GemvBytesBeyondCache() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const size_t twice_l3 = l3 > 0 ? 2 * static_cast<size_t>(l3) : 0;
  return std::clamp<size_t>(twice_l3, size_t{64} << 20, size_t{1} << 30);
}

struct Sizes {
  int64_t cols = 4096;
  size_t gemv_bytes = GemvBytesBeyondCache();  // beyond the caches: measures memory bandwidth
  int64_t gemm_rows = 1024;
  int64_t gemm_tokens = 128;
  int64_t attn_ctx = 2048;
  int attn_tokens = 32;
  double min_seconds = 0.1;  // per trial
  int min_reps = 3;
  int trials = 5;            // per figure (graph/measure.h)
  int overhead_calls = 2000;
};

Sizes SizesFor(bool quick) {
  Sizes s;
  if (quick) {  // the GEMV's weights stay beyond the caches: a quick rate must still be memory's, not cache's
    s.gemm_rows = 256;
    s.gemm_tokens = 32;
    s.attn_ctx = 256;
    s.attn_tokens = 8;
    s.min_seconds = 0.01;
    s.min_reps = 1;
    s.trials = 3;
    s.overhead_calls = 200;
  }
  return s;
}

double Seconds(Clock::time_point begin) { return std::chrono::duration<double>(Clock::now() - begin).count(); }

// The fastest of fn's runs, over at least min_reps runs and min_seconds in total, after one warm-up run. Another
// program on the same cores only ever slows a run down (two OpenMP teams spinning on two cores, by up to 10x), so
// the fastest is the nearest to the machine's own rate, which is what a plan assumes; the figures' bounds catch a
// run that was fast for a wrong reason.
double TimeIt(const Sizes& sz, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  const auto begin = Clock::now();
  while (static_cast<int>(t.size()) < sz.min_reps || Seconds(begin) < sz.min_seconds) {
    const auto s = Clock::now();
    fn();
    t.push_back(Seconds(s));
    if (t.size() >= 1000) break;
  }
  return std::max(*std::min_element(t.begin(), t.end()), 1e-9);
}

// A GEMV's bytes may come faster than the streaming probe's fastest read by this much at most (the margin covers
// what still differs between two timings; the probe reads a buffer the size of the GEMV's weights, whole, as the
// GEMV reads them, so both meet the same cache reuse).
constexpr double kGemvOverProbe = 1.25;
// A GEMM may reach this share of the ISA's peak at most (the peak below is already a generous one).
constexpr double kGemmOverPeak = 1.25;
// Quantized prefill takes oneDNN's bf16 route on AMX (cpu_backend/onednn_matmul.h) only when it measures this much
// faster than MatMul's kernels: its results are no longer llama.cpp's activation rounding, so a tie keeps ours.
constexpr double kOneDnnQuantGain = 1.05;
constexpr std::array<int64_t, 2> kQuantRouteBatches = {256, 512};  // 512: prefill's default batch

// One core's clock: a chain of dependent register adds retires one add per cycle on every x86 core of the last
// decade. Register, not immediate, operands: newer Intel cores fold chains of immediate adds in the renamer
// (an AMX Xeon VM measured "20.18 GHz" with `add $1`). The fastest of many short tries (about a millisecond each,
// inside one scheduler slice), so that a busy machine cannot lower it.
double MeasureClockGhz() {
  constexpr int64_t kLoops = 250'000;  // x 8 adds
  double best = 0;
  for (int attempt = 0; attempt < 30; ++attempt) {
    uint64_t x = 0;
    const uint64_t one = 1;
    const auto begin = Clock::now();
    for (int64_t i = 0; i < kLoops; ++i) {
      asm volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                   "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
                   : "+r"(x)
                   : "r"(one));
    }
    best = std::max(best, static_cast<double>(x) / Seconds(begin) / 1e9);
  }
  return best;
}

// Multiply-adds a core can start per cycle, counted as two operations each, for the widest kernels an ISA level
// runs (int8 dot products over two 512-bit ports for AVX-512): an upper bound, not a prediction.
double PeakOpsPerCycle(cpu::Isa isa) {
  switch (isa) {
    case cpu::Isa::kAvx512:
      return 256;
    case cpu::Isa::kAvx2:
      return 128;
    case cpu::Isa::kScalar:
      break;
  }
  return 64;  // compilers vectorize the scalar paths too
}

// On the pages the CPU backend computes from (huge pages where allowed).
using HostBuf = std::unique_ptr<uint8_t, cpu::HostBlockDeleter>;

HostBuf HostAlloc(size_t bytes) { return HostBuf(static_cast<uint8_t*>(cpu::AllocHostBlock(bytes))); }

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A rows x cols matrix of `type`: a few quantized random rows repeated (speed does not depend on the values).
absl::StatusOr<HostBuf> SyntheticMatrix(DType type, int64_t rows, int64_t cols) {
  const size_t row_bytes = RowBytes(type, cols);
  constexpr int64_t kDistinct = 16;
  HostBuf buf = HostAlloc(row_bytes * static_cast<size_t>(rows));
  if (!buf) return ResourceExhausted("calibrate: out of memory for a ", rows, "x", cols, " matrix");
  const std::vector<float> src = Random(static_cast<size_t>(kDistinct * cols), 7);
  for (int64_t r = 0; r < std::min(rows, kDistinct); ++r) {
    TANDEM_RETURN_IF_ERROR(QuantizeRow(type, src.data() + r * cols, buf.get() + r * row_bytes, cols));
  }
  for (int64_t r = kDistinct; r < rows; ++r) {
    std::memcpy(buf.get() + r * row_bytes, buf.get() + (r % kDistinct) * row_bytes, row_bytes);
  }
  return buf;
}

std::vector<DType> TypesToMeasure(const CalibrateOptions& opts) {
  std::vector<DType> types = opts.types;
  if (types.empty()) {
    // MXFP4: gpt-oss's experts; without a measured rate the planner would take the slowest type's.
    types = {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
             DType::kMXFP4};
  }
  types.erase(std::remove_if(types.begin(), types.end(), [](DType t) { return !CanQuantize(t); }), types.end());
  return types;
}

// A weight matrix for timing one-token products: about sz.gemv_bytes of `type`, repacked when the CPU backend
// would repack it. gemv reads all of it; the GGUF bytes it stands for are row_bytes * rows.
struct GemvMatrix {
  HostBuf file_rows;
  HostBuf packed;
  WeightMatrix gemv;
  size_t gguf_bytes = 0;
};

absl::StatusOr<GemvMatrix> MakeGemvMatrix(const Sizes& sz, DType type, bool repack) {
  GemvMatrix m;
  const size_t row_bytes = RowBytes(type, sz.cols);
  // Whole groups of 16 rows, so the matrix can be repacked as a model's would be.
  const int64_t wanted = std::max<int64_t>(sz.gemm_rows, static_cast<int64_t>(sz.gemv_bytes / row_bytes));
  const int64_t rows = wanted / cpu::kPackRows * cpu::kPackRows;
  TANDEM_ASSIGN_OR_RETURN(m.file_rows, SyntheticMatrix(type, rows, sz.cols));
  m.gemv = WeightMatrix{type, m.file_rows.get(), rows, sz.cols, row_bytes};
  m.gguf_bytes = row_bytes * static_cast<size_t>(rows);
  // Measured in the layout the CPU backend will compute with: the repacked one where it repacks. The bytes a
  // decoded token reads are the same in both (GB/s counts the GGUF bytes).
  if (repack && cpu::CanRepack(m.gemv)) {
    m.packed = HostAlloc(cpu::PackedBytes(m.gemv));
    if (!m.packed) return ResourceExhausted("calibrate: out of memory repacking a ", rows, "x", sz.cols, " matrix");
    m.gemv = cpu::Repack(m.gemv, m.packed.get());
  }
  return m;
}

// The memory's read roof as the probe has seen it so far: its fastest read. A busy machine only slows reads down
// (two OpenMP teams on the same cores slow each other by up to 10x), so the fastest is the nearest to what memory
// can give, and an honest GEMV trial taken in a quiet moment is not refused for a probe read in a busy one.
struct ReadRoof {
  cpu::ReadBandwidthProbe* probe = nullptr;
  double best_gbps = 0;
  double Read() { return best_gbps = std::max(best_gbps, probe->Run()); }
};

// One trial of a GEMV's GB/s, each product preceded by a read of the probe (a buffer of the same size, read whole
// as the GEMV reads its weights, so that both meet the same cache reuse), bounded by the roof.
Trial GemvTrial(const Sizes& sz, const GemvMatrix& m, ReadRoof& roof, const float* x, float* y, void* scratch) {
  double gemv_s = 0;
  int reps = 0;
  const auto begin = Clock::now();
  while (reps < sz.min_reps || Seconds(begin) < sz.min_seconds) {
    roof.Read();
    const auto s = Clock::now();
    cpu::MatMul(m.gemv, x, 1, y, scratch);
    gemv_s += Seconds(s);
    if (++reps >= 1000) break;
  }
  return Trial{.value = static_cast<double>(m.gguf_bytes) * reps / gemv_s / 1e9,
               .upper = roof.best_gbps * kGemvOverProbe};
}

MeasureOptions GemvFigure(const Sizes& sz, std::string what) {
  return {.what = std::move(what), .unit = "GB/s", .bound_reason = "the fastest memory read alongside",
          .trials = sz.trials};
}

}  // namespace

namespace {

struct Distance {
  int64_t bytes = 0;
  double gain = 1;  // its GB/s over none
};

// The prefetch distance a one-token product reads fastest with, set through `set`: round after round, every
// candidate once, so that all of them meet the host's swings alike. No prefetch unless a distance is clearly and
// steadily faster: by 5 % in the median, and in at least two rounds of three against no prefetch in the same round
// (a host's swings make single rounds differ by more than that).
Distance FastestDistance(const Sizes& sz, int rounds, void (*set)(size_t), const std::function<void()>& product,
                         size_t bytes) {
  constexpr size_t kCandidates[] = {0, 2048, 4096};
  std::vector<double> gbps[std::size(kCandidates)];
  for (int r = 0; r < rounds; ++r) {
    for (size_t c = 0; c < std::size(kCandidates); ++c) {
      set(kCandidates[c]);
      gbps[c].push_back(static_cast<double>(bytes) / TimeIt(sz, product) / 1e9);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  Distance best;
  const double none = median(gbps[0]);
  for (size_t c = 1; c < std::size(kCandidates); ++c) {
    const double gain = median(gbps[c]) / none;
    int won = 0;
    for (int r = 0; r < rounds; ++r) won += gbps[c][r] > gbps[0][r] ? 1 : 0;
    if (gain > 1.05 && 3 * won >= 2 * rounds && gain > best.gain) best = {static_cast<int64_t>(kCandidates[c]), gain};
  }
  return best;
}

}  // namespace

absl::StatusOr<KernelSettings> MeasureKernelSettings(const CalibrateOptions& opts) {
  if (opts.n_threads > 0) omp_set_num_threads(opts.n_threads);
  Sizes sz = SizesFor(false);  // weights beyond the caches, or the prefetch is not what is measured
  sz.min_seconds = opts.quick ? 0.02 : 0.05;
  const int rounds = opts.quick ? 3 : 7;
  const bool repack = ResolveRepack(opts.repack);
  const std::vector<float> x = Random(static_cast<size_t>(sz.cols), 29);
  KernelSettings k;
  {  // within rows: Q4_K, the most common type of decode's bytes (Q4_K_M files)
    TANDEM_ASSIGN_OR_RETURN(const GemvMatrix m, MakeGemvMatrix(sz, DType::kQ4_K, repack));
    std::vector<float> y(static_cast<size_t>(m.gemv.rows));
    HostBuf scratch = HostAlloc(cpu::MatMulScratchBytes(DType::kQ4_K, sz.cols, 1));
    const size_t before = cpu::DecodePrefetchBytes();
    const Distance d = FastestDistance(
        sz, rounds, &cpu::SetDecodePrefetchBytes,
        [&] { cpu::MatMul(m.gemv, x.data(), 1, y.data(), scratch.get()); }, m.gguf_bytes);
    cpu::SetDecodePrefetchBytes(before);
    k.decode_prefetch_bytes = d.bytes;
    k.decode_prefetch_gain = d.gain;
  }
  {  // rows ahead: the float types (BF16, F16), the Q4_K matrix freed first; one product of each per timing
    TANDEM_ASSIGN_OR_RETURN(const GemvMatrix bf16, MakeGemvMatrix(sz, DType::kBF16, repack));
    TANDEM_ASSIGN_OR_RETURN(const GemvMatrix f16, MakeGemvMatrix(sz, DType::kF16, repack));
    std::vector<float> y(static_cast<size_t>(std::max(bf16.gemv.rows, f16.gemv.rows)));
    HostBuf scratch = HostAlloc(std::max(cpu::MatMulScratchBytes(DType::kBF16, sz.cols, 1),
                                         cpu::MatMulScratchBytes(DType::kF16, sz.cols, 1)));
    const size_t before = cpu::RowPrefetchBytes();
    const Distance d = FastestDistance(
        sz, rounds, &cpu::SetRowPrefetchBytes,
        [&] {
          cpu::MatMul(bf16.gemv, x.data(), 1, y.data(), scratch.get());
          cpu::MatMul(f16.gemv, x.data(), 1, y.data(), scratch.get());
        },
        bf16.gguf_bytes + f16.gguf_bytes);
    cpu::SetRowPrefetchBytes(before);
    k.row_prefetch_bytes = d.bytes;
    k.row_prefetch_gain = d.gain;
  }
  return k;
}

void SetKernelSettings(const KernelSettings& k, MachineProfile* p) {
  p->cpu_decode_prefetch_bytes = k.decode_prefetch_bytes;
  p->cpu_decode_prefetch_gain = k.decode_prefetch_gain;
  p->cpu_row_prefetch_bytes = k.row_prefetch_bytes;
  p->cpu_row_prefetch_gain = k.row_prefetch_gain;
}

absl::StatusOr<MachineProfile> CalibrateCpu(const CalibrateOptions& opts) {
  if (opts.n_threads > 0) omp_set_num_threads(opts.n_threads);
  const Sizes sz = SizesFor(opts.quick);
  MachineProfile p = DefaultProfile(false);
  p.device = "cpu";
  p.kind = opts.quick ? ProfileKind::kQuick : ProfileKind::kFull;
  p.measured_at = UtcNowIso8601();
  p.host = ThisHost();
  p.n_threads = omp_get_max_threads();
  p.cpu_gemv_gbps.clear();
  p.cpu_gemm_gflops.clear();
  // What else ran meanwhile: rates taken beside other work are low, and plans made from them mislead.
  const absl::StatusOr<CpuTimes> load_before = ReadCpuTimes();
  const auto wall_start = Clock::now();

  // Kernel settings first, so that the rates below are those of the kernels as they will run.
  TANDEM_ASSIGN_OR_RETURN(const KernelSettings k, MeasureKernelSettings(opts));
  SetKernelSettings(k, &p);
  ApplyKernelSettings(p);

  // The GEMMs' bound: every core the threads run on at the measured clock, at the ISA's widest rate.
  p.cpu_clock_ghz = MeasureClockGhz();
  const int cores = std::max(1, std::min(p.n_threads, p.host.n_cores > 0 ? p.host.n_cores : p.n_threads));
  const double peak_gflops = cores * p.cpu_clock_ghz * PeakOpsPerCycle(cpu::ActiveIsa()) * kGemmOverPeak;
  auto peak_trial = [&](double value) { return Trial{.value = value, .upper = peak_gflops}; };
  auto gemm_figure = [&](std::string what) {
    return MeasureOptions{.what = std::move(what), .unit = "GFLOP/s",
                          .bound_reason = Cat("the peak of ", cores, " cores at ", p.cpu_clock_ghz, " GHz"),
                          .trials = sz.trials};
  };

  const std::vector<float> x =
      Random(static_cast<size_t>(sz.cols * std::max(sz.gemm_tokens, kQuantRouteBatches.back())), 11);
  const bool repack = ResolveRepack(opts.repack);
  // A buffer the size of one GEMV's weights (they are all about sz.gemv_bytes), read a few times up front.
  cpu::ReadBandwidthProbe probe(sz.gemv_bytes);
  ReadRoof roof{.probe = &probe};
  for (int i = 0; i < 2 * sz.trials; ++i) roof.Read();
  for (DType type : TypesToMeasure(opts)) {
    const std::string name(DTypeName(type));
    TANDEM_ASSIGN_OR_RETURN(const GemvMatrix m, MakeGemvMatrix(sz, type, repack));
    std::vector<float> y(static_cast<size_t>(m.gemv.rows * sz.gemm_tokens));
    HostBuf scratch = HostAlloc(cpu::MatMulScratchBytes(type, sz.cols, sz.gemm_tokens));
    cpu::MatMul(m.gemv, x.data(), 1, y.data(), scratch.get());  // warm-up
    TANDEM_ASSIGN_OR_RETURN(const Figure gemv, MeasureFigure(GemvFigure(sz, name + " GEMV"), [&] {
                              return GemvTrial(sz, m, roof, x.data(), y.data(), scratch.get());
                            }));
    p.cpu_gemv_gbps[type] = gemv.median;
    p.cpu_gemv_spread[type] = gemv.spread;

    WeightMatrix gemm = m.gemv;
    gemm.rows = sz.gemm_rows;  // the first groups (rows) of the same copy
    // Float weights take oneDNN's route for prefill (cpu_backend/onednn_matmul.h), measured on as many rows as it
    // needs. Quantized ones may take it on AMX (full calibrations): from the smallest of kQuantRouteBatches at
    // which it measures kOneDnnQuantGain faster than MatMul's kernels. The type's rate stays the kernels' at
    // sz.gemm_tokens, which is what the cost model's prefill assumes.
    const bool float_route = cpu::OneDnnEnabled() && cpu::OneDnnTakesType(type);
    const bool quant_route = !opts.quick && cpu::OneDnnEnabled() && cpu::IsPacked(gemm) &&
                             cpu::OneDnnQuantTakesType(type) && cpu::OneDnnPeakOpsPerCycle(type) > 0;
    if ((float_route || quant_route) && m.gemv.rows >= cpu::kOneDnnMinRows) {
      gemm.rows = std::max(gemm.rows, cpu::kOneDnnMinRows);
    }
    const bool onednn_fits = gemm.rows >= cpu::kOneDnnMinRows;
    const int64_t max_tok = quant_route ? std::max(sz.gemm_tokens, kQuantRouteBatches.back()) : sz.gemm_tokens;
    y.resize(std::max(y.size(), static_cast<size_t>(gemm.rows * max_tok)));
    if (max_tok > sz.gemm_tokens) scratch = HostAlloc(cpu::MatMulScratchBytes(type, sz.cols, max_tok));
    auto measure_gemm = [&](bool try_onednn, int64_t n_tok) -> absl::StatusOr<Figure> {
      cpu::OneDnnMatMuls onednn({.quant = cpu::OneDnnQuant::kAll});
      bool via_onednn = false;
      std::vector<uint8_t> onednn_scratch;
      if (try_onednn) {
        TANDEM_RETURN_IF_ERROR(onednn.SetMaxTokens(n_tok));
        TANDEM_ASSIGN_OR_RETURN(via_onednn, onednn.Prepare(gemm));
        onednn_scratch.resize(onednn.ScratchBytes(n_tok));
      }
      const double ops =
          std::max(PeakOpsPerCycle(cpu::ActiveIsa()), via_onednn ? cpu::OneDnnPeakOpsPerCycle(type) : 0);
      const double flops = 2.0 * static_cast<double>(gemm.rows) * sz.cols * n_tok;
      absl::Status run_status;
      auto run = [&] {
        if (!via_onednn) return cpu::MatMul(gemm, x.data(), n_tok, y.data(), scratch.get());
        if (absl::Status st = onednn.MatMul(gemm, x.data(), n_tok, y.data(), onednn_scratch.data()); !st.ok()) {
          run_status = st;
        }
      };
      std::string what = name + " GEMM";
      if (n_tok != sz.gemm_tokens) what += Cat(" at ", n_tok, " tokens", via_onednn ? " (oneDNN bf16)" : "");
      TANDEM_ASSIGN_OR_RETURN(const Figure fig, MeasureFigure(gemm_figure(what), [&] {
        const double gflops = flops / TimeIt(sz, run) / 1e9;
        return Trial{.value = gflops, .upper = cores * p.cpu_clock_ghz * ops * kGemmOverPeak};
      }));
      TANDEM_RETURN_IF_ERROR(run_status);
      return fig;
    };
    TANDEM_ASSIGN_OR_RETURN(const Figure gemm_fig, measure_gemm(float_route && onednn_fits, sz.gemm_tokens));
    for (const int64_t n_tok : kQuantRouteBatches) {
      if (!quant_route || !onednn_fits) break;
      TANDEM_ASSIGN_OR_RETURN(const Figure kernels, measure_gemm(false, n_tok));
      TANDEM_ASSIGN_OR_RETURN(const Figure via_onednn, measure_gemm(true, n_tok));
      if (via_onednn.median > kOneDnnQuantGain * kernels.median) {
        p.cpu_onednn_quant_min_tokens[type] = n_tok;
        break;
      }
    }
    p.cpu_gemm_gflops[type] = gemm_fig.median;
    p.cpu_gemm_spread[type] = gemm_fig.spread;
  }
  ApplyKernelSettings(p);

  {  // Attention over an F16 cache, Mixtral-like heads.
    const int n_head = 32, n_head_kv = 8, head_dim = 128;
    const int64_t row = int64_t{n_head_kv} * head_dim;
    std::vector<f16_t> k(static_cast<size_t>(sz.attn_ctx * row)), v(k.size());
    const std::vector<float> kv_src = Random(k.size(), 13);
    for (size_t i = 0; i < k.size(); ++i) k[i] = v[i] = F32ToF16(kv_src[i]);
    const std::vector<float> q = Random(static_cast<size_t>(sz.attn_tokens) * n_head * head_dim, 17);
    std::vector<float> out(q.size());
    const KvLayer kv{DType::kF16, k.data(), v.data(), sz.attn_ctx, row};
    const AttentionParams ap{n_head, n_head_kv, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))};
    HostBuf scratch = HostAlloc(cpu::AttentionScratchBytes(sz.attn_ctx, n_head, omp_get_max_threads()));
    const int64_t pos0 = sz.attn_ctx - sz.attn_tokens;
    const double avg_ctx = pos0 + (sz.attn_tokens + 1) / 2.0;
    const double flops = 4.0 * sz.attn_tokens * avg_ctx * n_head * head_dim;
    TANDEM_ASSIGN_OR_RETURN(const Figure attn, MeasureFigure(gemm_figure("attention"), [&] {
      return peak_trial(flops / TimeIt(sz, [&] {
        cpu::Attention(q.data(), kv, sz.attn_tokens, pos0, ap, out.data(), scratch.get());
      }) / 1e9);
    }));
    p.cpu_attn_gflops = attn.median;
    p.cpu_attn_spread = attn.spread;
  }

  {  // Fixed cost of a kernel call: a tiny matmul, dominated by the thread fork/join.
    const int64_t n = 64;
    const std::vector<float> w = Random(static_cast<size_t>(n * n), 19);
    std::vector<float> y(static_cast<size_t>(n));
    HostBuf scratch = HostAlloc(cpu::MatMulScratchBytes(DType::kF32, n, 1));
    const WeightMatrix m{DType::kF32, w.data(), n, n, static_cast<size_t>(n) * sizeof(float)};
    // A millisecond per call would be a machine too busy to plan for.
    const MeasureOptions o{.what = "kernel call overhead", .unit = "s", .bound_reason = "a sane machine",
                           .trials = sz.trials};
    TANDEM_ASSIGN_OR_RETURN(const Figure overhead, MeasureFigure(o, [&] {
      const auto begin = Clock::now();
      for (int i = 0; i < sz.overhead_calls; ++i) cpu::MatMul(m, x.data(), 1, y.data(), scratch.get());
      return Trial{.value = Seconds(begin) / sz.overhead_calls, .upper = 1e-3};
    }));
    p.cpu_op_overhead_s = overhead.median;
  }
  if (const absl::StatusOr<CpuTimes> load_after = ReadCpuTimes(); load_before.ok() && load_after.ok()) {
    p.others_cpu_share = OthersBusyShare(*load_before, *load_after, Seconds(wall_start));
  }
  return p;
}

absl::Status CalibrateDevice(Backend& dev, const CalibrateOptions& opts, MachineProfile* p) {
  if (dev.host_memory()) return InvalidArgument("calibrate: '", dev.name(), "' is host memory, not a device");
  const Sizes sz = SizesFor(opts.quick);
  const size_t cap = dev.capacity();
  // Stay well inside the device: the buffers below take at most about half of it.
  const size_t copy_bytes = std::min<size_t>(opts.quick ? (8ull << 20) : (64ull << 20), cap / 8);
  const DType type = DType::kQ4_K;
  const size_t row_bytes = RowBytes(type, sz.cols);
  const int64_t rows =
      std::max<int64_t>(16, static_cast<int64_t>(std::min<size_t>(sz.gemv_bytes / 2, cap / 8) / row_bytes));
  const int64_t gemm_rows = std::min(rows, sz.gemm_rows);
  const size_t w_bytes = row_bytes * static_cast<size_t>(rows);
  const size_t x_bytes = static_cast<size_t>(sz.cols * sz.gemm_tokens) * sizeof(float);
  const size_t y_bytes = static_cast<size_t>(rows * sz.gemm_tokens) * sizeof(float);
  if (copy_bytes < (1u << 16)) return InvalidArgument("calibrate: '", dev.name(), "' is too small to measure");

  WorkspaceSpec ws;
  ws.max_tokens = sz.gemm_tokens;
  ws.max_cols = sz.cols;
  ws.max_rows = rows;
  ws.n_ctx = 256;
  ws.n_head = 32;
  TANDEM_RETURN_IF_ERROR(dev.ReserveWorkspace(ws));

  std::vector<void*> device_blocks;
  std::vector<void*> pinned_blocks;
  auto release = [&] {
    (void)dev.Synchronize(Stream::kCompute);
    (void)dev.Synchronize(Stream::kCopy);
    for (void* b : device_blocks) dev.Free(b);
    for (void* b : pinned_blocks) dev.FreeHostPinned(b);
  };
  auto run = [&]() -> absl::Status {
    TANDEM_ASSIGN_OR_RETURN(void* d_copy, dev.Alloc(copy_bytes, "calibrate copy"));
    device_blocks.push_back(d_copy);
    TANDEM_ASSIGN_OR_RETURN(void* h_copy, dev.AllocHostPinned(std::max(copy_bytes, w_bytes)));
    pinned_blocks.push_back(h_copy);
    std::memset(h_copy, 1, std::max(copy_bytes, w_bytes));
    absl::Status st;
    const double t_copy = TimeIt(sz, [&] {
      st.Update(dev.CopyHostToDevice(d_copy, h_copy, copy_bytes, Stream::kCopy));
      st.Update(dev.Synchronize(Stream::kCopy));
    });
    TANDEM_RETURN_IF_ERROR(st);
    p->h2d_gbps = static_cast<double>(copy_bytes) / t_copy / 1e9;

    TANDEM_ASSIGN_OR_RETURN(HostBuf w_host, SyntheticMatrix(type, rows, sz.cols));
    TANDEM_ASSIGN_OR_RETURN(void* d_w, dev.Alloc(w_bytes, "calibrate weights"));
    device_blocks.push_back(d_w);
    TANDEM_ASSIGN_OR_RETURN(void* d_x, dev.Alloc(x_bytes, "calibrate x"));
    device_blocks.push_back(d_x);
    TANDEM_ASSIGN_OR_RETURN(void* d_y, dev.Alloc(y_bytes, "calibrate y"));
    device_blocks.push_back(d_y);
    std::memcpy(h_copy, w_host.get(), w_bytes);
    TANDEM_RETURN_IF_ERROR(dev.CopyHostToDevice(d_w, h_copy, w_bytes, Stream::kCompute));
    const std::vector<float> x = Random(static_cast<size_t>(sz.cols * sz.gemm_tokens), 23);
    TANDEM_RETURN_IF_ERROR(dev.CopyHostToDevice(d_x, x.data(), x_bytes, Stream::kCompute));
    TANDEM_RETURN_IF_ERROR(dev.Synchronize(Stream::kCompute));

    auto* xf = static_cast<const float*>(d_x);
    auto* yf = static_cast<float*>(d_y);
    const WeightMatrix gemv{type, d_w, rows, sz.cols, row_bytes};
    constexpr int kBatch = 8;  // several calls per sync, so the sync does not count as compute
    const double t1 = TimeIt(sz, [&] {
      for (int i = 0; i < kBatch; ++i) dev.MatMul(gemv, xf, 1, yf);
      st.Update(dev.Synchronize(Stream::kCompute));
    });
    p->gpu_gemv_gbps = static_cast<double>(w_bytes) * kBatch / t1 / 1e9;
    const WeightMatrix gemm{type, d_w, gemm_rows, sz.cols, row_bytes};
    const double tn = TimeIt(sz, [&] {
      dev.MatMul(gemm, xf, sz.gemm_tokens, yf);
      st.Update(dev.Synchronize(Stream::kCompute));
    });
    p->gpu_gemm_gflops = 2.0 * gemm_rows * sz.cols * sz.gemm_tokens / tn / 1e9;

    // Launch: many tiny kernels, one sync. Sync: an event hop between streams and a host wait.
    const int n_calls = sz.overhead_calls / 4;
    auto begin = Clock::now();
    for (int i = 0; i < n_calls; ++i) dev.Add(xf, xf, 256, yf);
    st.Update(dev.Synchronize(Stream::kCompute));
    p->gpu_launch_s = std::chrono::duration<double>(Clock::now() - begin).count() / n_calls;
    TANDEM_ASSIGN_OR_RETURN(const int ev, dev.CreateEvent());
    begin = Clock::now();
    for (int i = 0; i < n_calls; ++i) {
      st.Update(dev.RecordEvent(ev, Stream::kCompute));
      st.Update(dev.WaitEvent(ev, Stream::kCopy));
      st.Update(dev.Synchronize(Stream::kCopy));
    }
    p->gpu_sync_s = std::chrono::duration<double>(Clock::now() - begin).count() / n_calls;
    TANDEM_RETURN_IF_ERROR(st);
    return dev.TakeError();
  };
  const absl::Status s = run();
  release();
  TANDEM_RETURN_IF_ERROR(s);
  p->has_gpu = true;
  p->gpu_capacity_bytes = cap;
  p->device = std::string(dev.name());
  p->gpu_description = dev.Describe();
  return absl::OkStatus();
}

std::string CachedProfileMismatch(const MachineProfile& p, int n_threads) {
  if (p.kind == ProfileKind::kDefault || p.kind == ProfileKind::kSettings) return "holds no measured rates";
  if (!(p.host == ThisHost())) {
    return Cat("was measured on ", p.host.Describe(), ", not on this ", ThisHost().Describe());
  }
  if (p.n_threads != n_threads) return Cat("was measured with ", p.n_threads, " threads, not ", n_threads);
  return "";
}

absl::StatusOr<bool> StoreProfile(const std::string& path, const MachineProfile& p) {
  if (p.kind != ProfileKind::kFull) {
    absl::StatusOr<MachineProfile> cached = LoadProfile(path);
    if (cached.ok() && cached->kind > p.kind && cached->host == p.host) return false;
  }
  TANDEM_RETURN_IF_ERROR(SaveProfile(path, p));
  return true;
}

absl::StatusOr<MachineProfile> CachedCpuProfile(const CalibrateOptions& opts, bool* measured,
                                                std::vector<std::string>* notes) {
  const std::string path = ProfileCachePath("cpu");
  absl::StatusOr<MachineProfile> cached = LoadProfile(path);
  const int threads = opts.n_threads > 0 ? opts.n_threads : omp_get_max_threads();
  if (cached.ok()) {
    const std::string mismatch = CachedProfileMismatch(*cached, threads);
    if (mismatch.empty()) {
      if (measured) *measured = false;
      return cached;
    }
    if (notes != nullptr && cached->kind != ProfileKind::kSettings) {
      notes->push_back(Cat("the cached profile ", path, " ", mismatch, "; measuring this machine"));
    }
  }
  CalibrateOptions o = opts;
  o.n_threads = threads;
  TANDEM_ASSIGN_OR_RETURN(MachineProfile p, CalibrateCpu(o));
  (void)StoreProfile(path, p);  // a read-only cache only costs a re-measure next time
  if (measured) *measured = true;
  return p;
}

bool KernelSettingsMissing(const MachineProfile& p) {
  return p.cpu_decode_prefetch_bytes < 0 || p.cpu_row_prefetch_bytes < 0 || !(p.host == ThisHost());
}

absl::StatusOr<MachineProfile> EnsureKernelSettings(const CalibrateOptions& opts, std::vector<std::string>* notes) {
  const std::string path = ProfileCachePath("cpu");
  absl::StatusOr<MachineProfile> cached = LoadProfile(path);
  if (cached.ok() && !KernelSettingsMissing(*cached)) {
    ApplyKernelSettings(*cached);
    return cached;
  }
  TANDEM_ASSIGN_OR_RETURN(const KernelSettings k, MeasureKernelSettings(opts));
  if (notes != nullptr) {
    notes->push_back(Cat("measured this CPU's kernel settings once (decode prefetch ", k.decode_prefetch_bytes,
                         " bytes, ", k.decode_prefetch_gain, "x; row prefetch ", k.row_prefetch_bytes, " bytes, ",
                         k.row_prefetch_gain, "x), kept in ", path));
  }
  // Kept in the cached profile: added to one measured here, or as a profile of settings alone.
  MachineProfile p = cached.ok() && cached->host == ThisHost() ? *cached : DefaultProfile(false);
  if (p.kind == ProfileKind::kDefault) {
    p.kind = ProfileKind::kSettings;
    p.device = "cpu";
    p.host = ThisHost();
    p.measured_at = UtcNowIso8601();
  }
  SetKernelSettings(k, &p);
  (void)SaveProfile(path, p);
  ApplyKernelSettings(p);
  return p;
}

MachineProfile SimProfile(const MachineProfile& cpu, const SimOptions& sim) {
  MachineProfile p = cpu;
  const MachineProfile gpu_defaults = DefaultProfile(true);
  p.device = sim.spec;
  p.has_gpu = true;
  p.gpu_capacity_bytes = sim.capacity;
  p.h2d_gbps = sim.pcie_gbps;
  p.gpu_gemv_gbps = sim.gpu_gbps > 0 ? sim.gpu_gbps : gpu_defaults.gpu_gemv_gbps;
  p.gpu_gemm_gflops = gpu_defaults.gpu_gemm_gflops;
  p.gpu_launch_s = gpu_defaults.gpu_launch_s;
  p.gpu_sync_s = gpu_defaults.gpu_sync_s;
  p.gpu_library_workspace_bytes = 0;  // the sim runs the CPU kernels: no GPU libraries
  return p;
}

}  // namespace tandem

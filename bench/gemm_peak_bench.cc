// Prefill GEMM choices side by side on one shape: oneDNN's matmul in f32 and in bf16 (weights already converted,
// in oneDNN's preferred layout and as a file's rows, [n][k] row-major: no dequantization cost is counted), tandem's
// float-weight route through oneDNN (cpu_backend/onednn_matmul.h: activations converted, F16 rows through f32
// tiles, all counted), and tandem's packed int8 kernels (repack.h) on Q4_0, Q8_0, Q4_K and Q6_K weights of the same
// shape, next to the same packed rows through oneDNN's bf16 route (dequantized tile by tile, counted). This is the
// measurement behind the choice of prefill kernel recorded in docs/performance.md.
//
//   gemm_peak_bench [--m TOKENS] [--k COLS] [--n ROWS] [--reps N]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/quant.h"
#include "cpu_backend/kernels.h"
#include "cpu_backend/onednn_matmul.h"
#include "cpu_backend/repack.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

template <typename Fn>
double BestSeconds(int reps, Fn fn) {
  fn();  // warm-up: threads, page tables, oneDNN's JIT
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = Now();
    fn();
    best = std::min(best, Now() - t0);
  }
  return best;
}

// oneDNN matmul: src [m, k] (f32 or bf16), weights [k, n] in the layout oneDNN prefers or (file_rows) as [n][k]
// row-major, dst [m, n] f32.
double OneDnnGflops(dnnl::memory::data_type wt, bool file_rows, int64_t m, int64_t k, int64_t n, int reps) {
  using dnnl::memory;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const memory::desc src_md({m, k}, wt, memory::format_tag::ab);
  const memory::desc w_any({k, n}, wt, file_rows ? memory::format_tag::ba : memory::format_tag::any);
  const memory::desc dst_md({m, n}, memory::data_type::f32, memory::format_tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, w_any, dst_md), eng);

  // Random data through f32 buffers and oneDNN reorders, which also convert to bf16.
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> src_f(static_cast<size_t>(m * k)), w_f(static_cast<size_t>(k * n));
  for (float& v : src_f) v = normal(rng);
  for (float& v : w_f) v = normal(rng);
  memory src_f_mem({{m, k}, memory::data_type::f32, memory::format_tag::ab}, eng, src_f.data());
  memory w_f_mem({{k, n}, memory::data_type::f32, memory::format_tag::ab}, eng, w_f.data());
  memory src_mem(pd.src_desc(), eng), w_mem(pd.weights_desc(), eng), dst_mem(pd.dst_desc(), eng);
  dnnl::reorder(src_f_mem, src_mem).execute(strm, src_f_mem, src_mem);
  dnnl::reorder(w_f_mem, w_mem).execute(strm, w_f_mem, w_mem);
  strm.wait();

  const dnnl::matmul prim(pd);
  const double s = BestSeconds(reps, [&] {
    prim.execute(strm, {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_DST, dst_mem}});
    strm.wait();
  });
  return 2.0 * static_cast<double>(m) * k * n / s * 1e-9;
}

// tandem's float-weight route (OneDnnMatMuls) on the file's rows of `type`, primitives made for batches of m.
double RouteGflops(tandem::DType type, int64_t m, int64_t k, int64_t n, int reps) {
  std::vector<uint8_t> rows(tandem::RowBytes(type, k) * static_cast<size_t>(n), 0);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < rows.size() / 2; ++i) {  // random halves: bf16 or f16 values, or halves of f32 ones
    const uint16_t h = type == tandem::DType::kF16 ? tandem::F32ToF16(normal(rng)) : tandem::F32ToBf16(normal(rng));
    std::memcpy(rows.data() + 2 * i, &h, 2);
  }
  const tandem::WeightMatrix w{.type = type, .data = rows.data(), .rows = n, .cols = k};
  tandem::cpu::OneDnnMatMuls mm;
  if (!mm.SetMaxTokens(m).ok() || !mm.Prepare(w).ok() || !mm.Takes(w, m)) return 0.0;
  std::vector<uint8_t> scratch(mm.ScratchBytes(m));
  std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
  for (float& v : x) v = normal(rng);
  const double s = BestSeconds(reps, [&] { (void)mm.MatMul(w, x.data(), m, y.data(), scratch.data()); });
  return 2.0 * static_cast<double>(m) * k * n / s * 1e-9;
}

// Packed int8 kernels (repack.h) on `type`, or (via_onednn) the same packed rows through oneDNN's bf16 route,
// dequantized tile by tile (OneDnnQuant::kAll), all of it counted.
double PackedGflops(tandem::DType type, int64_t m, int64_t k, int64_t n, int reps, bool via_onednn = false) {
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t row_bytes = tandem::RowBytes(type, k);
  std::vector<uint8_t> gguf(row_bytes * static_cast<size_t>(n));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    for (float& v : row) v = normal(rng);
    if (!tandem::QuantizeRow(type, row.data(), gguf.data() + r * row_bytes, k, tandem::QuantizeEffort::kFast).ok()) {
      return 0;
    }
  }
  const tandem::WeightMatrix w{.type = type, .data = gguf.data(), .rows = n, .cols = k, .row_stride = row_bytes};
  std::vector<uint8_t> packed(tandem::cpu::PackedBytes(w));
  const tandem::WeightMatrix pw = tandem::cpu::Repack(w, packed.data());
  std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
  for (float& v : x) v = normal(rng);
  if (via_onednn) {
    tandem::cpu::OneDnnMatMuls mm({.quant = tandem::cpu::OneDnnQuant::kAll});
    if (!mm.SetMaxTokens(m).ok() || !mm.Prepare(pw).ok() || !mm.Takes(pw, m)) return 0.0;
    std::vector<uint8_t> scratch(mm.ScratchBytes(m));
    const double s = BestSeconds(reps, [&] { (void)mm.MatMul(pw, x.data(), m, y.data(), scratch.data()); });
    return 2.0 * static_cast<double>(m) * k * n / s * 1e-9;
  }
  std::vector<uint8_t> scratch(tandem::cpu::MatMulScratchBytes(type, k, m));
  const double s = BestSeconds(reps, [&] { tandem::cpu::MatMul(pw, x.data(), m, y.data(), scratch.data()); });
  return 2.0 * static_cast<double>(m) * k * n / s * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t m = 512, k = 4096, n = 14336;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (a == "--m") m = v;
    else if (a == "--k") k = v;
    else if (a == "--n") n = v;
    else if (a == "--reps") reps = static_cast<int>(v);
    else {
      std::fprintf(stderr, "usage: gemm_peak_bench [--m TOKENS] [--k COLS] [--n ROWS] [--reps N]\n");
      return 2;
    }
  }
  if (m <= 0 || n <= 0 || n % 16 != 0 || k <= 0 || k % 256 != 0) {
    std::fprintf(stderr, "need m > 0, n a positive multiple of 16 and k a positive multiple of 256\n");
    return 2;
  }
  std::printf("# gemm_peak_bench: m=%lld tokens, k=%lld, n=%lld, %d threads, best of %d\n", static_cast<long long>(m),
              static_cast<long long>(k), static_cast<long long>(n), omp_get_max_threads(), reps);
  std::printf("%-26s %10s\n", "kernel", "GFLOP/s");
  try {
    for (const bool rows : {false, true}) {
      using dnnl::memory;
      const char* layout = rows ? " (file rows)" : "";
      std::printf("oneDNN f32%-16s %10.1f\n", layout, OneDnnGflops(memory::data_type::f32, rows, m, k, n, reps));
      std::printf("oneDNN bf16%-15s %10.1f\n", layout, OneDnnGflops(memory::data_type::bf16, rows, m, k, n, reps));
    }
  } catch (const dnnl::error& e) {
    std::printf("oneDNN: %s\n", e.what());
  }
  for (tandem::DType t : {tandem::DType::kF32, tandem::DType::kBF16, tandem::DType::kF16}) {
    const std::string name = "tandem oneDNN " + std::string(tandem::DTypeName(t));
    std::printf("%-26s %10.1f\n", name.c_str(), RouteGflops(t, m, k, n, reps));
  }
  for (tandem::DType t : {tandem::DType::kQ4_0, tandem::DType::kQ8_0, tandem::DType::kQ4_K, tandem::DType::kQ6_K}) {
    const std::string name(tandem::DTypeName(t));
    std::printf("%-26s %10.1f\n", ("tandem packed " + name).c_str(), PackedGflops(t, m, k, n, reps));
    std::printf("%-26s %10.1f\n", ("tandem oneDNN " + name).c_str(), PackedGflops(t, m, k, n, reps, true));
  }
  return 0;
}

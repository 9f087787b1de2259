#include "graph/calibrate.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>

#include "core/quant.h"
#include "core/status.h"
#include "cpu_backend/kernels.h"
#include "cpu_backend/repack.h"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;

struct Sizes {
  int64_t cols = 4096;
  size_t gemv_bytes = 64ull << 20;  // beyond the caches: measures memory bandwidth
  int64_t gemm_rows = 1024;
  int64_t gemm_tokens = 128;
  int64_t attn_ctx = 2048;
  int attn_tokens = 32;
  double min_seconds = 0.2;  // per measurement
  int min_reps = 3;
  int overhead_calls = 2000;
};

Sizes SizesFor(bool quick) {
  Sizes s;
  if (quick) {
    s.gemv_bytes = 4ull << 20;
    s.gemm_rows = 256;
    s.gemm_tokens = 32;
    s.attn_ctx = 256;
    s.attn_tokens = 8;
    s.min_seconds = 0.01;
    s.min_reps = 1;
    s.overhead_calls = 200;
  }
  return s;
}

// Median seconds of fn over at least min_reps runs and min_seconds in total, after one warm-up run.
double TimeIt(const Sizes& sz, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  const auto begin = Clock::now();
  while (static_cast<int>(t.size()) < sz.min_reps ||
         std::chrono::duration<double>(Clock::now() - begin).count() < sz.min_seconds) {
    const auto s = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - s).count());
    if (t.size() >= 1000) break;
  }
  std::sort(t.begin(), t.end());
  return std::max(t[t.size() / 2], 1e-9);
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using HostBuf = std::unique_ptr<uint8_t, FreeDeleter>;

HostBuf HostAlloc(size_t bytes) {
  return HostBuf(static_cast<uint8_t*>(std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64))));
}

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
    types = {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  }
  types.erase(std::remove_if(types.begin(), types.end(), [](DType t) { return !CanQuantize(t); }), types.end());
  return types;
}

}  // namespace

absl::StatusOr<MachineProfile> CalibrateCpu(const CalibrateOptions& opts) {
  if (opts.n_threads > 0) omp_set_num_threads(opts.n_threads);
  const Sizes sz = SizesFor(opts.quick);
  MachineProfile p = DefaultProfile(false);
  p.device = "cpu";
  p.n_threads = omp_get_max_threads();
  p.cpu_gemv_gbps.clear();
  p.cpu_gemm_gflops.clear();

  const std::vector<float> x = Random(static_cast<size_t>(sz.cols * sz.gemm_tokens), 11);
  const bool repack = ResolveRepack(opts.repack);
  for (DType type : TypesToMeasure(opts)) {
    const size_t row_bytes = RowBytes(type, sz.cols);
    // Whole groups of 16 rows, so the matrix can be repacked as a model's would be.
    const int64_t wanted = std::max<int64_t>(sz.gemm_rows, static_cast<int64_t>(sz.gemv_bytes / row_bytes));
    const int64_t rows = wanted / cpu::kPackRows * cpu::kPackRows;
    TANDEM_ASSIGN_OR_RETURN(HostBuf w, SyntheticMatrix(type, rows, sz.cols));
    std::vector<float> y(static_cast<size_t>(rows * sz.gemm_tokens));
    HostBuf scratch = HostAlloc(cpu::MatMulScratchBytes(type, sz.cols, sz.gemm_tokens));
    WeightMatrix gemv{type, w.get(), rows, sz.cols, row_bytes};
    WeightMatrix gemm{type, w.get(), sz.gemm_rows, sz.cols, row_bytes};
    // Measured in the layout the CPU backend will compute with: the repacked one where it repacks. The bytes a
    // decoded token reads are the same in both (GB/s counts the GGUF bytes).
    HostBuf packed;
    if (repack && cpu::CanRepack(gemv)) {
      packed = HostAlloc(cpu::PackedBytes(gemv));
      gemv = cpu::Repack(gemv, packed.get());
      gemm = gemv;
      gemm.rows = sz.gemm_rows;  // the first groups of the same copy
    }
    const double t1 = TimeIt(sz, [&] { cpu::MatMul(gemv, x.data(), 1, y.data(), scratch.get()); });
    p.cpu_gemv_gbps[type] = static_cast<double>(row_bytes) * rows / t1 / 1e9;
    const double tn = TimeIt(sz, [&] { cpu::MatMul(gemm, x.data(), sz.gemm_tokens, y.data(), scratch.get()); });
    p.cpu_gemm_gflops[type] = 2.0 * sz.gemm_rows * sz.cols * sz.gemm_tokens / tn / 1e9;
  }

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
    const double t = TimeIt(sz, [&] {
      cpu::Attention(q.data(), kv, sz.attn_tokens, pos0, ap, out.data(), scratch.get());
    });
    const double avg_ctx = pos0 + (sz.attn_tokens + 1) / 2.0;
    p.cpu_attn_gflops = 4.0 * sz.attn_tokens * avg_ctx * n_head * head_dim / t / 1e9;
  }

  {  // Fixed cost of a kernel call: a tiny matmul, dominated by the thread fork/join.
    const int64_t n = 64;
    const std::vector<float> w = Random(static_cast<size_t>(n * n), 19);
    std::vector<float> y(static_cast<size_t>(n));
    HostBuf scratch = HostAlloc(cpu::MatMulScratchBytes(DType::kF32, n, 1));
    const WeightMatrix m{DType::kF32, w.data(), n, n, static_cast<size_t>(n) * sizeof(float)};
    const auto begin = Clock::now();
    for (int i = 0; i < sz.overhead_calls; ++i) cpu::MatMul(m, x.data(), 1, y.data(), scratch.get());
    p.cpu_op_overhead_s = std::chrono::duration<double>(Clock::now() - begin).count() / sz.overhead_calls;
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
  return absl::OkStatus();
}

absl::StatusOr<MachineProfile> CachedCpuProfile(const CalibrateOptions& opts, bool* measured) {
  const std::string path = ProfileCachePath("cpu");
  absl::StatusOr<MachineProfile> cached = LoadProfile(path);
  const int threads = opts.n_threads > 0 ? opts.n_threads : omp_get_max_threads();
  if (cached.ok() && cached->n_threads == threads) {
    if (measured) *measured = false;
    return cached;
  }
  CalibrateOptions o = opts;
  o.n_threads = threads;
  TANDEM_ASSIGN_OR_RETURN(MachineProfile p, CalibrateCpu(o));
  (void)SaveProfile(path, p);  // a read-only cache only costs a re-measure next time
  if (measured) *measured = true;
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

// GPU kernel benchmark. Measures the device's copy bandwidth (the ceiling for memory-bound kernels), pinned and
// pageable host<->device bandwidth, the quantized matvec of every weight type as achieved GB/s of weight bytes
// against that ceiling, the cuBLAS prefill path in GFLOP/s, decode attention, and an MoE layer's routing and
// experts (Qwen3-30B-A3B's shape) from decode to prefill batches. Prints one table; the last
// block, between "== summary ==" lines, is what tools/gpu-check.sh repeats.
//
// usage: gpu_bench [--quick]   (--quick: smaller matrices and fewer repetitions)
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#if defined(TANDEM_HAVE_CUDA)

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>

#include "absl/strings/str_format.h"
#include "core/dtype.h"
#include "gpu_backend/cuda_backend.h"
#include "tests/gpu_backend/random_weights.h"

namespace tandem {
namespace {

struct Row {
  std::string what;
  std::string value;
  std::string note;
};

class Report {
 public:
  void Add(std::string what, std::string value, std::string note = "") {
    std::printf("%-44s %14s  %s\n", what.c_str(), value.c_str(), note.c_str());
    std::fflush(stdout);
    rows_.push_back({std::move(what), std::move(value), std::move(note)});
  }
  void Summary() const {
    std::printf("== summary ==\n");
    std::printf("| %-44s | %14s | %-40s |\n", "measurement", "value", "note");
    std::printf("|%s|%s|%s|\n", std::string(46, '-').c_str(), std::string(16, '-').c_str(),
                std::string(42, '-').c_str());
    for (const Row& r : rows_) {
      std::printf("| %-44s | %14s | %-40s |\n", r.what.c_str(), r.value.c_str(), r.note.c_str());
    }
    std::printf("== summary ==\n");
  }

 private:
  std::vector<Row> rows_;
};

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

bool Ok(const absl::Status& st, const char* what) {
  if (st.ok()) return true;
  std::fprintf(stderr, "gpu_bench: %s: %s\n", what, std::string(st.message()).c_str());
  return false;
}

// Mean seconds per call of `body` (which only enqueues work) after warm-up: calls are queued back to back and
// the stream drained once, so launch overhead overlaps with execution.
double TimePerCall(Backend& gpu, Stream s, int warmup, int reps, const std::function<void()>& body) {
  for (int i = 0; i < warmup; ++i) body();
  if (!Ok(gpu.Synchronize(s), "synchronize")) return -1;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) body();
  if (!Ok(gpu.Synchronize(s), "synchronize")) return -1;
  const auto t1 = std::chrono::steady_clock::now();
  if (!Ok(gpu.TakeError(), "kernel")) return -1;
  return Seconds(t0, t1) / reps;
}

std::string Gbps(double bytes, double seconds) {
  return seconds > 0 ? absl::StrFormat("%.1f GB/s", bytes / seconds / 1e9) : "failed";
}

// Device-to-device copy bandwidth, counting bytes read plus bytes written, with the runtime directly (the
// Backend interface has no device-to-device copy).
double MeasureCopyBandwidth(size_t bytes, int reps) {
  void* a = nullptr;
  void* b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    cudaFree(a);
    return -1;
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);  // warm-up
  cudaEventRecord(e0);
  for (int i = 0; i < reps; ++i) cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  const bool ok = cudaGetLastError() == cudaSuccess;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return ok && ms > 0 ? 2.0 * static_cast<double>(bytes) * reps / (ms * 1e-3) : -1;
}

// A weight matrix of about `target` bytes on the device: a few MiB of random rows generated once and repeated.
struct DeviceWeights {
  WeightMatrix w;
  void* data = nullptr;
};
bool MakeWeights(Backend& gpu, DType t, int64_t cols, size_t target, DeviceWeights* out) {
  const size_t row_bytes = RowBytes(t, cols);
  const int64_t rows = std::max<int64_t>(4, static_cast<int64_t>(target / row_bytes) / 4 * 4);
  const int64_t template_rows = std::min<int64_t>(rows, std::max<int64_t>(1, (int64_t{8} << 20) / row_bytes));
  const std::vector<uint8_t> host = test::RandomWeightRows(t, template_rows, cols, 42);
  absl::StatusOr<void*> dev = gpu.Alloc(row_bytes * rows, "bench weights");
  if (!Ok(dev.status(), "alloc weights")) return false;
  for (int64_t r0 = 0; r0 < rows; r0 += template_rows) {
    const int64_t n = std::min(template_rows, rows - r0);
    if (!Ok(gpu.CopyHostToDevice(static_cast<uint8_t*>(*dev) + r0 * row_bytes, host.data(), n * row_bytes,
                                 Stream::kCompute),
            "upload weights")) {
      return false;
    }
  }
  out->data = *dev;
  out->w = {t, *dev, rows, cols, row_bytes};
  return Ok(gpu.Synchronize(Stream::kCompute), "upload weights");
}

float* DeviceNormals(Backend& gpu, size_t n) {
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = static_cast<float>((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
  absl::StatusOr<void*> d = gpu.Alloc(n * sizeof(float), "bench activations");
  if (!Ok(d.status(), "alloc activations")) return nullptr;
  if (!Ok(gpu.CopyHostToDevice(*d, h.data(), n * sizeof(float), Stream::kCompute), "upload")) return nullptr;
  return static_cast<float*>(*d);
}

int Run(bool quick) {
  Report report;
  const int n_dev = CudaDeviceCount();
  if (n_dev == 0) {
    std::printf("gpu_bench: skipped: no CUDA device\n");
    return 0;
  }
  absl::StatusOr<std::unique_ptr<Backend>> made = CreateCudaBackend({});
  if (!Ok(made.status(), "create backend")) return 1;
  Backend& gpu = **made;
  WorkspaceSpec spec;
  spec.max_tokens = 512;
  spec.max_cols = 8192;
  spec.max_rows = 8192;
  spec.n_ctx = 32768;
  spec.n_head = 32;
  spec.n_expert = 128;
  spec.n_expert_used = 8;
  if (!Ok(gpu.ReserveWorkspace(spec), "reserve workspace")) return 1;
  report.Add("device", std::string(gpu.name()));

  const size_t copy_bytes = quick ? (size_t{256} << 20) : (size_t{1} << 30);
  const double copy_bw = MeasureCopyBandwidth(copy_bytes, quick ? 4 : 10);
  report.Add("device copy (read+write)", Gbps(copy_bw, 1.0), "cudaMemcpy D2D, the roofline below");

  // ---- Host <-> device ----
  {
    const size_t n = quick ? (size_t{64} << 20) : (size_t{256} << 20);
    absl::StatusOr<void*> pinned = gpu.AllocHostPinned(n);
    absl::StatusOr<void*> dev = gpu.Alloc(n, "bench copy");
    if (pinned.ok() && dev.ok()) {
      std::memset(*pinned, 1, n);
      const double h2d = TimePerCall(gpu, Stream::kCopy, 1, 5, [&] {
        (void)gpu.CopyHostToDevice(*dev, *pinned, n, Stream::kCopy);
      });
      report.Add("H2D pinned", Gbps(static_cast<double>(n), h2d), "CopyHostToDevice on the copy stream");
      const double d2h = TimePerCall(gpu, Stream::kCopy, 1, 5, [&] {
        (void)gpu.CopyDeviceToHost(*pinned, *dev, n, Stream::kCopy);
      });
      report.Add("D2H pinned", Gbps(static_cast<double>(n), d2h));
      std::vector<uint8_t> pageable(n, 1);
      const double h2d_pageable = TimePerCall(gpu, Stream::kCopy, 1, 3, [&] {
        (void)gpu.CopyHostToDevice(*dev, pageable.data(), n, Stream::kCopy);
      });
      report.Add("H2D pageable", Gbps(static_cast<double>(n), h2d_pageable), "for comparison");
    }
    if (pinned.ok()) gpu.FreeHostPinned(*pinned);
    if (dev.ok()) gpu.Free(*dev);
  }

  // ---- Decode matvec: weight bytes per second, every type ----
  const size_t weight_bytes = quick ? (size_t{96} << 20) : (size_t{256} << 20);
  const int64_t cols = 8192;
  float* x = DeviceNormals(gpu, 8 * cols);
  absl::StatusOr<void*> y_mem = gpu.Alloc(size_t{512} * 65536 * sizeof(float), "bench outputs");
  if (x == nullptr || !Ok(y_mem.status(), "alloc outputs")) return 1;
  auto* y = static_cast<float*>(*y_mem);
  for (DType t : test::AllWeightTypes()) {
    DeviceWeights dw;
    if (!MakeWeights(gpu, t, cols, weight_bytes, &dw)) return 1;
    const double bytes = static_cast<double>(dw.w.rows) * dw.w.row_stride;
    for (int n_tok : {1, 8}) {
      if (dw.w.rows * n_tok > int64_t{512} * 65536) continue;
      const double s = TimePerCall(gpu, Stream::kCompute, 3, quick ? 10 : 30, [&] { gpu.MatMul(dw.w, x, n_tok, y); });
      const std::string note = s > 0 && copy_bw > 0 ? absl::StrFormat("%.0f%% of copy, %.1f us", 100.0 * bytes / s / copy_bw, s * 1e6) : "";
      report.Add(absl::StrFormat("matvec %-4s x%d [%lld x %lld]", std::string(DTypeName(t)), n_tok,
                                 static_cast<long long>(dw.w.rows), static_cast<long long>(cols)),
                 Gbps(bytes, s), note);
    }
    gpu.Free(dw.data);
  }

  // ---- Prefill: cuBLAS on dequantized tiles ----
  {
    const int64_t pcols = 4096, prows = 4096, n_tok = 512;
    float* xp = DeviceNormals(gpu, static_cast<size_t>(n_tok * pcols));
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K,
                    DType::kMXFP4}) {
      DeviceWeights dw;
      if (xp == nullptr || !MakeWeights(gpu, t, pcols, RowBytes(t, pcols) * prows, &dw)) return 1;
      const double s = TimePerCall(gpu, Stream::kCompute, 2, quick ? 5 : 20, [&] { gpu.MatMul(dw.w, xp, n_tok, y); });
      const double flops = 2.0 * static_cast<double>(dw.w.rows) * pcols * n_tok;
      report.Add(absl::StrFormat("prefill %-4s x%lld [%lld x %lld]", std::string(DTypeName(t)),
                                 static_cast<long long>(n_tok), static_cast<long long>(dw.w.rows),
                                 static_cast<long long>(pcols)),
                 s > 0 ? absl::StrFormat("%.0f GFLOP/s", flops / s / 1e9) : "failed",
                 s > 0 ? absl::StrFormat("%.2f ms", s * 1e3) : "");
      gpu.Free(dw.data);
    }
    gpu.Free(xp);
  }

  // ---- Matvec slices vs cuBLAS for mid-size batches (where the default switch-over should sit) ----
  {
    const int64_t mcols = 4096;
    for (int threshold : {1000, -1}) {
      absl::StatusOr<std::unique_ptr<Backend>> other = CreateCudaBackend({.matvec_max_tokens = threshold});
      if (!Ok(other.status(), "second backend")) break;
      Backend& g2 = **other;
      if (!Ok(g2.ReserveWorkspace(spec), "reserve")) break;
      float* x2 = DeviceNormals(g2, 64 * mcols);
      absl::StatusOr<void*> y2 = g2.Alloc(size_t{64} * 16384 * sizeof(float), "bench outputs");
      DeviceWeights dw;
      if (x2 == nullptr || !y2.ok() || !MakeWeights(g2, DType::kQ4_K, mcols, RowBytes(DType::kQ4_K, mcols) * 16384, &dw)) {
        break;
      }
      for (int n_tok : {8, 16, 32, 64}) {
        const double s = TimePerCall(g2, Stream::kCompute, 2, quick ? 5 : 20, [&] {
          g2.MatMul(dw.w, x2, n_tok, static_cast<float*>(*y2));
        });
        report.Add(absl::StrFormat("Q4_K x%d via %s [16384 x 4096]", n_tok, threshold < 0 ? "cuBLAS" : "matvec"),
                   s > 0 ? absl::StrFormat("%.1f us", s * 1e6) : "failed");
      }
    }
  }

  // ---- Decode attention over an F16 cache ----
  {
    const int n_head = 32, n_head_kv = 8, head_dim = 128;
    const int64_t row = n_head_kv * head_dim;
    for (int64_t ctx : {int64_t{4096}, int64_t{32768}}) {
      const size_t kv_bytes = static_cast<size_t>(ctx * row) * 2;
      absl::StatusOr<void*> k = gpu.Alloc(kv_bytes, "bench k");
      absl::StatusOr<void*> v = gpu.Alloc(kv_bytes, "bench v");
      if (!k.ok() || !v.ok()) break;
      (void)cudaMemset(*k, 0, kv_bytes);
      (void)cudaMemset(*v, 0, kv_bytes);
      const KvLayer kv{DType::kF16, *k, *v, ctx, row};
      const AttentionParams p{n_head, n_head_kv, head_dim, 0.088f};
      const double s = TimePerCall(gpu, Stream::kCompute, 3, quick ? 10 : 50, [&] {
        gpu.Attention(x, kv, 1, ctx - 1, p, y);
      });
      report.Add(absl::StrFormat("attention decode ctx %lld (32/8 heads x 128)", static_cast<long long>(ctx)),
                 Gbps(2.0 * static_cast<double>(kv_bytes), s), s > 0 ? absl::StrFormat("%.1f us", s * 1e6) : "");
      gpu.Free(*k);
      gpu.Free(*v);
    }
  }
  // ---- MoE: routing and experts, all on the device (Qwen3-30B-A3B: 128 experts, top 8, 2048 -> 768 -> 2048) ----
  {
    const int n_expert = 128, k = 8;
    const int64_t n_embd = 2048, n_ff = 768;
    const DType t = DType::kQ4_K;
    DeviceWeights gate, up, down;
    if (!MakeWeights(gpu, t, n_embd, RowBytes(t, n_embd) * n_ff * n_expert, &gate) ||
        !MakeWeights(gpu, t, n_embd, RowBytes(t, n_embd) * n_ff * n_expert, &up) ||
        !MakeWeights(gpu, t, n_ff, RowBytes(t, n_ff) * n_embd * n_expert, &down)) {
      return 1;
    }
    std::vector<WeightMatrix> mats;
    mats.reserve(3 * n_expert);
    std::vector<ExpertMatrices> experts(n_expert);
    for (int e = 0; e < n_expert; ++e) {
      for (const DeviceWeights* dw : {&gate, &up, &down}) {
        WeightMatrix m = dw->w;
        m.rows = dw == &down ? n_embd : n_ff;
        m.data = static_cast<const uint8_t*>(dw->w.data) + static_cast<size_t>(e) * m.rows * m.row_stride;
        mats.push_back(m);
      }
      experts[e] = {&mats[3 * e], &mats[3 * e + 1], &mats[3 * e + 2]};
    }
    const int64_t max_tok = 512;
    float* xm = DeviceNormals(gpu, static_cast<size_t>(max_tok * n_embd));
    float* logits = DeviceNormals(gpu, static_cast<size_t>(max_tok * n_expert));
    absl::StatusOr<void*> ids = gpu.Alloc(max_tok * k * sizeof(int32_t), "bench ids");
    absl::StatusOr<void*> wts = gpu.Alloc(max_tok * k * sizeof(float), "bench weights");
    absl::StatusOr<void*> xe = gpu.Alloc(max_tok * k * n_embd * sizeof(float), "bench xe");
    absl::StatusOr<void*> g = gpu.Alloc(max_tok * k * n_ff * sizeof(float), "bench gate");
    absl::StatusOr<void*> u = gpu.Alloc(max_tok * k * n_ff * sizeof(float), "bench up");
    absl::StatusOr<void*> out = gpu.Alloc(max_tok * k * n_embd * sizeof(float), "bench out");
    if (xm == nullptr || logits == nullptr || !ids.ok() || !wts.ok() || !xe.ok() || !g.ok() || !u.ok() || !out.ok()) {
      return 1;
    }
    MoeRouteParams rp;
    rp.n_expert = n_expert;
    rp.k = k;
    MoeExpertsArgs a;
    a.experts = experts.data();
    a.n_expert = n_expert;
    a.x = xm;
    a.ids = static_cast<const int32_t*>(*ids);
    a.weights = static_cast<const float*>(*wts);
    a.k = k;
    a.out = static_cast<float*>(*out);
    const double expert_bytes = static_cast<double>(gate.w.bytes() + up.w.bytes() + down.w.bytes()) / n_expert;
    for (int64_t n_tok : {int64_t{1}, int64_t{8}, int64_t{64}, max_tok}) {
      a.n_tok = n_tok;
      a.buf = ExpertBuffers{static_cast<float*>(*xe), static_cast<float*>(*g), static_cast<float*>(*u), n_tok * k};
      const double s = TimePerCall(gpu, Stream::kCompute, 2, quick ? 5 : 20, [&] {
        gpu.MoeRoute(logits, n_tok, rp, static_cast<int32_t*>(*ids), static_cast<float*>(*wts));
        gpu.MoeExperts(a);
      });
      // Weights read: the experts the batch touches, at least once (about all of them from 64 tokens on).
      const double touched = std::min<double>(n_expert, static_cast<double>(n_tok * k)) * expert_bytes;
      report.Add(absl::StrFormat("moe Q4_K x%lld (128 experts, top 8)", static_cast<long long>(n_tok)),
                 s > 0 ? absl::StrFormat("%.1f us", s * 1e6) : "failed",
                 s > 0 ? absl::StrFormat("%s of touched weights", Gbps(touched, s)) : "");
    }
    for (void* p : {*ids, *wts, *xe, *g, *u, *out}) gpu.Free(p);
    gpu.Free(xm);
    gpu.Free(logits);
    gpu.Free(gate.data);
    gpu.Free(up.data);
    gpu.Free(down.data);
  }

  report.Add("peak VRAM of this run", absl::StrFormat("%.0f MiB", gpu.peak_bytes() / 1048576.0),
             absl::StrFormat("capacity %.1f GiB", gpu.capacity() / 1073741824.0));
  report.Summary();
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: gpu_bench [--quick]\n");
      return 2;
    }
  }
  return tandem::Run(quick);
}

#else  // !TANDEM_HAVE_CUDA

int main() {
  std::printf("gpu_bench: built without CUDA\n");
  return 0;
}

#endif

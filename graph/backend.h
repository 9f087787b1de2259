// The Backend interface: memory, streams and kernels of one device, behind which the CPU, the CUDA GPU and the
// simulated GPU sit. The partitioner asks Supports() and the profile, never names. Only the executor calls the
// memory-movement half (copies, events, streams).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "cpu_backend/kernels.h"

namespace tandem {

using cpu::AttentionParams;
using cpu::KvLayer;
using cpu::RopeParams;
using cpu::WeightMatrix;

enum class Op { kGetRows, kRmsNorm, kMatMul, kRope, kAttention, kSwiGlu, kAdd, kMoeRoute };

// Streams: compute runs on kCompute; weight prefetch and activation transfers on kCopy.
enum class Stream { kCompute = 0, kCopy = 1 };

// Sizes a backend's workspace once, at planning, so nothing is allocated per token.
struct WorkspaceSpec {
  int64_t max_tokens = 1;   // largest batch
  int64_t expert_rows = 0;  // ExpertBuffers::rows: in decode, one row per expert, each a one-token job
  int64_t max_cols = 0;     // widest matmul input
  int64_t max_rows = 0;     // widest matmul output
  int64_t n_ctx = 0;        // KV length
  int n_head = 0;
  int n_threads = 1;
};

// One of several products that share their input (Backend::MatMuls).
struct MatMulOutput {
  const WeightMatrix* w = nullptr;  // [cols -> rows]
  float* y = nullptr;               // [n_tok][w->rows]
};

// One expert's share of an MoE layer: its FFN weights and the tokens routed to it.
struct ExpertFfnJob {
  const WeightMatrix* gate = nullptr;  // [n_embd -> n_ff]
  const WeightMatrix* up = nullptr;    // [n_embd -> n_ff]
  const WeightMatrix* down = nullptr;  // [n_ff -> n_embd]
  const int32_t* rows = nullptr;       // host: [m] rows of x routed to it
  const int32_t* slot_rows = nullptr;  // host: [m] rows of y its weighted outputs go to, each written once
  const float* weights = nullptr;      // host: [m] routing weights
  int64_t m = 0;
};
// A backend's buffers for ExpertFfns, in its memory.
struct ExpertBuffers {
  float* xe = nullptr;    // [rows][n_embd]
  float* gate = nullptr;  // [rows][n_ff]
  float* up = nullptr;    // [rows][n_ff]
  int64_t rows = 0;       // at least every job's m
};

class Backend {
 public:
  virtual ~Backend() = default;

  // For display and logs only.
  virtual std::string_view name() const = 0;
  // True when this backend's memory is the host's own and needs no copy to be read by the CPU.
  virtual bool host_memory() const = 0;
  virtual bool Supports(Op op, DType weight_type) const = 0;

  // ---- Memory: a pool with a hard capacity; peak is tracked ----
  virtual absl::StatusOr<void*> Alloc(size_t bytes, std::string_view what) = 0;
  virtual void Free(void* p) = 0;
  virtual size_t capacity() const = 0;
  virtual size_t bytes_in_use() const = 0;
  virtual size_t peak_bytes() const = 0;
  // Host memory the device can copy from quickly (pinned). Not counted against capacity.
  virtual absl::StatusOr<void*> AllocHostPinned(size_t bytes) = 0;
  virtual void FreeHostPinned(void* p) = 0;
  // The form of a MatMul weight this backend computes fastest with, made once at load from `m` (which stays valid,
  // for copies to other devices). The default is `m` itself; the CPU repacks some quantized types (repack.h) into
  // memory it allocates and frees with the backend.
  virtual absl::StatusOr<WeightMatrix> PrepareMatMulWeights(const WeightMatrix& m, std::string_view what) {
    return m;
  }
  // Scratch for the kernels, sized once. Call before any compute.
  virtual absl::Status ReserveWorkspace(const WorkspaceSpec& spec) = 0;

  // ---- Movement (executor only). Asynchronous on `s`. ----
  virtual absl::Status CopyHostToDevice(void* dst, const void* src, size_t n, Stream s) = 0;
  virtual absl::Status CopyDeviceToHost(void* dst, const void* src, size_t n, Stream s) = 0;
  // Events order work across streams: Record on one stream, Wait on another.
  virtual absl::StatusOr<int> CreateEvent() = 0;
  virtual absl::Status RecordEvent(int event, Stream s) = 0;
  virtual absl::Status WaitEvent(int event, Stream s) = 0;   // s waits for the event
  virtual absl::Status Synchronize(Stream s) = 0;             // host waits for s

  // ---- Compute, on Stream::kCompute. Pointers are this backend's memory. ----
  // Errors inside kernels (a failed launch) are sticky: TakeError() returns and clears the first one.
  virtual void GetRows(const WeightMatrix& table, const int32_t* ids, int64_t n_tok, float* y) = 0;
  virtual void RmsNorm(const float* x, const float* w, int64_t n_tok, int64_t n, float eps, float* y) = 0;
  virtual void MatMul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y) = 0;
  // Products that share their input x, such as q, k and v: y = x W^T for each. By default one after another; the
  // CPU runs its packed ones in one parallel region that quantizes x once.
  virtual void MatMuls(std::span<const MatMulOutput> products, const float* x, int64_t n_tok) {
    for (const MatMulOutput& p : products) MatMul(*p.w, x, n_tok, p.y);
  }
  virtual void Rope(float* x, int64_t n_tok, const int32_t* pos, const RopeParams& p) = 0;
  virtual void KvStore(const KvLayer& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0) = 0;
  virtual void Attention(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
                         float* out) = 0;
  virtual void SwiGlu(const float* g, const float* u, int64_t n, float* y) = 0;
  virtual void Add(const float* a, const float* b, int64_t n, float* y) = 0;
  virtual void Scale(const float* x, float s, int64_t n, float* y) = 0;            // y = s * x
  virtual void AddScaled(const float* x, float s, int64_t n, float* y) = 0;        // y += s * x
  // Softmax top-k router; ids and weights are written to HOST memory, and are there when the call returns (it
  // synchronizes the compute stream), because the model groups tokens by expert right after.
  virtual void MoeRoute(const float* logits, int64_t n_tok, int n_expert, int k, int32_t* ids_host,
                        float* weights_host) = 0;
  // Gathers rows: y[i] = x[idx[i]] (idx in host memory), and scatters back with a weight: y[idx[i]] += s[i] * x[i]
  // (ScatterAddRows) or y[idx[i]] = s[i] * x[i] (ScatterRows).
  virtual void GatherRows(const float* x, const int32_t* idx_host, int64_t n_idx, int64_t n, float* y) = 0;
  virtual void ScatterAddRows(const float* x, const int32_t* idx_host, const float* w_host, int64_t n_idx,
                              int64_t n, float* y) = 0;
  virtual void ScatterRows(const float* x, const int32_t* idx_host, const float* w_host, int64_t n_idx, int64_t n,
                           float* y) = 0;

  // For every job: y[slot_rows[i]] = weights[i] * down(silu(gate x[rows[i]]) * up x[rows[i]]). By default one
  // expert after another through the ops above; the CPU runs the experts of different NUMA nodes side by side.
  virtual void ExpertFfns(const ExpertFfnJob* jobs, size_t n_jobs, const float* x, int64_t n_embd, int64_t n_ff,
                          const ExpertBuffers& buf, float* y) {
    for (size_t e = 0; e < n_jobs; ++e) {
      const ExpertFfnJob& j = jobs[e];
      GatherRows(x, j.rows, j.m, n_embd, buf.xe);
      MatMul(*j.gate, buf.xe, j.m, buf.gate);
      MatMul(*j.up, buf.xe, j.m, buf.up);
      SwiGlu(buf.gate, buf.up, j.m * n_ff, buf.gate);
      MatMul(*j.down, buf.gate, j.m, buf.xe);
      ScatterRows(buf.xe, j.slot_rows, j.weights, j.m, n_embd, y);
    }
  }

  virtual absl::Status TakeError() = 0;

  // Names the work queued from now on (the unit's name), for traces and profilers. Optional.
  virtual void SetTraceLabel(std::string_view label) {}
};

}  // namespace tandem

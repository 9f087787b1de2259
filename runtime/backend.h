// The Backend interface: memory, streams and kernels of one device, behind which the CPU, the CUDA GPU and the
// simulated GPU sit. It knows no model: the ops take the parameter structs of runtime/ops.h, and a family's unit
// functions (arch/) are written once against it. The partitioner asks Supports(), never a backend's name. Only the
// executor calls the memory-movement half (copies, events, streams).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace tandem {

// The compute ops, for Supports() and for counting (graph/cost_model.h).
enum class Op {
  kGetRows, kRmsNorm, kMatMul, kAddBias, kRope, kKvStore, kAttention, kGlu, kAdd, kMoeRoute, kMoeExperts,
  kScaleRows
};
inline constexpr int kNumOps = 12;
std::string_view OpName(Op op);

// Streams: compute runs on kCompute; weight prefetch and activation transfers on kCopy.
enum class Stream { kCompute = 0, kCopy = 1 };

// Sizes a backend's workspace once, at planning, so nothing is allocated per token.
struct WorkspaceSpec {
  int64_t max_tokens = 1;   // largest batch
  int64_t expert_rows = 0;  // rows of the ExpertBuffers MoeExperts gets (graph sizes them)
  int64_t max_cols = 0;     // widest matmul input
  int64_t max_rows = 0;     // widest matmul output
  int64_t n_ctx = 0;        // KV length
  int n_head = 0;
  int n_expert = 0;         // MoE: experts and experts per token, for the routing's grouping scratch
  int n_expert_used = 0;
};

// One of several products that share their input (Backend::MatMuls).
struct MatMulOutput {
  const WeightMatrix* w = nullptr;  // [cols -> rows]
  float* y = nullptr;               // [n_tok][w->rows]
};

class Backend {
 public:
  virtual ~Backend() = default;

  // For display and logs only.
  virtual std::string_view name() const = 0;
  // The device as its driver describes it, for profiles: model, driver version, bus address.
  virtual std::string Describe() const { return std::string(name()); }
  // True when this backend's memory is the host's own and needs no copy to be read by the CPU.
  virtual bool host_memory() const = 0;
  // Whether `op` runs here with weights of `weight_type` (F32 for ops without weights).
  virtual bool Supports(Op op, DType weight_type) const = 0;

  // ---- Memory: a pool with a hard capacity; peak is tracked ----
  virtual absl::StatusOr<void*> Alloc(size_t bytes, std::string_view what) = 0;
  virtual void Free(void* p) = 0;
  virtual size_t capacity() const = 0;
  virtual size_t peak_bytes() const = 0;
  // Host memory the device can copy from quickly (pinned). Not counted against capacity.
  virtual absl::StatusOr<void*> AllocHostPinned(size_t bytes) = 0;
  virtual void FreeHostPinned(void* p) = 0;
  // The form of a MatMul weight this backend computes fastest with, made once at load from `m` (which stays valid,
  // for copies to other devices). The default is `m` itself. A copy in a layout of the backend's own (the CPU's
  // repacked rows) belongs to the backend: ReleaseMatMulWeights frees it, and so does the backend's destructor.
  virtual absl::StatusOr<WeightMatrix> PrepareMatMulWeights(const WeightMatrix& m, std::string_view what) {
    return m;
  }
  virtual void ReleaseMatMulWeights(const WeightMatrix& prepared) {}
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

  // ---- Compute, on Stream::kCompute. Pointers are this backend's memory. Nothing here waits for the device. ----
  // Errors inside kernels (a failed launch, a bad argument) are sticky: TakeError() returns and clears the first
  // one, naming the trace label it happened under. The executor asks once per step.
  virtual void GetRows(const WeightMatrix& table, const int32_t* ids, int64_t n_tok, float* y) = 0;
  // y = x / sqrt(mean(x^2) + eps) * w, per row of n (w null: no scale). y may alias x (per-head norms run in place).
  virtual void RmsNorm(const float* x, const float* w, int64_t n_tok, int64_t n, float eps, float* y) = 0;
  // y[t][r] = dot(W[r], x[t]).
  virtual void MatMul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y) = 0;
  // Products that share their input x, such as q, k and v: y = x W^T for each. By default one after another; the
  // CPU runs its packed ones in one parallel region that quantizes x once.
  virtual void MatMuls(std::span<const MatMulOutput> products, const float* x, int64_t n_tok) {
    for (const MatMulOutput& p : products) MatMul(*p.w, x, n_tok, p.y);
  }
  // y[t][i] = x[t][i] + b[i] (y may alias x).
  virtual void AddBias(const float* x, const float* b, int64_t n_tok, int64_t n, float* y) = 0;
  // In place on x [n_tok][n_head * head_dim]; pos [n_tok].
  virtual void Rope(float* x, int64_t n_tok, const int32_t* pos, const RopeParams& p) = 0;
  // Writes rows pos0..pos0+n_tok-1 of the cache from k and v ([n_tok][row_elems] each).
  virtual void KvStore(const KvLayer& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0) = 0;
  // q and out [n_tok][n_head * head_dim]; query t is at position pos0 + t.
  virtual void Attention(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
                         float* out) = 0;
  virtual void Glu(const float* g, const float* u, int64_t n, const GluParams& p, float* y) = 0;
  // y = a + b over n values (y may alias a).
  virtual void Add(const float* a, const float* b, int64_t n, float* y) = 0;
  // y[t][i] = x[t][i] * f(s[t]) over n_tok rows of n (runtime/ops.h's RowScale; y may alias x): a gate per token.
  virtual void ScaleRows(const float* x, const float* s, int64_t n_tok, int64_t n, RowScale f, float* y) = 0;
  // logits [n_tok][n_expert] -> ids, weights [n_tok][k], all in this backend's memory: routing stays here.
  virtual void MoeRoute(const float* logits, int64_t n_tok, const MoeRouteParams& p, int32_t* ids,
                        float* weights) = 0;
  virtual void MoeExperts(const MoeExpertsArgs& a) = 0;

  virtual absl::Status TakeError() = 0;

  // Names the work queued from now on (the unit's name), for traces, profilers and error messages.
  virtual void SetTraceLabel(std::string_view label) {}
};

}  // namespace tandem

// The simulated GPU: a Backend whose "device memory" is a separate host pool with a hard capacity, whose copies
// are real memcpys throttled to a PCIe rate, and whose kernels are the CPU kernels. It lets the executor's
// streaming, budgets and event ordering be tested, and "what if I had a 12 GB card" be answered, with no GPU.
//
// Its own folder beside the real backends: it depends on runtime/ and the CPU kernels, never on graph/.
//
// Streams behave like CUDA streams: each has its own worker thread running its queue in order. RecordEvent marks
// a point in a stream; WaitEvent makes another stream wait until that point has run (the most recent Record at
// the time of the Wait; an event never recorded is already complete); Synchronize blocks the host until a
// stream's queue is empty. All compute runs in order on the compute stream. Copies follow CUDA's rules for host
// memory: with pinned memory (AllocHostPinned) they are asynchronous, so the host buffer must stay untouched
// until the stream passes the copy; from pageable memory the source is read at the call (the caller may reuse
// it at once); into pageable memory the call returns when the copy is done.
//
// Every copy and kernel is recorded in a trace (kind, label, start/end) that tests read to check overlap and
// ordering; the executor labels work with SetTraceLabel (the unit name) before queueing it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/backend.h"

namespace tandem {

struct SimOptions {
  uint64_t capacity = 0;  // bytes of simulated VRAM
  double pcie_gbps = 25;  // copy rate each way, GB/s (1e9 bytes/s)
  double gpu_gbps = 900;  // a MatMul takes at least weight bytes / gpu_gbps; 0: no throttle
  std::string spec;       // as given, for display
};

// "sim:12GiB", "sim:12GiB,pcie=25", "sim:24G,pcie=2,gpu_gbps=0". Sizes in binary units (KiB/MiB/GiB, K/M/G)
// or plain bytes.
absl::StatusOr<SimOptions> ParseSimSpec(std::string_view spec);

// What a simulated GPU runs (SimBackend::Supports): every op, with the weight types the CPU kernels compute.
bool SimSupports(Op op, DType weight_type);

struct TraceEvent {
  enum class Kind { kCopy, kCompute };
  Kind kind = Kind::kCompute;
  Stream stream = Stream::kCompute;
  std::string label;  // the trace label when the work was queued
  std::string op;     // "H2D", "D2H", "MatMul", "Attention", ...
  uint64_t bytes = 0;  // copies: bytes moved; compute: the weight (or, for Attention, cache) bytes it read
  int64_t start_ns = 0;  // since the backend was created
  int64_t end_ns = 0;
};

class SimBackend final : public Backend {
 public:
  explicit SimBackend(const SimOptions& opts);
  ~SimBackend() override;
  SimBackend(const SimBackend&) = delete;
  SimBackend& operator=(const SimBackend&) = delete;

  std::string_view name() const override { return opts_.spec; }
  bool host_memory() const override { return false; }
  bool Supports(Op op, DType weight_type) const override;

  absl::StatusOr<void*> Alloc(size_t bytes, std::string_view what) override;
  void Free(void* p) override;
  size_t capacity() const override { return opts_.capacity; }
  size_t bytes_in_use() const;
  size_t peak_bytes() const override;
  absl::StatusOr<void*> AllocHostPinned(size_t bytes) override;
  void FreeHostPinned(void* p) override;
  absl::Status ReserveWorkspace(const WorkspaceSpec& spec) override;

  absl::Status CopyHostToDevice(void* dst, const void* src, size_t n, Stream s) override;
  absl::Status CopyDeviceToHost(void* dst, const void* src, size_t n, Stream s) override;
  absl::StatusOr<int> CreateEvent() override;
  absl::Status RecordEvent(int event, Stream s) override;
  absl::Status WaitEvent(int event, Stream s) override;
  absl::Status Synchronize(Stream s) override;

  void GetRows(const WeightMatrix& table, const int32_t* ids, int64_t n_tok, float* y) override;
  void RmsNorm(const float* x, const float* w, int64_t n_tok, int64_t n, float eps, float* y) override;
  void MatMul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y) override;
  void AddBias(const float* x, const float* b, int64_t n_tok, int64_t n, float* y) override;
  void Rope(float* x, int64_t n_tok, const int32_t* pos, const RopeParams& p) override;
  void KvStore(const KvLayer& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0) override;
  void Attention(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
                 float* out) override;
  void Glu(const float* g, const float* u, int64_t n, const GluParams& p, float* y) override;
  void Add(const float* a, const float* b, int64_t n, float* y) override;
  void ScaleRows(const float* x, const float* s, int64_t n_tok, int64_t n, RowScale f, float* y) override;
  void MoeRoute(const float* logits, int64_t n_tok, const MoeRouteParams& p, int32_t* ids, float* weights) override;
  void MoeExperts(const MoeExpertsArgs& a) override;

  absl::Status TakeError() override;

  // ---- Simulation extras (not part of Backend) ----
  // Labels the work queued from now on (the executor passes the unit name, e.g. "blk.3.ffn").
  void SetTraceLabel(std::string_view label) override;
  std::vector<TraceEvent> Trace() const;  // a copy, in completion order
  // The steady_clock time (ns since its epoch) the trace counts from, to line it up with host-side timings.
  int64_t trace_origin_ns() const { return t0_ns_; }
  void ClearTrace();
  const SimOptions& options() const { return opts_; }
  uint64_t h2d_bytes() const;  // bytes copied host -> device so far
  uint64_t d2h_bytes() const;

 private:
  class Worker;
  struct Allocation {
    size_t bytes;
    std::string what;
  };

  // OK when [p, p+n) lies inside one device allocation.
  absl::Status DeviceRange(const void* p, size_t n, std::string_view op, std::string_view what) const;
  bool IsPinned(const void* p, size_t n) const;
  // DeviceRange, recorded as the sticky error when it fails (for the kernels, which return nothing).
  bool CheckDevice(const void* p, size_t n, std::string_view op, std::string_view what);
  void SetError(absl::Status s);
  // Queues fn on the compute stream, timed and traced.
  template <typename Fn>
  void Compute(std::string_view op, uint64_t weight_bytes, Fn&& fn);
  void Record(TraceEvent ev);
  void SetComputeThreads(int n);
  int64_t NowNs() const;

  SimOptions opts_;
  std::array<std::unique_ptr<Worker>, 2> workers_;  // indexed by Stream

  mutable std::mutex mem_mu_;
  std::map<uintptr_t, Allocation> device_;  // base address -> allocation
  std::map<uintptr_t, size_t> pinned_;  // base address -> bytes
  size_t in_use_ = 0;
  size_t peak_ = 0;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  size_t matmul_scratch_bytes_ = 0;
  size_t attention_scratch_bytes_ = 0;
  void* grouping_ = nullptr;  // MoeExperts' grouping of (token, slot) pairs, in device memory
  int64_t grouping_max_pairs_ = 0;
  int grouping_n_expert_ = 0;
  int grouping_k_ = 0;
  int compute_threads_ = 1;  // OpenMP threads of the compute worker (ReserveWorkspace's n_threads when given)

  std::mutex err_mu_;
  absl::Status error_;

  struct EventTable;
  std::unique_ptr<EventTable> events_;

  mutable std::mutex trace_mu_;
  std::vector<TraceEvent> trace_;
  uint64_t h2d_bytes_ = 0, d2h_bytes_ = 0;
  std::string label_;  // host-side current label
  int64_t t0_ns_ = 0;
};

}  // namespace tandem

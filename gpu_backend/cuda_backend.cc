// The CUDA Backend: device memory pool, streams, events, cuBLAS handle, workspace, and argument checking in
// front of the kernel launchers (launch.h). Every CUDA/cuBLAS result is turned into an absl::Status here.
#include "gpu_backend/cuda_backend.h"


#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/status.h"
#include "gpu_backend/cuda_status.h"
#include "gpu_backend/dequant.h"
#include "gpu_backend/launch.h"
#include "gpu_backend/matmul.h"
#include "gpu_backend/memory_pool.h"
#include "gpu_backend/cublas_loader.h"

namespace tandem {
namespace gpu {
namespace {

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;  // what cuBLAS recommends for Hopper
constexpr int64_t kAttentionSplitTokens = 4;                 // batches up to this size may split keys
constexpr int64_t kAttentionMaxSplit = 32;
constexpr size_t kMaxTileElems = size_t{32} << 20;  // 64 MiB of f16 weights per cuBLAS tile
constexpr size_t kMaxX16Elems = size_t{64} << 20;
constexpr int kDefaultQuantMatVecTokens = 32;
constexpr int kDefaultFloatMatVecTokens = 8;
// MoeExperts' passes: the caller's buffer rows, and no more than a grid's y dimension of tiles.
constexpr int64_t kMoeMaxPassPairs = 65535;

// The budget when none is given: all free memory less headroom for the driver, cuBLAS and kernel stacks.
size_t DefaultCapacity(size_t free_bytes) {
  const size_t margin = (size_t{256} << 20) + free_bytes / 100;
  return free_bytes > margin ? free_bytes - margin : 0;
}

// Why cudaGetDeviceCount found nothing, as one line. Without any driver the runtime says "driver version is
// insufficient", which misleads, so the driver library is looked for first.
std::string NoDeviceReason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  if (err == cudaErrorInsufficientDriver) {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == nullptr) return "no NVIDIA driver is installed (libcuda.so.1 not found)";
    dlclose(driver);
  }
  if (err != cudaSuccess) return Cat(cudaGetErrorString(err), " (", cudaGetErrorName(err), ")");
  return "no CUDA-capable device is present";
}

bool ValidStream(Stream s) { return s == Stream::kCompute || s == Stream::kCopy; }

class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<Backend>> Create(const CudaOptions& options) {
    std::unique_ptr<CudaBackend> b(new CudaBackend());
    TANDEM_RETURN_IF_ERROR(b->Init(options));
    return std::unique_ptr<Backend>(std::move(b));
  }

  ~CudaBackend() override {
    if (!initialized_) return;
    (void)cudaSetDevice(device_);
    for (cudaStream_t st : streams_) {
      if (st != nullptr) (void)cudaStreamSynchronize(st);
    }
    pool_.reset();  // frees the workspace and anything the caller leaked
    for (void* p : pinned_) (void)cudaFreeHost(p);
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
    if (cublas_ != nullptr) (void)cublas_api_->destroy(cublas_);
    for (cudaStream_t st : streams_) {
      if (st != nullptr) (void)cudaStreamDestroy(st);
    }
    (void)cudaGetLastError();
  }

  std::string_view name() const override { return name_; }
  std::string Describe() const override { return description_; }
  bool host_memory() const override { return false; }

  bool Supports(Op op, DType weight_type) const override { return CudaSupports(op, weight_type); }

  // ---- Memory ----
  absl::StatusOr<void*> Alloc(size_t bytes, std::string_view what) override {
    TANDEM_RETURN_IF_ERROR(SetDevice());
    return pool_->Alloc(bytes, what);
  }
  void Free(void* p) override {
    if (!SetDevice().ok()) return;
    Fail(pool_->Free(p));
  }
  size_t capacity() const override { return pool_->capacity(); }
  size_t peak_bytes() const override { return pool_->peak_bytes(); }

  absl::StatusOr<void*> AllocHostPinned(size_t bytes) override {
    TANDEM_RETURN_IF_ERROR(SetDevice());
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return ResourceExhausted("cuda: pinned host allocation of ", FormatBytes(bytes), " failed: ",
                               cudaGetErrorString(err));
    }
    std::lock_guard<std::mutex> lock(mu_);
    pinned_.insert(p);
    return p;
  }
  void FreeHostPinned(void* p) override {
    if (p == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pinned_.erase(p) == 0) {
        FailLocked(InvalidArgument("cuda: FreeHostPinned of a pointer AllocHostPinned did not return"));
        return;
      }
    }
    Check(cudaFreeHost(p), "cudaFreeHost");
  }

  absl::Status ReserveWorkspace(const WorkspaceSpec& spec) override;

  // ---- Movement ----
  absl::Status CopyHostToDevice(void* dst, const void* src, size_t n, Stream s) override {
    return Copy(dst, src, n, s, cudaMemcpyHostToDevice, "CopyHostToDevice");
  }
  absl::Status CopyDeviceToHost(void* dst, const void* src, size_t n, Stream s) override {
    return Copy(dst, src, n, s, cudaMemcpyDeviceToHost, "CopyDeviceToHost");
  }

  absl::StatusOr<int> CreateEvent() override {
    TANDEM_RETURN_IF_ERROR(SetDevice());
    cudaEvent_t e = nullptr;
    TANDEM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(e);
    return static_cast<int>(events_.size() - 1);
  }
  absl::Status RecordEvent(int event, Stream s) override {
    TANDEM_ASSIGN_OR_RETURN(cudaEvent_t e, EventOf(event, s));
    return CudaStatus(cudaEventRecord(e, stream(s)), "cudaEventRecord");
  }
  absl::Status WaitEvent(int event, Stream s) override {
    TANDEM_ASSIGN_OR_RETURN(cudaEvent_t e, EventOf(event, s));
    return CudaStatus(cudaStreamWaitEvent(stream(s), e, 0), "cudaStreamWaitEvent");
  }
  absl::Status Synchronize(Stream s) override {
    if (!ValidStream(s)) return InvalidArgument("cuda: Synchronize: unknown stream");
    TANDEM_RETURN_IF_ERROR(SetDevice());
    return CudaStatus(cudaStreamSynchronize(stream(s)), "cudaStreamSynchronize");
  }

  // ---- Compute ----
  void GetRows(const WeightMatrix& table, const int32_t* ids, int64_t n_tok, float* y) override;
  void RmsNorm(const float* x, const float* w, int64_t n_tok, int64_t n, float eps, float* y) override;
  void MatMul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y) override;
  void Rope(float* x, int64_t n_tok, const int32_t* pos, const RopeParams& p) override;
  void KvStore(const KvLayer& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0) override;
  void Attention(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
                 float* out) override;
  void AddBias(const float* x, const float* b, int64_t n_tok, int64_t n, float* y) override;
  void Glu(const float* g, const float* u, int64_t n, const GluParams& p, float* y) override;
  void Add(const float* a, const float* b, int64_t n, float* y) override {
    if (Elementwise("Add", n, {a, b, y})) Check(LaunchAdd(a, b, n, y, compute()), "Add launch");
  }
  void ScaleRows(const float* x, const float* s, int64_t n_tok, int64_t n, RowScale f, float* y) override;
  void MoeRoute(const float* logits, int64_t n_tok, const MoeRouteParams& p, int32_t* ids, float* weights) override;
  void MoeExperts(const MoeExpertsArgs& a) override;
  void SetTraceLabel(std::string_view label) override {
    std::lock_guard<std::mutex> lock(mu_);
    label_.assign(label.data(), label.size());  // no temporary: it runs for every unit of every step
  }

  absl::Status TakeError() override;

 private:
  CudaBackend() = default;
  absl::Status Init(const CudaOptions& options);

  cudaStream_t stream(Stream s) const { return streams_[static_cast<int>(s)]; }
  cudaStream_t compute() const { return streams_[0]; }
  absl::Status SetDevice() const { return CudaStatus(cudaSetDevice(device_), "cudaSetDevice"); }

  // Keeps the first error: later ones are usually its consequences.
  void Fail(absl::Status st) {
    if (st.ok()) return;
    std::lock_guard<std::mutex> lock(mu_);
    FailLocked(std::move(st));
  }
  void FailLocked(absl::Status st) {
    if (!error_.ok()) return;
    error_ = label_.empty() ? std::move(st) : absl::Status(st.code(), Cat(label_, ": ", st.message()));
  }
  bool Check(cudaError_t err, std::string_view what) {
    if (err == cudaSuccess) return true;
    Fail(CudaStatus(err, what));
    return false;
  }
  template <typename... Args>
  bool Expect(bool cond, const Args&... why) {
    if (!cond) Fail(InvalidArgument("cuda: ", why...));
    return cond;
  }
  // Common checks of a compute call; false (with the error recorded) when it must not run.
  bool Begin(std::string_view op, std::initializer_list<const void*> pointers) {
    if (!Check(cudaSetDevice(device_), "cudaSetDevice")) return false;
    for (const void* p : pointers) {
      if (!Expect(p != nullptr, op, ": null pointer")) return false;
    }
    return true;
  }
  bool Elementwise(std::string_view op, int64_t n, std::initializer_list<const void*> pointers) {
    if (!Expect(n >= 0, op, ": negative size")) return false;
    return n > 0 && Begin(op, pointers);
  }
  absl::Status ValidateWeights(const WeightMatrix& w, std::string_view op) const;
  // One matrix of every computed expert (`which` of ExpertMatrices), checked to share type, shape and stride with
  // expert `first`'s (the first computed), into `m`; a skipped expert's (null gate) data and bias are null.
  absl::Status CollectExperts(const MoeExpertsArgs& a, int first, const WeightMatrix* ExpertMatrices::*which,
                              const float* ExpertMatrices::*bias, std::string_view name, MoeMatrices* m) const;
  // A device-readable view of an index array, or null when it lives in ordinary (pageable) host memory.
  const int32_t* DeviceView(const int32_t* p) const;

  absl::StatusOr<cudaEvent_t> EventOf(int event, Stream s) {
    if (!ValidStream(s)) return InvalidArgument("cuda: unknown stream");
    TANDEM_RETURN_IF_ERROR(SetDevice());
    std::lock_guard<std::mutex> lock(mu_);
    if (event < 0 || static_cast<size_t>(event) >= events_.size()) {
      return InvalidArgument("cuda: event ", event, " was not created");
    }
    return events_[event];
  }
  absl::Status Copy(void* dst, const void* src, size_t n, Stream s, cudaMemcpyKind kind, std::string_view what) {
    if (n == 0) return absl::OkStatus();
    if (dst == nullptr || src == nullptr) return InvalidArgument("cuda: ", what, ": null pointer");
    if (!ValidStream(s)) return InvalidArgument("cuda: ", what, ": unknown stream");
    TANDEM_RETURN_IF_ERROR(SetDevice());
    return CudaStatus(cudaMemcpyAsync(dst, src, n, kind, stream(s)), what);
  }
  void ReleaseScratch();
  MatMulContext MatMulCtx() const;

  bool initialized_ = false;
  int device_ = 0;
  std::string name_;
  std::string description_;  // Describe(): model, memory, driver, PCI address
  int sm_count_ = 1;
  int quant_matvec_max_tokens_ = kDefaultQuantMatVecTokens;
  int float_matvec_max_tokens_ = kDefaultFloatMatVecTokens;
  cudaStream_t streams_[2] = {nullptr, nullptr};  // indexed by Stream
  const CublasApi* cublas_api_ = nullptr;  // loaded with the first backend (cublas_loader.h)
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<MemoryPool> pool_;

  std::mutex mu_;  // guards pinned_, events_, error_, label_
  std::unordered_set<void*> pinned_;
  std::vector<cudaEvent_t> events_;
  absl::Status error_;
  std::string label_;  // the trace label, for error messages

  // Workspace, all from the pool.
  int* error_word_ = nullptr;  // DeviceErrorCode written by kernels
  void* cublas_workspace_ = nullptr;
  void* x16_ = nullptr;
  size_t x16_elems_ = 0;
  void* tile_ = nullptr;
  size_t tile_elems_ = 0;
  float* attn_partials_ = nullptr;
  size_t attn_partial_floats_ = 0;
  void* moe_block_ = nullptr;  // MoeExperts' grouping (launch.h's MoeGroups)
  MoeGroups moe_groups_;
  int64_t moe_max_pairs_ = 0;
  std::array<MoeMatrices, 3> moe_matrices_;  // MoeExperts' gate, up, down: ~4 KiB each, so not on the stack
};

absl::Status CudaBackend::Init(const CudaOptions& options) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return FailedPrecondition("cuda: no usable CUDA device: ", NoDeviceReason());
  }
  if (options.device < 0 || options.device >= count) {
    return InvalidArgument("cuda: device ", options.device, " does not exist (", count, " device",
                           count == 1 ? "" : "s", ")");
  }
  device_ = options.device;
  TANDEM_RETURN_IF_ERROR(SetDevice());
  cudaDeviceProp prop;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
  name_ = Cat("cuda:", device_, " (", prop.name, ", sm_", prop.major, prop.minor, ")");
  int driver = 0;
  (void)cudaDriverGetVersion(&driver);
  char bus[32];
  std::snprintf(bus, sizeof bus, "%04x:%02x:%02x.0", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
  description_ = Cat(prop.name, ", sm_", prop.major, prop.minor, ", ", prop.totalGlobalMem >> 20, " MiB, driver ",
                     driver / 1000, ".", driver % 1000 / 10, ", PCI ", bus);
  sm_count_ = std::max(1, prop.multiProcessorCount);
  TANDEM_CUDA_RETURN_IF_ERROR(cudaFree(nullptr), "creating the CUDA context");
  initialized_ = true;  // from here on the destructor cleans up

  for (cudaStream_t& st : streams_) {
    TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  TANDEM_ASSIGN_OR_RETURN(cublas_api_, LoadCublas());
  TANDEM_CUBLAS_RETURN_IF_ERROR(cublas_api_->create(&cublas_), "cublasCreate");
  TANDEM_CUBLAS_RETURN_IF_ERROR(cublas_api_->set_stream(cublas_, compute()), "cublasSetStream");

  if (options.matvec_max_tokens != 0) {
    quant_matvec_max_tokens_ = float_matvec_max_tokens_ = std::max(0, options.matvec_max_tokens);
  }

  size_t free_bytes = 0, total_bytes = 0;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  size_t capacity = DefaultCapacity(free_bytes);
  if (options.vram_budget != 0) {
    if (options.vram_budget > free_bytes) {
      return ResourceExhausted("cuda: VRAM budget ", FormatBytes(options.vram_budget), " exceeds the ",
                               FormatBytes(free_bytes), " free on ", name_);
    }
    capacity = options.vram_budget;
  }
  pool_ = std::make_unique<MemoryPool>(
      Cat("cuda:", device_), capacity,
      [](size_t bytes) -> absl::StatusOr<void*> {
        void* p = nullptr;
        const cudaError_t err = cudaMalloc(&p, bytes);
        if (err != cudaSuccess) {
          (void)cudaGetLastError();  // out-of-memory is not sticky; keep later launch checks clean
          return CudaStatus(err, "cudaMalloc");
        }
        return p;
      },
      [](void* p) { (void)cudaFree(p); });

  // The small, always-present part of the workspace.
  TANDEM_ASSIGN_OR_RETURN(void* word, pool_->Alloc(sizeof(int), "workspace: error word"));
  error_word_ = static_cast<int*>(word);
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(error_word_, 0, sizeof(int), compute()), "cudaMemset");
  return CudaStatus(cudaStreamSynchronize(compute()), "initial synchronize");
}

void CudaBackend::ReleaseScratch() {
  Fail(pool_->Free(x16_));
  Fail(pool_->Free(tile_));
  Fail(pool_->Free(attn_partials_));
  Fail(pool_->Free(moe_block_));
  x16_ = tile_ = nullptr;
  attn_partials_ = nullptr;
  x16_elems_ = tile_elems_ = attn_partial_floats_ = 0;
  moe_block_ = nullptr;
  moe_groups_ = MoeGroups{};
  moe_max_pairs_ = 0;
}

absl::Status CudaBackend::ReserveWorkspace(const WorkspaceSpec& spec) {
  if (spec.max_tokens < 0 || spec.max_cols < 0 || spec.max_rows < 0 || spec.n_head < 0 || spec.n_expert < 0 ||
      spec.n_expert_used < 0) {
    return InvalidArgument("cuda: ReserveWorkspace: negative size");
  }
  TANDEM_RETURN_IF_ERROR(SetDevice());
  // The old scratch may still be in use by queued kernels.
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute()), "cudaStreamSynchronize");
  ReleaseScratch();
  const auto tokens = static_cast<size_t>(spec.max_tokens);
  const auto cols = static_cast<size_t>(spec.max_cols);
  const auto rows = static_cast<size_t>(spec.max_rows);

  const bool any_gemm = spec.max_tokens > std::min(quant_matvec_max_tokens_, float_matvec_max_tokens_);
  if (any_gemm && cublas_workspace_ == nullptr) {
    TANDEM_ASSIGN_OR_RETURN(cublas_workspace_, pool_->Alloc(kCublasWorkspaceBytes, "workspace: cuBLAS"));
    TANDEM_CUBLAS_RETURN_IF_ERROR(cublas_api_->set_workspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes),
                                  "cublasSetWorkspace");
  }
  if (any_gemm && cols > 0) {
    x16_elems_ = std::max(cols, std::min(tokens * cols, kMaxX16Elems));
    TANDEM_ASSIGN_OR_RETURN(x16_, pool_->Alloc(x16_elems_ * 2, "workspace: f16 activations"));
  }
  if (spec.max_tokens > quant_matvec_max_tokens_ && cols > 0 && rows > 0) {
    tile_elems_ = std::max(std::min<size_t>(rows, 64) * cols, std::min(rows * cols, kMaxTileElems));
    TANDEM_ASSIGN_OR_RETURN(tile_, pool_->Alloc(tile_elems_ * 2, "workspace: f16 weight tile"));
  }
  if (spec.n_head > 0 && cols > 0) {
    const size_t split_tokens = std::min<size_t>(tokens, kAttentionSplitTokens);
    attn_partial_floats_ = kAttentionMaxSplit * std::max<size_t>(split_tokens, 1) *
                           (cols + 2 * static_cast<size_t>(spec.n_head));
    TANDEM_ASSIGN_OR_RETURN(void* p, pool_->Alloc(attn_partial_floats_ * sizeof(float), "workspace: attention"));
    attn_partials_ = static_cast<float*>(p);
  }
  if (spec.n_expert > 0 && spec.n_expert_used > 0) {
    const int64_t pairs = std::max<int64_t>(spec.max_tokens, 1) * spec.n_expert_used;
    TANDEM_ASSIGN_OR_RETURN(moe_block_, pool_->Alloc(MoeGroupsBytes(pairs), "workspace: MoE grouping"));
    moe_groups_ = CarveMoeGroups(moe_block_, pairs);
    moe_max_pairs_ = pairs;
  }
  return absl::OkStatus();
}

MatMulContext CudaBackend::MatMulCtx() const {
  MatMulContext ctx;
  ctx.stream = compute();
  ctx.cublas_api = cublas_api_;
  ctx.cublas = cublas_workspace_ != nullptr ? cublas_ : nullptr;  // no cuBLAS until its workspace is ours
  ctx.x16 = x16_;
  ctx.x16_elems = x16_elems_;
  ctx.tile = tile_;
  ctx.tile_elems = tile_elems_;
  ctx.quant_matvec_max_tokens = quant_matvec_max_tokens_;
  ctx.float_matvec_max_tokens = float_matvec_max_tokens_;
  return ctx;
}

absl::Status CudaBackend::ValidateWeights(const WeightMatrix& w, std::string_view op) const {
  if (!IsPlainFloat(w.type) && !IsQuantized(w.type)) {
    return Unimplemented("cuda: ", op, ": weight type ", static_cast<uint32_t>(w.type), " is not supported");
  }
  if (w.layout != kGgufLayout) return InvalidArgument("cuda: ", op, ": weights in another backend's layout");
  const DTypeTraits& tr = Traits(w.type);
  if (w.rows < 0 || w.cols <= 0 || w.rows > INT_MAX || w.cols % tr.block_elems != 0) {
    return InvalidArgument("cuda: ", op, ": bad shape [", w.rows, " x ", w.cols, "] for ", tr.name);
  }
  if (w.row_stride < RowBytes(w.type, w.cols)) {
    return InvalidArgument("cuda: ", op, ": row stride ", w.row_stride, " is shorter than a row");
  }
  const size_t align = RowAlignment(w.type);
  if (w.data == nullptr || reinterpret_cast<uintptr_t>(w.data) % align != 0 || w.row_stride % align != 0) {
    return InvalidArgument("cuda: ", op, ": weight rows must be non-null and ", align, "-byte aligned");
  }
  return absl::OkStatus();
}

const int32_t* CudaBackend::DeviceView(const int32_t* p) const {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  switch (attr.type) {
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged:
      return p;
    case cudaMemoryTypeHost:  // pinned: mapped into the device's address space
      return static_cast<const int32_t*>(attr.devicePointer);
    default:
      return nullptr;
  }
}

void CudaBackend::GetRows(const WeightMatrix& table, const int32_t* ids, int64_t n_tok, float* y) {
  if (!Expect(n_tok >= 0 && n_tok <= INT_MAX, "GetRows: bad token count ", n_tok) || n_tok == 0) return;
  if (!Begin("GetRows", {ids, y})) return;
  const absl::Status valid = ValidateWeights(table, "GetRows");
  if (!valid.ok()) return Fail(valid);
  if (const int32_t* dev = DeviceView(ids); dev != nullptr) {
    static const IndexChunk kUnused{};
    Check(LaunchGetRows(table, dev, kUnused, n_tok, y, error_word_, compute()), "GetRows launch");
    return;
  }
  IndexChunk chunk{};
  for (int64_t t0 = 0; t0 < n_tok; t0 += kIndexChunk) {
    const int count = static_cast<int>(std::min<int64_t>(kIndexChunk, n_tok - t0));
    for (int i = 0; i < count; ++i) {
      const int32_t id = ids[t0 + i];
      if (!Expect(id >= 0 && id < table.rows, "GetRows: token id ", id, " is outside [0, ", table.rows, ")")) return;
      chunk.idx[i] = id;
    }
    if (!Check(LaunchGetRows(table, nullptr, chunk, count, y + t0 * table.cols, error_word_, compute()),
               "GetRows launch")) {
      return;
    }
  }
}

void CudaBackend::RmsNorm(const float* x, const float* w, int64_t n_tok, int64_t n, float eps, float* y) {
  if (!Expect(n_tok >= 0 && n_tok <= INT_MAX && n >= 0, "RmsNorm: bad size")) return;
  if (n_tok == 0 || n == 0 || !Begin("RmsNorm", {x, y})) return;
  Check(LaunchRmsNorm(x, w, n_tok, n, eps, y, compute()), "RmsNorm launch");
}

void CudaBackend::MatMul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y) {
  if (!Expect(n_tok >= 0, "MatMul: negative token count") || n_tok == 0 || w.rows == 0) return;
  if (!Begin("MatMul", {x, y})) return;
  const absl::Status valid = ValidateWeights(w, "MatMul");
  if (!valid.ok()) return Fail(valid);
  Fail(RunMatMul(MatMulCtx(), w, x, n_tok, y));
}

void CudaBackend::Rope(float* x, int64_t n_tok, const int32_t* pos, const RopeParams& p) {
  if (!Expect(n_tok >= 0, "Rope: negative token count") || n_tok == 0) return;
  if (!Expect(p.n_head > 0 && p.head_dim > 0 && p.n_rot > 0 && p.n_rot % 2 == 0 && p.n_rot <= p.head_dim,
              "Rope: bad parameters (n_head ", p.n_head, ", head_dim ", p.head_dim, ", n_rot ", p.n_rot, ")")) {
    return;
  }
  if (!Begin("Rope", {x, pos})) return;
  if (const int32_t* dev = DeviceView(pos); dev != nullptr) {
    static const IndexChunk kUnused{};
    Check(LaunchRope(x, n_tok, dev, kUnused, p, compute()), "Rope launch");
    return;
  }
  IndexChunk chunk{};
  const int64_t row = static_cast<int64_t>(p.n_head) * p.head_dim;
  for (int64_t t0 = 0; t0 < n_tok; t0 += kIndexChunk) {
    const int count = static_cast<int>(std::min<int64_t>(kIndexChunk, n_tok - t0));
    std::copy(pos + t0, pos + t0 + count, chunk.idx);
    if (!Check(LaunchRope(x + t0 * row, count, nullptr, chunk, p, compute()), "Rope launch")) return;
  }
}

void CudaBackend::KvStore(const KvLayer& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0) {
  if (!Expect(kv.HoldsStore(pos0, n_tok), "KvStore: rows ", pos0, "..", pos0 + n_tok, " outside the cache of ",
              kv.n_ctx, kv.ring ? " (a ring)" : "") ||
      n_tok == 0) {
    return;
  }
  if (!Expect(kv.type == DType::kF32 || kv.type == DType::kF16, "KvStore: cache type must be F32 or F16") ||
      !Expect(kv.row_elems > 0, "KvStore: empty cache rows")) {
    return;
  }
  if (!Begin("KvStore", {kv.k, kv.v, k, v})) return;
  Check(LaunchKvStore(kv, k, v, n_tok, pos0, compute()), "KvStore launch");
}

void CudaBackend::Attention(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0,
                            const AttentionParams& p, float* out) {
  if (!Expect(kv.HoldsAttention(pos0, n_tok, p.window), "Attention: positions ", pos0, "..", pos0 + n_tok,
              " outside the cache of ", kv.n_ctx, kv.ring ? Cat(" (a ring, window ", p.window, ")") : "") ||
      n_tok == 0) {
    return;
  }
  if (!Expect(p.n_head > 0 && p.n_head_kv > 0 && p.n_head % p.n_head_kv == 0, "Attention: ", p.n_head,
              " query heads do not group over ", p.n_head_kv, " KV heads") ||
      !Expect(p.head_dim > 0 && p.head_dim <= kAttentionMaxHeadDim, "Attention: head_dim ", p.head_dim,
              " outside 1..", kAttentionMaxHeadDim) ||
      !Expect(kv.row_elems >= static_cast<int64_t>(p.n_head_kv) * p.head_dim, "Attention: cache rows of ",
              kv.row_elems, " elements are narrower than ", p.n_head_kv, " KV heads") ||
      !Expect(kv.type == DType::kF32 || kv.type == DType::kF16, "Attention: cache type must be F32 or F16")) {
    return;
  }
  if (!Begin("Attention", {q, kv.k, kv.v, out})) return;
  AttentionWork work;
  work.partials = attn_partials_;
  work.partial_floats = attn_partial_floats_;
  work.sm_count = sm_count_;
  Check(LaunchAttention(q, kv, n_tok, pos0, p, out, work, compute()), "Attention launch");
}

void CudaBackend::AddBias(const float* x, const float* b, int64_t n_tok, int64_t n, float* y) {
  if (!Expect(n_tok >= 0 && n >= 0, "AddBias: negative size") || n_tok == 0 || n == 0) return;
  if (!Begin("AddBias", {x, b, y})) return;
  Check(LaunchAddBias(x, b, n_tok, n, y, compute()), "AddBias launch");
}

void CudaBackend::ScaleRows(const float* x, const float* s, int64_t n_tok, int64_t n, RowScale f, float* y) {
  if (!Expect(n_tok >= 0 && n >= 0, "ScaleRows: negative size") ||
      !Expect(f == RowScale::kLinear || f == RowScale::kSigmoid, "ScaleRows: unknown scale ", static_cast<int>(f)) ||
      n_tok == 0 || n == 0) {
    return;
  }
  if (!Begin("ScaleRows", {x, s, y})) return;
  Check(LaunchScaleRows(x, s, n_tok, n, f, y, compute()), "ScaleRows launch");
}

void CudaBackend::Glu(const float* g, const float* u, int64_t n, const GluParams& p, float* y) {
  if (!Expect(p.act == Activation::kSilu || p.act == Activation::kGelu || p.act == Activation::kSwigluOai,
              "Glu: unknown activation ", static_cast<int>(p.act)) ||
      !Expect(p.act != Activation::kSwigluOai || u != nullptr, "Glu: the gpt-oss SwiGLU needs u")) {
    return;
  }
  if (Elementwise("Glu", n, {g, y})) Check(LaunchGlu(g, u, n, p, y, compute()), "Glu launch");
}

void CudaBackend::MoeRoute(const float* logits, int64_t n_tok, const MoeRouteParams& p, int32_t* ids,
                           float* weights) {
  if (!Expect(n_tok >= 0, "MoeRoute: negative token count") || n_tok == 0) return;
  if (!Expect(p.n_expert > 0 && p.n_expert <= kMoeMaxExperts && p.k > 0 && p.k <= p.n_expert, "MoeRoute: top-",
              p.k, " of ", p.n_expert, " experts is not supported (at most ", kMoeMaxExperts, " experts)") ||
      !Expect(p.gating == MoeGating::kSoftmax || p.gating == MoeGating::kSigmoid ||
                  p.gating == MoeGating::kSoftmaxTopK,
              "MoeRoute: unknown gating ", static_cast<int>(p.gating))) {
    return;
  }
  if (!Begin("MoeRoute", {logits, ids, weights})) return;
  Check(LaunchMoeRoute(logits, n_tok, p, ids, weights, compute()), "MoeRoute launch");
}

absl::Status CudaBackend::CollectExperts(const MoeExpertsArgs& a, int first,
                                         const WeightMatrix* ExpertMatrices::*which,
                                         const float* ExpertMatrices::*bias, std::string_view name,
                                         MoeMatrices* m) const {
  const WeightMatrix* tmpl = a.experts[first].*which;
  if (tmpl == nullptr) return InvalidArgument("cuda: MoeExperts: expert ", first, " has no ", name, " matrix");
  TANDEM_RETURN_IF_ERROR(ValidateWeights(*tmpl, "MoeExperts"));
  m->type = tmpl->type;
  m->rows = tmpl->rows;
  m->cols = tmpl->cols;
  m->row_stride = tmpl->row_stride;
  // The others need only match the first computed expert and have their own rows where the type's loads want them.
  // A skipped expert's fields are another device's, or nothing: the kernels see null and skip its tiles.
  const size_t align = RowAlignment(tmpl->type);
  for (int e = 0; e < a.n_expert; ++e) {
    if (a.experts[e].gate == nullptr) {
      m->data[e] = nullptr;
      m->bias[e] = nullptr;
      continue;
    }
    const WeightMatrix* w = a.experts[e].*which;
    if (w == nullptr) return InvalidArgument("cuda: MoeExperts: expert ", e, " has no ", name, " matrix");
    if (w->type != tmpl->type || w->rows != tmpl->rows || w->cols != tmpl->cols ||
        w->row_stride != tmpl->row_stride || w->layout != tmpl->layout) {
      return InvalidArgument("cuda: MoeExperts: expert ", e, "'s ", name, " matrix differs from expert ", first,
                             "'s in type, shape, row stride or layout");
    }
    if (w->data == nullptr || reinterpret_cast<uintptr_t>(w->data) % align != 0) {
      return InvalidArgument("cuda: MoeExperts: expert ", e, "'s ", name, " rows must be non-null and ", align,
                             "-byte aligned");
    }
    m->data[e] = w->data;
    m->bias[e] = a.experts[e].*bias;
  }
  for (int e = a.n_expert; e < kMoeMaxExperts; ++e) {
    m->data[e] = nullptr;
    m->bias[e] = nullptr;
  }
  return absl::OkStatus();
}

// The pairs are grouped by expert on the device (moe_group.cu), then each pass of at most buf.rows grouped pairs
// runs the gate/up products with their activation into buf.gate and the down products straight into `out`
// (moe_experts.cu). The routing stays on the device; the host only knows how many pairs there are, so when the call
// skips experts (a null gate, runtime/ops.h) it zeroes all of `out` first and the kernels leave their slots alone.
void CudaBackend::MoeExperts(const MoeExpertsArgs& a) {
  if (!Expect(a.n_tok >= 0, "MoeExperts: negative token count") || a.n_tok == 0) return;
  if (!Expect(a.n_expert > 0 && a.n_expert <= kMoeMaxExperts && a.k > 0, "MoeExperts: top-", a.k, " of ",
              a.n_expert, " experts is not supported (at most ", kMoeMaxExperts, " experts)") ||
      !Expect(a.act.act == Activation::kSilu || a.act.act == Activation::kGelu ||
                  a.act.act == Activation::kSwigluOai,
              "MoeExperts: unknown activation ", static_cast<int>(a.act.act)) ||
      !Expect(a.buf.rows > 0, "MoeExperts: no buffer rows")) {
    return;
  }
  const int64_t n_pairs = a.n_tok * a.k;
  if (moe_block_ == nullptr || n_pairs > moe_max_pairs_) {
    return Fail(FailedPrecondition("cuda: MoeExperts: ", a.n_tok, " tokens of ", a.k,
                                   " experts each exceed the grouping workspace reserved (", moe_max_pairs_,
                                   " pairs)"));
  }
  if (!Begin("MoeExperts", {a.experts, a.x, a.ids, a.weights, a.out, a.buf.gate, a.buf.up})) return;
  int first_computed = -1;  // the template of the others (CollectExperts); -1: every expert is skipped
  bool skips = false;
  for (int e = 0; e < a.n_expert; ++e) {
    if (a.experts[e].gate == nullptr) {
      skips = true;
    } else if (first_computed < 0) {
      first_computed = e;
    }
  }
  const int64_t n_embd = first_computed >= 0 ? a.experts[first_computed].gate->cols : a.n_embd;
  if (!Expect(n_embd > 0, "MoeExperts: every expert is skipped and n_embd is not given") ||
      !Expect(a.n_embd == 0 || a.n_embd == n_embd, "MoeExperts: n_embd ", a.n_embd, " but experts of ", n_embd)) {
    return;
  }
  MoeMatrices& gate = moe_matrices_[0];
  MoeMatrices& up = moe_matrices_[1];
  MoeMatrices& down = moe_matrices_[2];
  if (first_computed >= 0) {
    const int f = first_computed;
    absl::Status st = CollectExperts(a, f, &ExpertMatrices::gate, &ExpertMatrices::gate_bias, "gate", &gate);
    if (st.ok()) st = CollectExperts(a, f, &ExpertMatrices::up, &ExpertMatrices::up_bias, "up", &up);
    if (st.ok()) st = CollectExperts(a, f, &ExpertMatrices::down, &ExpertMatrices::down_bias, "down", &down);
    if (!st.ok()) return Fail(st);
    if (!Expect(up.rows == gate.rows && up.cols == gate.cols && down.cols == gate.rows && down.rows == gate.cols,
                "MoeExperts: gate [", gate.rows, " x ", gate.cols, "], up [", up.rows, " x ", up.cols,
                "] and down [", down.rows, " x ", down.cols, "] do not make an FFN") ||
        !Expect(gate.rows > 0, "MoeExperts: empty experts")) {
      return;
    }
  }
  // Before the launches, on their stream: the kernels then write only the computed experts' slots.
  if (skips && !Check(cudaMemsetAsync(a.out, 0, static_cast<size_t>(n_pairs * n_embd) * sizeof(float), compute()),
                      "MoeExperts cudaMemsetAsync")) {
    return;
  }
  if (first_computed < 0) return;  // nothing to compute: out is all zeros

  // One token: every tile holds one pair, so the kernels keep one accumulator per row.
  const int tile = a.n_tok == 1 ? 1 : kMoeTile;
  const int64_t pass_pairs = std::min(a.buf.rows, kMoeMaxPassPairs);
  if (!Check(LaunchMoeGroup(a.ids, a.weights, a.n_tok, a.k, a.n_expert, tile, static_cast<int>(pass_pairs),
                            moe_groups_, error_word_, compute()),
             "MoeExperts grouping launch")) {
    return;
  }
  MoePass pass;
  pass.groups = moe_groups_;
  pass.tile = tile;
  for (int64_t first = 0; first < n_pairs; first += pass_pairs, ++pass.pass) {
    pass.first_pair = first;
    pass.max_tiles = MoeMaxTiles(std::min(pass_pairs, n_pairs - first), a.n_expert, tile);
    if (!Check(LaunchMoeGateUp(gate, up, a.x, a.weight_input, a.act, pass, a.buf.gate, a.buf.up, compute()),
               "MoeExperts gate/up launch") ||
        !Check(LaunchMoeDown(down, a.buf.gate, a.weight_input, pass, a.out, compute()), "MoeExperts down launch")) {
      return;
    }
  }
}

absl::Status CudaBackend::TakeError() {
  absl::Status st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    st = std::move(error_);
    error_ = absl::OkStatus();
  }
  absl::Status device_st = SetDevice();
  // Kernels report bad device-side indices through the error word; reading it also surfaces any
  // asynchronous fault of the compute stream.
  int word = 0;
  if (device_st.ok()) {
    device_st = CudaStatus(cudaMemcpyAsync(&word, error_word_, sizeof(int), cudaMemcpyDeviceToHost, compute()),
                           "reading the device error word");
  }
  if (device_st.ok()) device_st = CudaStatus(cudaStreamSynchronize(compute()), "cudaStreamSynchronize");
  if (device_st.ok() && word != kDeviceOk) {
    switch (word) {
      case kDeviceBadTokenId:
        device_st = InvalidArgument("cuda: GetRows: a token id was outside the embedding table");
        break;
      case kDeviceBadExpertId:
        device_st = InvalidArgument("cuda: MoeExperts: an expert id was outside [0, n_expert)");
        break;
      default:
        device_st = absl::InternalError(Cat("cuda: device error code ", word));
        break;
    }
    (void)cudaMemsetAsync(error_word_, 0, sizeof(int), compute());
  }
  return st.ok() ? device_st : st;
}

}  // namespace
}  // namespace gpu

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaOptions& options) {
  return gpu::CudaBackend::Create(options);
}

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace tandem

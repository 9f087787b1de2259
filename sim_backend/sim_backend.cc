#include "sim_backend/sim_backend.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "cpu_backend/host_block.h"
#include "cpu_backend/kernels.h"

namespace tandem {
namespace {

constexpr size_t kAlignment = 256;          // like cudaMalloc
constexpr size_t kMaxTraceEvents = 1 << 20;  // a long run keeps its first million events

using Clock = std::chrono::steady_clock;

// Resident when handed out, as cudaMalloc's and cudaHostAlloc's memory is, so that a run's first use does not pay
// page faults a real device would not (cpu_backend/host_block.h).
void* AlignedAlloc(size_t bytes) {
  const size_t rounded = std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  void* p = std::aligned_alloc(kAlignment, rounded);
  cpu::PrefaultHostBlock(p, rounded);
  return p;
}

// Weight types whose matmul scratch the workspace must cover (what cpu::MatMul runs).
constexpr DType kMatMulTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                                  DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4};

absl::StatusOr<uint64_t> ParseBytes(std::string_view s) {
  std::string t = absl::AsciiStrToLower(absl::string_view(s.data(), s.size()));
  struct Unit {
    const char* suffix;
    double mult;
  };
  static constexpr Unit kUnits[] = {{"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0},
                                    {"tib", 1099511627776.0}, {"k", 1024.0}, {"m", 1048576.0},
                                    {"g", 1073741824.0}, {"t", 1099511627776.0}, {"b", 1.0}};
  double mult = 1.0;
  for (const Unit& u : kUnits) {
    const std::string_view suf(u.suffix);
    if (t.size() > suf.size() && t.compare(t.size() - suf.size(), suf.size(), suf) == 0) {
      mult = u.mult;
      t.resize(t.size() - suf.size());
      break;
    }
  }
  double v = 0;
  if (t.empty() || !absl::SimpleAtod(t, &v) || !(v >= 0) || v * mult > 1.8e19) {
    return InvalidArgument("invalid size '", s, "'");
  }
  return static_cast<uint64_t>(v * mult);
}

size_t MatrixBytes(const WeightMatrix& w) {
  if (w.rows <= 0) return 0;
  const size_t row = RowBytes(w.type, w.cols);
  const size_t stride = w.row_stride == 0 ? row : w.row_stride;
  return static_cast<size_t>(w.rows - 1) * stride + row;
}

}  // namespace

absl::StatusOr<SimOptions> ParseSimSpec(std::string_view spec) {
  if (spec.rfind("sim:", 0) != 0) {
    return InvalidArgument("a simulated device is 'sim:VRAM[,pcie=GBPS][,gpu_gbps=GBPS]', got '", spec, "'");
  }
  SimOptions o;
  o.spec = std::string(spec);
  const std::vector<std::string> parts =
      absl::StrSplit(absl::string_view(spec.data() + 4, spec.size() - 4), ',');
  if (parts.empty() || parts[0].empty()) {
    return InvalidArgument("'", spec, "': the VRAM size is missing (e.g. sim:12GiB)");
  }
  absl::StatusOr<uint64_t> cap = ParseBytes(parts[0]);
  if (!cap.ok()) return InvalidArgument("'", spec, "': ", Message(cap.status()), " (e.g. sim:12GiB)");
  if (*cap == 0) return InvalidArgument("'", spec, "': the VRAM size must be > 0");
  o.capacity = *cap;
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    const std::string key = parts[i].substr(0, eq);
    double v = 0;
    if (eq == std::string::npos || !absl::SimpleAtod(parts[i].substr(eq + 1), &v) || !std::isfinite(v)) {
      return InvalidArgument("'", spec, "': expected key=number, got '", parts[i], "'");
    }
    if (key == "pcie") {
      if (!(v > 0)) return InvalidArgument("'", spec, "': pcie must be > 0 GB/s");
      o.pcie_gbps = v;
    } else if (key == "gpu_gbps") {
      if (!(v >= 0)) return InvalidArgument("'", spec, "': gpu_gbps must be >= 0 (0: no throttle)");
      o.gpu_gbps = v;
    } else {
      return InvalidArgument("'", spec, "': unknown key '", key, "' (known: pcie, gpu_gbps)");
    }
  }
  return o;
}

// One stream: a thread running queued closures in order.
class SimBackend::Worker {
 public:
  Worker() : thread_([this] { Loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Push(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_all();
  }
  // Blocks until everything queued so far has run.
  void Drain() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      task();
      lock.lock();
      busy_ = false;
      if (queue_.empty()) idle_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the fields it uses
};

// Event generations: Record bumps `recorded` on the host and sets `completed` when its stream reaches it.
struct SimBackend::EventTable {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> recorded, completed;
  bool shutting_down = false;
};

SimBackend::SimBackend(const SimOptions& opts) : opts_(opts), events_(std::make_unique<EventTable>()) {
  t0_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  for (auto& w : workers_) w = std::make_unique<Worker>();
  SetComputeThreads(omp_get_max_threads());
}

void SimBackend::SetComputeThreads(int n) {
  // OpenMP's thread count is per thread: the compute worker gets the host's, so that the kernels' per-thread
  // scratch (sized here) matches the team they run with.
  compute_threads_ = std::max(1, n);
  workers_[static_cast<int>(Stream::kCompute)]->Push([n = compute_threads_] { omp_set_num_threads(n); });
}

SimBackend::~SimBackend() {
  for (auto& w : workers_) w->Drain();
  {
    std::lock_guard<std::mutex> lock(events_->mu);
    events_->shutting_down = true;
  }
  events_->cv.notify_all();
  for (auto& w : workers_) w.reset();
  for (auto& [base, a] : device_) std::free(reinterpret_cast<void*>(base));
  for (auto& [base, bytes] : pinned_) std::free(reinterpret_cast<void*>(base));
}

bool SimSupports(Op op, DType weight_type) {
  if (op != Op::kMatMul && op != Op::kGetRows && op != Op::kMoeExperts) return true;
  return std::find(std::begin(kMatMulTypes), std::end(kMatMulTypes), weight_type) != std::end(kMatMulTypes);
}

bool SimBackend::Supports(Op op, DType weight_type) const { return SimSupports(op, weight_type); }

// ---- Memory ----

absl::StatusOr<void*> SimBackend::Alloc(size_t bytes, std::string_view what) {
  std::lock_guard<std::mutex> lock(mem_mu_);
  if (bytes > opts_.capacity || in_use_ > opts_.capacity - bytes) {
    return ResourceExhausted(opts_.spec, ": cannot allocate ", what, ": ", bytes, " bytes requested, ", in_use_,
                             " of ", opts_.capacity, " bytes in use");
  }
  void* p = AlignedAlloc(bytes);
  if (p == nullptr) return ResourceExhausted(opts_.spec, ": out of host memory allocating ", what);
  device_[reinterpret_cast<uintptr_t>(p)] = {bytes, std::string(what)};
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  return p;
}

void SimBackend::Free(void* p) {
  if (p == nullptr) return;
  // Queued work may still read the block: let both streams finish first, as cudaFree does.
  for (auto& w : workers_) w->Drain();
  std::lock_guard<std::mutex> lock(mem_mu_);
  auto it = device_.find(reinterpret_cast<uintptr_t>(p));
  TANDEM_CHECK(it != device_.end());  // freeing memory this backend did not hand out is a bug
  in_use_ -= it->second.bytes;
  device_.erase(it);
  std::free(p);
}

size_t SimBackend::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mem_mu_);
  return in_use_;
}

size_t SimBackend::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mem_mu_);
  return peak_;
}

absl::StatusOr<void*> SimBackend::AllocHostPinned(size_t bytes) {
  void* p = AlignedAlloc(bytes);
  if (p == nullptr) return ResourceExhausted(opts_.spec, ": out of host memory allocating ", bytes, " pinned bytes");
  std::lock_guard<std::mutex> lock(mem_mu_);
  pinned_[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

void SimBackend::FreeHostPinned(void* p) {
  if (p == nullptr) return;
  for (auto& w : workers_) w->Drain();
  std::lock_guard<std::mutex> lock(mem_mu_);
  TANDEM_CHECK(pinned_.erase(reinterpret_cast<uintptr_t>(p)) == 1);
  std::free(p);
}

absl::Status SimBackend::ReserveWorkspace(const WorkspaceSpec& spec) {
  size_t matmul_bytes = 0;
  for (DType type : kMatMulTypes) {
    const int64_t block = Traits(type).block_elems;
    const int64_t cols = (spec.max_cols + block - 1) / block * block;
    matmul_bytes = std::max(matmul_bytes, cpu::MatMulScratchBytes(type, cols, std::max<int64_t>(spec.max_tokens, 1)));
  }
  // One thread: a second OpenMP team beside the CPU backend's would spin against it for the same cores (measured
  // 16x slower decode on 2 cores). The sim stands for a GPU, whose speed gpu_gbps sets anyway.
  const int threads = 1;
  if (threads != compute_threads_) SetComputeThreads(threads);
  const size_t attention_bytes = cpu::AttentionScratchBytes(spec.n_ctx, spec.n_head, compute_threads_);
  if (workspace_ != nullptr) {
    Free(workspace_);
    workspace_ = nullptr;
    workspace_bytes_ = matmul_scratch_bytes_ = attention_scratch_bytes_ = 0;
    grouping_ = nullptr;
  }
  const size_t grouping_bytes =
      spec.n_expert > 0 ? cpu::MoeGroupingBytes(spec.max_tokens, spec.n_expert, spec.n_expert_used) : 0;
  TANDEM_ASSIGN_OR_RETURN(workspace_, Alloc(matmul_bytes + attention_bytes + grouping_bytes, "workspace"));
  workspace_bytes_ = matmul_bytes + attention_bytes + grouping_bytes;
  matmul_scratch_bytes_ = matmul_bytes;
  attention_scratch_bytes_ = attention_bytes;
  grouping_ = grouping_bytes > 0 ? static_cast<uint8_t*>(workspace_) + matmul_bytes + attention_bytes : nullptr;
  grouping_max_pairs_ = spec.max_tokens * spec.n_expert_used;
  grouping_n_expert_ = spec.n_expert;
  grouping_k_ = spec.n_expert_used;
  return absl::OkStatus();
}

absl::Status SimBackend::DeviceRange(const void* p, size_t n, std::string_view op, std::string_view what) const {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  {
    std::lock_guard<std::mutex> lock(mem_mu_);
    auto it = device_.upper_bound(addr);
    if (p != nullptr && it != device_.begin()) {
      --it;
      if (addr >= it->first && addr + n <= it->first + std::max<size_t>(it->second.bytes, 1)) {
        return absl::OkStatus();
      }
    }
  }
  return FailedPrecondition(opts_.spec, ": ", op, ": ", what, " (", n,
                            " bytes) is not inside one device allocation; copy it to the device first");
}

bool SimBackend::IsPinned(const void* p, size_t n) const {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mem_mu_);
  auto it = pinned_.upper_bound(addr);
  if (it == pinned_.begin()) return false;
  --it;
  return addr >= it->first && addr + n <= it->first + it->second;
}

bool SimBackend::CheckDevice(const void* p, size_t n, std::string_view op, std::string_view what) {
  absl::Status s = DeviceRange(p, n, op, what);
  if (s.ok()) return true;
  SetError(std::move(s));
  return false;
}

void SimBackend::SetError(absl::Status s) {
  std::string label;
  {
    std::lock_guard<std::mutex> lock(trace_mu_);
    label = label_;
  }
  std::lock_guard<std::mutex> lock(err_mu_);
  if (!error_.ok()) return;
  error_ = label.empty() ? std::move(s) : absl::Status(s.code(), Cat(label, ": ", s.message()));
}

absl::Status SimBackend::TakeError() {
  std::lock_guard<std::mutex> lock(err_mu_);
  absl::Status first = std::move(error_);
  error_ = absl::OkStatus();
  return first;
}

// ---- Trace ----

int64_t SimBackend::NowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count() - t0_ns_;
}

void SimBackend::Record(TraceEvent ev) {
  std::lock_guard<std::mutex> lock(trace_mu_);
  if (trace_.size() < kMaxTraceEvents) trace_.push_back(std::move(ev));
}

void SimBackend::SetTraceLabel(std::string_view label) {
  std::lock_guard<std::mutex> lock(trace_mu_);
  label_ = std::string(label);
}

std::vector<TraceEvent> SimBackend::Trace() const {
  std::lock_guard<std::mutex> lock(trace_mu_);
  return trace_;
}

void SimBackend::ClearTrace() {
  std::lock_guard<std::mutex> lock(trace_mu_);
  trace_.clear();
}

uint64_t SimBackend::h2d_bytes() const {
  std::lock_guard<std::mutex> lock(trace_mu_);
  return h2d_bytes_;
}

uint64_t SimBackend::d2h_bytes() const {
  std::lock_guard<std::mutex> lock(trace_mu_);
  return d2h_bytes_;
}

// ---- Movement ----

absl::Status SimBackend::CopyHostToDevice(void* dst, const void* src, size_t n, Stream s) {
  if (n == 0) return absl::OkStatus();
  TANDEM_RETURN_IF_ERROR(DeviceRange(dst, n, "CopyHostToDevice", "the destination"));
  std::string label;
  {
    std::lock_guard<std::mutex> lock(trace_mu_);
    label = label_;
    h2d_bytes_ += n;
  }
  // Pageable source: read now, as CUDA stages it before returning.
  std::shared_ptr<std::vector<uint8_t>> snapshot;
  if (!IsPinned(src, n)) {
    snapshot = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(src),
                                                      static_cast<const uint8_t*>(src) + n);
    src = snapshot->data();
  }
  const double rate = opts_.pcie_gbps * 1e9;
  workers_[static_cast<int>(s)]->Push([this, dst, src, n, s, rate, snapshot, label = std::move(label)] {
    const auto start = Clock::now();
    const int64_t start_ns = NowNs();
    std::memcpy(dst, src, n);
    std::this_thread::sleep_until(start + std::chrono::nanoseconds(static_cast<int64_t>(n / rate * 1e9)));
    Record({TraceEvent::Kind::kCopy, s, label, "H2D", n, start_ns, NowNs()});
  });
  return absl::OkStatus();
}

absl::Status SimBackend::CopyDeviceToHost(void* dst, const void* src, size_t n, Stream s) {
  if (n == 0) return absl::OkStatus();
  TANDEM_RETURN_IF_ERROR(DeviceRange(src, n, "CopyDeviceToHost", "the source"));
  std::string label;
  {
    std::lock_guard<std::mutex> lock(trace_mu_);
    label = label_;
    d2h_bytes_ += n;
  }
  const double rate = opts_.pcie_gbps * 1e9;
  workers_[static_cast<int>(s)]->Push([this, dst, src, n, s, rate, label = std::move(label)] {
    const auto start = Clock::now();
    const int64_t start_ns = NowNs();
    std::memcpy(dst, src, n);
    std::this_thread::sleep_until(start + std::chrono::nanoseconds(static_cast<int64_t>(n / rate * 1e9)));
    Record({TraceEvent::Kind::kCopy, s, label, "D2H", n, start_ns, NowNs()});
  });
  // Pageable destination: the call returns when the data is there, as with CUDA.
  if (!IsPinned(dst, n)) workers_[static_cast<int>(s)]->Drain();
  return absl::OkStatus();
}

absl::StatusOr<int> SimBackend::CreateEvent() {
  std::lock_guard<std::mutex> lock(events_->mu);
  events_->recorded.push_back(0);
  events_->completed.push_back(0);
  return static_cast<int>(events_->recorded.size() - 1);
}

absl::Status SimBackend::RecordEvent(int event, Stream s) {
  uint64_t gen = 0;
  {
    std::lock_guard<std::mutex> lock(events_->mu);
    if (event < 0 || static_cast<size_t>(event) >= events_->recorded.size()) {
      return InvalidArgument(opts_.spec, ": unknown event ", event);
    }
    gen = ++events_->recorded[event];
  }
  EventTable* ev = events_.get();
  workers_[static_cast<int>(s)]->Push([ev, event, gen] {
    {
      std::lock_guard<std::mutex> lock(ev->mu);
      ev->completed[event] = std::max(ev->completed[event], gen);
    }
    ev->cv.notify_all();
  });
  return absl::OkStatus();
}

absl::Status SimBackend::WaitEvent(int event, Stream s) {
  uint64_t target = 0;
  {
    std::lock_guard<std::mutex> lock(events_->mu);
    if (event < 0 || static_cast<size_t>(event) >= events_->recorded.size()) {
      return InvalidArgument(opts_.spec, ": unknown event ", event);
    }
    target = events_->recorded[event];
  }
  if (target == 0) return absl::OkStatus();  // never recorded: nothing to wait for
  EventTable* ev = events_.get();
  workers_[static_cast<int>(s)]->Push([ev, event, target] {
    std::unique_lock<std::mutex> lock(ev->mu);
    ev->cv.wait(lock, [&] { return ev->shutting_down || ev->completed[event] >= target; });
  });
  return absl::OkStatus();
}

absl::Status SimBackend::Synchronize(Stream s) {
  workers_[static_cast<int>(s)]->Drain();
  return absl::OkStatus();
}

// ---- Compute: queued on the compute stream ----

template <typename Fn>
void SimBackend::Compute(std::string_view op, uint64_t weight_bytes, Fn&& fn) {
  std::string label;
  {
    std::lock_guard<std::mutex> lock(trace_mu_);
    label = label_;
  }
  const double rate = opts_.gpu_gbps * 1e9;
  workers_[static_cast<int>(Stream::kCompute)]->Push(
      [this, op = std::string(op), weight_bytes, rate, label = std::move(label), fn = std::forward<Fn>(fn)] {
        const auto start = Clock::now();
        const int64_t start_ns = NowNs();
        uint64_t bytes = weight_bytes;
        // Work whose weight bytes only the device knows (the experts a batch routes to) returns them.
        if constexpr (std::is_same_v<decltype(fn()), uint64_t>) {
          bytes += fn();
        } else {
          fn();
        }
        if (rate > 0 && bytes > 0) {
          std::this_thread::sleep_until(start + std::chrono::nanoseconds(static_cast<int64_t>(bytes / rate * 1e9)));
        }
        Record({TraceEvent::Kind::kCompute, Stream::kCompute, label, op, bytes, start_ns, NowNs()});
      });
}

void SimBackend::GetRows(const WeightMatrix& table, const int32_t* ids, int64_t n_tok, float* y) {
  if (!CheckDevice(table.data, MatrixBytes(table), "GetRows", "the table") ||
      !CheckDevice(ids, n_tok * sizeof(int32_t), "GetRows", "ids") ||
      !CheckDevice(y, n_tok * table.cols * sizeof(float), "GetRows", "y")) {
    return;
  }
  // A lookup reads one row of the table per token; a norm or a bias reads its vector: the throttle charges them.
  Compute("GetRows", static_cast<uint64_t>(n_tok) * RowBytes(table.type, table.cols),
          [table, ids, n_tok, y] { cpu::GetRows(table, ids, n_tok, y); });
}

void SimBackend::RmsNorm(const float* x, const float* w, int64_t n_tok, int64_t n, float eps, float* y) {
  const size_t bytes = static_cast<size_t>(n_tok * n) * sizeof(float);
  if (!CheckDevice(x, bytes, "RmsNorm", "x") || !CheckDevice(y, bytes, "RmsNorm", "y") ||
      (w != nullptr && !CheckDevice(w, n * sizeof(float), "RmsNorm", "w"))) {
    return;
  }
  Compute("RmsNorm", w != nullptr ? static_cast<uint64_t>(n) * sizeof(float) : 0,
          [=] { cpu::RmsNorm(x, w, n_tok, n, eps, y); });
}

void SimBackend::MatMul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y) {
  const size_t wbytes = MatrixBytes(w);
  if (!CheckDevice(w.data, wbytes, "MatMul", "the weights") ||
      !CheckDevice(x, n_tok * w.cols * sizeof(float), "MatMul", "x") ||
      !CheckDevice(y, n_tok * w.rows * sizeof(float), "MatMul", "y")) {
    return;
  }
  const size_t need = cpu::MatMulScratchBytes(w.type, w.cols, n_tok);
  if (workspace_ == nullptr || need > matmul_scratch_bytes_) {
    SetError(FailedPrecondition(opts_.spec, ": MatMul needs ", need, " bytes of workspace, ", matmul_scratch_bytes_,
                                " reserved (call ReserveWorkspace with a larger spec)"));
    return;
  }
  void* scratch = workspace_;
  Compute("MatMul", wbytes, [w, x, n_tok, y, scratch] { cpu::MatMul(w, x, n_tok, y, scratch); });
}

void SimBackend::Rope(float* x, int64_t n_tok, const int32_t* pos, const RopeParams& p) {
  if (!CheckDevice(x, static_cast<size_t>(n_tok) * p.n_head * p.head_dim * sizeof(float), "Rope", "x") ||
      !CheckDevice(pos, n_tok * sizeof(int32_t), "Rope", "pos") ||
      (p.freq_factors != nullptr &&
       !CheckDevice(p.freq_factors, static_cast<size_t>(p.n_rot / 2) * sizeof(float), "Rope", "freq_factors"))) {
    return;
  }
  Compute("Rope", 0, [=] { cpu::Rope(x, n_tok, pos, p); });
}

void SimBackend::KvStore(const KvLayer& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0) {
  const size_t cache = static_cast<size_t>(kv.n_ctx * kv.row_elems) * (kv.type == DType::kF32 ? 4 : 2);
  const size_t rows = static_cast<size_t>(n_tok * kv.row_elems) * sizeof(float);
  if (!CheckDevice(kv.k, cache, "KvStore", "the K cache") || !CheckDevice(kv.v, cache, "KvStore", "the V cache") ||
      !CheckDevice(k, rows, "KvStore", "k") || !CheckDevice(v, rows, "KvStore", "v")) {
    return;
  }
  if (!kv.HoldsStore(pos0, n_tok)) {
    SetError(InvalidArgument(opts_.spec, ": KvStore: rows ", pos0, "..", pos0 + n_tok, " outside the cache of ",
                             kv.n_ctx));
    return;
  }
  Compute("KvStore", 0, [=] { cpu::KvStore(kv, k, v, n_tok, pos0); });
}

void SimBackend::Attention(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
                           float* out) {
  const size_t cache = static_cast<size_t>(kv.n_ctx * kv.row_elems) * (kv.type == DType::kF32 ? 4 : 2);
  const size_t rows = static_cast<size_t>(n_tok) * p.n_head * p.head_dim * sizeof(float);
  if (!CheckDevice(q, rows, "Attention", "q") || !CheckDevice(out, rows, "Attention", "out") ||
      !CheckDevice(kv.k, cache, "Attention", "the K cache") || !CheckDevice(kv.v, cache, "Attention", "the V cache") ||
      (p.sinks != nullptr && !CheckDevice(p.sinks, static_cast<size_t>(p.n_head) * sizeof(float), "Attention", "sinks"))) {
    return;
  }
  if (!kv.HoldsAttention(pos0, n_tok, p.window)) {
    SetError(InvalidArgument(opts_.spec, ": Attention: positions ", pos0, "..", pos0 + n_tok, " outside the cache of ",
                             kv.n_ctx, kv.ring ? " (a ring)" : ""));
    return;
  }
  const size_t need = cpu::AttentionScratchBytes(kv.n_ctx, p.n_head, compute_threads_);
  if (workspace_ == nullptr || need > attention_scratch_bytes_) {
    SetError(FailedPrecondition(opts_.spec, ": Attention needs ", need, " bytes of workspace, ",
                                attention_scratch_bytes_, " reserved"));
    return;
  }
  void* scratch = static_cast<uint8_t*>(workspace_) + matmul_scratch_bytes_;
  // A GPU's attention is bound by reading the cached K and V rows, so that is what the throttle charges.
  const int64_t rows_read = p.window > 0 ? std::min<int64_t>(p.window + n_tok - 1, pos0 + n_tok) : pos0 + n_tok;
  const uint64_t kv_read = 2ull * static_cast<uint64_t>(rows_read) * kv.row_elems * (kv.type == DType::kF32 ? 4 : 2);
  Compute("Attention", kv_read, [=] { cpu::Attention(q, kv, n_tok, pos0, p, out, scratch); });
}

void SimBackend::AddBias(const float* x, const float* b, int64_t n_tok, int64_t n, float* y) {
  const size_t bytes = static_cast<size_t>(n_tok * n) * sizeof(float);
  if (!CheckDevice(x, bytes, "AddBias", "x") || !CheckDevice(y, bytes, "AddBias", "y") ||
      !CheckDevice(b, static_cast<size_t>(n) * sizeof(float), "AddBias", "b")) {
    return;
  }
  Compute("AddBias", static_cast<uint64_t>(n) * sizeof(float), [=] { cpu::AddBias(x, b, n_tok, n, y); });
}

void SimBackend::ScaleRows(const float* x, const float* s, int64_t n_tok, int64_t n, RowScale f, float* y) {
  const size_t bytes = static_cast<size_t>(n_tok * n) * sizeof(float);
  if (!CheckDevice(x, bytes, "ScaleRows", "x") || !CheckDevice(y, bytes, "ScaleRows", "y") ||
      !CheckDevice(s, static_cast<size_t>(n_tok) * sizeof(float), "ScaleRows", "s")) {
    return;
  }
  Compute("ScaleRows", 0, [=] { cpu::ScaleRows(x, s, n_tok, n, f, y); });
}

void SimBackend::Glu(const float* g, const float* u, int64_t n, const GluParams& p, float* y) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (!CheckDevice(g, bytes, "Glu", "g") || (u != nullptr && !CheckDevice(u, bytes, "Glu", "u")) ||
      !CheckDevice(y, bytes, "Glu", "y")) {
    return;
  }
  Compute("Glu", 0, [=] { cpu::Glu(g, u, n, p, y); });
}

void SimBackend::Add(const float* a, const float* b, int64_t n, float* y) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (!CheckDevice(a, bytes, "Add", "a") || !CheckDevice(b, bytes, "Add", "b") || !CheckDevice(y, bytes, "Add", "y")) {
    return;
  }
  Compute("Add", 0, [=] { cpu::Add(a, b, n, y); });
}

void SimBackend::MoeRoute(const float* logits, int64_t n_tok, const MoeRouteParams& p, int32_t* ids,
                          float* weights) {
  const size_t pairs = static_cast<size_t>(n_tok) * static_cast<size_t>(std::max(p.k, 0));
  if (p.k < 1 || p.k > p.n_expert) {
    SetError(InvalidArgument(opts_.spec, ": MoeRoute: top-", p.k, " of ", p.n_expert, " experts"));
    return;
  }
  if (!CheckDevice(logits, static_cast<size_t>(n_tok) * p.n_expert * sizeof(float), "MoeRoute", "logits") ||
      !CheckDevice(ids, pairs * sizeof(int32_t), "MoeRoute", "ids") ||
      !CheckDevice(weights, pairs * sizeof(float), "MoeRoute", "weights") ||
      (p.selection_bias != nullptr &&
       !CheckDevice(p.selection_bias, static_cast<size_t>(p.n_expert) * sizeof(float), "MoeRoute", "bias"))) {
    return;
  }
  // Like a GPU, the routing stays in device memory: nothing waits for it here.
  Compute("MoeRoute", 0, [=] { cpu::MoeRoute(logits, n_tok, p, ids, weights); });
}

void SimBackend::MoeExperts(const MoeExpertsArgs& a) {
  if (a.n_tok == 0) return;
  if (grouping_ == nullptr || a.n_tok * a.k > grouping_max_pairs_ || a.n_expert > grouping_n_expert_ ||
      a.n_tok > a.buf.rows) {
    SetError(FailedPrecondition(opts_.spec, ": MoeExperts: ", a.n_tok, " tokens of ", a.k, " of ", a.n_expert,
                                " experts exceed the workspace or buffers reserved"));
    return;
  }
  // Skipped experts (a null gate, runtime/ops.h) are another device's: nothing of theirs is checked or read.
  const int first = cpu::FirstComputedExpert(a);
  const int64_t n_embd = cpu::MoeOutWidth(a), n_ff = first >= 0 ? a.experts[first].gate->rows : 0;
  if (n_embd <= 0 || (a.n_embd != 0 && a.n_embd != n_embd)) {
    SetError(InvalidArgument(opts_.spec, ": MoeExperts: ",
                             n_embd <= 0 ? "every expert is skipped and n_embd is not given"
                                         : Cat("n_embd ", a.n_embd, " but experts of ", n_embd)));
    return;
  }
  const size_t pairs = static_cast<size_t>(a.n_tok * a.k);
  if (!CheckDevice(a.x, static_cast<size_t>(a.n_tok * n_embd) * sizeof(float), "MoeExperts", "x") ||
      !CheckDevice(a.ids, pairs * sizeof(int32_t), "MoeExperts", "ids") ||
      !CheckDevice(a.weights, pairs * sizeof(float), "MoeExperts", "weights") ||
      !CheckDevice(a.out, pairs * n_embd * sizeof(float), "MoeExperts", "out") ||
      !CheckDevice(a.buf.xe, static_cast<size_t>(a.buf.rows * n_embd) * sizeof(float), "MoeExperts", "buffers") ||
      !CheckDevice(a.buf.gate, static_cast<size_t>(a.buf.rows * n_ff) * sizeof(float), "MoeExperts", "buffers") ||
      !CheckDevice(a.buf.up, static_cast<size_t>(a.buf.rows * n_ff) * sizeof(float), "MoeExperts", "buffers")) {
    return;
  }
  // The views are the caller's: keep copies, as the queued work runs later.
  auto experts = std::make_shared<std::vector<ExpertMatrices>>(a.experts, a.experts + a.n_expert);
  auto matrices = std::make_shared<std::vector<WeightMatrix>>();
  matrices->reserve(3 * experts->size());
  for (ExpertMatrices& m : *experts) {
    if (m.gate == nullptr) {
      m = ExpertMatrices{};  // so the queued task cannot touch what the caller left there
      continue;
    }
    const size_t ff_bytes = static_cast<size_t>(n_ff) * sizeof(float), embd_bytes = static_cast<size_t>(n_embd) * 4;
    if ((m.gate_bias != nullptr && !CheckDevice(m.gate_bias, ff_bytes, "MoeExperts", "a gate bias")) ||
        (m.up_bias != nullptr && !CheckDevice(m.up_bias, ff_bytes, "MoeExperts", "an up bias")) ||
        (m.down_bias != nullptr && !CheckDevice(m.down_bias, embd_bytes, "MoeExperts", "a down bias"))) {
      return;
    }
    for (const WeightMatrix** w : {&m.gate, &m.up, &m.down}) {
      if (!CheckDevice((*w)->data, MatrixBytes(**w), "MoeExperts", "expert weights")) return;
      matrices->push_back(**w);
      *w = &matrices->back();
    }
  }
  // A GPU reads the weights of the computed experts the batch routes to, which only the device knows: the throttle
  // charges them when the task runs.
  MoeExpertsArgs args = a;
  args.experts = experts->data();
  void* groups_block = grouping_;
  void* scratch = workspace_;
  const size_t scratch_bytes = matmul_scratch_bytes_;
  const int max_tok = static_cast<int>(grouping_max_pairs_ / std::max(grouping_k_, 1));
  const int n_expert_ws = grouping_n_expert_, k_ws = grouping_k_;
  Compute("MoeExperts", 0, [this, args, experts, matrices, groups_block, scratch, scratch_bytes, max_tok, n_expert_ws,
                            k_ws]() -> uint64_t {
    cpu::ExpertGroups g = cpu::CarveExpertGroups(groups_block, max_tok, n_expert_ws, k_ws);
    cpu::GroupByExpert(args.ids, args.weights, args.n_tok, args.k, args.n_expert, g);
    // Each expert's pairs go through MatMul in chunks of up to buf.rows; the scratch holds max_tokens rows. The
    // grouping admits n_tok * k pairs, which with a smaller k than reserved for can put more tokens than that on
    // one expert: an error, not an overrun. Only here, on the device, are the counts known.
    for (int e = 0; e < args.n_expert; ++e) {
      const int64_t chunk = std::min(g.expert_begin[e + 1] - g.expert_begin[e], args.buf.rows);
      if (chunk == 0 || cpu::SkipsExpert(args, e)) continue;
      for (const WeightMatrix* w : {args.experts[e].gate, args.experts[e].up, args.experts[e].down}) {
        if (const size_t need = cpu::MatMulScratchBytes(w->type, w->cols, chunk); need > scratch_bytes) {
          SetError(FailedPrecondition(opts_.spec, ": MoeExperts: expert ", e, " takes ", chunk,
                                      " rows at once, which need ", need, " bytes of matmul workspace; ",
                                      scratch_bytes, " reserved"));
          return 0;
        }
      }
    }
    cpu::MoeExpertsOneByOne(args, g, scratch);
    uint64_t bytes = 0;
    for (int e = 0; e < args.n_expert; ++e) {
      if (g.expert_begin[e + 1] == g.expert_begin[e] || cpu::SkipsExpert(args, e)) continue;
      const ExpertMatrices& m = args.experts[e];
      bytes += MatrixBytes(*m.gate) + MatrixBytes(*m.up) + MatrixBytes(*m.down);
    }
    return bytes;
  });
}

}  // namespace tandem

// CpuBackend: the Backend interface over host memory and the cpu:: kernels.
#include "cpu_backend/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "core/status.h"
#include "cpu_backend/host_block.h"
#include "cpu_backend/kernels.h"
#include "cpu_backend/onednn_matmul.h"
#include "cpu_backend/repack.h"

namespace tandem {
namespace {

// Weight types whose matmul scratch the workspace must cover.
constexpr DType kMatMulTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                                  DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4};

class CpuBackend final : public CpuBackendApi {
 public:
  explicit CpuBackend(const CpuBackendOptions& options)
      : capacity_(options.capacity), repack_(ResolveRepack(options.repack)) {
    if (options.n_threads > 0) omp_set_num_threads(options.n_threads);
  }

  ~CpuBackend() override {
    for (auto& [p, bytes] : allocations_) cpu::FreeHostBlock(p);
  }

  std::string_view name() const override { return "CPU"; }
  bool host_memory() const override { return true; }
  bool Supports(Op, DType) const override { return true; }

  // ---- Memory ----
  // Workspaces, activations and KV caches come back resident (PrefaultHostBlock), so a run's first prefill does
  // not pay their page faults; repacked weights (AllocBlock alone) are written whole by Repack at once.
  absl::StatusOr<void*> Alloc(size_t bytes, std::string_view what) override {
    TANDEM_ASSIGN_OR_RETURN(void* p, AllocBlock(bytes, what));
    cpu::PrefaultHostBlock(p, bytes);
    return p;
  }

  void Free(void* p) override {
    if (p == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocations_.find(p);
    TANDEM_CHECK(it != allocations_.end());  // freeing memory this backend did not hand out is a bug
    in_use_ -= it->second;
    allocations_.erase(it);
    cpu::FreeHostBlock(p);
  }

  size_t capacity() const override { return capacity_; }
  size_t bytes_in_use() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return in_use_;
  }
  size_t peak_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }

  absl::StatusOr<void*> AllocHostPinned(size_t bytes) override {
    void* p = cpu::AllocHostBlock(bytes);
    if (p == nullptr) return ResourceExhausted("CPU: out of host memory allocating ", bytes, " pinned bytes");
    return p;
  }
  void FreeHostPinned(void* p) override { cpu::FreeHostBlock(p); }

  absl::StatusOr<WeightMatrix> PrepareMatMulWeights(const WeightMatrix& m, std::string_view what) override {
    if (onednn_on_ && cpu::OneDnnTakesType(m.type)) {
      TANDEM_ASSIGN_OR_RETURN(const bool taken, onednn_.Prepare(m));
      (void)taken;  // taken or not, MatMul reads the file's rows: oneDNN in place, or the own kernels
      return m;
    }
    if (!repack_ || !cpu::CanRepack(m)) return m;
    TANDEM_ASSIGN_OR_RETURN(void* packed, AllocBlock(cpu::PackedBytes(m), Cat(what, " (repacked)")));
    const WeightMatrix prepared = cpu::Repack(m, packed);
    if (onednn_on_ && cpu::OneDnnQuantMinTokens(m.type) > 0) {  // prefill on AMX (onednn_matmul.h) where faster
      TANDEM_ASSIGN_OR_RETURN(const bool taken, onednn_.Prepare(prepared));
      (void)taken;
    }
    return prepared;
  }
  void ReleaseMatMulWeights(const WeightMatrix& prepared) override {
    if (!cpu::IsPacked(prepared)) return;  // the file's own rows: not ours
    {
      std::lock_guard<std::mutex> lock(mu_);
      row_nodes_.erase(prepared.data);
    }
    // Our own allocation (Alloc above), found by its address.
    Free(const_cast<void*>(prepared.data));
  }

  absl::Status ReserveWorkspace(const WorkspaceSpec& spec) override {
    size_t matmul_bytes = 0;
    for (DType type : kMatMulTypes) {
      // A type's rows are whole blocks, so any legal width up to max_cols fits in max_cols rounded up.
      const int64_t block = Traits(type).block_elems;
      const int64_t cols = (spec.max_cols + block - 1) / block * block;
      matmul_bytes = std::max(matmul_bytes, cpu::MatMulScratchBytes(type, cols, spec.max_tokens));
      // ExpertPass's one-token experts in one region, each with its own activations (a decode step's down
      // projections): a tile per thread each.
      const auto one_token_jobs = static_cast<size_t>(std::clamp<int64_t>(spec.expert_rows, 1, cpu::kMaxBatchJobs / 2));
      matmul_bytes = std::max(matmul_bytes, one_token_jobs * cpu::MatMulScratchBytes(type, cols, 1));
    }
    // oneDNN's products share the matmul workspace (calls on one backend are sequential).
    TANDEM_RETURN_IF_ERROR(onednn_.SetMaxTokens(spec.max_tokens));
    matmul_bytes = std::max(matmul_bytes, onednn_.ScratchBytes(spec.max_tokens));
    const size_t attention_bytes = cpu::AttentionScratchBytes(spec.n_ctx, spec.n_head, omp_get_max_threads());
    const size_t grouping_bytes =
        spec.n_expert > 0 ? cpu::MoeGroupingBytes(spec.max_tokens, spec.n_expert, spec.n_expert_used) : 0;

    ReleaseWorkspace();
    TANDEM_ASSIGN_OR_RETURN(matmul_scratch_, Alloc(matmul_bytes, "matmul workspace"));
    auto attention = Alloc(attention_bytes, "attention workspace");
    if (!attention.ok()) {
      ReleaseWorkspace();
      return attention.status();
    }
    attention_scratch_ = *attention;
    matmul_scratch_bytes_ = matmul_bytes;
    attention_scratch_bytes_ = attention_bytes;
    if (grouping_bytes > 0) {
      auto grouping = Alloc(grouping_bytes, "MoE grouping workspace");
      if (!grouping.ok()) {
        ReleaseWorkspace();
        return grouping.status();
      }
      grouping_scratch_ = *grouping;
      groups_ = cpu::CarveExpertGroups(grouping_scratch_, spec.max_tokens, spec.n_expert, spec.n_expert_used);
      grouping_max_pairs_ = spec.max_tokens * spec.n_expert_used;
      grouping_n_expert_ = spec.n_expert;
    }
    return absl::OkStatus();
  }

  // ---- Movement: host to host, so synchronous; streams and events have nothing to order ----
  absl::Status CopyHostToDevice(void* dst, const void* src, size_t n, Stream) override {
    std::memcpy(dst, src, n);
    return absl::OkStatus();
  }
  absl::Status CopyDeviceToHost(void* dst, const void* src, size_t n, Stream) override {
    std::memcpy(dst, src, n);
    return absl::OkStatus();
  }
  absl::StatusOr<int> CreateEvent() override {
    std::lock_guard<std::mutex> lock(mu_);
    return n_events_++;
  }
  absl::Status RecordEvent(int event, Stream) override { return CheckEvent(event); }
  absl::Status WaitEvent(int event, Stream) override { return CheckEvent(event); }
  absl::Status Synchronize(Stream) override { return absl::OkStatus(); }

  // ---- Compute ----
  void GetRows(const WeightMatrix& table, const int32_t* ids, int64_t n_tok, float* y) override {
    cpu::GetRows(table, ids, n_tok, y);
  }
  void RmsNorm(const float* x, const float* w, int64_t n_tok, int64_t n, float eps, float* y) override {
    cpu::RmsNorm(x, w, n_tok, n, eps, y);
  }
  void MatMul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y) override {
    const size_t need = cpu::MatMulScratchBytes(w.type, w.cols, n_tok);
    if (matmul_scratch_ == nullptr || need > matmul_scratch_bytes_) {
      SetError(FailedPrecondition("CPU MatMul needs ", need, " bytes of workspace, ", matmul_scratch_bytes_,
                                  " reserved"));
      return;
    }
    if (onednn_.Takes(w, n_tok) && onednn_.ScratchFor(w, n_tok) <= matmul_scratch_bytes_) {
      if (absl::Status st = onednn_.MatMul(w, x, n_tok, y, matmul_scratch_); !st.ok()) SetError(std::move(st));
      return;
    }
    cpu::MatMul(w, x, n_tok, y, matmul_scratch_, AffinityFor(w, n_tok));
  }
  // Packed products share one parallel region and one quantized copy of x (MatMulBatch): in decode, q, k and v of
  // one layer are one region instead of three (docs/performance.md). Others, and prefill products on oneDNN's
  // route, run one by one.
  void MatMuls(std::span<const MatMulOutput> products, const float* x, int64_t n_tok) override {
    cpu::MatMulJob jobs[cpu::kMaxBatchJobs];
    size_t n_jobs = 0, n_ranges = 0;
    for (const MatMulOutput& p : products) {
      if (cpu::IsPacked(*p.w) && !onednn_.Takes(*p.w, n_tok) && n_jobs < cpu::kMaxBatchJobs) {
        jobs[n_jobs] = Job(*p.w, x, n_tok, p.y);
        n_ranges += RangesOf(jobs[n_jobs++]);
      } else {
        MatMul(*p.w, x, n_tok, p.y);
      }
    }
    if (n_jobs == 0) return;
    if (matmul_scratch_ == nullptr || n_ranges > cpu::kMaxBatchRanges ||
        cpu::MatMulBatchScratchBytes(jobs, n_jobs) > matmul_scratch_bytes_) {
      for (size_t i = 0; i < n_jobs; ++i) MatMul(*jobs[i].w, x, n_tok, jobs[i].y);
      return;
    }
    cpu::MatMulBatch(jobs, n_jobs, matmul_scratch_, thread_node_.empty() ? nullptr : thread_node_.data(),
                     thread_node_.size());
  }

  // ---- NUMA ----
  void SetThreadNodes(std::vector<int> thread_node) override { thread_node_ = std::move(thread_node); }
  void SetRowNodes(const void* data, std::vector<cpu::RowNodeRange> ranges) override {
    std::lock_guard<std::mutex> lock(mu_);
    row_nodes_[data] = std::move(ranges);
  }
  void AddBias(const float* x, const float* b, int64_t n_tok, int64_t n, float* y) override {
    cpu::AddBias(x, b, n_tok, n, y);
  }
  void ScaleRows(const float* x, const float* s, int64_t n_tok, int64_t n, RowScale f, float* y) override {
    cpu::ScaleRows(x, s, n_tok, n, f, y);
  }
  void Rope(float* x, int64_t n_tok, const int32_t* pos, const RopeParams& p) override { cpu::Rope(x, n_tok, pos, p); }
  void KvStore(const KvLayer& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0) override {
    cpu::KvStore(kv, k, v, n_tok, pos0);
  }
  void Attention(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
                 float* out) override {
    const size_t need = cpu::AttentionScratchBytes(kv.n_ctx, p.n_head, omp_get_max_threads());
    if (attention_scratch_ == nullptr || need > attention_scratch_bytes_) {
      SetError(FailedPrecondition("CPU Attention needs ", need, " bytes of workspace, ", attention_scratch_bytes_,
                                  " reserved"));
      return;
    }
    cpu::Attention(q, kv, n_tok, pos0, p, out, attention_scratch_);
  }
  void Glu(const float* g, const float* u, int64_t n, const GluParams& p, float* y) override {
    cpu::Glu(g, u, n, p, y);
  }
  void Add(const float* a, const float* b, int64_t n, float* y) override { cpu::Add(a, b, n, y); }
  void MoeRoute(const float* logits, int64_t n_tok, const MoeRouteParams& p, int32_t* ids, float* weights) override {
    if (p.k < 1 || p.k > p.n_expert) {
      SetError(InvalidArgument("CPU MoeRoute: top-", p.k, " of ", p.n_expert, " experts"));
      return;
    }
    cpu::MoeRoute(logits, n_tok, p, ids, weights);
  }

  // The routed (token, slot) pairs grouped by expert, then every expert with tokens. Packed experts go through
  // MatMulBatch: the gate and up products of every expert in one parallel region, then every down product in
  // another, each thread taking its own node's experts first. A pass takes as many experts as the buffers and the
  // workspace hold; the products equal the one-by-one path's, bit for bit. Other layouts go one by one. Skipped
  // experts (a null gate, runtime/ops.h) take no part: their pairs' slots are zeroed, nothing else of out is.
  void MoeExperts(const MoeExpertsArgs& a) override {
    if (a.n_tok == 0) return;
    if (grouping_scratch_ == nullptr || matmul_scratch_ == nullptr || a.n_tok * a.k > grouping_max_pairs_ ||
        a.n_expert > grouping_n_expert_ || a.n_tok > a.buf.rows) {
      SetError(FailedPrecondition("CPU MoeExperts: ", a.n_tok, " tokens of ", a.k, " of ", a.n_expert,
                                  " experts exceed the workspace or buffers reserved"));
      return;
    }
    const int64_t n_embd = cpu::MoeOutWidth(a);
    if (n_embd <= 0 || (a.n_embd != 0 && a.n_embd != n_embd)) {
      SetError(InvalidArgument("CPU MoeExperts: ", n_embd <= 0 ? "every expert is skipped and n_embd is not given"
                                                               : Cat("n_embd ", a.n_embd, " but experts of ", n_embd)));
      return;
    }
    cpu::GroupByExpert(a.ids, a.weights, a.n_tok, a.k, a.n_expert, groups_);
    bool packed = true, skips = false;
    for (int e = 0; e < a.n_expert; ++e) {
      const ExpertMatrices& m = a.experts[e];
      if (cpu::SkipsExpert(a, e)) {
        skips = true;
      } else {
        packed = packed && cpu::IsPacked(*m.gate) && cpu::IsPacked(*m.up) && cpu::IsPacked(*m.down);
      }
    }
    if (!packed) {
      for (int e = 0; e < a.n_expert; ++e) {
        if (!ExpertFitsScratch(a, e)) return;
      }
      cpu::MoeExpertsOneByOne(a, groups_, matmul_scratch_);  // zeroes the skipped experts' slots itself
      return;
    }
    if (skips) cpu::ZeroSkippedSlots(a, groups_, n_embd);
    int first = 0;  // the first expert not yet run
    while (true) {
      while (first < a.n_expert &&
             (cpu::SkipsExpert(a, first) || groups_.expert_begin[first + 1] == groups_.expert_begin[first])) {
        ++first;
      }
      if (first == a.n_expert) return;
      first = ExpertPass(first, a);
    }
  }

  void SetTraceLabel(std::string_view label) override { label_.assign(label.data(), label.size()); }

  absl::Status TakeError() override {
    std::lock_guard<std::mutex> lock(mu_);
    absl::Status first = std::move(error_);
    error_ = absl::OkStatus();
    return first;
  }

 private:
  // A block of this backend's, counted against its capacity, as the OS gave it (not yet resident).
  absl::StatusOr<void*> AllocBlock(size_t bytes, std::string_view what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes > capacity_ || in_use_ > capacity_ - bytes) {
      return ResourceExhausted("CPU: cannot allocate ", what, ": ", bytes, " bytes requested, ", in_use_,
                               " of ", capacity_, " bytes in use");
    }
    void* p = cpu::AllocHostBlock(bytes);
    if (p == nullptr) return ResourceExhausted("CPU: out of host memory allocating ", what, " (", bytes, " bytes)");
    allocations_[p] = bytes;
    in_use_ += bytes;
    peak_ = std::max(peak_, in_use_);
    return p;
  }

  absl::Status CheckEvent(int event) {
    std::lock_guard<std::mutex> lock(mu_);
    if (event < 0 || event >= n_events_) return InvalidArgument("CPU: unknown event ", event);
    return absl::OkStatus();
  }

  void SetError(absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return;
    error_ = label_.empty() ? std::move(status)
                            : absl::Status(status.code(), Cat(label_, ": ", status.message()));
  }

  // A matrix split across nodes is always computed node by node. One that lives whole on one node (an expert under
  // shard) is left to that node's threads only for small batches, which are bound by its memory; a prefill batch
  // is bound by arithmetic and takes every thread. Null: no node preference.
  const std::vector<cpu::RowNodeRange>* NodeRanges(const WeightMatrix& w, int64_t n_tok) const {
    constexpr int64_t kLocalOnlyMaxTokens = 8;
    if (thread_node_.empty() || !cpu::IsPacked(w)) return nullptr;
    auto it = row_nodes_.find(w.data);  // written at load only, so read without the lock
    if (it == row_nodes_.end() || it->second.empty()) return nullptr;
    const std::vector<cpu::RowNodeRange>& ranges = it->second;
    const bool split = std::any_of(ranges.begin(), ranges.end(),
                                   [&](const cpu::RowNodeRange& r) { return r.node != ranges.front().node; });
    if (!split && n_tok > kLocalOnlyMaxTokens) return nullptr;
    return &ranges;
  }
  const cpu::MatMulAffinity* AffinityFor(const WeightMatrix& w, int64_t n_tok) {
    const std::vector<cpu::RowNodeRange>* ranges = NodeRanges(w, n_tok);
    if (ranges == nullptr) return nullptr;
    affinity_ = cpu::MatMulAffinity{.ranges = ranges->data(), .n_ranges = ranges->size(),
                                  .thread_node = thread_node_.data(), .n_thread_nodes = thread_node_.size()};
    return &affinity_;
  }
  cpu::MatMulJob Job(const WeightMatrix& w, const float* x, int64_t n_tok, float* y) const {
    const std::vector<cpu::RowNodeRange>* ranges = NodeRanges(w, n_tok);
    return cpu::MatMulJob{.w = &w, .x = x, .n_tok = n_tok, .y = y,
                          .ranges = ranges == nullptr ? nullptr : ranges->data(),
                          .n_ranges = ranges == nullptr ? 0 : ranges->size()};
  }
  static size_t RangesOf(const cpu::MatMulJob& j) { return j.ranges == nullptr ? 1 : j.n_ranges; }

  // Whether the one-by-one path can run expert e: its pairs go through MatMul in chunks of up to buf.rows, and the
  // workspace holds the products of max_tokens rows. The grouping admits n_tok * k pairs, which with a smaller k
  // than reserved for can put more tokens on one expert than that: an error, not an overrun of the scratch.
  bool ExpertFitsScratch(const MoeExpertsArgs& a, int e) {
    const int64_t chunk = std::min(groups_.expert_begin[e + 1] - groups_.expert_begin[e], a.buf.rows);
    if (chunk == 0 || cpu::SkipsExpert(a, e)) return true;
    const ExpertMatrices& m = a.experts[e];
    for (const WeightMatrix* w : {m.gate, m.up, m.down}) {
      if (const size_t need = cpu::MatMulScratchBytes(w->type, w->cols, chunk); need > matmul_scratch_bytes_) {
        SetError(FailedPrecondition("CPU MoeExperts: expert ", e, " takes ", chunk, " rows at once, which need ", need,
                                    " bytes of matmul workspace; ", matmul_scratch_bytes_, " reserved"));
        return false;
      }
    }
    return true;
  }

  // One pass over the computed experts from `first` on (itself computed) that fit together (at least `first`
  // itself, whose pairs fit the buffers); returns the expert to go on from.
  int ExpertPass(int first, const MoeExpertsArgs& a) {
    constexpr size_t kMaxExperts = cpu::kMaxBatchJobs / 2;
    const ExpertBuffers& buf = a.buf;
    const int64_t n_embd = a.experts[first].gate->cols, n_ff = a.experts[first].gate->rows;
    cpu::MatMulJob gate_up[cpu::kMaxBatchJobs], down[kMaxExperts];
    int ids[kMaxExperts];
    int64_t row0[kMaxExperts], x_row[kMaxExperts];  // expert e's rows of gate, up and its output; of its input
    size_t n = 0, gate_up_ranges = 0, down_ranges = 0;
    int64_t rows = 0;
    int e = first;
    for (; e < a.n_expert && n < kMaxExperts; ++e) {
      const int64_t begin = groups_.expert_begin[e], count = groups_.expert_begin[e + 1] - begin;
      if (count == 0 || cpu::SkipsExpert(a, e)) continue;
      const ExpertMatrices& m = a.experts[e];
      if (rows + count > buf.rows) break;
      // A decode step's experts all take the one token: they read the first one's gathered row, so MatMulBatch
      // quantizes it once (its jobs share the tiles of equal inputs side by side). Not when the routing weight
      // scales the input, which makes each expert's input its own.
      const bool same_token = !a.weight_input && n > 0 && count == 1 &&
                              groups_.expert_begin[ids[n - 1] + 1] - groups_.expert_begin[ids[n - 1]] == 1 &&
                              groups_.rows[begin] == groups_.rows[groups_.expert_begin[ids[n - 1]]];
      x_row[n] = same_token ? x_row[n - 1] : rows;
      gate_up[2 * n] = Job(*m.gate, buf.xe + x_row[n] * n_embd, count, buf.gate + rows * n_ff);
      gate_up[2 * n + 1] = Job(*m.up, buf.xe + x_row[n] * n_embd, count, buf.up + rows * n_ff);
      down[n] = Job(*m.down, buf.gate + rows * n_ff, count, buf.xe + rows * n_embd);
      const size_t gu = gate_up_ranges + RangesOf(gate_up[2 * n]) + RangesOf(gate_up[2 * n + 1]);
      const size_t dn = down_ranges + RangesOf(down[n]);
      if (gu > cpu::kMaxBatchRanges || dn > cpu::kMaxBatchRanges ||
          cpu::MatMulBatchScratchBytes(gate_up, 2 * n + 2) > matmul_scratch_bytes_ ||
          cpu::MatMulBatchScratchBytes(down, n + 1) > matmul_scratch_bytes_) {
        break;
      }
      gate_up_ranges = gu;
      down_ranges = dn;
      ids[n] = e;
      row0[n] = rows;
      rows += count;
      ++n;
    }
    if (n == 0) {  // the first expert alone does not fit the workspace: it runs one product at a time
      if (!ExpertFitsScratch(a, first)) return a.n_expert;  // nor that: give up on the call
      MoeExpertsArgs one = a;
      one.experts = a.experts + first;
      one.n_expert = 1;
      cpu::ExpertGroups g = groups_;
      g.expert_begin += first;
      cpu::MoeExpertsOneByOne(one, g, matmul_scratch_);
      return first + 1;
    }
    const int* nodes = thread_node_.empty() ? nullptr : thread_node_.data();
    for (size_t i = 0; i < n; ++i) {
      const int64_t begin = groups_.expert_begin[ids[i]], end = groups_.expert_begin[ids[i] + 1];
      if (x_row[i] == row0[i]) {
        cpu::GatherExpertInputs(a, a.experts[ids[i]], groups_, begin, end, buf.xe + row0[i] * n_embd);
      }
    }
    cpu::MatMulBatch(gate_up, 2 * n, matmul_scratch_, nodes, thread_node_.size());
    for (size_t i = 0; i < n; ++i) {
      const int64_t count = groups_.expert_begin[ids[i] + 1] - groups_.expert_begin[ids[i]];
      cpu::AddExpertGateUpBiases(a.experts[ids[i]], count, buf.gate + row0[i] * n_ff, buf.up + row0[i] * n_ff);
    }
    cpu::Glu(buf.gate, buf.up, rows * n_ff, a.act, buf.gate);
    cpu::MatMulBatch(down, n, matmul_scratch_, nodes, thread_node_.size());
    for (size_t i = 0; i < n; ++i) {
      const int64_t begin = groups_.expert_begin[ids[i]], end = groups_.expert_begin[ids[i] + 1];
      cpu::ScatterExpertOutputs(a, a.experts[ids[i]], groups_, begin, end, buf.xe + row0[i] * n_embd);
    }
    return e;
  }

  void ReleaseWorkspace() {
    Free(matmul_scratch_);
    Free(attention_scratch_);
    Free(grouping_scratch_);
    matmul_scratch_ = attention_scratch_ = grouping_scratch_ = nullptr;
    matmul_scratch_bytes_ = attention_scratch_bytes_ = 0;
    groups_ = {};
    grouping_max_pairs_ = 0;
    grouping_n_expert_ = 0;
  }

  const size_t capacity_;
  const bool repack_;
  const bool onednn_on_ = cpu::OneDnnEnabled();
  cpu::OneDnnMatMuls onednn_;  // primitives for the float matrices PrepareMatMulWeights saw
  mutable std::mutex mu_;  // guards the accounting, events and the sticky error
  absl::flat_hash_map<void*, size_t> allocations_;
  size_t in_use_ = 0;
  size_t peak_ = 0;
  int n_events_ = 0;
  absl::Status error_;

  std::vector<int> thread_node_;  // empty: no NUMA affinity
  absl::flat_hash_map<const void*, std::vector<cpu::RowNodeRange>> row_nodes_;
  cpu::MatMulAffinity affinity_;  // the current MatMul's (calls on one backend are sequential)

  void* matmul_scratch_ = nullptr;
  size_t matmul_scratch_bytes_ = 0;
  void* attention_scratch_ = nullptr;
  size_t attention_scratch_bytes_ = 0;
  void* grouping_scratch_ = nullptr;  // MoeExperts' grouping of (token, slot) pairs by expert
  cpu::ExpertGroups groups_;
  int64_t grouping_max_pairs_ = 0;
  int grouping_n_expert_ = 0;
  std::string label_;  // the trace label, for error messages
};

}  // namespace

bool ResolveRepack(Repack r) {
  if (r == Repack::kAuto) {
    if (const char* env = std::getenv("TANDEM_REPACK"); env != nullptr && *env != '\0') {
      r = std::strcmp(env, "0") == 0 ? Repack::kOff : Repack::kOn;
    }
  }
  if (r == Repack::kAuto) return cpu::ActiveIsa() == cpu::Isa::kAvx512;
  return r == Repack::kOn;
}

std::unique_ptr<CpuBackendApi> CreateCpuBackend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace tandem

#include "graph/cost_model.h"

#include <algorithm>
#include <cmath>

namespace tandem {
namespace {

constexpr double kGiga = 1e9;
// A decode of MoE experts is a fixed handful of kernels whatever the routing (gather, gate and up, activation,
// down, scatter): what its launches and forks cost.
constexpr int kMoeExpertsOps = 6;

// A backend that computes nothing and counts what the ops would move and do. Attention charges the cache rows the
// query's batch reads at the configured average context, not at the positions it is called with.
class CountingBackend final : public Backend {
 public:
  CountingBackend(int64_t batch, double ctx, int kv_elem_bytes) : batch_(batch), ctx_(ctx), kv_elem_(kv_elem_bytes) {}

  const UnitWork& work() const { return w_; }
  const std::vector<std::pair<Op, DType>>& ops() const { return ops_; }

  std::string_view name() const override { return "counting"; }
  bool host_memory() const override { return true; }
  bool Supports(Op, DType) const override { return true; }
  absl::StatusOr<void*> Alloc(size_t, std::string_view) override { return absl::UnimplementedError("counting"); }
  void Free(void*) override {}
  size_t capacity() const override { return 0; }
  size_t peak_bytes() const override { return 0; }
  absl::StatusOr<void*> AllocHostPinned(size_t) override { return absl::UnimplementedError("counting"); }
  void FreeHostPinned(void*) override {}
  absl::Status ReserveWorkspace(const WorkspaceSpec&) override { return absl::OkStatus(); }
  absl::Status CopyHostToDevice(void*, const void*, size_t, Stream) override { return absl::OkStatus(); }
  absl::Status CopyDeviceToHost(void*, const void*, size_t, Stream) override { return absl::OkStatus(); }
  absl::StatusOr<int> CreateEvent() override { return 0; }
  absl::Status RecordEvent(int, Stream) override { return absl::OkStatus(); }
  absl::Status WaitEvent(int, Stream) override { return absl::OkStatus(); }
  absl::Status Synchronize(Stream) override { return absl::OkStatus(); }
  absl::Status TakeError() override { return absl::OkStatus(); }

  void GetRows(const WeightMatrix& table, const int32_t*, int64_t n_tok, float*) override {
    // A lookup reads one row per token.
    const double rows = static_cast<double>(std::max<int64_t>(table.rows, 1));
    w_.weight_bytes_read += std::min(static_cast<double>(n_tok), rows) / rows * static_cast<double>(table.bytes());
    Issue(Op::kGetRows, table.type);
  }
  void RmsNorm(const float*, const float*, int64_t, int64_t n, float, float*) override {
    w_.weight_bytes_read += static_cast<double>(n) * sizeof(float);  // the scale vector (views carry no data)
    Issue(Op::kRmsNorm, DType::kF32);
  }
  void MatMul(const WeightMatrix& w, const float*, int64_t n_tok, float*) override {
    w_.weight_bytes_read += static_cast<double>(w.bytes());
    w_.flops += 2.0 * static_cast<double>(w.rows) * static_cast<double>(w.cols) * static_cast<double>(n_tok);
    Issue(Op::kMatMul, w.type);
  }
  void AddBias(const float*, const float*, int64_t, int64_t n, float*) override {
    w_.weight_bytes_read += static_cast<double>(n) * sizeof(float);
    Issue(Op::kAddBias, DType::kF32);
  }
  void Rope(float*, int64_t, const int32_t*, const RopeParams&) override { Issue(Op::kRope, DType::kF32); }
  void KvStore(const KvLayer&, const float*, const float*, int64_t, int64_t) override {
    Issue(Op::kKvStore, DType::kF32);
  }
  void Attention(const float*, const KvLayer& kv, int64_t n_tok, int64_t, const AttentionParams& p,
                 float*) override {
    // The live tokens are the batch's last: they attend to about as many rows as the batch's average does, and the
    // batch reads the rows up to its last token once.
    double rows_read = ctx_ + static_cast<double>(batch_ - 1) / 2;
    double rows_seen = ctx_;
    if (p.window > 0) {
      rows_read = std::min(rows_read, static_cast<double>(p.window) + static_cast<double>(batch_ - 1));
      rows_seen = std::min(rows_seen, static_cast<double>(p.window));
    }
    w_.kv_bytes_read += 2.0 * rows_read * static_cast<double>(kv.row_elems) * kv_elem_;
    w_.attn_flops += 4.0 * static_cast<double>(n_tok) * rows_seen * p.n_head * p.head_dim;
    Issue(Op::kAttention, DType::kF32);
  }
  void Glu(const float*, const float*, int64_t, const GluParams&, float*) override { Issue(Op::kGlu, DType::kF32); }
  void Add(const float*, const float*, int64_t, float*) override { Issue(Op::kAdd, DType::kF32); }
  void ScaleRows(const float*, const float*, int64_t, int64_t, RowScale, float*) override {
    Issue(Op::kScaleRows, DType::kF32);
  }
  void MoeRoute(const float*, int64_t, const MoeRouteParams&, int32_t*, float*) override {
    Issue(Op::kMoeRoute, DType::kF32);
  }
  void MoeExperts(const MoeExpertsArgs& a) override {
    // Routing is data: the expected number of distinct experts a batch of uniform picks reaches.
    const ExpertMatrices& m = a.experts[0];
    const double hit = ExpectedExpertsHit(a.n_expert, a.k, a.n_tok);
    double bytes = 0, params = 0;
    for (const WeightMatrix* w : {m.gate, m.up, m.down}) {
      bytes += static_cast<double>(w->bytes());
      params += static_cast<double>(w->rows) * static_cast<double>(w->cols);
    }
    w_.weight_bytes_read += hit * bytes;
    w_.flops += 2.0 * static_cast<double>(a.n_tok) * std::min(a.k, a.n_expert) * params;
    w_.expert_bytes_read += hit * bytes;
    w_.expert_flops += 2.0 * static_cast<double>(a.n_tok) * std::min(a.k, a.n_expert) * params;
    w_.n_ops += kMoeExpertsOps - 1;
    Issue(Op::kMoeExperts, m.gate->type);
  }

 private:
  void Issue(Op op, DType type) {
    ++w_.n_ops;
    const std::pair<Op, DType> key{op, type};
    if (std::find(ops_.begin(), ops_.end(), key) == ops_.end()) ops_.push_back(key);
  }

  const int64_t batch_;
  const double ctx_;
  const int kv_elem_;
  UnitWork w_;
  std::vector<std::pair<Op, DType>> ops_;
};

// Stand-in activation buffers: the counting backend reads no data, so they only need addresses that keep the unit
// functions' pointer arithmetic well away from null.
Activations NowhereActivations(const ModelConfig& cfg, int64_t max_tok) {
  alignas(64) static char nowhere[64];
  return CarveActivations(nowhere, cfg, max_tok);
}

struct Counted {
  UnitWork work;
  std::vector<std::pair<Op, DType>> ops;
};

Counted Count(const UnitSpec& u, int64_t n_tok, double ctx, int kv_elem_bytes, int64_t n_live) {
  const UnitProgram& prog = *u.program;
  const int64_t n = std::max<int64_t>(n_tok, 1);
  CountingBackend be(n, ctx, kv_elem_bytes);
  std::vector<ExpertMatrices> views(static_cast<size_t>(std::max(prog.cfg.n_expert, 0)));
  const BatchSegment one_sequence[] = {{.row0 = 0, .n_tok = n, .pos0 = 0, .seq = 0}};
  StepContext s{.cfg = &prog.cfg, .n_tok = n, .segments = one_sequence,
                .n_live = n_live < 0 ? n : std::min(n_live, n), .expert_views = views.data()};
  Activations act = NowhereActivations(prog.cfg, n);
  const KvLayer kv{.type = kv_elem_bytes == 2 ? DType::kF16 : DType::kF32, .n_ctx = 0,
                   .row_elems = prog.cfg.n_embd_kv()};
  RunUnit(*prog.arch, be, s, prog.weights, std::span(&kv, 1), n - s.n_live, act);
  return Counted{be.work(), be.ops()};
}

}  // namespace

double ExpectedExpertsHit(int e, int k, int64_t n_tok) {
  if (e <= 0 || k <= 0 || n_tok <= 0) return 0;
  const double miss = 1.0 - static_cast<double>(std::min(k, e)) / e;
  return e * (1.0 - std::pow(miss, static_cast<double>(n_tok)));
}

UnitWork WorkOf(const UnitSpec& u, int64_t n_tok, double ctx, int kv_elem_bytes, int64_t n_live) {
  if (u.program == nullptr) return UnitWork{};
  return Count(u, n_tok, ctx, kv_elem_bytes, n_live).work;
}

std::vector<std::pair<Op, DType>> OpsOf(const UnitSpec& u) {
  if (u.program == nullptr) return {};
  return Count(u, 1, 1, 2, -1).ops;
}

double UnitSeconds(const UnitSpec& u, Placement p, const CostQuery& q, const MachineProfile& prof) {
  const UnitWork w = WorkOf(u, q.n_tok, q.ctx, q.kv_elem_bytes, q.n_live);
  if (p == Placement::kCpu) {
    const double read_s = w.weight_bytes_read / (prof.CpuGemvGbps(u.main_type) * kGiga);
    const double math_s = w.flops / (prof.CpuGemmGflops(u.main_type) * kGiga);
    // One token is a GEMV: the measured GEMV rate already includes its arithmetic.
    const double mm_s = q.n_tok <= 1 ? read_s : std::max(read_s, math_s);
    const double attn_s = std::max(w.kv_bytes_read / (prof.CpuGemvGbps(DType::kF16) * kGiga),
                                   w.attn_flops / (prof.cpu_attn_gflops * kGiga));
    return mm_s + attn_s + w.n_ops * prof.cpu_op_overhead_s;
  }
  const double mm_s = std::max(w.weight_bytes_read / (prof.gpu_gemv_gbps * kGiga),
                               w.flops / (prof.gpu_gemm_gflops * kGiga));
  const double attn_s = std::max(w.kv_bytes_read / (prof.gpu_gemv_gbps * kGiga),
                                 w.attn_flops / (prof.gpu_gemm_gflops * kGiga));
  const double launch_s = w.n_ops * prof.gpu_launch_s;
  if (p == Placement::kGpu) return mm_s + attn_s + launch_s;
  // Streamed: the whole unit is copied (routing is not known before the copy starts).
  const double copy_s = static_cast<double>(u.weight_bytes) / (prof.h2d_gbps * kGiga);
  return std::max(copy_s, mm_s + attn_s) + launch_s + prof.gpu_sync_s;
}

double TransferSeconds(uint64_t bytes, const MachineProfile& prof) {
  return static_cast<double>(bytes) / (prof.h2d_gbps * kGiga) + prof.gpu_sync_s;
}

SplitCost SplitFfnCost(const UnitSpec& u, const UnitWork& w, const CostQuery& q, std::span<const double> share,
                       std::span<const Placement> where, int k, const MachineProfile& prof,
                       std::span<const double> copied) {
  const double t = static_cast<double>(q.n_live < 0 ? q.n_tok : std::min(q.n_live, q.n_tok));
  SplitCost c;
  if (t <= 0) return c;
  // The router, norm and shared experts on the GPU.
  const double own_bytes = w.weight_bytes_read - w.expert_bytes_read, own_flops = w.flops - w.expert_flops;
  c.seconds = std::max(own_bytes / (prof.gpu_gemv_gbps * kGiga), own_flops / (prof.gpu_gemm_gflops * kGiga)) +
              (w.n_ops - kMoeExpertsOps) * prof.gpu_launch_s;
  double bytes[3] = {0, 0, 0}, flops[3] = {0, 0, 0};  // by Placement
  const double block = static_cast<double>(u.expert_block_bytes);
  for (size_t e = 0; e < share.size() && e < where.size(); ++e) {
    const double p = std::clamp(share[e], 0.0, 1.0);
    const int side = static_cast<int>(where[e]);
    const double reached = (1.0 - std::pow(1.0 - p, t)) * block;
    bytes[side] += reached;
    if (where[e] == Placement::kStream && e < copied.size()) c.stream_bytes -= (1.0 - copied[e]) * reached;
    flops[side] += 2.0 * t * p * u.expert_params;
    if (where[e] == Placement::kGpu) c.gpu_picks += p;
  }
  const int g = static_cast<int>(Placement::kGpu), s = static_cast<int>(Placement::kStream),
            h = static_cast<int>(Placement::kCpu);
  const bool any_cpu = std::any_of(where.begin(), where.end(), [](Placement p) { return p == Placement::kCpu; });
  const bool any_stream =
      std::any_of(where.begin(), where.end(), [](Placement p) { return p == Placement::kStream; });
  const double row = static_cast<double>(u.program ? u.program->cfg.n_embd : 0) * sizeof(float);
  if (any_cpu || any_stream) {  // the routing (and for the CPU the weights and the input) back to the host
    const double back = t * k * sizeof(int32_t) * (any_cpu ? 2 : 1) + (any_cpu ? t * row : 0);
    c.pcie_bytes += back;
    c.seconds += back / (prof.h2d_gbps * kGiga) + prof.gpu_sync_s;
  }
  c.stream_bytes += bytes[s];  // less what the cache already held
  c.pcie_bytes += c.stream_bytes;
  const double copy_s = c.stream_bytes / (prof.h2d_gbps * kGiga);
  const double gpu_s =
      bytes[g] + bytes[s] > 0
          ? copy_s + std::max((bytes[g] + bytes[s]) / (prof.gpu_gemv_gbps * kGiga),
                              (flops[g] + flops[s]) / (prof.gpu_gemm_gflops * kGiga)) +
                kMoeExpertsOps * prof.gpu_launch_s
          : 0;
  double cpu_s = 0;
  if (any_cpu) {
    const double read_s = bytes[h] / (prof.CpuGemvGbps(u.main_type) * kGiga);
    const double math_s = flops[h] / (prof.CpuGemmGflops(u.main_type) * kGiga);
    cpu_s = (t <= 1 ? read_s : std::max(read_s, math_s)) + kMoeExpertsOps * prof.cpu_op_overhead_s;
    const double slots = t * k * row;  // the CPU's slots to the GPU, then added
    c.pcie_bytes += slots;
    cpu_s += slots / (prof.h2d_gbps * kGiga) + prof.gpu_launch_s;
  }
  c.seconds += std::max(gpu_s, cpu_s);
  return c;
}

}  // namespace tandem

#include "graph/executor.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"

namespace tandem {
namespace {

enum class Side { kCpu, kGpu };
Side SideOf(Placement p) { return p == Placement::kCpu ? Side::kCpu : Side::kGpu; }

constexpr size_t kAlign = 256;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
size_t MatrixBytes(const WeightMatrix& m) { return static_cast<size_t>(m.rows) * m.row_stride; }

// The weights of one placement unit, in one place (mmap, VRAM or a staging slot).
struct UnitWeights {
  UnitKind kind = UnitKind::kAttn;
  AttnWeights attn;           // kAttn
  FfnWeights ffn;             // kFfn
  WeightMatrix first, second;  // kEmbd: token_embd; kOutput: output_norm, output

  void ForEach(const std::function<void(WeightMatrix&)>& fn) {
    switch (kind) {
      case UnitKind::kAttn:
        ForEachMatrix(attn, fn);
        break;
      case UnitKind::kFfn:
        ForEachMatrix(ffn, fn);
        break;
      case UnitKind::kEmbd:
        fn(first);
        break;
      case UnitKind::kOutput:
        fn(first);
        fn(second);
        break;
      case UnitKind::kExpert:
        break;
    }
  }
};

struct Unit {
  const UnitPlan* plan = nullptr;
  UnitWeights host;       // views into the mmap
  UnitWeights cpu_view;   // what the CPU computes with: host, with MatMul weights in the CPU's own layout
  UnitWeights resident;   // views into VRAM (when resident)
  UnitWeights staged[2];  // views into the two staging buffers (when streamed)
  std::vector<size_t> offsets;  // packed offset of each matrix, in ForEach order
  size_t packed_bytes = 0;
  void* vram = nullptr;         // resident copy
  void* pinned = nullptr;       // packed source for streaming
};

}  // namespace

struct Executor::Impl {
  const GgufFile* file = nullptr;
  ModelConfig cfg;
  ExecutorOptions opts;
  Backend* cpu = nullptr;
  Backend* gpu = nullptr;
  std::vector<Unit> units;  // plan order
  std::vector<KvLayer> kv;  // per layer, on the side of its attention unit
  Activations cpu_act, gpu_act;
  void* cpu_act_block = nullptr;
  bool cpu_act_pinned = false;
  void* gpu_act_block = nullptr;
  void* staging[2] = {nullptr, nullptr};
  int copy_done[2] = {-1, -1};
  int compute_done[2] = {-1, -1};
  MoeScratch moe;
  std::vector<float> dump_scratch;
  std::vector<void*> gpu_allocs;
  std::vector<void*> cpu_allocs;
  std::vector<size_t> streamed[2];  // per phase: indices of the streamed units, in order; slot = rank % 2
  const void* embd_data = nullptr;  // token_embd in the mmap: row lookups read it there, so it stays mapped

  ~Impl() {
    if (gpu != nullptr) {
      (void)gpu->Synchronize(Stream::kCompute);
      (void)gpu->Synchronize(Stream::kCopy);
      for (void* p : gpu_allocs) gpu->Free(p);
      for (Unit& u : units) {
        if (u.pinned != nullptr) gpu->FreeHostPinned(u.pinned);
      }
      if (cpu_act_pinned && cpu_act_block != nullptr) gpu->FreeHostPinned(cpu_act_block);
    }
    for (void* p : cpu_allocs) cpu->Free(p);
  }

  absl::StatusOr<void*> GpuAlloc(size_t bytes, std::string_view what) {
    TANDEM_ASSIGN_OR_RETURN(void* p, gpu->Alloc(bytes, what));
    gpu_allocs.push_back(p);
    return p;
  }

  absl::Status BuildUnits(const Plan& plan, const ModelWeights& w);
  absl::Status PrepareCpuWeights(Unit& u);
  void ReleaseHostPages(const Unit& u, const UnitWeights& kept);
  absl::Status Load(ExecutorStats& stats);
  absl::Status AllocateState();
};

absl::Status Executor::Impl::BuildUnits(const Plan& plan, const ModelWeights& w) {
  for (const UnitPlan& up : plan.units) {
    if (up.kind == UnitKind::kExpert) return Unimplemented("per-expert placement units are not supported yet");
    Unit u;
    u.plan = &up;
    u.host.kind = up.kind;
    switch (up.kind) {
      case UnitKind::kEmbd:
        u.host.first = w.token_embd;
        embd_data = w.token_embd.data;
        break;
      case UnitKind::kOutput:
        u.host.first = w.output_norm;
        u.host.second = w.output;
        break;
      case UnitKind::kAttn:
      case UnitKind::kFfn:
        if (up.layer < 0 || up.layer >= cfg.n_layer) return InvalidArgument("plan unit '", up.name, "' has no layer");
        if (up.kind == UnitKind::kAttn) {
          u.host.attn = w.attn[up.layer];
        } else {
          u.host.ffn = w.ffn[up.layer];
        }
        break;
      case UnitKind::kExpert:
        break;
    }
    if (up.kind == UnitKind::kAttn && SideOf(up.prefill) != SideOf(up.decode)) {
      return InvalidArgument("plan unit '", up.name, "' changes side between phases; its KV cache cannot follow");
    }
    if (gpu == nullptr && (up.prefill != Placement::kCpu || up.decode != Placement::kCpu)) {
      return FailedPrecondition("plan puts '", up.name, "' on a GPU but no GPU device is open");
    }
    size_t off = 0;
    u.host.ForEach([&](WeightMatrix& m) {
      u.offsets.push_back(off);
      off = AlignUp(off + MatrixBytes(m));
    });
    u.packed_bytes = off;
    for (Phase ph : {Phase::kPrefill, Phase::kDecode}) {
      if (up.at(ph) == Placement::kStream) streamed[static_cast<int>(ph)].push_back(units.size());
    }
    units.push_back(std::move(u));
  }
  // Every layer needs both units, and embd/output exactly once.
  std::vector<int> seen_attn(cfg.n_layer), seen_ffn(cfg.n_layer);
  int seen_embd = 0, seen_output = 0;
  for (const Unit& u : units) {
    switch (u.plan->kind) {
      case UnitKind::kAttn: ++seen_attn[u.plan->layer]; break;
      case UnitKind::kFfn: ++seen_ffn[u.plan->layer]; break;
      case UnitKind::kEmbd: ++seen_embd; break;
      case UnitKind::kOutput: ++seen_output; break;
      case UnitKind::kExpert: break;
    }
  }
  for (int il = 0; il < cfg.n_layer; ++il) {
    if (seen_attn[il] != 1 || seen_ffn[il] != 1) return InvalidArgument("plan does not cover layer ", il, " once");
  }
  if (seen_embd != 1 || seen_output != 1) return InvalidArgument("plan needs exactly one embd and one output unit");
  return absl::OkStatus();
}

// Rewrites the views of `src` to point into a packed block at `base`.
static UnitWeights Relocate(const Unit& u, void* base) {
  UnitWeights w = u.host;
  size_t i = 0;
  w.ForEach([&](WeightMatrix& m) { m.data = static_cast<uint8_t*>(base) + u.offsets[i++]; });
  return w;
}

absl::Status Executor::Impl::Load(ExecutorStats& stats) {
  uint64_t total = 0, done = 0;
  for (const Unit& u : units) total += u.packed_bytes;
  size_t max_streamed = 0;
  for (Unit& u : units) {
    const bool is_streamed = u.plan->prefill == Placement::kStream || u.plan->decode == Placement::kStream;
    if (u.plan->resident()) {  // resident weights go to VRAM now
      TANDEM_ASSIGN_OR_RETURN(u.vram, GpuAlloc(u.packed_bytes, u.plan->name));
      u.resident = Relocate(u, u.vram);
      size_t i = 0;
      UnitWeights src = u.host;
      absl::Status st;
      src.ForEach([&](WeightMatrix& m) {
        if (st.ok()) st = gpu->CopyHostToDevice(static_cast<uint8_t*>(u.vram) + u.offsets[i], m.data,
                                               MatrixBytes(m), Stream::kCopy);
        ++i;
      });
      TANDEM_RETURN_IF_ERROR(st);
      TANDEM_RETURN_IF_ERROR(gpu->Synchronize(Stream::kCopy));
      stats.load_h2d_bytes += u.packed_bytes;
    }
    if (is_streamed) {  // streamed weights go to pinned RAM, packed so one copy moves the unit
      TANDEM_ASSIGN_OR_RETURN(u.pinned, gpu->AllocHostPinned(u.packed_bytes));
      size_t i = 0;
      UnitWeights src = u.host;
      src.ForEach([&](WeightMatrix& m) {
        std::memcpy(static_cast<uint8_t*>(u.pinned) + u.offsets[i++], m.data, MatrixBytes(m));
      });
      max_streamed = std::max(max_streamed, u.packed_bytes);
    }
    const bool on_cpu = u.plan->prefill == Placement::kCpu || u.plan->decode == Placement::kCpu;
    if (on_cpu && is_streamed) {
      // The CPU computes in the other phase straight from the pinned copy (GGUF rows, the layout the decode
      // kernels read at the same speed): one host copy of the unit, not a second repacked one.
      u.cpu_view = Relocate(u, u.pinned);
      if (u.plan->kind == UnitKind::kEmbd) u.cpu_view.first = u.host.first;  // row lookups keep the mapping
    } else if (on_cpu) {
      TANDEM_RETURN_IF_ERROR(PrepareCpuWeights(u));
    }
    // Once copied to VRAM, pinned RAM or the CPU's own layout, the mapped pages only cost resident memory.
    ReleaseHostPages(u, on_cpu ? u.cpu_view : UnitWeights{});
    done += u.packed_bytes;
    if (opts.progress) opts.progress(done, total);
  }
  if (max_streamed > 0) {
    for (int s = 0; s < 2; ++s) {
      TANDEM_ASSIGN_OR_RETURN(staging[s], GpuAlloc(max_streamed, "staging"));
      TANDEM_ASSIGN_OR_RETURN(copy_done[s], gpu->CreateEvent());
      TANDEM_ASSIGN_OR_RETURN(compute_done[s], gpu->CreateEvent());
    }
    for (Unit& u : units) {
      if (u.pinned == nullptr) continue;
      for (int s = 0; s < 2; ++s) u.staged[s] = Relocate(u, staging[s]);
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::PrepareCpuWeights(Unit& u) {
  u.cpu_view = u.host;
  if (u.plan->kind == UnitKind::kEmbd) return absl::OkStatus();  // a row lookup, not a MatMul
  absl::Status st;
  u.cpu_view.ForEach([&](WeightMatrix& m) {
    if (!st.ok()) return;
    absl::StatusOr<WeightMatrix> prepared = cpu->PrepareMatMulWeights(m, u.plan->name);
    if (!prepared.ok()) {
      st = prepared.status();
      return;
    }
    if (prepared->data != m.data) {
      cpu_allocs.push_back(const_cast<void*>(prepared->data));
      if (opts.on_cpu_copy) st = opts.on_cpu_copy(m, *prepared);
      // Copies to VRAM or pinned RAM were made before; drop the mapped pages now, matrix by matrix, so that load
      // never holds a whole unit (a layer's experts) twice.
      if (m.data != embd_data) file->ReleasePages(m.data, MatrixBytes(m));
    }
    m = *prepared;
  });
  return st;
}

// Releases the mapped pages of every matrix of u that `kept` (the CPU's view, or nothing) does not read from the
// mapping. token_embd stays: the CPU's row lookups read it there.
void Executor::Impl::ReleaseHostPages(const Unit& u, const UnitWeights& kept) {
  std::vector<const void*> still_read;
  UnitWeights k = kept;
  k.kind = u.host.kind;
  k.ForEach([&](WeightMatrix& m) { still_read.push_back(m.data); });
  UnitWeights h = u.host;
  h.ForEach([&](WeightMatrix& m) {
    if (m.data == nullptr || m.data == embd_data) return;
    if (std::find(still_read.begin(), still_read.end(), m.data) != still_read.end()) return;
    file->ReleasePages(m.data, MatrixBytes(m));
  });
}

absl::Status Executor::Impl::AllocateState() {
  const int64_t max_tok = opts.max_batch;
  const int64_t q_dim = static_cast<int64_t>(cfg.n_head) * cfg.head_dim;
  const WorkspaceSpec ws{.max_tokens = max_tok,
                         .expert_rows = ExpertRows(cfg, max_tok),
                         .max_cols = std::max<int64_t>({cfg.n_embd, cfg.n_ff, q_dim}),
                         .max_rows = std::max<int64_t>({cfg.n_vocab, cfg.n_ff, q_dim, cfg.n_embd}),
                         .n_ctx = opts.n_ctx,
                         .n_head = cfg.n_head,
                         .n_threads = 1};
  TANDEM_RETURN_IF_ERROR(cpu->ReserveWorkspace(ws));
  const size_t act_bytes = ActivationBytes(cfg, max_tok);
  if (gpu != nullptr) {
    TANDEM_RETURN_IF_ERROR(gpu->ReserveWorkspace(ws));
    TANDEM_ASSIGN_OR_RETURN(gpu_act_block, GpuAlloc(act_bytes, "activations"));
    gpu_act = CarveActivations(gpu_act_block, cfg, max_tok);
    // Host activations are pinned so that transfers to the GPU can be asynchronous.
    TANDEM_ASSIGN_OR_RETURN(cpu_act_block, gpu->AllocHostPinned(act_bytes));
    cpu_act_pinned = true;
  } else {
    TANDEM_ASSIGN_OR_RETURN(cpu_act_block, cpu->Alloc(act_bytes, "activations"));
    cpu_allocs.push_back(cpu_act_block);
  }
  cpu_act = CarveActivations(cpu_act_block, cfg, max_tok);
  moe.Reserve(cfg, max_tok);

  const size_t elem = opts.kv_type == DType::kF16 ? 2 : 4;
  const size_t half = static_cast<size_t>(opts.n_ctx) * cfg.n_embd_kv() * elem;
  kv.resize(cfg.n_layer);
  for (const Unit& u : units) {
    if (u.plan->kind != UnitKind::kAttn) continue;
    void* block = nullptr;
    const std::string what = Cat("kv cache of layer ", u.plan->layer);
    if (SideOf(u.plan->decode) == Side::kGpu) {
      TANDEM_ASSIGN_OR_RETURN(block, GpuAlloc(2 * half, what));
    } else {
      TANDEM_ASSIGN_OR_RETURN(block, cpu->Alloc(2 * half, what));
      cpu_allocs.push_back(block);
    }
    kv[u.plan->layer] = KvLayer{.type = opts.kv_type, .k = block, .v = static_cast<uint8_t*>(block) + half,
                                .n_ctx = opts.n_ctx, .row_elems = cfg.n_embd_kv()};
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(const GgufFile& file, const ModelConfig& cfg,
                                                           const Plan& plan, Backend* cpu, Backend* gpu,
                                                           const ExecutorOptions& opts) {
  if (opts.kv_type != DType::kF16 && opts.kv_type != DType::kF32) {
    return InvalidArgument("KV cache type must be F16 or F32");
  }
  if (opts.n_ctx < 1 || opts.max_batch < 1) return InvalidArgument("context and batch must be positive");
  std::unique_ptr<Executor> ex(new Executor());
  ex->plan_ = plan;
  ex->impl_ = std::make_unique<Impl>();
  Impl& m = *ex->impl_;
  m.file = &file;
  m.cfg = cfg;
  m.opts = opts;
  m.opts.max_batch = std::min(opts.max_batch, opts.n_ctx);
  m.cpu = cpu;
  m.gpu = gpu;
  TANDEM_ASSIGN_OR_RETURN(ModelWeights w, MapWeights(file, cfg));
  TANDEM_RETURN_IF_ERROR(m.BuildUnits(ex->plan_, w));
  TANDEM_RETURN_IF_ERROR(m.Load(ex->stats_));
  TANDEM_RETURN_IF_ERROR(m.AllocateState());
  if (gpu != nullptr) ex->stats_.peak_vram_bytes = gpu->peak_bytes();
  return ex;
}

Executor::~Executor() = default;

absl::Status Executor::Forward(std::span<const int32_t> tokens, int64_t pos0, int64_t n_logit_rows, float* logits) {
  Impl& m = *impl_;
  const ModelConfig& c = m.cfg;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 1 || n > m.opts.max_batch) return InvalidArgument("batch of ", n, " tokens (max ", m.opts.max_batch, ")");
  if (pos0 < 0 || pos0 + n > m.opts.n_ctx) {
    return InvalidArgument("context full: positions up to ", pos0 + n, " but the context holds ", m.opts.n_ctx);
  }
  if (n_logit_rows < 0 || n_logit_rows > n) return InvalidArgument("bad logits row count ", n_logit_rows);
  for (int32_t t : tokens) {
    if (t < 0 || t >= c.n_vocab) return InvalidArgument("token id ", t, " out of range (vocab ", c.n_vocab, ")");
  }
  const Phase phase = n == 1 ? Phase::kDecode : Phase::kPrefill;
  uint64_t pcie = 0;

  std::memcpy(m.cpu_act.ids, tokens.data(), n * sizeof(int32_t));
  for (int64_t t = 0; t < n; ++t) m.cpu_act.pos[t] = static_cast<int32_t>(pos0 + t);
  if (m.gpu != nullptr) {
    TANDEM_RETURN_IF_ERROR(m.gpu->CopyHostToDevice(m.gpu_act.ids, m.cpu_act.ids, n * 4, Stream::kCompute));
    TANDEM_RETURN_IF_ERROR(m.gpu->CopyHostToDevice(m.gpu_act.pos, m.cpu_act.pos, n * 4, Stream::kCompute));
    pcie += 2 * n * 4;
  }

  StepContext s{.cfg = &c, .n_tok = n, .pos0 = pos0, .n_live = n};
  if (m.opts.dump) {
    s.on_named = [&m](Backend& be, const float* data, int64_t count, std::string_view name, int il) {
      if (be.host_memory()) {
        m.opts.dump(name, il, std::span<const float>(data, count));
        return;
      }
      m.dump_scratch.resize(count);  // debugging only: dumps may allocate
      if (be.CopyDeviceToHost(m.dump_scratch.data(), data, count * 4, Stream::kCompute).ok() &&
          be.Synchronize(Stream::kCompute).ok()) {
        m.opts.dump(name, il, std::span<const float>(m.dump_scratch.data(), count));
      }
    };
  }

  const std::vector<size_t>& streamed = m.streamed[static_cast<int>(phase)];
  auto prefetch = [&](size_t j) -> absl::Status {
    if (j >= streamed.size()) return absl::OkStatus();
    const int slot = static_cast<int>(j % 2);
    const Unit& u = m.units[streamed[j]];
    // The slot's previous user (streamed unit j - 2) must finish computing before it is overwritten.
    if (j >= 2) TANDEM_RETURN_IF_ERROR(m.gpu->WaitEvent(m.compute_done[slot], Stream::kCopy));
    m.gpu->SetTraceLabel(u.plan->name);
    TANDEM_RETURN_IF_ERROR(m.gpu->CopyHostToDevice(m.staging[slot], u.pinned, u.packed_bytes, Stream::kCopy));
    TANDEM_RETURN_IF_ERROR(m.gpu->RecordEvent(m.copy_done[slot], Stream::kCopy));
    pcie += u.packed_bytes;
    return absl::OkStatus();
  };
  TANDEM_RETURN_IF_ERROR(prefetch(0));

  Side where = Side::kCpu;  // side holding the residual stream
  auto move_residual = [&](Side to) -> absl::Status {  // its live rows only
    if (to == where) return absl::OkStatus();
    const size_t row0 = static_cast<size_t>(n - s.n_live) * c.n_embd;
    const size_t x_bytes = static_cast<size_t>(s.n_live) * c.n_embd * sizeof(float);
    float* host = m.cpu_act.x + row0;
    float* device = m.gpu_act.x + row0;
    if (to == Side::kGpu) {
      TANDEM_RETURN_IF_ERROR(m.gpu->CopyHostToDevice(device, host, x_bytes, Stream::kCompute));
    } else {
      TANDEM_RETURN_IF_ERROR(m.gpu->CopyDeviceToHost(host, device, x_bytes, Stream::kCompute));
      TANDEM_RETURN_IF_ERROR(m.gpu->Synchronize(Stream::kCompute));
    }
    pcie += x_bytes;
    where = to;
    return absl::OkStatus();
  };

  size_t next_streamed = 0;
  for (Unit& u : m.units) {
    const Placement p = u.plan->at(phase);
    const Side side = SideOf(p);
    Backend& be = side == Side::kCpu ? *m.cpu : *m.gpu;
    Activations& act = side == Side::kCpu ? m.cpu_act : m.gpu_act;
    const UnitWeights* w = &u.cpu_view;
    int slot = -1;
    if (p == Placement::kGpu) {
      w = &u.resident;
    } else if (p == Placement::kStream) {
      const size_t j = next_streamed++;
      slot = static_cast<int>(j % 2);
      TANDEM_RETURN_IF_ERROR(prefetch(j + 1));  // the next unit's copy overlaps this unit's compute
      TANDEM_RETURN_IF_ERROR(m.gpu->WaitEvent(m.copy_done[slot], Stream::kCompute));
      w = &u.staged[slot];
    }
    be.SetTraceLabel(u.plan->name);
    if (u.plan->kind == UnitKind::kEmbd) {
      where = side;  // the lookup writes the residual stream fresh
    } else {
      TANDEM_RETURN_IF_ERROR(move_residual(side));
    }
    switch (u.plan->kind) {
      case UnitKind::kEmbd:
        Embed(be, s, w->first, act);
        break;
      case UnitKind::kAttn:
        // Past the last layer's attention only the logit rows are read (their residual rows come last).
        if (u.plan->layer == c.n_layer - 1) s.n_live = n_logit_rows;
        AttentionUnit(be, s, u.plan->layer, w->attn, m.kv[u.plan->layer], act);
        break;
      case UnitKind::kFfn:
        FfnUnit(be, s, u.plan->layer, w->ffn, act, m.moe);
        break;
      case UnitKind::kOutput:
        OutputUnit(be, s, w->first, w->second, n - n_logit_rows, act);
        break;
      case UnitKind::kExpert:
        break;
    }
    if (slot >= 0) TANDEM_RETURN_IF_ERROR(m.gpu->RecordEvent(m.compute_done[slot], Stream::kCompute));
    if (absl::Status st = be.TakeError(); !st.ok()) {
      return absl::Status(st.code(), Cat("unit ", u.plan->name, ": ", Message(st)));
    }
    if (u.plan->kind == UnitKind::kOutput && n_logit_rows > 0) {
      const size_t bytes = static_cast<size_t>(n_logit_rows) * c.n_vocab * sizeof(float);
      if (side == Side::kCpu) {
        std::memcpy(logits, act.logits, bytes);
      } else {
        TANDEM_RETURN_IF_ERROR(m.gpu->CopyDeviceToHost(logits, act.logits, bytes, Stream::kCompute));
        pcie += bytes;
      }
    }
  }
  if (m.gpu != nullptr) TANDEM_RETURN_IF_ERROR(m.gpu->Synchronize(Stream::kCompute));

  stats_.pcie_bytes += pcie;
  (phase == Phase::kDecode ? stats_.pcie_bytes_decode : stats_.pcie_bytes_prefill) += pcie;
  (phase == Phase::kDecode ? stats_.decode_tokens : stats_.prefill_tokens) += n;
  if (m.gpu != nullptr) stats_.peak_vram_bytes = m.gpu->peak_bytes();
  return absl::OkStatus();
}

Plan CpuOnlyPlan(const ModelConfig& cfg) {
  Plan p;
  auto add = [&p](std::string name, UnitKind kind, int layer) {
    UnitPlan u;
    u.name = std::move(name);
    u.kind = kind;
    u.layer = layer;
    p.units.push_back(std::move(u));
  };
  add("embd", UnitKind::kEmbd, -1);
  for (int il = 0; il < cfg.n_layer; ++il) {
    add(Cat("blk.", il, ".attn"), UnitKind::kAttn, il);
    add(Cat("blk.", il, ".ffn"), UnitKind::kFfn, il);
  }
  add("output", UnitKind::kOutput, -1);
  p.why = "cpu only";
  return p;
}

}  // namespace tandem

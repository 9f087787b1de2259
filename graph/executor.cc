#include "graph/executor.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"
#include "runtime/devices.h"

namespace tandem {
namespace {

constexpr size_t kAlign = 256;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// One placement unit: its weights in each place they live.
struct Unit {
  const UnitPlan* plan = nullptr;
  int device = 0;         // its accelerator when either phase is GPU-side
  UnitWeights host;       // views into the mmap
  UnitWeights cpu_view;   // what the CPU computes with: host, with MatMul weights in the CPU's own layout
  UnitWeights resident;   // views into its accelerator's memory (when resident)
  UnitWeights staged[2];  // views into its accelerator's two staging buffers (when streamed)
  std::vector<size_t> offsets;  // packed offset of each matrix, in ForEach order
  size_t packed_bytes = 0;
  void* vram = nullptr;         // resident copy
  void* pinned = nullptr;       // packed source for streaming
  std::vector<WeightMatrix> cpu_copies;  // the CPU backend's own copies, released through it
};

// An accelerator's state.
struct Accelerator {
  Backend* be = nullptr;
  bool used = false;            // the plan puts something here
  bool runs[2] = {false, false};  // per phase: a unit runs here
  Activations act;
  void* staging[2] = {nullptr, nullptr};
  int copy_done[2] = {-1, -1};
  int compute_done[2] = {-1, -1};
  std::vector<void*> allocs;
  std::vector<size_t> streamed[2];  // per phase: indices of the units streamed here, in order; slot = rank % 2
};

// Rewrites the views of `u.host` to point into a packed block at `base`.
UnitWeights Relocate(const Unit& u, void* base) {
  UnitWeights w = u.host;
  size_t i = 0;
  w.ForEach([&](WeightMatrix& m) { m.data = static_cast<uint8_t*>(base) + u.offsets[i++]; });
  return w;
}

}  // namespace

struct Executor::Impl {
  const GgufFile* file = nullptr;
  ModelSchema model;
  ExecutorOptions opts;
  Backend* cpu = nullptr;
  std::vector<Accelerator> accel;  // [device]; [0] unused (the host)
  std::vector<Unit> units;         // plan order
  std::vector<KvLayer> kv;         // per layer, on the device of its attention unit
  Activations cpu_act;
  void* cpu_act_block = nullptr;
  Backend* cpu_act_pinned_by = nullptr;  // the accelerator that pinned the host activations, or null
  std::vector<void*> cpu_allocs;
  std::vector<ExpertMatrices> expert_views;
  std::vector<size_t> next_streamed;  // [device] during a step: how many of its streamed units have run
  std::vector<float> dump_scratch;
  std::vector<const void*> embd_data;  // the embeddings' matrices in the mmap: row lookups read them there, so they
                                       // stay mapped
  bool IsEmbd(const void* p) const { return std::find(embd_data.begin(), embd_data.end(), p) != embd_data.end(); }

  ~Impl() {
    for (size_t d = 1; d < accel.size(); ++d) {
      Accelerator& a = accel[d];
      if (a.be == nullptr) continue;
      (void)a.be->Synchronize(Stream::kCompute);
      (void)a.be->Synchronize(Stream::kCopy);
      for (void* p : a.allocs) a.be->Free(p);
    }
    for (Unit& u : units) {
      if (u.pinned != nullptr) accel[u.device].be->FreeHostPinned(u.pinned);
      for (const WeightMatrix& m : u.cpu_copies) cpu->ReleaseMatMulWeights(m);
    }
    if (cpu_act_pinned_by != nullptr) cpu_act_pinned_by->FreeHostPinned(cpu_act_block);
    for (void* p : cpu_allocs) cpu->Free(p);
  }

  absl::StatusOr<void*> DeviceAlloc(int d, size_t bytes, std::string_view what) {
    TANDEM_ASSIGN_OR_RETURN(void* p, accel[d].be->Alloc(bytes, what));
    accel[d].allocs.push_back(p);
    return p;
  }

  absl::Status BuildUnits(const Plan& plan);
  absl::Status PrepareCpuWeights(Unit& u);
  void ReleaseHostPages(const Unit& u, const UnitWeights& kept);
  absl::Status Load(ExecutorStats& stats);
  absl::Status AllocateState();
};

absl::Status Executor::Impl::BuildUnits(const Plan& plan) {
  const ModelConfig& cfg = model.cfg;
  const TensorData data_of = [this](const GgufTensorInfo& t) { return file->TensorData(t); };
  for (const UnitPlan& up : plan.units) {
    Unit u;
    u.plan = &up;
    const bool gpu_side = GpuSide(up.prefill) || GpuSide(up.decode);
    u.device = gpu_side ? up.device : 0;
    if (gpu_side && (u.device < 1 || u.device >= static_cast<int>(accel.size()) || accel[u.device].be == nullptr)) {
      return FailedPrecondition("plan puts '", up.name, "' on device ", up.device, " but no such GPU device is open");
    }
    if ((up.kind == UnitKind::kAttn || up.kind == UnitKind::kFfn) && (up.layer < 0 || up.layer >= cfg.n_layer)) {
      return InvalidArgument("plan unit '", up.name, "' has no layer");
    }
    if (up.kind == UnitKind::kAttn && GpuSide(up.prefill) != GpuSide(up.decode)) {
      return InvalidArgument("plan unit '", up.name, "' changes side between phases; its KV cache cannot follow");
    }
    u.host = BindUnit(model, up.kind, up.layer, data_of);
    if (up.kind == UnitKind::kEmbd) u.host.ForEach([&](WeightMatrix& m) { embd_data.push_back(m.data); });
    size_t off = 0;
    u.host.ForEach([&](WeightMatrix& m) {
      u.offsets.push_back(off);
      off = AlignUp(off + m.bytes());
    });
    u.packed_bytes = off;
    if (gpu_side) accel[u.device].used = true;
    if (GpuSide(up.prefill)) accel[u.device].runs[static_cast<int>(Phase::kPrefill)] = true;
    if (GpuSide(up.decode)) accel[u.device].runs[static_cast<int>(Phase::kDecode)] = true;
    for (Phase ph : {Phase::kPrefill, Phase::kDecode}) {
      if (up.at(ph) == Placement::kStream) accel[u.device].streamed[static_cast<int>(ph)].push_back(units.size());
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
    }
  }
  for (int il = 0; il < cfg.n_layer; ++il) {
    if (seen_attn[il] != 1 || seen_ffn[il] != 1) return InvalidArgument("plan does not cover layer ", il, " once");
  }
  if (seen_embd != 1 || seen_output != 1) return InvalidArgument("plan needs exactly one embd and one output unit");
  return absl::OkStatus();
}

absl::Status Executor::Impl::Load(ExecutorStats& stats) {
  uint64_t total = 0, done = 0;
  for (const Unit& u : units) total += u.packed_bytes;
  std::vector<size_t> max_streamed(accel.size(), 0);
  for (Unit& u : units) {
    const bool is_streamed = u.plan->prefill == Placement::kStream || u.plan->decode == Placement::kStream;
    Backend* dev = u.device > 0 ? accel[u.device].be : nullptr;
    if (u.plan->resident()) {  // resident weights go to their accelerator now
      TANDEM_ASSIGN_OR_RETURN(u.vram, DeviceAlloc(u.device, u.packed_bytes, u.plan->name));
      u.resident = Relocate(u, u.vram);
      size_t i = 0;
      absl::Status st;
      u.host.ForEach([&](WeightMatrix& m) {
        if (st.ok()) {
          st = dev->CopyHostToDevice(static_cast<uint8_t*>(u.vram) + u.offsets[i], m.data, m.bytes(), Stream::kCopy);
        }
        ++i;
      });
      TANDEM_RETURN_IF_ERROR(st);
      TANDEM_RETURN_IF_ERROR(dev->Synchronize(Stream::kCopy));
      stats.load_h2d_bytes += u.packed_bytes;
    }
    if (is_streamed) {  // streamed weights go to pinned RAM, packed so one copy moves the unit
      TANDEM_ASSIGN_OR_RETURN(u.pinned, dev->AllocHostPinned(u.packed_bytes));
      size_t i = 0;
      u.host.ForEach([&](WeightMatrix& m) {
        std::memcpy(static_cast<uint8_t*>(u.pinned) + u.offsets[i++], m.data, m.bytes());
      });
      max_streamed[u.device] = std::max(max_streamed[u.device], u.packed_bytes);
    }
    const bool on_cpu = u.plan->prefill == Placement::kCpu || u.plan->decode == Placement::kCpu;
    if (on_cpu && is_streamed) {
      // The CPU computes in the other phase straight from the pinned copy (GGUF rows, the layout the decode
      // kernels read at the same speed): one host copy of the unit, not a second repacked one.
      u.cpu_view = Relocate(u, u.pinned);
      if (u.plan->kind == UnitKind::kEmbd) u.cpu_view.slots = u.host.slots;  // row lookups keep the mapping
    } else if (on_cpu) {
      TANDEM_RETURN_IF_ERROR(PrepareCpuWeights(u));
    }
    // Once copied to VRAM, pinned RAM or the CPU's own layout, the mapped pages only cost resident memory.
    ReleaseHostPages(u, on_cpu ? u.cpu_view : UnitWeights{});
    done += u.packed_bytes;
    if (opts.progress) opts.progress(done, total);
  }
  for (size_t d = 1; d < accel.size(); ++d) {
    if (max_streamed[d] == 0) continue;
    Accelerator& a = accel[d];
    for (int s = 0; s < 2; ++s) {
      TANDEM_ASSIGN_OR_RETURN(a.staging[s], DeviceAlloc(static_cast<int>(d), max_streamed[d], "staging"));
      TANDEM_ASSIGN_OR_RETURN(a.copy_done[s], a.be->CreateEvent());
      TANDEM_ASSIGN_OR_RETURN(a.compute_done[s], a.be->CreateEvent());
    }
  }
  for (Unit& u : units) {
    if (u.pinned == nullptr) continue;
    for (int s = 0; s < 2; ++s) u.staged[s] = Relocate(u, accel[u.device].staging[s]);
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
      u.cpu_copies.push_back(*prepared);
      if (opts.on_cpu_copy) st = opts.on_cpu_copy(m, *prepared);
      // Copies to VRAM or pinned RAM were made before; drop the mapped pages now, matrix by matrix, so that load
      // never holds a whole unit (a layer's experts) twice.
      if (!IsEmbd(m.data)) file->ReleasePages(m.data, m.bytes());
    }
    m = *prepared;
  });
  return st;
}

// Releases the mapped pages of every matrix of u that `kept` (the CPU's view, or nothing) does not read from the
// mapping. The embeddings stay: the CPU's row lookups read them there.
void Executor::Impl::ReleaseHostPages(const Unit& u, const UnitWeights& kept) {
  std::vector<const void*> still_read;
  UnitWeights k = kept;
  k.ForEach([&](WeightMatrix& m) { still_read.push_back(m.data); });
  UnitWeights h = u.host;
  h.ForEach([&](WeightMatrix& m) {
    if (m.data == nullptr || IsEmbd(m.data)) return;
    if (std::find(still_read.begin(), still_read.end(), m.data) != still_read.end()) return;
    file->ReleasePages(m.data, m.bytes());
  });
}

absl::Status Executor::Impl::AllocateState() {
  const ModelConfig& cfg = model.cfg;
  const int64_t max_tok = opts.max_batch;
  const int64_t ff = std::max(cfg.n_ff, cfg.n_ff_expert);
  const WorkspaceSpec ws{.max_tokens = max_tok,
                         .expert_rows = ExpertRows(cfg, max_tok),
                         .max_cols = std::max<int64_t>({cfg.n_embd, ff, cfg.q_dim()}),
                         .max_rows = std::max<int64_t>({cfg.n_vocab, ff, cfg.q_dim(), cfg.n_embd}),
                         .n_ctx = opts.n_ctx,
                         .n_head = cfg.n_head,
                         .n_expert = cfg.n_expert,
                         .n_expert_used = cfg.n_expert_used};
  TANDEM_RETURN_IF_ERROR(cpu->ReserveWorkspace(ws));
  const size_t act_bytes = ActivationBytes(cfg, max_tok);
  for (size_t d = 1; d < accel.size(); ++d) {
    Accelerator& a = accel[d];
    if (!a.used) continue;
    TANDEM_RETURN_IF_ERROR(a.be->ReserveWorkspace(ws));
    TANDEM_ASSIGN_OR_RETURN(void* block, DeviceAlloc(static_cast<int>(d), act_bytes, "activations"));
    a.act = CarveActivations(block, cfg, max_tok);
    if (cpu_act_pinned_by == nullptr) {
      // Host activations are pinned so that transfers to the accelerators can be asynchronous.
      TANDEM_ASSIGN_OR_RETURN(cpu_act_block, a.be->AllocHostPinned(act_bytes));
      cpu_act_pinned_by = a.be;
    }
  }
  if (cpu_act_pinned_by == nullptr) {
    TANDEM_ASSIGN_OR_RETURN(cpu_act_block, cpu->Alloc(act_bytes, "activations"));
    cpu_allocs.push_back(cpu_act_block);
  }
  cpu_act = CarveActivations(cpu_act_block, cfg, max_tok);
  expert_views.resize(static_cast<size_t>(std::max(cfg.n_expert, 0)));
  next_streamed.assign(accel.size(), 0);

  const size_t elem = opts.kv_type == DType::kF16 ? 2 : 4;
  const size_t half = static_cast<size_t>(opts.n_ctx) * cfg.n_embd_kv() * elem;
  kv.resize(cfg.n_layer);
  for (const Unit& u : units) {
    if (u.plan->kind != UnitKind::kAttn) continue;
    void* block = nullptr;
    const std::string what = Cat("kv cache of layer ", u.plan->layer);
    if (GpuSide(u.plan->decode)) {
      TANDEM_ASSIGN_OR_RETURN(block, DeviceAlloc(u.device, 2 * half, what));
    } else {
      TANDEM_ASSIGN_OR_RETURN(block, cpu->Alloc(2 * half, what));
      cpu_allocs.push_back(block);
    }
    kv[u.plan->layer] = KvLayer{.type = opts.kv_type, .k = block, .v = static_cast<uint8_t*>(block) + half,
                                .n_ctx = opts.n_ctx, .row_elems = cfg.n_embd_kv()};
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(const GgufFile& file, const ModelSchema& model,
                                                           const Plan& plan, std::span<Backend* const> devices,
                                                           const ExecutorOptions& opts) {
  if (opts.kv_type != DType::kF16 && opts.kv_type != DType::kF32) {
    return InvalidArgument("KV cache type must be F16 or F32");
  }
  if (opts.n_ctx < 1 || opts.max_batch < 1) return InvalidArgument("context and batch must be positive");
  if (devices.empty() || devices[kHostDevice] == nullptr) return InvalidArgument("the executor needs the host CPU");
  std::unique_ptr<Executor> ex(new Executor());
  ex->plan_ = plan;
  ex->impl_ = std::make_unique<Impl>();
  Impl& m = *ex->impl_;
  m.file = &file;
  m.model = model;
  m.opts = opts;
  m.opts.max_batch = std::min(opts.max_batch, opts.n_ctx);
  m.cpu = devices[kHostDevice];
  m.accel.resize(devices.size());
  for (size_t d = 1; d < devices.size(); ++d) m.accel[d].be = devices[d];
  TANDEM_RETURN_IF_ERROR(m.BuildUnits(ex->plan_));
  TANDEM_RETURN_IF_ERROR(m.Load(ex->stats_));
  TANDEM_RETURN_IF_ERROR(m.AllocateState());
  for (size_t d = 1; d < m.accel.size(); ++d) {
    if (m.accel[d].used) ex->stats_.peak_vram_bytes += m.accel[d].be->peak_bytes();
  }
  return ex;
}

Executor::~Executor() = default;

absl::Status Executor::Forward(std::span<const int32_t> tokens, int64_t pos0, int64_t n_logit_rows, float* logits) {
  Impl& m = *impl_;
  const ModelConfig& c = m.model.cfg;
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

  const int ph = static_cast<int>(phase);
  std::memcpy(m.cpu_act.ids, tokens.data(), n * sizeof(int32_t));
  for (int64_t t = 0; t < n; ++t) m.cpu_act.pos[t] = static_cast<int32_t>(pos0 + t);
  for (size_t d = 1; d < m.accel.size(); ++d) {  // the ids and positions, to each accelerator this phase runs on
    Accelerator& a = m.accel[d];
    if (!a.runs[ph]) continue;
    TANDEM_RETURN_IF_ERROR(a.be->CopyHostToDevice(a.act.ids, m.cpu_act.ids, n * 4, Stream::kCompute));
    TANDEM_RETURN_IF_ERROR(a.be->CopyHostToDevice(a.act.pos, m.cpu_act.pos, n * 4, Stream::kCompute));
    pcie += 2 * n * 4;
  }

  StepContext s{.cfg = &c, .n_tok = n, .pos0 = pos0, .n_live = n, .expert_views = m.expert_views.data()};
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

  // Streaming: each accelerator copies its next streamed unit into the slot the unit two before it used.
  std::vector<size_t>& next_streamed = m.next_streamed;  // sized at Create: nothing is allocated per step
  std::fill(next_streamed.begin(), next_streamed.end(), 0);
  auto prefetch = [&](int d, size_t j) -> absl::Status {
    Accelerator& a = m.accel[d];
    if (j >= a.streamed[ph].size()) return absl::OkStatus();
    const int slot = static_cast<int>(j % 2);
    const Unit& u = m.units[a.streamed[ph][j]];
    // The slot's previous user (streamed unit j - 2) must finish computing before it is overwritten.
    if (j >= 2) TANDEM_RETURN_IF_ERROR(a.be->WaitEvent(a.compute_done[slot], Stream::kCopy));
    a.be->SetTraceLabel(u.plan->name);
    TANDEM_RETURN_IF_ERROR(a.be->CopyHostToDevice(a.staging[slot], u.pinned, u.packed_bytes, Stream::kCopy));
    TANDEM_RETURN_IF_ERROR(a.be->RecordEvent(a.copy_done[slot], Stream::kCopy));
    pcie += u.packed_bytes;
    return absl::OkStatus();
  };
  for (size_t d = 1; d < m.accel.size(); ++d) TANDEM_RETURN_IF_ERROR(prefetch(static_cast<int>(d), 0));

  int where = kHostDevice;  // the device holding the residual stream
  auto move_residual = [&](int to) -> absl::Status {  // its live rows only, through the host between accelerators
    if (to == where) return absl::OkStatus();
    const size_t row0 = static_cast<size_t>(n - s.n_live) * c.n_embd;
    const size_t x_bytes = static_cast<size_t>(s.n_live) * c.n_embd * sizeof(float);
    float* host = m.cpu_act.x + row0;
    if (where != kHostDevice) {
      Accelerator& from = m.accel[where];
      TANDEM_RETURN_IF_ERROR(from.be->CopyDeviceToHost(host, from.act.x + row0, x_bytes, Stream::kCompute));
      TANDEM_RETURN_IF_ERROR(from.be->Synchronize(Stream::kCompute));
      pcie += x_bytes;
    }
    if (to != kHostDevice) {
      Accelerator& dst = m.accel[to];
      TANDEM_RETURN_IF_ERROR(dst.be->CopyHostToDevice(dst.act.x + row0, host, x_bytes, Stream::kCompute));
      pcie += x_bytes;
    }
    where = to;
    return absl::OkStatus();
  };

  for (Unit& u : m.units) {
    const Placement p = u.plan->at(phase);
    const int d = GpuSide(p) ? u.device : kHostDevice;
    Backend& be = d == kHostDevice ? *m.cpu : *m.accel[d].be;
    Activations& act = d == kHostDevice ? m.cpu_act : m.accel[d].act;
    const UnitWeights* w = &u.cpu_view;
    int slot = -1;
    if (p == Placement::kGpu) {
      w = &u.resident;
    } else if (p == Placement::kStream) {
      Accelerator& a = m.accel[d];
      const size_t j = next_streamed[d]++;
      slot = static_cast<int>(j % 2);
      TANDEM_RETURN_IF_ERROR(prefetch(d, j + 1));  // the next unit's copy overlaps this unit's compute
      TANDEM_RETURN_IF_ERROR(a.be->WaitEvent(a.copy_done[slot], Stream::kCompute));
      w = &u.staged[slot];
    }
    be.SetTraceLabel(u.plan->name);
    if (u.plan->kind == UnitKind::kEmbd) {
      where = d;  // the lookup writes the residual stream fresh
    } else {
      TANDEM_RETURN_IF_ERROR(move_residual(d));
    }
    // Past the last layer's attention only the logit rows are read (their residual rows come last).
    if (u.plan->kind == UnitKind::kAttn && u.plan->layer == c.n_layer - 1) s.n_live = n_logit_rows;
    const KvLayer* kv = u.plan->kind == UnitKind::kAttn ? &m.kv[u.plan->layer] : nullptr;
    RunUnit(*m.model.arch, be, s, *w, kv, n - n_logit_rows, act);
    if (slot >= 0) TANDEM_RETURN_IF_ERROR(m.accel[d].be->RecordEvent(m.accel[d].compute_done[slot], Stream::kCompute));
    if (u.plan->kind == UnitKind::kOutput && n_logit_rows > 0) {
      const size_t bytes = static_cast<size_t>(n_logit_rows) * c.n_vocab * sizeof(float);
      if (d == kHostDevice) {
        std::memcpy(logits, act.logits, bytes);
      } else {
        TANDEM_RETURN_IF_ERROR(be.CopyDeviceToHost(logits, act.logits, bytes, Stream::kCompute));
        pcie += bytes;
      }
    }
  }
  // Errors are checked once per step: a device's first error names the unit it happened in.
  absl::Status first_error;
  for (size_t d = 1; d < m.accel.size(); ++d) {
    Accelerator& a = m.accel[d];
    if (!a.used) continue;
    absl::Status st = a.be->Synchronize(Stream::kCompute);
    if (st.ok()) st = a.be->TakeError();
    if (first_error.ok()) first_error = st;
  }
  if (absl::Status st = m.cpu->TakeError(); first_error.ok()) first_error = st;
  uint64_t peak = 0;
  for (size_t d = 1; d < m.accel.size(); ++d) {
    if (m.accel[d].used) peak += m.accel[d].be->peak_bytes();
  }
  stats_.peak_vram_bytes = peak;
  TANDEM_RETURN_IF_ERROR(first_error);

  stats_.pcie_bytes += pcie;
  (phase == Phase::kDecode ? stats_.pcie_bytes_decode : stats_.pcie_bytes_prefill) += pcie;
  (phase == Phase::kDecode ? stats_.decode_tokens : stats_.prefill_tokens) += n;
  return absl::OkStatus();
}

Plan CpuOnlyPlan(const ModelConfig& cfg) {
  Plan p;
  auto add = [&p](UnitKind kind, int layer) {
    UnitPlan u;
    u.name = UnitName(kind, layer);
    u.kind = kind;
    u.layer = layer;
    p.units.push_back(std::move(u));
  };
  add(UnitKind::kEmbd, -1);
  for (int il = 0; il < cfg.n_layer; ++il) {
    add(UnitKind::kAttn, il);
    add(UnitKind::kFfn, il);
  }
  add(UnitKind::kOutput, -1);
  p.why = "cpu only";
  return p;
}

}  // namespace tandem

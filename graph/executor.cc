#include "graph/executor.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"
#include "graph/executor_impl.h"
#include "runtime/devices.h"

namespace tandem {

absl::Status Executor::Impl::BuildUnits(const Plan& plan) {
  const ModelConfig& cfg = model.cfg;
  const TensorData data_of = [this](const GgufTensorInfo& t) { return file->TensorData(t); };
  ffn_of.assign(cfg.n_layer, nullptr);
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
    if (up.split()) {
      TANDEM_RETURN_IF_ERROR(CheckSplit(up));
      u.split = true;
      u.experts_label = Cat(up.name, ".experts");
    }
    if (up.kind == UnitKind::kEmbd) u.host.ForEach([&](WeightMatrix& m) { embd_data.push_back(m.data); });
    size_t off = 0;
    u.ForEachOwn(u.host, [&](WeightMatrix& m) {
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
  for (Unit& u : units) {
    if (u.plan->kind == UnitKind::kFfn) ffn_of[u.plan->layer] = &u;
  }
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
      u.ForEachOwn(u.host, [&](WeightMatrix& m) {
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
      u.ForEachOwn(u.host, [&](WeightMatrix& m) {
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
    if (u.split) {
      if (!on_cpu) u.cpu_view = u.host;  // the experts' part of it is the CPU's
      TANDEM_RETURN_IF_ERROR(LoadExperts(u, stats));
    }
    // Once copied to VRAM, pinned RAM or the CPU's own layout, the mapped pages only cost resident memory.
    UnitWeights kept = on_cpu || u.split ? u.cpu_view : UnitWeights{};
    if (u.split && !on_cpu) kept.slots.clear();
    ReleaseHostPages(u, kept);
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
  // Streamed experts: room for the most distinct ones a batch can route to in one layer.
  std::vector<size_t> expert_staging(accel.size(), 0);
  const int k = std::max(model.cfg.n_expert_used, 1);
  for (const Unit& u : units) {
    if (!u.split) continue;
    const int64_t most[2] = {static_cast<int64_t>(opts.max_batch) * k,  // [prefill, decode]
                             static_cast<int64_t>(opts.n_seq) * k};
    for (Phase ph : {Phase::kPrefill, Phase::kDecode}) {
      if (ph == Phase::kDecode && plan->expert_cache_bytes > 0) continue;  // decode copies into the cache
      const int64_t n = std::min<int64_t>(u.plan->CountExperts(ph, Placement::kStream), most[static_cast<int>(ph)]);
      expert_staging[u.device] = std::max(expert_staging[u.device], static_cast<size_t>(n) * u.ex.block);
    }
  }
  for (size_t d = 1; d < accel.size(); ++d) {
    if (expert_staging[d] == 0) continue;
    Accelerator& a = accel[d];
    TANDEM_ASSIGN_OR_RETURN(a.expert_staging, DeviceAlloc(static_cast<int>(d), expert_staging[d], "expert staging"));
    TANDEM_ASSIGN_OR_RETURN(a.expert_copy_done, a.be->CreateEvent());
  }
  return AllocateExpertCache();
}

absl::Status Executor::Impl::PrepareCpuWeights(Unit& u) {
  u.cpu_view = u.host;
  if (u.plan->kind == UnitKind::kEmbd) return absl::OkStatus();  // a row lookup, not a MatMul
  absl::Status st;
  u.ForEachOwn(u.cpu_view, [&](WeightMatrix& m) {
    if (st.ok()) st = PrepareCpuMatrix(u, m);
  });
  return st;
}

absl::Status Executor::Impl::PrepareCpuMatrix(Unit& u, WeightMatrix& m) {
  TANDEM_ASSIGN_OR_RETURN(const WeightMatrix prepared, cpu->PrepareMatMulWeights(m, u.plan->name));
  if (prepared.data != m.data) {
    u.cpu_copies.push_back(prepared);
    if (opts.on_cpu_copy) TANDEM_RETURN_IF_ERROR(opts.on_cpu_copy(m, prepared));
    // Copies to VRAM or pinned RAM were made before; drop the mapped pages now, matrix by matrix, so that load
    // never holds a whole unit (a layer's experts) twice.
    if (!IsEmbd(m.data)) file->ReleasePages(m.data, m.bytes());
  }
  m = prepared;
  return absl::OkStatus();
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
  const int64_t ff = cfg.max_ff();
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
  side_views.resize(expert_views.size());
  staged.assign(expert_views.size(), 0);
  next_streamed.assign(accel.size(), 0);
  // An accelerator that runs a split layer's router while the CPU computes some of its experts adds their slots.
  for (const Unit& u : units) {
    if (!u.split) continue;
    bool cpu_share = false;
    for (Phase ph : {Phase::kPrefill, Phase::kDecode}) {
      cpu_share = cpu_share || (GpuSide(u.plan->at(ph)) && u.plan->CountExperts(ph, Placement::kCpu) > 0);
    }
    Accelerator& a = accel[u.device];
    if (!cpu_share || a.merge != nullptr) continue;
    const size_t bytes = static_cast<size_t>(cfg.n_expert_used) * max_tok * cfg.n_embd * sizeof(float);
    TANDEM_ASSIGN_OR_RETURN(void* merge, DeviceAlloc(u.device, bytes, "expert merge"));
    a.merge = static_cast<float*>(merge);
  }

  const size_t elem = opts.kv_type == DType::kF16 ? 2 : 4;
  const int n_seq = opts.n_seq;
  kv.resize(static_cast<size_t>(cfg.n_layer) * n_seq);
  for (const Unit& u : units) {
    if (u.plan->kind != UnitKind::kAttn) continue;
    const int64_t rows = cfg.KvRows(u.plan->layer, opts.n_ctx, max_tok);
    const size_t half = static_cast<size_t>(rows) * cfg.n_embd_kv() * elem;
    void* block = nullptr;  // the layer's K and V of every sequence
    const std::string what = Cat("kv cache of layer ", u.plan->layer);
    if (GpuSide(u.plan->decode)) {
      TANDEM_ASSIGN_OR_RETURN(block, DeviceAlloc(u.device, 2 * half * n_seq, what));
    } else {
      TANDEM_ASSIGN_OR_RETURN(block, cpu->Alloc(2 * half * n_seq, what));
      cpu_allocs.push_back(block);
    }
    for (int q = 0; q < n_seq; ++q) {
      uint8_t* base = static_cast<uint8_t*>(block) + 2 * half * q;
      kv[static_cast<size_t>(u.plan->layer) * n_seq + q] =
          KvLayer{.type = opts.kv_type, .k = base, .v = base + half, .n_ctx = rows, .row_elems = cfg.n_embd_kv(),
                  .ring = rows < opts.n_ctx};
    }
  }
  // A decode step's streamed experts must all fit the expert cache at once (AllocateExpertCache): a batch of one
  // token per sequence that could route to more runs with the prefill placement instead.
  decode_max_tok = n_seq;
  for (size_t d = 1; d < accel.size(); ++d) {
    if (accel[d].cache != nullptr) {
      const int64_t slots = static_cast<int64_t>(accel[d].cache_owner.size());
      decode_max_tok = std::min<int64_t>(decode_max_tok, slots / std::max(cfg.n_expert_used, 1));
    }
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
  if (opts.n_seq < 1 || opts.n_seq > std::min(opts.max_batch, opts.n_ctx)) {
    return InvalidArgument("sequences: ", opts.n_seq, " (from 1 to the batch size, ", std::min(opts.max_batch, opts.n_ctx), ")");
  }
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
  m.plan = &ex->plan_;
  m.accel.resize(devices.size());
  for (size_t d = 1; d < devices.size(); ++d) m.accel[d].be = devices[d];
  TANDEM_RETURN_IF_ERROR(m.BuildUnits(ex->plan_));
  TANDEM_RETURN_IF_ERROR(m.Load(ex->stats_));
  TANDEM_RETURN_IF_ERROR(m.AllocateState());
  const bool any_split = std::any_of(m.units.begin(), m.units.end(), [](const Unit& u) { return u.split; });
  if (any_split || opts.on_routing) m.dispatch = std::make_unique<Impl::Dispatch>(&m);
  m.stats = &ex->stats_;
  for (size_t d = 1; d < m.accel.size(); ++d) {
    if (m.accel[d].used) ex->stats_.peak_vram_bytes += m.accel[d].be->peak_bytes();
  }
  return ex;
}

Executor::~Executor() = default;

absl::Status Executor::Forward(std::span<const int32_t> tokens, int64_t pos0, int64_t n_logit_rows, float* logits) {
  const BatchSegment one[] = {{.row0 = 0, .n_tok = static_cast<int64_t>(tokens.size()), .pos0 = pos0, .seq = 0}};
  return Forward(tokens, one, n_logit_rows, logits);
}

int Executor::n_seq() const { return impl_->opts.n_seq; }

absl::Status Executor::Forward(std::span<const int32_t> tokens, std::span<const BatchSegment> segments,
                               int64_t n_logit_rows, float* logits) {
  Impl& m = *impl_;
  const ModelConfig& c = m.model.cfg;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 1 || n > m.opts.max_batch) return InvalidArgument("batch of ", n, " tokens (max ", m.opts.max_batch, ")");
  if (segments.empty() || segments.size() > static_cast<size_t>(m.opts.n_seq)) {
    return InvalidArgument("a batch of ", segments.size(), " sequences (from 1 to ", m.opts.n_seq, ")");
  }
  int64_t next_row = 0;
  bool one_token_each = true;
  for (size_t i = 0; i < segments.size(); ++i) {
    const BatchSegment& g = segments[i];
    if (g.row0 != next_row || g.n_tok < 1 || g.row0 + g.n_tok > n) {
      return InvalidArgument("batch segment ", i, " (rows ", g.row0, "+", g.n_tok, ") does not follow row ", next_row,
                             " of ", n);
    }
    if (g.seq < 0 || g.seq >= m.opts.n_seq) return InvalidArgument("sequence ", g.seq, " of ", m.opts.n_seq);
    for (size_t j = 0; j < i; ++j) {
      if (segments[j].seq == g.seq) return InvalidArgument("sequence ", g.seq, " appears twice in one batch");
    }
    if (g.pos0 < 0 || g.pos0 + g.n_tok > m.opts.n_ctx) {
      return InvalidArgument("context full: positions up to ", g.pos0 + g.n_tok, " but the context holds ",
                             m.opts.n_ctx);
    }
    next_row = g.row0 + g.n_tok;
    one_token_each = one_token_each && g.n_tok == 1;
  }
  if (next_row != n) return InvalidArgument("the batch segments cover ", next_row, " of ", n, " tokens");
  if (n_logit_rows < 0 || n_logit_rows > n) return InvalidArgument("bad logits row count ", n_logit_rows);
  for (int32_t t : tokens) {
    if (t < 0 || t >= c.n_vocab) return InvalidArgument("token id ", t, " out of range (vocab ", c.n_vocab, ")");
  }
  const Phase phase = one_token_each && n <= m.decode_max_tok ? Phase::kDecode : Phase::kPrefill;
  uint64_t pcie = 0;

  const int ph = static_cast<int>(phase);
  std::memcpy(m.cpu_act.ids, tokens.data(), n * sizeof(int32_t));
  for (const BatchSegment& g : segments) {
    for (int64_t t = 0; t < g.n_tok; ++t) m.cpu_act.pos[g.row0 + t] = static_cast<int32_t>(g.pos0 + t);
  }
  for (size_t d = 1; d < m.accel.size(); ++d) {  // the ids and positions, to each accelerator this phase runs on
    Accelerator& a = m.accel[d];
    if (!a.runs[ph]) continue;
    TANDEM_RETURN_IF_ERROR(a.be->CopyHostToDevice(a.act.ids, m.cpu_act.ids, n * 4, Stream::kCompute));
    TANDEM_RETURN_IF_ERROR(a.be->CopyHostToDevice(a.act.pos, m.cpu_act.pos, n * 4, Stream::kCompute));
    pcie += 2 * n * 4;
  }

  StepContext s{.cfg = &c, .n_tok = n, .segments = segments, .n_live = n, .expert_views = m.expert_views.data(),
                .experts = m.dispatch.get()};
  m.phase = phase;
  m.step_pcie = &pcie;
  m.step_error = absl::OkStatus();
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
    const std::span<const KvLayer> kv =
        u.plan->kind == UnitKind::kAttn
            ? std::span<const KvLayer>(m.kv).subspan(static_cast<size_t>(u.plan->layer) * m.opts.n_seq, m.opts.n_seq)
            : std::span<const KvLayer>();
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
  if (first_error.ok()) first_error = m.step_error;
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

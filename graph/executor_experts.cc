// MoE layers whose experts are placed one by one (UnitPlan::experts): loading each expert where it lives, decode's
// expert cache, and the step that splits a layer's experts between the accelerator and the CPU.
#include <algorithm>
#include <cstring>

#include "core/status.h"
#include "graph/executor_impl.h"
#include "runtime/devices.h"

namespace tandem {

// Experts placed one by one need an MoE layer, one placement per expert, and the router on the accelerator in any
// phase where an expert is GPU-side (the CPU's experts get their rows from it; the reverse is not built).
absl::Status Executor::Impl::CheckSplit(const UnitPlan& up) const {
  const ModelConfig& cfg = model.cfg;
  if (up.kind != UnitKind::kFfn || !cfg.is_moe()) {
    return InvalidArgument("plan places the experts of '", up.name, "' one by one but it has no experts");
  }
  if (static_cast<int>(up.experts.size()) != cfg.n_expert) {
    return InvalidArgument("plan places ", up.experts.size(), " experts of '", up.name, "' but it has ",
                           cfg.n_expert);
  }
  for (Phase ph : {Phase::kPrefill, Phase::kDecode}) {
    if (GpuSide(up.at(ph))) continue;
    for (const ExpertPlacement& e : up.experts) {
      if (GpuSide(e.at(ph))) {
        return InvalidArgument("plan puts an expert of '", up.name, "' on the GPU in ",
                               ph == Phase::kPrefill ? "prefill" : "decode", " while its router runs on the CPU");
      }
    }
  }
  return absl::OkStatus();
}

// A split unit's experts: the resident ones to VRAM, the streamed ones to pinned RAM, each packed in a block of
// its own; the CPU's in its own layout, or read from the pinned copy when they stream in the other phase.
absl::Status Executor::Impl::LoadExperts(Unit& u, ExecutorStats& stats) {
  const UnitPlan& up = *u.plan;
  ExpertStore& ex = u.ex;
  const int n_expert = u.host.n_expert;
  const int n_slots = n_expert > 0 ? static_cast<int>(u.host.expert_slots.size()) / n_expert : 0;
  size_t off = 0;
  for (int sl = 0; sl < n_slots; ++sl) {
    const WeightMatrix& m = u.host.expert(sl, 0);
    if (!m.present()) continue;
    ex.slots.push_back(sl);
    ex.offsets.push_back(off);
    off = AlignUp(off + m.bytes());
  }
  ex.block = off;
  for (int e = 1; e < n_expert; ++e) {  // one stack per slot: every expert is shaped as expert 0
    for (int sl : ex.slots) {
      if (u.host.expert(sl, e).bytes() != u.host.expert(sl, 0).bytes()) {
        return InvalidArgument("'", up.name, "': expert ", e, " differs in size from expert 0");
      }
    }
  }
  ex.vram_at.assign(n_expert, -1);
  ex.pinned_at.assign(n_expert, -1);
  int n_vram = 0, n_pinned = 0;
  for (int e = 0; e < n_expert; ++e) {
    const ExpertPlacement& p = up.experts[e];
    if (p.prefill == Placement::kGpu || p.decode == Placement::kGpu) ex.vram_at[e] = n_vram++;
    if (p.prefill == Placement::kStream || p.decode == Placement::kStream) ex.pinned_at[e] = n_pinned++;
  }
  Backend* dev = u.device > 0 ? accel[u.device].be : nullptr;
  auto base = [&](void* block, int at) { return static_cast<uint8_t*>(block) + static_cast<size_t>(at) * ex.block; };
  ex.resident = u.host;
  ex.staged = u.host;
  if (n_vram > 0) {
    TANDEM_ASSIGN_OR_RETURN(ex.vram, DeviceAlloc(u.device, n_vram * ex.block, Cat(up.name, " experts")));
    for (int e = 0; e < n_expert; ++e) {
      if (ex.vram_at[e] < 0) continue;
      for (size_t i = 0; i < ex.slots.size(); ++i) {
        const WeightMatrix& m = u.host.expert(ex.slots[i], e);
        TANDEM_RETURN_IF_ERROR(
            dev->CopyHostToDevice(base(ex.vram, ex.vram_at[e]) + ex.offsets[i], m.data, m.bytes(), Stream::kCopy));
      }
      RelocateExpert(ex, e, base(ex.vram, ex.vram_at[e]), ex.resident);
    }
    TANDEM_RETURN_IF_ERROR(dev->Synchronize(Stream::kCopy));
    stats.load_h2d_bytes += n_vram * ex.block;
  }
  if (n_pinned > 0) {
    TANDEM_ASSIGN_OR_RETURN(ex.pinned, dev->AllocHostPinned(n_pinned * ex.block));
    for (int e = 0; e < n_expert; ++e) {
      if (ex.pinned_at[e] < 0) continue;
      for (size_t i = 0; i < ex.slots.size(); ++i) {
        const WeightMatrix& m = u.host.expert(ex.slots[i], e);
        std::memcpy(base(ex.pinned, ex.pinned_at[e]) + ex.offsets[i], m.data, m.bytes());
      }
    }
  }
  for (int e = 0; e < n_expert; ++e) {
    const ExpertPlacement& p = up.experts[e];
    const bool on_cpu = p.prefill == Placement::kCpu || p.decode == Placement::kCpu;
    for (int sl = 0; sl < n_slots; ++sl) {
      WeightMatrix& m = u.cpu_view.expert_slots[sl * n_expert + e];
      if (!on_cpu) {
        m = WeightMatrix{};
      } else if (ex.pinned_at[e] < 0 && m.present()) {
        TANDEM_RETURN_IF_ERROR(PrepareCpuMatrix(u, m));
      }
    }
    if (on_cpu && ex.pinned_at[e] >= 0) RelocateExpert(ex, e, base(ex.pinned, ex.pinned_at[e]), u.cpu_view);
  }
  return absl::OkStatus();
}

// Decode's LRU cache of streamed experts, on each accelerator that streams experts in decode: slots of the largest
// such expert's block, at least top-k of them (a batch's experts must all be there while it computes).
absl::Status Executor::Impl::AllocateExpertCache() {
  const uint64_t bytes = plan->expert_cache_bytes;
  if (bytes == 0) return absl::OkStatus();
  std::vector<size_t> block(accel.size(), 0);
  for (const Unit& u : units) {
    if (u.split && u.plan->CountExperts(Phase::kDecode, Placement::kStream) > 0) {
      block[u.device] = std::max(block[u.device], u.ex.block);
    }
  }
  cache_slot_of.assign(static_cast<size_t>(model.cfg.n_layer) * std::max(model.cfg.n_expert, 1), -1);
  for (size_t d = 1; d < accel.size(); ++d) {
    if (block[d] == 0) continue;
    Accelerator& a = accel[d];
    const int slots = static_cast<int>(bytes / block[d]);
    if (slots < model.cfg.n_expert_used) {
      return InvalidArgument("the expert cache of ", bytes, " bytes holds ", slots, " experts; a token routes to ",
                             model.cfg.n_expert_used);
    }
    TANDEM_ASSIGN_OR_RETURN(void* cache, DeviceAlloc(static_cast<int>(d), slots * block[d], "expert cache"));
    a.cache = static_cast<uint8_t*>(cache);
    a.cache_slot_bytes = block[d];
    a.cache_owner.assign(slots, -1);
    a.cache_prev.resize(slots);
    a.cache_next.resize(slots);
    for (int s = 0; s < slots; ++s) {
      a.cache_prev[s] = s - 1;
      a.cache_next[s] = s + 1 < slots ? s + 1 : -1;
    }
    a.cache_head = 0;
    a.cache_tail = slots - 1;
    if (a.expert_copy_done < 0) {
      TANDEM_ASSIGN_OR_RETURN(a.expert_copy_done, a.be->CreateEvent());
    }
  }
  return absl::OkStatus();
}

// One MoE layer's experts. Unsplit: as the unit's backend would run them. Split, with the router on an
// accelerator: the routing comes back to the host; the streamed experts the batch routed to are copied into the
// expert staging buffer; the accelerator's experts (resident and staged) are queued there; meanwhile the CPU
// computes its own experts from a copy of the layer's input; their slots go back and are added. A slot only one
// side computes is zero on the other, so the sum is exactly each slot's one value.
void Executor::Impl::RunExperts(Backend& be, int il, const MoeWeights& w, const MoeExpertsArgs& a) {
  Unit& u = *ffn_of[il];
  const ModelConfig& c = model.cfg;
  const int ph = static_cast<int>(phase);
  const int d = &be == cpu ? kHostDevice : u.device;
  const int64_t pairs = a.n_tok * a.k;
  const int n_cpu = u.split ? u.plan->CountExperts(phase, Placement::kCpu) : 0;
  const int n_stream = u.split ? u.plan->CountExperts(phase, Placement::kStream) : 0;
  const bool record = static_cast<bool>(opts.on_routing);

  // The routing on the host, when something here needs it.
  const int32_t* ids = a.ids;
  if (d != kHostDevice && (n_cpu > 0 || n_stream > 0 || record)) {
    const size_t id_bytes = static_cast<size_t>(pairs) * sizeof(int32_t);
    const size_t x_bytes = n_cpu > 0 ? static_cast<size_t>(a.n_tok) * c.n_embd * sizeof(float) : 0;
    absl::Status st = be.CopyDeviceToHost(cpu_act.expert_ids, a.ids, id_bytes, Stream::kCompute);
    if (st.ok() && n_cpu > 0) st = be.CopyDeviceToHost(cpu_act.expert_weights, a.weights, id_bytes, Stream::kCompute);
    if (st.ok() && n_cpu > 0) st = be.CopyDeviceToHost(cpu_act.cur, a.x, x_bytes, Stream::kCompute);
    if (st.ok()) st = be.Synchronize(Stream::kCompute);
    if (!st.ok()) return Fail(st);
    *step_pcie += (n_cpu > 0 ? 2 : 1) * id_bytes + x_bytes;
    ids = cpu_act.expert_ids;
  }
  if (record) {
    opts.on_routing(il, std::span<const int32_t>(ids, static_cast<size_t>(pairs)), a.n_tok, a.k);
  }
  if (!u.split) return be.MoeExperts(a);

  const int n_expert = c.n_expert;
  if (d == kHostDevice) {  // every expert is the CPU's in this phase (CheckSplit)
    for (int e = 0; e < n_expert; ++e) side_views[e] = ExpertViews(u.cpu_view, w, e);
    MoeExpertsArgs mine = a;
    mine.experts = side_views.data();
    return cpu->MoeExperts(mine);
  }
  Accelerator& acc = accel[d];
  ExpertStore& ex = u.ex;
  uint64_t picks = 0, gpu_picks = 0;
  std::fill(staged.begin(), staged.end(), 0);
  if (n_cpu > 0 || n_stream > 0) {
    int n_staged = 0;
    for (int64_t i = 0; i < pairs; ++i) {
      const int e = ids[i];
      if (e < 0 || e >= n_expert) {
        return Fail(absl::InternalError(Cat("layer ", il, ": the router chose expert ", e, " of ", n_expert)));
      }
      const Placement p = u.plan->experts[e].at(phase);
      ++picks;
      gpu_picks += p == Placement::kGpu;  // a streamed pick is a miss: its expert had to be copied
      if (p != Placement::kStream || staged[e]) continue;
      staged[e] = 1;
      uint8_t* dst = nullptr;
      if (phase == Phase::kDecode && acc.cache != nullptr) {
        // Decode: from the cache when it holds the expert, else into its least recently used slot (never one
        // this batch uses: those were just moved to the front, and the cache has k slots for each token of a decode
        // batch, Impl::decode_max_tok).
        const int key = il * n_expert + e;
        int slot = cache_slot_of[key];
        if (slot >= 0) {
          acc.CacheTouch(slot);
          RelocateExpert(ex, e, acc.cache + static_cast<size_t>(slot) * acc.cache_slot_bytes, ex.staged);
          ++stats->expert_cache_hits;
          continue;
        }
        slot = acc.cache_tail;
        if (acc.cache_owner[slot] >= 0) cache_slot_of[acc.cache_owner[slot]] = -1;
        acc.cache_owner[slot] = key;
        cache_slot_of[key] = slot;
        acc.CacheTouch(slot);
        ++stats->expert_cache_misses;
        dst = acc.cache + static_cast<size_t>(slot) * acc.cache_slot_bytes;
        ++n_staged;
      } else {
        dst = static_cast<uint8_t*>(acc.expert_staging) + static_cast<size_t>(n_staged++) * ex.block;
      }
      const uint8_t* src = static_cast<const uint8_t*>(ex.pinned) + static_cast<size_t>(ex.pinned_at[e]) * ex.block;
      acc.be->SetTraceLabel(u.experts_label);
      if (absl::Status st = acc.be->CopyHostToDevice(dst, src, ex.block, Stream::kCopy); !st.ok()) return Fail(st);
      RelocateExpert(ex, e, dst, ex.staged);
      *step_pcie += ex.block;
      stats->expert_stream_bytes[ph] += ex.block;
    }
    if (n_staged > 0) {
      absl::Status st = acc.be->RecordEvent(acc.expert_copy_done, Stream::kCopy);
      if (st.ok()) st = acc.be->WaitEvent(acc.expert_copy_done, Stream::kCompute);
      if (!st.ok()) return Fail(st);
    }
    stats->expert_picks[ph] += picks;
    stats->expert_gpu_picks[ph] += gpu_picks;
  }
  // The accelerator's share, queued before the CPU starts on its own so that both run at once.
  const bool gpu_share = n_cpu < n_expert;
  if (gpu_share) {
    for (int e = 0; e < n_expert; ++e) {
      const Placement p = u.plan->experts[e].at(phase);
      side_views[e] = p == Placement::kGpu                  ? ExpertViews(ex.resident, w, e)
                      : p == Placement::kStream && staged[e] ? ExpertViews(ex.staged, w, e)
                                                             : ExpertMatrices{};
    }
    MoeExpertsArgs mine = a;
    mine.experts = side_views.data();
    mine.n_embd = c.n_embd;  // a batch may route to none of them
    be.SetTraceLabel(u.experts_label);
    be.MoeExperts(mine);
    be.SetTraceLabel(u.plan->name);
  }
  if (n_cpu == 0) return;
  const int64_t t0 = opts.trace_host ? NowNs() : 0;
  for (int e = 0; e < n_expert; ++e) {
    side_views[e] = u.plan->experts[e].at(phase) == Placement::kCpu ? ExpertViews(u.cpu_view, w, e) : ExpertMatrices{};
  }
  const int64_t slot_elems = a.n_tok * c.n_embd;
  cpu->MoeExperts(MoeExpertsArgs{
      .experts = side_views.data(), .n_expert = n_expert, .x = cpu_act.cur, .n_tok = a.n_tok, .ids = ids,
      .weights = cpu_act.expert_weights, .k = a.k, .act = a.act, .weight_input = a.weight_input,
      .buf = ExpertBuffers{.xe = cpu_act.xe, .gate = cpu_act.gate, .up = cpu_act.up, .rows = cpu_act.expert_rows},
      .out = cpu_act.slots, .n_embd = c.n_embd});
  if (opts.trace_host) stats->host_trace.push_back({u.experts_label, t0, NowNs()});
  // The CPU's slots go back: straight into out when the accelerator had no share, else added to its own.
  const size_t out_bytes = static_cast<size_t>(a.k * slot_elems) * sizeof(float);
  float* dst = gpu_share ? acc.merge : a.out;
  if (absl::Status st = be.CopyHostToDevice(dst, cpu_act.slots, out_bytes, Stream::kCompute); !st.ok()) return Fail(st);
  *step_pcie += out_bytes;
  if (gpu_share) be.Add(a.out, acc.merge, a.k * slot_elems, a.out);
}

}  // namespace tandem

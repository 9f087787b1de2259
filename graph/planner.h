// The partitioner's insides, shared by graph/partitioner.cc (rules, counts mode, the plan it finishes) and
// graph/partitioner_auto.cc (auto placement): a unit's options, and the Planner that prices and accounts them. Only
// those two files include it.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/partitioner.h"

namespace tandem::partition_internal {

inline constexpr int kAttentionQueryTile = 16;

// One unit's placement in both phases, and its accelerator when either phase is GPU-side.
struct Option {
  Placement prefill = Placement::kCpu;
  Placement decode = Placement::kCpu;
  int device = 1;
  // MoE FFN units placed expert by expert: prefill/decode are the router's (gpu); the layer's `hot` most picked
  // experts are resident and the others go rest_prefill / rest_decode (cpu or stream). hot < 0: not split.
  int hot = -1;
  Placement rest_prefill = Placement::kCpu;
  Placement rest_decode = Placement::kCpu;
  // Or each expert's placement, as --place expert rules fix it ([e], in expert order).
  std::shared_ptr<const std::vector<ExpertPlacement>> each;
  bool split() const { return hot >= 0 || each != nullptr; }
  Placement rest(Phase ph) const { return ph == Phase::kPrefill ? rest_prefill : rest_decode; }
  bool operator==(const Option&) const = default;
};
inline Option SplitOpt(int hot, Placement rest_prefill, Placement rest_decode) {
  return Option{Placement::kGpu, Placement::kGpu, 1, hot, rest_prefill, rest_decode};
}
inline const Option kCpuOpt{Placement::kCpu, Placement::kCpu};
inline const Option kGpuOpt{Placement::kGpu, Placement::kGpu};
inline const Option kStreamOpt{Placement::kStream, Placement::kStream};

// The device a phase runs on: 0 (the host) or the option's accelerator.
inline int DeviceAt(const Option& o, Placement p) { return GpuSide(p) ? o.device : 0; }
// Activations crossing from one device to the next: none, one copy, or two (between accelerators, via the host).
inline int Crossings(int from, int to) { return from == to ? 0 : (from != 0 && to != 0 ? 2 : 1); }

using Assignment = std::vector<Option>;

inline bool Streams(const Option& o) { return o.prefill == Placement::kStream || o.decode == Placement::kStream; }
inline bool Resident(const Option& o) { return !o.split() && (o.prefill == Placement::kGpu || o.decode == Placement::kGpu); }
inline bool AnyGpuSide(const Option& o) { return GpuSide(o.prefill) || GpuSide(o.decode); }
// The CPU computes the unit in some phase from the file's pages (or its repacked copy), not from a pinned copy.
inline bool ComputesFromMapping(const Option& o) {
  return (o.prefill == Placement::kCpu || o.decode == Placement::kCpu) && !Streams(o);
}

// Per-unit times are stored in arrays indexed by Placement.
static_assert(static_cast<int>(Placement::kCpu) == 0 && static_cast<int>(Placement::kGpu) == 1 &&
              static_cast<int>(Placement::kStream) == 2);

// Seconds of one prefill chunk, averaged over a prompt of `chunks` chunks. Past the last layer's cache store only
// the prompt's last token goes on (arch/blocks.cc), and only in the last chunk: the model's last attention, its
// FFN and the head cost their cache-only share in every chunk and a one-token share once per prompt.
inline double PrefillChunkSeconds(const UnitSpec& u, Placement p, const CostQuery& q, double chunks, int n_layer,
                           const MachineProfile& prof) {
  if (u.kind != UnitKind::kOutput && u.layer != n_layer - 1) return UnitSeconds(u, p, q, prof);
  CostQuery cache_only = q, one_token = q;
  cache_only.n_live = 0;
  one_token.n_live = 1;
  const double s0 = UnitSeconds(u, p, cache_only, prof);
  return s0 + (UnitSeconds(u, p, one_token, prof) - s0) / std::max(chunks, 1.0);
}

// Everything derived once from the input.
class Planner {
 public:
  Planner(const PartitionInput& in, std::vector<uint64_t> caps) : in_(in), caps_(std::move(caps)) {
    const ModelConfig& c = in.config;
    n_eff_ = std::max<int64_t>(1, std::min<int64_t>(in.prefill_batch, std::max(in.prompt_tokens, 1)));
    w_prefill_ = static_cast<double>(std::max(in.prompt_tokens, 0)) / static_cast<double>(n_eff_);
    w_decode_ = std::max(in.gen_tokens, 0);
    const double ctx_prefill = std::max(in.prompt_tokens, 1) / 2.0;
    const double ctx_decode = std::max(in.prompt_tokens, 0) + std::max(in.gen_tokens, 0) / 2.0;
    q_prefill_ = {n_eff_, ctx_prefill, in.kv_elem_bytes};
    q_prefill_report_ = {n_eff_, ctx_prefill, in.kv_elem_bytes};
    q_decode_ = {1, ctx_decode, in.kv_elem_bytes};
    n_devices_ = static_cast<int>(in.devices.size());
    n_eff_max_ = std::max(in.prefill_batch, 1);
    act_bytes_ = ActivationBytesEstimate(c, std::max(in.prefill_batch, 1));
    // The executor's buffer for the CPU's expert slots on the accelerator (graph/executor.cc).
    merge_bytes_ = static_cast<uint64_t>(std::max(c.n_expert_used, 0)) * std::max(in.prefill_batch, 1) * c.n_embd *
                   sizeof(float);
    ws_bytes_ = GpuWorkspaceEstimate(c, std::max(in.prefill_batch, 1), in.n_ctx, in.n_threads,
                                     in.profile.gpu_library_workspace_bytes);
    for (const UnitSpec& u : in.units) {
      auto prefill = [&](Placement p) {
        return PrefillChunkSeconds(u, p, q_prefill_, w_prefill_, c.n_layer, in.profile);
      };
      prefill_s_.push_back({prefill(Placement::kCpu), prefill(Placement::kGpu), prefill(Placement::kStream)});
      decode_s_.push_back({UnitSeconds(u, Placement::kCpu, q_decode_, in.profile),
                           UnitSeconds(u, Placement::kGpu, q_decode_, in.profile),
                           UnitSeconds(u, Placement::kStream, q_decode_, in.profile)});
    }
    // MoE layers: each expert's share of the picks, most picked first (the recorded routing, else uniform).
    // Partition has checked that a recording matches the model.
    const RoutingStats uniform = in.routing != nullptr || c.n_expert <= 0
                                     ? RoutingStats{}
                                     : RoutingStats::Empty(c.n_layer, c.n_expert, c.n_expert_used);
    const RoutingStats& r = in.routing != nullptr ? *in.routing : uniform;
    hot_order_.resize(in.units.size());
    hot_share_.resize(in.units.size());
    work_.resize(in.units.size());
    for (size_t i = 0; i < in.units.size(); ++i) {
      const UnitSpec& u = in.units[i];
      if (u.kind != UnitKind::kFfn || u.expert_block_bytes == 0 || c.n_expert <= 0) continue;
      hot_order_[i] = r.HotOrder(u.layer);
      for (int e : hot_order_[i]) hot_share_[i].push_back(r.Share(u.layer, e));
      work_[i][0] = WorkOf(u, q_prefill_.n_tok, q_prefill_.ctx, q_prefill_.kv_elem_bytes, q_prefill_.n_live);
      work_[i][1] = WorkOf(u, q_decode_.n_tok, q_decode_.ctx, q_decode_.kv_elem_bytes, q_decode_.n_live);
    }
    // --expert-cache: slots of the largest expert block, shared evenly by the split layers for the prediction.
    if (in.request.expert_cache.value_or(0) > 0) {
      uint64_t block = 0;
      int n_split = 0;
      for (size_t i = 0; i < in.units.size(); ++i) {
        if (hot_share_[i].empty()) continue;
        block = std::max(block, in.units[i].expert_block_bytes);
        ++n_split;
      }
      cache_slots_ = block > 0 ? static_cast<int>(*in.request.expert_cache / block) : 0;
      cache_bytes_ = static_cast<uint64_t>(cache_slots_) * block;
      cache_per_layer_ = n_split > 0 ? static_cast<double>(cache_slots_) / n_split : 0;
    }
    const uint64_t act_row = static_cast<uint64_t>(c.n_embd) * sizeof(float);
    switch_prefill_s_ = TransferSeconds(act_row * n_eff_, in.profile);
    switch_decode_s_ = TransferSeconds(act_row, in.profile);
    logits_s_ = TransferSeconds(static_cast<uint64_t>(c.n_vocab) * sizeof(float), in.profile);
  }

  const PartitionInput& in() const { return in_; }
  // Each accelerator's cap ([0] unused).
  uint64_t cap(int device) const { return device < static_cast<int>(caps_.size()) ? caps_[device] : 0; }
  int n_devices() const { return n_devices_; }
  // A unit may run on an accelerator only if the device supports every op it issues.
  bool Runs(size_t unit, int device) const {
    const DeviceDesc& d = in_.devices[device - 1];
    if (!d.supports) return true;
    for (const auto& [op, type] : in_.units[unit].ops) {
      if (!d.supports(op, type)) return false;
    }
    return true;
  }
  absl::Status CheckSupported(const Assignment& a) const {
    for (size_t i = 0; i < a.size(); ++i) {
      if (!AnyGpuSide(a[i]) || Runs(i, a[i].device)) continue;
      const DeviceDesc& d = in_.devices[a[i].device - 1];
      for (const auto& [op, type] : in_.units[i].ops) {
        if (d.supports && !d.supports(op, type)) {
          return InvalidArgument(d.name, " cannot run ", in_.units[i].name, ": it has no ", OpName(op), " for ",
                                 DTypeName(type), " weights");
        }
      }
    }
    return absl::OkStatus();
  }
  size_t size() const { return in_.units.size(); }
  uint64_t kv(size_t i) const {
    return in_.units[i].KvBytes(in_.n_ctx, in_.kv_elem_bytes, in_.prefill_batch) * static_cast<uint64_t>(in_.n_seq);
  }

  // Mix-weighted seconds of one unit (no transfers).
  double Node(size_t i, const Option& o) const {
    if (o.split()) return w_prefill_ * Split(i, o, Phase::kPrefill).seconds + w_decode_ * Split(i, o, Phase::kDecode).seconds;
    return w_prefill_ * prefill_s_[i][static_cast<int>(o.prefill)] +
           w_decode_ * decode_s_[i][static_cast<int>(o.decode)];
  }
  // A split MoE unit in one phase (SplitFfnCost), its experts in hot order.
  SplitCost Split(size_t i, const Option& o, Phase ph) const {
    const std::vector<double>& share = hot_share_[i];
    const std::vector<Placement> where = Where(i, o, ph);
    const bool prefill = ph == Phase::kPrefill;
    return SplitFfnCost(in_.units[i], work_[i][prefill ? 0 : 1], prefill ? q_prefill_ : q_decode_, share, where,
                        in_.config.n_expert_used, in_.profile,
                        prefill ? std::vector<double>{} : CacheMisses(share, where));
  }
  // Decode with an expert cache: for each streamed expert, the chance it must be copied when routed. The cache is
  // LRU; Che's approximation under independent routing gives each expert's hit chance 1 - exp(-share * T), T the
  // characteristic time that fills this layer's part of the cache. Layers take their turns in a fixed order, so a
  // cache with fewer than k slots per streaming layer is swept clean between two uses of an expert: no hits.
  // Empty: no cache.
  std::vector<double> CacheMisses(const std::vector<double>& share, const std::vector<Placement>& where) const {
    if (cache_slots_ == 0) return {};
    std::vector<double> miss(share.size(), 1.0);
    if (cache_per_layer_ < in_.config.n_expert_used) return miss;
    double streamed = 0;
    for (size_t j = 0; j < share.size(); ++j) streamed += where[j] == Placement::kStream;
    if (streamed <= cache_per_layer_) {  // every streamed expert stays cached once copied
      std::fill(miss.begin(), miss.end(), 0.0);
      return miss;
    }
    auto filled = [&](double t) {
      double f = 0;
      for (size_t j = 0; j < share.size(); ++j) f += where[j] == Placement::kStream ? 1.0 - std::exp(-share[j] * t) : 0;
      return f;
    };
    double lo = 0, hi = 1;
    while (filled(hi) < cache_per_layer_ && hi < 1e12) hi *= 2;
    for (int it = 0; it < 100; ++it) {
      const double mid = (lo + hi) / 2;
      (filled(mid) < cache_per_layer_ ? lo : hi) = mid;
    }
    for (size_t j = 0; j < share.size(); ++j) miss[j] = std::exp(-share[j] * lo);
    return miss;
  }
  int cache_slots() const { return cache_slots_; }
  uint64_t cache_bytes() const { return cache_bytes_; }
  uint64_t CacheSlotBytes() const {
    uint64_t block = 0;
    for (size_t i = 0; i < in_.units.size(); ++i) {
      if (!hot_share_[i].empty()) block = std::max(block, in_.units[i].expert_block_bytes);
    }
    return block;
  }
  bool Splittable(size_t i) const { return !hot_share_[i].empty(); }
  // A split unit's experts in hot order, where they run in a phase.
  std::vector<Placement> Where(size_t i, const Option& o, Phase ph) const {
    std::vector<Placement> where(hot_share_[i].size(), o.rest(ph));
    for (size_t j = 0; j < where.size(); ++j) {
      if (o.each) {
        where[j] = (*o.each)[hot_order_[i][j]].at(ph);
      } else if (static_cast<int>(j) < o.hot) {
        where[j] = Placement::kGpu;
      }
    }
    return where;
  }
  // Experts of a split unit resident (in either phase), streamed (in either), and computed by the CPU from its
  // pages (cpu in a phase, never streamed).
  struct ExpertTally {
    uint64_t resident = 0, streamed = 0, cpu_mapped = 0;
    bool cpu_share = false;  // some expert is the CPU's in some phase: the GPU holds a buffer for its slots
  };
  ExpertTally Tally(size_t i, const Option& o) const {
    ExpertTally t;
    const std::vector<Placement> p = Where(i, o, Phase::kPrefill), d = Where(i, o, Phase::kDecode);
    for (size_t j = 0; j < p.size(); ++j) {
      const bool gpu = p[j] == Placement::kGpu || d[j] == Placement::kGpu;
      const bool stream = p[j] == Placement::kStream || d[j] == Placement::kStream;
      const bool cpu = p[j] == Placement::kCpu || d[j] == Placement::kCpu;
      t.resident += gpu;
      t.streamed += stream;
      t.cpu_mapped += cpu && !stream;
      t.cpu_share = t.cpu_share || cpu;
    }
    return t;
  }
  const std::vector<int>& HotOrder(size_t i) const { return hot_order_[i]; }
  const std::vector<double>& HotShare(size_t i) const { return hot_share_[i]; }
  // The most distinct streamed experts one batch of a split unit routes to, per phase.
  uint64_t ExpertStagingBytes(size_t i, const Option& o) const {
    const int64_t k = std::max(in_.config.n_expert_used, 1);
    auto streamed = [&](Phase ph) {
      const std::vector<Placement> w = Where(i, o, ph);
      return static_cast<int64_t>(std::count(w.begin(), w.end(), Placement::kStream));
    };
    // With an expert cache decode copies into the cache, not the staging buffer.
    const int64_t n = std::max(std::min(streamed(Phase::kPrefill), n_eff_max_ * k),
                               cache_slots_ > 0 ? 0 : std::min(streamed(Phase::kDecode), k));
    return static_cast<uint64_t>(n) * in_.units[i].expert_block_bytes;
  }
  // Activations crossing between consecutive units.
  double Edge(const Option& a, const Option& b) const {
    return w_prefill_ * switch_prefill_s_ * Crossings(DeviceAt(a, a.prefill), DeviceAt(b, b.prefill)) +
           w_decode_ * switch_decode_s_ * Crossings(DeviceAt(a, a.decode), DeviceAt(b, b.decode));
  }
  // Logits back to the host after the last unit.
  double Exit(const Option& o) const {
    return (GpuSide(o.prefill) ? w_prefill_ * logits_s_ : 0) + (GpuSide(o.decode) ? w_decode_ * logits_s_ : 0);
  }
  double Objective(const Assignment& a) const {
    double t = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      t += Node(i, a[i]);
      if (i > 0) t += Edge(a[i - 1], a[i]);
    }
    return t + Exit(a.back());
  }

  // Exact minimum over the chain given each unit's allowed options (Viterbi). Earlier options win ties.
  Assignment Solve(const std::vector<std::vector<Option>>& allowed) const {
    const size_t n = allowed.size();
    std::vector<std::vector<double>> best(n);
    std::vector<std::vector<int>> from(n);
    for (size_t i = 0; i < n; ++i) {
      best[i].assign(allowed[i].size(), std::numeric_limits<double>::infinity());
      from[i].assign(allowed[i].size(), -1);
      for (size_t j = 0; j < allowed[i].size(); ++j) {
        const double node = Node(i, allowed[i][j]) + (i + 1 == n ? Exit(allowed[i][j]) : 0);
        if (i == 0) {
          best[i][j] = node;
          continue;
        }
        for (size_t k = 0; k < allowed[i - 1].size(); ++k) {
          const double c = best[i - 1][k] + Edge(allowed[i - 1][k], allowed[i][j]) + node;
          if (c < best[i][j]) {
            best[i][j] = c;
            from[i][j] = static_cast<int>(k);
          }
        }
      }
    }
    Assignment a(n);
    int j = 0;
    for (size_t k = 1; k < best[n - 1].size(); ++k) {
      if (best[n - 1][k] < best[n - 1][j]) j = static_cast<int>(k);
    }
    for (size_t i = n; i-- > 0;) {
      a[i] = allowed[i][j];
      j = from[i][j];
    }
    return a;
  }

  struct Account {
    MemoryAccount gpu, host;             // gpu: every accelerator together
    std::vector<MemoryAccount> devices;  // [device]; [0] unused
    uint64_t slot = 0;                   // the largest staging slot of any accelerator
    uint64_t expert_staging = 0;         // the largest expert staging buffer of any accelerator
    bool expert_cache = false;           // some accelerator holds decode's expert cache
  };
  // The first accelerator whose account exceeds its cap, or 0 when all fit.
  int Over(const Account& acc) const {
    for (int d = 1; d <= n_devices_; ++d) {
      if (acc.devices[d].total() > caps_[d]) return d;
    }
    return 0;
  }
  bool Fits(const Assignment& a) const { return Over(Measure(a)) == 0; }
  Account Measure(const Assignment& a) const {
    Account acc;
    acc.devices.assign(n_devices_ + 1, MemoryAccount{});
    std::vector<uint64_t> slot(n_devices_ + 1, 0), expert_staging(n_devices_ + 1, 0);
    std::vector<bool> used(n_devices_ + 1, false), merge(n_devices_ + 1, false), cache(n_devices_ + 1, false);
    for (size_t i = 0; i < a.size(); ++i) {
      const UnitSpec& u = in_.units[i];
      const Option& o = a[i];
      MemoryAccount& dev = acc.devices[AnyGpuSide(o) ? o.device : 0];
      if (AnyGpuSide(o)) used[o.device] = true;
      if (o.split()) {
        // The router resident, the hot experts resident, the streamed ones pinned, the CPU's from its pages.
        const ExpertTally t = Tally(i, o);
        dev.weights += u.own_packed_bytes + t.resident * u.expert_block_bytes;
        acc.host.weights += t.streamed * u.expert_block_bytes;
        if (t.streamed > 0) expert_staging[o.device] = std::max(expert_staging[o.device], ExpertStagingBytes(i, o));
        const std::vector<Placement> d = Where(i, o, Phase::kDecode);
        if (cache_slots_ > 0 && std::count(d.begin(), d.end(), Placement::kStream) > 0) cache[o.device] = true;
        acc.host.mapped += t.cpu_mapped * u.ExpertCpuMappedBytes(in_.cpu_repack);
        acc.host.repacked += t.cpu_mapped * u.ExpertCpuRepackedBytes(in_.cpu_repack);
        if (t.cpu_share) merge[o.device] = true;
        continue;
      }
      if (Resident(o)) {
        dev.weights += u.packed_bytes;
      } else if (Streams(o)) {
        acc.host.weights += u.packed_bytes;  // pinned source of the copies
        slot[o.device] = std::max(slot[o.device], u.packed_bytes);
      }
      // What the CPU computes with, in either phase: the file's pages and the CPU's repacked copies; a unit that
      // also streams is computed from its pinned copy, already counted.
      if (ComputesFromMapping(o)) {
        acc.host.mapped += u.CpuMappedBytes(in_.cpu_repack);
        acc.host.repacked += u.CpuRepackedBytes(in_.cpu_repack);
      }
      (AnyGpuSide(o) ? dev.kv : acc.host.kv) += kv(i);
    }
    for (int d = 1; d <= n_devices_; ++d) {
      MemoryAccount& dev = acc.devices[d];
      dev.staging = 2 * slot[d] + expert_staging[d] + (cache[d] ? cache_bytes_ : 0);
      if (used[d]) {
        dev.activations = act_bytes_ + (merge[d] ? merge_bytes_ : 0);
        dev.workspace = ws_bytes_;
      }
      acc.slot = std::max(acc.slot, slot[d]);
      acc.expert_staging = std::max(acc.expert_staging, expert_staging[d]);
      acc.expert_cache = acc.expert_cache || cache[d];
      acc.gpu.weights += dev.weights;
      acc.gpu.kv += dev.kv;
      acc.gpu.staging += dev.staging;
      acc.gpu.activations += dev.activations;
      acc.gpu.workspace += dev.workspace;
    }
    acc.host.activations = act_bytes_;
    return acc;
  }

  uint64_t base_bytes() const { return act_bytes_ + ws_bytes_; }

  Plan Finish(const Assignment& a, uint64_t cap, std::string why) const;

 private:
  const PartitionInput& in_;
  const std::vector<uint64_t> caps_;
  int n_devices_ = 0;
  int64_t n_eff_ = 1;
  double w_prefill_ = 0, w_decode_ = 0;
  CostQuery q_prefill_, q_prefill_report_, q_decode_;
  uint64_t act_bytes_ = 0, ws_bytes_ = 0, merge_bytes_ = 0;
  std::vector<std::array<double, 3>> prefill_s_, decode_s_;  // indexed by Placement
  int64_t n_eff_max_ = 1;                                      // the largest batch the executor sizes for
  std::vector<std::vector<int>> hot_order_;                    // [unit]: MoE FFN experts, most picked first
  std::vector<std::vector<double>> hot_share_;                 // [unit]: their shares, in that order
  std::vector<std::array<UnitWork, 2>> work_;                  // [unit][prefill, decode]: MoE FFN units' work
  int cache_slots_ = 0;                                        // --expert-cache, in experts
  uint64_t cache_bytes_ = 0;                                   // and in bytes (whole slots)
  // The cache's slots per layer that streams experts in decode: while choosing, shared by every split layer (a
  // guess on the low side); Finish shares them among the layers the plan streams (the prediction it reports).
  mutable double cache_per_layer_ = 0;
  double switch_prefill_s_ = 0, switch_decode_s_ = 0, logits_s_ = 0;
};

// "weights 1 GiB, KV 2 MiB, ...", and what capped the VRAM, for messages.
std::string Breakdown(const MemoryAccount& m);
std::string DescribeCap(const PlacementRequest& req, uint64_t cap, uint64_t capacity);
// Units the --place rules fixed.
size_t RuleCount(const std::vector<std::optional<Option>>& fixed);
// Auto placement (graph/partitioner_auto.cc).
absl::StatusOr<Plan> PartitionAuto(const Planner& pl, uint64_t capacity,
                                   const std::vector<std::optional<Option>>& fixed);

}  // namespace tandem::partition_internal

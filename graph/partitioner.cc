#include "graph/partitioner.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>

#include "core/status.h"
#include "cpu_backend/kernels.h"

namespace tandem {
namespace {

constexpr int kAttentionQueryTile = 16;

// One unit's placement in both phases, and its accelerator when either phase is GPU-side.
struct Option {
  Placement prefill = Placement::kCpu;
  Placement decode = Placement::kCpu;
  int device = 1;
  bool operator==(const Option&) const = default;
};
constexpr Option kCpuOpt{Placement::kCpu, Placement::kCpu};
constexpr Option kGpuOpt{Placement::kGpu, Placement::kGpu};
constexpr Option kStreamOpt{Placement::kStream, Placement::kStream};

// The device a phase runs on: 0 (the host) or the option's accelerator.
int DeviceAt(const Option& o, Placement p) { return GpuSide(p) ? o.device : 0; }
// Activations crossing from one device to the next: none, one copy, or two (between accelerators, via the host).
int Crossings(int from, int to) { return from == to ? 0 : (from != 0 && to != 0 ? 2 : 1); }

using Assignment = std::vector<Option>;

bool Streams(const Option& o) { return o.prefill == Placement::kStream || o.decode == Placement::kStream; }
bool Resident(const Option& o) { return o.prefill == Placement::kGpu || o.decode == Placement::kGpu; }
bool AnyGpuSide(const Option& o) { return GpuSide(o.prefill) || GpuSide(o.decode); }
// The CPU computes the unit in some phase from the file's pages (or its repacked copy), not from a pinned copy.
bool ComputesFromMapping(const Option& o) {
  return (o.prefill == Placement::kCpu || o.decode == Placement::kCpu) && !Streams(o);
}

// Per-unit times are stored in arrays indexed by Placement.
static_assert(static_cast<int>(Placement::kCpu) == 0 && static_cast<int>(Placement::kGpu) == 1 &&
              static_cast<int>(Placement::kStream) == 2);

// Seconds of one prefill chunk, averaged over a prompt of `chunks` chunks. Past the last layer's cache store only
// the prompt's last token goes on (arch/blocks.cc), and only in the last chunk: the model's last attention, its
// FFN and the head cost their cache-only share in every chunk and a one-token share once per prompt.
double PrefillChunkSeconds(const UnitSpec& u, Placement p, const CostQuery& q, double chunks, int n_layer,
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
    act_bytes_ = ActivationBytesEstimate(c, std::max(in.prefill_batch, 1));
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
  uint64_t kv(size_t i) const { return in_.units[i].KvBytes(in_.n_ctx, in_.kv_elem_bytes); }

  // Mix-weighted seconds of one unit (no transfers).
  double Node(size_t i, const Option& o) const {
    return w_prefill_ * prefill_s_[i][static_cast<int>(o.prefill)] +
           w_decode_ * decode_s_[i][static_cast<int>(o.decode)];
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
    std::vector<uint64_t> slot(n_devices_ + 1, 0);
    std::vector<bool> used(n_devices_ + 1, false);
    for (size_t i = 0; i < a.size(); ++i) {
      const UnitSpec& u = in_.units[i];
      const Option& o = a[i];
      MemoryAccount& dev = acc.devices[AnyGpuSide(o) ? o.device : 0];
      if (AnyGpuSide(o)) used[o.device] = true;
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
      dev.staging = 2 * slot[d];
      if (used[d]) {
        dev.activations = act_bytes_;
        dev.workspace = ws_bytes_;
      }
      acc.slot = std::max(acc.slot, slot[d]);
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
  uint64_t act_bytes_ = 0, ws_bytes_ = 0;
  std::vector<std::array<double, 3>> prefill_s_, decode_s_;  // indexed by Placement
  double switch_prefill_s_ = 0, switch_decode_s_ = 0, logits_s_ = 0;
};

// One line for each way the host side of the plan will hurt: pages read from disk, or memory that will swap.
void AddHostWarnings(Plan& plan) {
  const uint64_t avail = plan.host_ram_available;
  if (avail == 0) return;
  const MemoryAccount& h = plan.host;
  if (h.anonymous() > avail) {
    plan.warnings.push_back(Cat("host memory: ", FormatBytes(h.anonymous()), " that cannot be paged (",
                                h.repacked > 0 ? Cat("repacked weights ", FormatBytes(h.repacked), ", ") : "",
                                h.weights > 0 ? Cat("pinned weights ", FormatBytes(h.weights), ", ") : "",
                                "KV ", FormatBytes(h.kv), ", activations ", FormatBytes(h.activations),
                                ") exceeds the ", FormatBytes(avail), " of RAM available: expect swapping or an ",
                                "out-of-memory kill (lower -c or put more on a GPU)"));
  }
  if (plan.host_paged_bytes > 0) {
    char rates[96];
    std::snprintf(rates, sizeof(rates), "assumed %.1f GB/s), decode about %.2f tok/s", plan.disk_read_gbps,
                  plan.predicted_decode_tps);
    plan.warnings.push_back(Cat("host memory: ", FormatBytes(h.total()), " needed but ", FormatBytes(avail),
                                " of RAM available: ", FormatBytes(plan.host_paged_bytes),
                                " of the model's weights will be read from disk as they are used (", rates));
  }
}

Plan Planner::Finish(const Assignment& a, uint64_t cap, std::string why) const {
  Plan plan;
  const ModelConfig& c = in_.config;
  plan.has_gpu = !in_.devices.empty();
  for (const DeviceDesc& d : in_.devices) {
    plan.devices.push_back(d.name);
    plan.device += Cat(plan.device.empty() ? "" : "+", d.name);
  }
  if (plan.device.empty()) plan.device = "none";
  plan.vram_budget = cap;
  plan.n_ctx = in_.n_ctx;
  plan.prefill_batch = std::max(in_.prefill_batch, 1);
  plan.n_threads = in_.n_threads;
  plan.kv_elem_bytes = in_.kv_elem_bytes;
  plan.prompt_tokens = in_.prompt_tokens;
  plan.gen_tokens = in_.gen_tokens;
  plan.why = std::move(why);
  plan.rates_measured = in_.profile.kind == ProfileKind::kFull || in_.profile.kind == ProfileKind::kQuick;
  const Account acc = Measure(a);
  plan.gpu = acc.gpu;
  plan.device_accounts = acc.devices;
  plan.host = acc.host;
  plan.staging_slot_bytes = acc.slot;
  plan.cpu_repack = in_.cpu_repack;
  plan.host_ram_available = in_.host_ram_available;
  plan.disk_read_gbps = in_.profile.disk_read_gbps;
  // Mapped pages are the part of the account the kernel can drop and read again; they give way first.
  if (in_.host_ram_available > 0 && plan.host.total() > in_.host_ram_available) {
    plan.host_paged_bytes = std::min(plan.host.mapped, plan.host.total() - in_.host_ram_available);
  }
  // Of the mapped weights each unit reads, this share comes from disk (pages evicted and faulted in again).
  const double paged_share = plan.host.mapped > 0 ? static_cast<double>(plan.host_paged_bytes) /
                                                        static_cast<double>(plan.host.mapped)
                                                  : 0.0;
  const double disk_bytes_per_s = in_.profile.disk_read_gbps * 1e9;
  double disk_decode_bytes = 0;
  // Bytes from disk when unit i runs on the CPU in a phase doing `work`.
  auto disk_bytes = [&](size_t i, const UnitSpec& u, const CostQuery& q) -> double {
    if (paged_share == 0 || !ComputesFromMapping(a[i]) || u.weight_bytes == 0) return 0;
    const UnitWork w = WorkOf(u, q.n_tok, q.ctx, q.kv_elem_bytes, q.n_live);
    const double mapped_share = static_cast<double>(u.CpuMappedBytes(in_.cpu_repack)) /
                                static_cast<double>(u.weight_bytes);
    return paged_share * mapped_share * w.weight_bytes_read;
  };

  // The run's batches: a prompt shorter than a full batch goes as one batch of its own length.
  const uint64_t batch = static_cast<uint64_t>(n_eff_);
  const uint64_t act_row = static_cast<uint64_t>(c.n_embd) * sizeof(float);
  const uint64_t logits_row = static_cast<uint64_t>(c.n_vocab) * sizeof(float);
  double prefill_s = 0, decode_s = 0;
  uint64_t prefill_pcie = 0, decode_pcie = 0;
  // A prompt fills this many of them.
  const double report_chunks = static_cast<double>(std::max(in_.prompt_tokens, 1)) / static_cast<double>(batch);
  for (size_t i = 0; i < a.size(); ++i) {
    const UnitSpec& u = in_.units[i];
    UnitPlan up;
    up.name = u.name;
    up.kind = u.kind;
    up.layer = u.layer;
    up.prefill = a[i].prefill;
    up.decode = a[i].decode;
    up.device = AnyGpuSide(a[i]) ? a[i].device : 0;
    up.weight_bytes = u.weight_bytes;
    up.tensors = u.tensors;
    up.kv_bytes = kv(i);
    up.predicted_prefill_s =
        PrefillChunkSeconds(u, up.prefill, q_prefill_report_, report_chunks, c.n_layer, in_.profile);
    up.predicted_decode_s = UnitSeconds(u, up.decode, q_decode_, in_.profile);
    if (up.prefill == Placement::kCpu) {
      up.predicted_prefill_s += disk_bytes(i, u, q_prefill_report_) / disk_bytes_per_s;
    }
    if (up.decode == Placement::kCpu) {
      const double from_disk = disk_bytes(i, u, q_decode_);
      disk_decode_bytes += from_disk;
      up.predicted_decode_s += from_disk / disk_bytes_per_s;
    }
    prefill_s += up.predicted_prefill_s;
    decode_s += up.predicted_decode_s;
    if (up.prefill == Placement::kStream) prefill_pcie += u.weight_bytes;
    if (up.decode == Placement::kStream) decode_pcie += u.weight_bytes;
    // Device changes: activations cross between units (twice between two accelerators, through the host).
    if (i > 0) {
      const int cross_p = Crossings(DeviceAt(a[i - 1], a[i - 1].prefill), DeviceAt(a[i], a[i].prefill));
      const int cross_d = Crossings(DeviceAt(a[i - 1], a[i - 1].decode), DeviceAt(a[i], a[i].decode));
      prefill_pcie += cross_p * batch * act_row;
      prefill_s += cross_p * TransferSeconds(batch * act_row, in_.profile);
      decode_pcie += cross_d * act_row;
      decode_s += cross_d * TransferSeconds(act_row, in_.profile);
    }
    plan.units.push_back(std::move(up));
  }
  // The token ids and positions go to each accelerator that runs something in the phase.
  std::set<int> prefill_devices, decode_devices;
  for (const Option& o : a) {
    if (GpuSide(o.prefill)) prefill_devices.insert(o.device);
    if (GpuSide(o.decode)) decode_devices.insert(o.device);
  }
  prefill_pcie += prefill_devices.size() * batch * 2 * sizeof(int32_t);
  decode_pcie += decode_devices.size() * 2 * sizeof(int32_t);
  // Logits of the last prompt token / of each decoded token come back to the host.
  if (GpuSide(a.back().prefill)) {
    prefill_pcie += logits_row;
    prefill_s += TransferSeconds(logits_row, in_.profile);
  }
  if (GpuSide(a.back().decode)) {
    decode_pcie += logits_row;
    decode_s += TransferSeconds(logits_row, in_.profile);
  }
  plan.predicted_prefill_tps = prefill_s > 0 ? static_cast<double>(batch) / prefill_s : 0;
  plan.predicted_ttft_s = prefill_s * report_chunks;
  plan.predicted_decode_tps = decode_s > 0 ? 1.0 / decode_s : 0;
  plan.pcie_bytes_per_prefill_token = prefill_pcie / batch;
  plan.pcie_bytes_per_decode_token = decode_pcie;
  plan.disk_bytes_per_decode_token = static_cast<uint64_t>(disk_decode_bytes);
  if (c.n_ctx_train > 0 && in_.n_ctx > c.n_ctx_train) {
    plan.warnings.push_back(Cat("context: -c ", in_.n_ctx, " is past the ", c.n_ctx_train,
                                " positions the model was trained on; output past them may degrade"));
  }
  AddHostWarnings(plan);
  return plan;
}

std::string Breakdown(const MemoryAccount& m) {
  return Cat("weights ", FormatBytes(m.weights), ", KV ", FormatBytes(m.kv), ", staging ", FormatBytes(m.staging),
             ", activations ", FormatBytes(m.activations), ", workspace ", FormatBytes(m.workspace));
}

std::string DescribeCap(const PlacementRequest& req, uint64_t cap, uint64_t capacity) {
  if (req.vram_budget) return Cat("--vram-budget is ", FormatBytes(cap));
  return Cat("the device has ", FormatBytes(capacity), " (", FormatBytes(cap),
             " usable with 10% headroom; --vram-budget sets the cap exactly)");
}

// Rule placements per unit (nullopt: no rule). Checks that each rule matches something and needs no missing GPU.
absl::StatusOr<std::vector<std::optional<Option>>> ApplyRules(const PartitionInput& in) {
  std::vector<std::optional<Option>> fixed(in.units.size());
  const std::vector<PlaceRule>& rules = in.request.rules;
  for (const PlaceRule& r : rules) {
    bool any = false;
    for (const UnitSpec& u : in.units) {
      for (const std::string& t : u.tensors) any = any || r.Matches(t);
    }
    if (!any) return InvalidArgument("--place '", r.pattern, "=", PlacementName(r.target), "' matches no tensor");
    if (r.target != Placement::kCpu && in.devices.empty()) {
      return InvalidArgument("--place '", r.pattern, "=", PlacementName(r.target),
                             "' needs a GPU but there is no GPU device (--device sim:12GiB simulates one)");
    }
  }
  for (size_t i = 0; i < in.units.size(); ++i) {
    if (std::optional<size_t> r = FirstMatchingRule(rules, in.units[i].tensors)) {
      fixed[i] = Option{rules[*r].target, rules[*r].target};
    }
  }
  return fixed;
}

size_t RuleCount(const std::vector<std::optional<Option>>& fixed) {
  return static_cast<size_t>(std::count_if(fixed.begin(), fixed.end(), [](const auto& f) { return f.has_value(); }));
}

// ---- counts mode ----
// The accelerator of each layer: resident layers split over the accelerators in order, in proportion to their
// caps (earlier devices take earlier layers); everything else on the first.
std::vector<int> LayerDevices(const Planner& pl, const LayerCounts& counts, int n_layer) {
  std::vector<int> dev(n_layer, 1);
  const int n_dev = pl.n_devices();
  if (n_dev <= 1 || counts.gpu == 0) return dev;
  double total = 0;
  for (int d = 1; d <= n_dev; ++d) total += static_cast<double>(pl.cap(d));
  const int first = n_layer - counts.gpu;
  double cum = 0;
  int begin = first;
  for (int d = 1; d <= n_dev; ++d) {
    cum += static_cast<double>(pl.cap(d));
    const int end = d == n_dev ? n_layer : first + static_cast<int>(std::lround(counts.gpu * cum / total));
    for (int l = begin; l < end; ++l) dev[l] = d;
    begin = std::max(begin, end);
  }
  return dev;
}

Assignment CountsAssignment(const Planner& pl, const LayerCounts& counts,
                            const std::vector<std::optional<Option>>& fixed) {
  const PartitionInput& in = pl.in();
  Assignment a(in.units.size(), kCpuOpt);
  const int n_layer = in.config.n_layer;
  const std::vector<int> dev = LayerDevices(pl, counts, n_layer);
  for (size_t i = 0; i < in.units.size(); ++i) {
    const UnitSpec& u = in.units[i];
    Placement p = Placement::kCpu;
    int d = 1;
    if (u.layer >= 0) {
      p = counts.For(u.layer);
      d = dev[u.layer];
    } else if (u.kind == UnitKind::kOutput) {
      p = counts.For(n_layer - 1);
      d = dev[n_layer - 1];
    }
    a[i] = fixed[i].value_or(Option{p, p, d});
  }
  return a;
}

std::string DeviceName(const PartitionInput& in, int device) {
  return in.devices.size() > 1 ? Cat(" on ", in.devices[device - 1].name) : "";
}

absl::StatusOr<Plan> PartitionCounts(const Planner& pl, uint64_t capacity,
                                     const std::vector<std::optional<Option>>& fixed) {
  const PartitionInput& in = pl.in();
  TANDEM_ASSIGN_OR_RETURN(const LayerCounts counts,
                          ResolveCounts(in.request, in.config.n_layer, !in.devices.empty()));
  const Assignment a = CountsAssignment(pl, counts, fixed);
  TANDEM_RETURN_IF_ERROR(pl.CheckSupported(a));
  std::string why = Cat("counts: ", counts.cpu, " cpu, ", counts.stream, " stream, ", counts.gpu,
                        " gpu layers (cpu first, gpu last)");
  if (pl.n_devices() > 1) why += Cat(", resident layers split over ", pl.n_devices(), " devices");
  if (RuleCount(fixed) > 0) why += Cat("; --place rules fixed ", RuleCount(fixed), " units");
  const Planner::Account acc = pl.Measure(a);
  const int over = pl.Over(acc);
  if (over == 0) return pl.Finish(a, pl.cap(1), why);

  // Say what would fit: fewer resident layers (the rest on the CPU), else fewer streamed ones.
  const std::string asked = in.request.DescribeCounts();
  const MemoryAccount& need = acc.devices[over];
  const std::string head =
      Cat(asked, " needs ", FormatBytes(need.total()), " of VRAM", DeviceName(in, over), " (", Breakdown(need),
          ") but ", DescribeCap(in.request, pl.cap(over), over == 1 ? capacity : in.devices[over - 1].capacity));
  auto fits = [&](int gpu, int stream) {
    LayerCounts c{in.config.n_layer - gpu - stream, stream, gpu};
    return pl.Fits(CountsAssignment(pl, c, fixed));
  };
  if (counts.gpu > 0) {
    for (int g = counts.gpu - 1; g >= 0; --g) {
      if (fits(g, counts.stream)) {
        return absl::ResourceExhaustedError(Cat(head, "; at most ", g, " layers fit",
                                                counts.stream > 0 ? Cat(" with --stream-layers ", counts.stream) : ""));
      }
    }
  }
  if (counts.stream > 0) {
    for (int s = counts.stream - 1; s >= 0; --s) {
      if (fits(0, s)) {
        return absl::ResourceExhaustedError(Cat(head, "; at most ", s, " streamed layers fit (with no gpu layers)"));
      }
    }
  }
  return absl::ResourceExhaustedError(Cat(head, "; no layer fits on the GPU",
                                          RuleCount(fixed) > 0 ? " with these --place rules" : ""));
}

// ---- auto mode ----
struct Variant {
  Assignment a;
  double objective = std::numeric_limits<double>::infinity();
};

absl::StatusOr<Plan> PartitionAuto(const Planner& pl, uint64_t capacity,
                                   const std::vector<std::optional<Option>>& fixed) {
  const PartitionInput& in = pl.in();
  const size_t n = pl.size();
  const uint64_t cap = pl.cap(1);  // auto places on the first accelerator
  const bool has_gpu = !in.devices.empty();
  // Rules that put units on the GPU side must fit by themselves.
  uint64_t forced_slot = 0;
  Assignment rules_only(n, kCpuOpt);
  for (size_t i = 0; i < n; ++i) {
    if (fixed[i]) rules_only[i] = *fixed[i];
    if (fixed[i] && Streams(*fixed[i])) forced_slot = std::max(forced_slot, in.units[i].packed_bytes);
  }
  TANDEM_RETURN_IF_ERROR(pl.CheckSupported(rules_only));
  {
    const MemoryAccount g = pl.Measure(rules_only).gpu;
    if (g.total() > cap) {
      return absl::ResourceExhaustedError(Cat("--place rules need ", FormatBytes(g.total()), " of VRAM (",
                                              Breakdown(g), ") but ", DescribeCap(in.request, cap, capacity)));
    }
  }

  // Streaming thresholds: no streaming (or only what rules force), then each distinct unit size above it.
  std::set<uint64_t> thresholds = {forced_slot};
  if (has_gpu) {
    for (size_t i = 0; i < n; ++i) {
      if (!fixed[i] && in.units[i].kind != UnitKind::kEmbd && in.units[i].packed_bytes > forced_slot) {
        thresholds.insert(in.units[i].packed_bytes);
      }
    }
  }

  auto allowed_for = [&](const std::vector<bool>& resident, uint64_t slot, bool attn_stream) {
    std::vector<std::vector<Option>> allowed(n);
    for (size_t i = 0; i < n; ++i) {
      const UnitSpec& u = in.units[i];
      if (fixed[i]) {
        allowed[i] = {*fixed[i]};
      } else if (resident[i]) {
        allowed[i] = {kGpuOpt};
      } else if (u.kind == UnitKind::kEmbd || !has_gpu || !pl.Runs(i, 1)) {
        allowed[i] = {kCpuOpt};
      } else {
        const bool can_stream = slot > 0 && u.packed_bytes <= slot;
        allowed[i] = {kCpuOpt};
        if (can_stream && u.kind == UnitKind::kAttn && attn_stream) allowed[i].push_back(kStreamOpt);
        if (can_stream && u.kind != UnitKind::kAttn) {
          allowed[i].push_back({Placement::kStream, Placement::kCpu});
          allowed[i].push_back({Placement::kCpu, Placement::kStream});
          allowed[i].push_back(kStreamOpt);
        }
      }
    }
    return allowed;
  };
  // The cheapest feasible assignment for a resident set: streaming attention needs VRAM for its KV, so it is
  // dropped when the account would not fit.
  auto solve = [&](const std::vector<bool>& resident, uint64_t slot) -> std::optional<Assignment> {
    for (bool attn_stream : {true, false}) {
      Assignment a = pl.Solve(allowed_for(resident, slot, attn_stream));
      if (pl.Measure(a).gpu.total() <= cap) return a;
    }
    return std::nullopt;
  };

  Variant best;
  for (uint64_t slot : thresholds) {
    std::vector<bool> resident(n, false);
    uint64_t used = pl.base_bytes() + 2 * slot;
    for (size_t i = 0; i < n; ++i) {
      if (fixed[i] && AnyGpuSide(*fixed[i])) used += (Resident(*fixed[i]) ? in.units[i].packed_bytes : 0) + pl.kv(i);
    }
    if (has_gpu && used <= cap) {
      // Greedy by predicted seconds saved per VRAM byte.
      const std::vector<std::vector<Option>> nonres = allowed_for(resident, slot, true);
      struct Cand {
        size_t i;
        double gain;
        uint64_t bytes;
      };
      std::vector<Cand> cands;
      // Listed last layer first: between equal candidates the later layers become resident, as with counts.
      for (size_t i = n; i-- > 0;) {
        if (fixed[i] || in.units[i].kind == UnitKind::kEmbd || !pl.Runs(i, 1)) continue;
        double alt = std::numeric_limits<double>::infinity();
        for (const Option& o : nonres[i]) alt = std::min(alt, pl.Node(i, o));
        const double gain = alt - pl.Node(i, kGpuOpt);
        if (gain > 0) cands.push_back({i, gain, in.units[i].packed_bytes + pl.kv(i)});
      }
      std::stable_sort(cands.begin(), cands.end(), [](const Cand& x, const Cand& y) {
        return x.gain * static_cast<double>(std::max<uint64_t>(y.bytes, 1)) >
               y.gain * static_cast<double>(std::max<uint64_t>(x.bytes, 1));
      });
      for (const Cand& c : cands) {
        if (used + c.bytes <= cap) {
          resident[c.i] = true;
          used += c.bytes;
        }
      }
    }
    std::optional<Assignment> a = solve(resident, slot);
    if (!a) continue;
    double obj = pl.Objective(*a);
    // Residents that do not pay for their transfers are dropped (they matter for tiny models).
    for (size_t i = 0; i < n; ++i) {
      if (!resident[i]) continue;
      resident[i] = false;
      std::optional<Assignment> b = solve(resident, slot);
      const double ob = b ? pl.Objective(*b) : std::numeric_limits<double>::infinity();
      if (ob < obj) {
        a = std::move(b);
        obj = ob;
      } else {
        resident[i] = true;
      }
    }
    if (obj < best.objective) best = {std::move(*a), obj};
  }
  if (best.a.empty()) {
    // Nothing on the GPU side fits (the rules alone fit, checked above).
    best.a = rules_only;
  }

  size_t n_res = 0, n_sp = 0, n_sd = 0;
  for (const Option& o : best.a) {
    n_res += Resident(o);
    n_sp += o.prefill == Placement::kStream;
    n_sd += o.decode == Placement::kStream;
  }
  std::string why = has_gpu ? Cat("auto: ", n_res, " units resident, ", n_sp, " streamed in prefill, ", n_sd,
                                  " streamed in decode, for ", in.prompt_tokens, " prompt + ", in.gen_tokens,
                                  " generated tokens")
                            : "auto: no GPU device, everything on the CPU";
  if (in.devices.size() > 1) why += Cat(", on ", in.devices[0].name, " only (counts spread layers over devices)");
  if (RuleCount(fixed) > 0) why += Cat("; --place rules fixed ", RuleCount(fixed), " units");
  return pl.Finish(best.a, cap, why);
}

// The KV cache must fit somewhere: in the accelerators' caps and the available RAM together. Says the largest
// context that would, so the user need not search for it.
absl::Status CheckKvFits(const PartitionInput& in, const std::vector<uint64_t>& caps) {
  if (in.host_ram_available == 0) return absl::OkStatus();  // unknown RAM: nothing to hold it against
  uint64_t kv_per_position = 0;
  for (const UnitSpec& u : in.units) kv_per_position += u.KvBytes(1, in.kv_elem_bytes);
  if (kv_per_position == 0) return absl::OkStatus();
  uint64_t room = in.host_ram_available;
  for (uint64_t cap : caps) room += cap;
  const uint64_t need = kv_per_position * static_cast<uint64_t>(in.n_ctx);
  if (need <= room) return absl::OkStatus();
  const std::string where =
      in.devices.empty() ? Cat(FormatBytes(in.host_ram_available), " of RAM available")
                         : Cat(FormatBytes(room), " of VRAM cap and available RAM together");
  const uint64_t largest = room / kv_per_position;
  return absl::ResourceExhaustedError(Cat("-c ", in.n_ctx, " needs ", FormatBytes(need), " of KV cache but there is ",
                                          where, largest > 0 ? Cat("; the largest context that fits is -c ", largest)
                                                             : std::string("; no context fits")));
}

}  // namespace

uint64_t ActivationBytesEstimate(const ModelConfig& c, int64_t max_tokens) {
  return ActivationBytes(c, std::max<int64_t>(max_tokens, 1));  // exactly what the executor allocates
}

uint64_t GpuWorkspaceEstimate(const ModelConfig& c, int64_t max_tokens, int64_t n_ctx, int n_threads,
                              uint64_t library_bytes) {
  const uint64_t t = static_cast<uint64_t>(std::max<int64_t>(max_tokens, 1));
  const uint64_t max_cols = static_cast<uint64_t>(std::max({c.n_embd, c.n_ff, c.n_ff_expert, c.n_head * c.head_dim}));
  const uint64_t score_rows = static_cast<uint64_t>(std::max(kAttentionQueryTile * c.n_head, n_threads));
  const uint64_t scores = score_rows * static_cast<uint64_t>(std::max<int64_t>(n_ctx, 1)) * sizeof(float);
  // MoeExperts groups each batch's (token, expert) pairs in device memory.
  const uint64_t grouping = c.is_moe() ? cpu::MoeGroupingBytes(static_cast<int64_t>(t), c.n_expert, c.n_expert_used) : 0;
  return library_bytes + t * max_cols * sizeof(float) + scores + grouping;
}

uint64_t UnitBlockBytes(const UnitWeights& w) {
  constexpr uint64_t kAlign = 256;
  uint64_t off = 0;
  UnitWeights copy = w;
  copy.ForEach([&](WeightMatrix& m) { off = (off + m.bytes() + kAlign - 1) / kAlign * kAlign; });
  return off;
}

absl::StatusOr<Plan> Partition(const PartitionInput& in) {
  if (in.units.empty()) return InvalidArgument("the model has no units to place");
  if (in.n_ctx <= 0) return InvalidArgument("the context size must be > 0, got ", in.n_ctx);
  if (in.prefill_batch <= 0) return InvalidArgument("the batch size must be > 0, got ", in.prefill_batch);
  if (in.prompt_tokens < 0 || in.gen_tokens < 0) return InvalidArgument("token counts must be >= 0");
  if (in.kv_elem_bytes <= 0) return InvalidArgument("the KV element size must be > 0");
  // Each accelerator's cap; the first's capacity may come from the profile.
  std::vector<uint64_t> caps(in.devices.size() + 1, 0);
  uint64_t first_capacity = 0;
  for (size_t d = 0; d < in.devices.size(); ++d) {
    uint64_t capacity = in.devices[d].capacity;
    if (d == 0 && capacity == 0) capacity = in.profile.gpu_capacity_bytes;
    if (capacity == 0 && !in.request.vram_budget) {
      return InvalidArgument("the memory size of ", in.devices[d].name, " is unknown: give --vram-budget");
    }
    if (d == 0) first_capacity = capacity;
    caps[d + 1] = EffectiveVramCap(in.request, true, capacity);
  }
  TANDEM_RETURN_IF_ERROR(CheckKvFits(in, caps));
  TANDEM_ASSIGN_OR_RETURN(const std::vector<std::optional<Option>> fixed, ApplyRules(in));
  const Planner pl(in, std::move(caps));
  if (in.request.counts_given()) return PartitionCounts(pl, first_capacity, fixed);
  return PartitionAuto(pl, first_capacity, fixed);
}

}  // namespace tandem

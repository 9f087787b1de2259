#include "graph/partitioner.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <set>

#include "core/status.h"
#include "cpu_backend/kernels.h"
#include "graph/planner.h"

namespace tandem {
namespace partition_internal {

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
  plan.n_seq = in_.n_seq;
  plan.prefill_batch = std::max(in_.prefill_batch, 1);
  plan.n_threads = in_.n_threads;
  plan.kv_elem_bytes = in_.kv_elem_bytes;
  plan.prompt_tokens = in_.prompt_tokens;
  plan.gen_tokens = in_.gen_tokens;
  plan.why = std::move(why);
  plan.rates_measured = in_.profile.kind == ProfileKind::kFull || in_.profile.kind == ProfileKind::kQuick;
  plan.profile_others_cpu_share = in_.profile.others_cpu_share;
  if (cache_slots_ > 0) {
    int streaming = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!a[i].split()) continue;
      const std::vector<Placement> d = Where(i, a[i], Phase::kDecode);
      streaming += std::count(d.begin(), d.end(), Placement::kStream) > 0;
    }
    if (streaming > 0) cache_per_layer_ = static_cast<double>(cache_slots_) / streaming;
  }
  const Account acc = Measure(a);
  plan.gpu = acc.gpu;
  plan.device_accounts = acc.devices;
  plan.host = acc.host;
  plan.staging_slot_bytes = acc.slot;
  plan.expert_staging_bytes = acc.expert_staging;
  if (acc.expert_cache) {
    plan.expert_cache_bytes = cache_bytes_;
    plan.expert_cache_slots = cache_slots_;
    double picks = 0, hits = 0;  // decode's picks of streamed experts, and those expected in the cache
    for (size_t i = 0; i < a.size(); ++i) {
      if (!a[i].split()) continue;
      const std::vector<Placement> where = Where(i, a[i], Phase::kDecode);
      const std::vector<double> miss = CacheMisses(hot_share_[i], where);
      for (size_t j = 0; j < where.size(); ++j) {
        if (where[j] != Placement::kStream) continue;
        picks += hot_share_[i][j];
        hits += hot_share_[i][j] * (1 - miss[j]);
      }
    }
    plan.expected_cache_hit_rate = picks > 0 ? hits / picks : 0;
  }
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
    if (a[i].split()) {
      // Experts in hot order: the first `hot` resident, the others where the option's rest goes.
      const std::vector<int>& order = HotOrder(i);
      const std::vector<Placement> p = Where(i, a[i], Phase::kPrefill), d = Where(i, a[i], Phase::kDecode);
      up.experts.resize(order.size());
      for (size_t j = 0; j < order.size(); ++j) up.experts[order[j]] = ExpertPlacement{p[j], d[j]};
      up.expert_block_bytes = u.expert_block_bytes;
      const SplitCost pf = Split(i, a[i], Phase::kPrefill), dc = Split(i, a[i], Phase::kDecode);
      up.expected_gpu_hit_rate = dc.gpu_picks / std::max(c.n_expert_used, 1);
      up.predicted_prefill_s = pf.seconds;
      up.predicted_decode_s = dc.seconds;
      prefill_pcie += static_cast<uint64_t>(pf.pcie_bytes);
      decode_pcie += static_cast<uint64_t>(dc.pcie_bytes);
    } else {
      up.predicted_prefill_s =
          PrefillChunkSeconds(u, up.prefill, q_prefill_report_, report_chunks, c.n_layer, in_.profile);
      up.predicted_decode_s = UnitSeconds(u, up.decode, q_decode_, in_.profile);
    }
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
    if (!r.experts.empty()) {
      if (in.config.n_expert <= 0) return InvalidArgument("--place '", r.pattern, "@...': the model has no experts");
      if (r.experts.back() >= in.config.n_expert) {
        return InvalidArgument("--place '", r.pattern, "@...': expert ", r.experts.back(), " but the model has ",
                               in.config.n_expert, " (0-", in.config.n_expert - 1, ")");
      }
    }
    if (r.target != Placement::kCpu && in.devices.empty()) {
      return InvalidArgument("--place '", r.pattern, "=", PlacementName(r.target),
                             "' needs a GPU but there is no GPU device (--device sim:12GiB simulates one)");
    }
  }
  if (in.request.cpu_moe_layers && in.config.n_expert <= 0) {
    return InvalidArgument("--n-cpu-moe / --cpu-moe: the model has no experts");
  }
  auto spec = [](const PlaceRule& r) { return Cat(r.pattern, "=", PlacementName(r.target)); };
  for (size_t i = 0; i < in.units.size(); ++i) {
    const UnitSpec& u = in.units[i];
    const bool moe_ffn = u.kind == UnitKind::kFfn && u.expert_block_bytes > 0;
    // Whole-unit rules, tensor by tensor: each tensor's first matching rule. A unit runs in one place, so those
    // rules must agree on it; `first` is the earliest of them, before which expert rules take the unit.
    std::optional<size_t> first, decided;  // indices into `rules`
    std::string decided_tensor;
    for (const std::string& t : u.tensors) {
      std::optional<size_t> r;
      for (size_t k = 0; k < rules.size() && !r; ++k) {
        if (rules[k].experts.empty() && rules[k].Matches(t)) r = k;
      }
      if (!r) continue;
      first = std::min(first.value_or(*r), *r);
      if (!decided) {
        decided = r;
        decided_tensor = t;
      } else if (rules[*r].target != rules[*decided].target) {
        return InvalidArgument("--place '", spec(rules[*decided]), "' matches ", decided_tensor, " and '",
                               spec(rules[*r]), "' matches ", t, ", both of ", u.name, ", which runs in one place",
                               moe_ffn ? " (its experts can go elsewhere: REGEX@EXPERTS=...)" : "");
      }
    }
    // Expert rules before that: each named expert takes the first rule naming it; the layer's others compute on
    // the CPU.
    if (moe_ffn) {
      auto each = std::make_shared<std::vector<ExpertPlacement>>(in.config.n_expert);
      std::vector<bool> named(in.config.n_expert, false);
      bool any = false;
      for (size_t k = 0; k < first.value_or(rules.size()); ++k) {
        const PlaceRule& r = rules[k];
        if (r.experts.empty() ||
            !FirstMatchingRule(std::span<const PlaceRule>(&r, 1), std::span(u.tensors).first(u.owned_tensors))) {
          continue;
        }
        for (int e : r.experts) {
          if (named[e]) continue;
          named[e] = any = true;
          (*each)[e] = ExpertPlacement{r.target, r.target};
        }
      }
      if (any) {
        const bool gpu_side = std::any_of(each->begin(), each->end(), [](const ExpertPlacement& e) {
          return GpuSide(e.prefill) || GpuSide(e.decode);
        });
        fixed[i] = gpu_side ? Option{Placement::kGpu, Placement::kGpu, 1, -1, Placement::kCpu, Placement::kCpu,
                                     std::move(each)}
                            : kCpuOpt;
        continue;
      }
    }
    if (decided) {
      fixed[i] = Option{rules[*decided].target, rules[*decided].target};
    } else if (in.request.cpu_moe_layers && moe_ffn && u.layer < *in.request.cpu_moe_layers) {
      fixed[i] = kCpuOpt;
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
    Option o{p, p, d};
    // A streamed MoE layer copies only the experts its batch routes to: router resident, experts streamed.
    if (p == Placement::kStream && in.request.expert_level && pl.Splittable(i)) {
      o = SplitOpt(0, Placement::kStream, Placement::kStream);
      o.device = d;
    }
    a[i] = fixed[i].value_or(o);
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


// The KV cache must fit somewhere: in the accelerators' caps and the available RAM together. Says the largest
// context that would, so the user need not search for it.
absl::Status CheckKvFits(const PartitionInput& in, const std::vector<uint64_t>& caps) {
  if (in.host_ram_available == 0) return absl::OkStatus();  // unknown RAM: nothing to hold it against
  // Full-context layers grow with the context; windowed layers' rings stop growing at their window.
  uint64_t kv_per_position = 0, need = 0, rings = 0;
  for (const UnitSpec& u : in.units) {
    const uint64_t n_seq = static_cast<uint64_t>(in.n_seq);
    need += u.KvBytes(in.n_ctx, in.kv_elem_bytes, in.prefill_batch) * n_seq;
    if (u.kv_window > 0) {
      rings += u.KvBytes(in.n_ctx, in.kv_elem_bytes, in.prefill_batch) * n_seq;
    } else {
      kv_per_position += u.KvBytes(1, in.kv_elem_bytes, in.prefill_batch) * n_seq;
    }
  }
  if (need == 0) return absl::OkStatus();
  uint64_t room = in.host_ram_available;
  for (uint64_t cap : caps) room += cap;
  if (need <= room) return absl::OkStatus();
  const std::string where =
      in.devices.empty() ? Cat(FormatBytes(in.host_ram_available), " of RAM available")
                         : Cat(FormatBytes(room), " of VRAM cap and available RAM together");
  const uint64_t largest = kv_per_position == 0 || room < rings ? 0 : (room - rings) / kv_per_position;
  const std::string sequences = in.n_seq > 1 ? Cat(" for ", in.n_seq, " sequences") : "";
  return absl::ResourceExhaustedError(Cat("-c ", in.n_ctx, sequences, " needs ", FormatBytes(need),
                                          " of KV cache but there is ", where,
                                          largest > 0 ? Cat("; the largest context that fits is -c ", largest)
                                                      : std::string("; no context fits")));
}

}  // namespace partition_internal

using partition_internal::ApplyRules;
using partition_internal::CheckKvFits;
using partition_internal::kAttentionQueryTile;
using partition_internal::Option;
using partition_internal::PartitionAuto;
using partition_internal::PartitionCounts;
using partition_internal::Planner;

uint64_t ActivationBytesEstimate(const ModelConfig& c, int64_t max_tokens) {
  return ActivationBytes(c, std::max<int64_t>(max_tokens, 1));  // exactly what the executor allocates
}

uint64_t GpuWorkspaceEstimate(const ModelConfig& c, int64_t max_tokens, int64_t n_ctx, int n_threads,
                              uint64_t library_bytes) {
  const uint64_t t = static_cast<uint64_t>(std::max<int64_t>(max_tokens, 1));
  const uint64_t max_cols = static_cast<uint64_t>(std::max<int64_t>({c.n_embd, c.max_ff(), c.q_dim()}));
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
  if (in.n_seq <= 0) return InvalidArgument("the sequence count must be > 0, got ", in.n_seq);
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
  if (in.routing != nullptr) {
    TANDEM_RETURN_IF_ERROR(
        CheckRoutingMatches(*in.routing, in.config.n_layer, in.config.n_expert, in.config.n_expert_used));
  }
  TANDEM_ASSIGN_OR_RETURN(const std::vector<std::optional<Option>> fixed, ApplyRules(in));
  const Planner pl(in, std::move(caps));
  if (in.request.expert_cache) {
    if (in.config.n_expert <= 0) return InvalidArgument("--expert-cache: the model has no experts");
    if (pl.cache_slots() < in.config.n_expert_used) {
      return InvalidArgument("--expert-cache ", FormatBytes(*in.request.expert_cache), " holds ", pl.cache_slots(),
                             " experts, but a token routes to ", in.config.n_expert_used, ": give at least ",
                             FormatBytes(pl.CacheSlotBytes() * in.config.n_expert_used));
    }
  }
  if (in.request.counts_given()) return PartitionCounts(pl, first_capacity, fixed);
  return PartitionAuto(pl, first_capacity, fixed);
}

}  // namespace tandem

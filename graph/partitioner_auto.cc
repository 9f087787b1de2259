// Auto placement: for every streaming threshold, units (and single experts of split MoE layers) made resident
// greedily by time saved per VRAM byte, the rest placed per phase by an exact dynamic program over the unit chain;
// the cheapest variant for the expected mix wins (graph/partitioner.h says more).
#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <vector>

#include "core/status.h"
#include "graph/planner.h"

namespace tandem::partition_internal {

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

  // MoE FFN units placed expert by expert (PartitionInput::expert_level): the router resident, the hottest experts
  // resident as far as they pay, the rest on the CPU or streamed when routed. They use no unit staging slot.
  auto splits = [&](size_t i) { return in.request.expert_level && has_gpu && !fixed[i] && pl.Splittable(i) && pl.Runs(i, 1); };
  // Streaming thresholds: no streaming (or only what rules force), then each distinct unit size above it.
  std::set<uint64_t> thresholds = {forced_slot};
  if (has_gpu) {
    for (size_t i = 0; i < n; ++i) {
      if (!fixed[i] && in.units[i].kind != UnitKind::kEmbd && in.units[i].packed_bytes > forced_slot) {
        thresholds.insert(in.units[i].packed_bytes);
      }
    }
  }
  const std::vector<Placement> rest_all = {Placement::kCpu, Placement::kStream};
  const std::vector<Placement> rest_cpu = {Placement::kCpu};
  bool prefill_experts_stream = false;  // the variant being solved
  auto split_options = [&](int hot, bool expert_stream) {
    std::vector<Option> opts;
    for (Placement rp : expert_stream && prefill_experts_stream ? rest_all : rest_cpu) {
      for (Placement rd : expert_stream ? rest_all : rest_cpu) opts.push_back(SplitOpt(hot, rp, rd));
    }
    return opts;
  };

  auto allowed_for = [&](const std::vector<bool>& resident, const std::vector<int>& hot, uint64_t slot,
                         bool attn_stream, bool expert_stream) {
    std::vector<std::vector<Option>> allowed(n);
    for (size_t i = 0; i < n; ++i) {
      const UnitSpec& u = in.units[i];
      if (fixed[i]) {
        allowed[i] = {*fixed[i]};
      } else if (splits(i)) {
        if (hot[i] == 0) {
          // With no expert resident the whole layer may still stream, its next copy overlapping this compute:
          // in prefill, where a batch routes to nearly every expert, that can beat copying them after routing.
          allowed[i] = {kCpuOpt};
          if (slot > 0 && u.packed_bytes <= slot) {
            allowed[i].push_back({Placement::kStream, Placement::kCpu});
            allowed[i].push_back(kStreamOpt);
          }
        }
        for (const Option& o : split_options(hot[i], expert_stream)) allowed[i].push_back(o);
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
  // The cheapest feasible assignment for a resident set: streaming attention needs VRAM for its KV, and streamed
  // experts a staging buffer, so each is dropped when the account would not fit.
  auto solve = [&](const std::vector<bool>& resident, const std::vector<int>& hot,
                   uint64_t slot) -> std::optional<Assignment> {
    for (bool expert_stream : {true, false}) {
      for (bool attn_stream : {true, false}) {
        Assignment a = pl.Solve(allowed_for(resident, hot, slot, attn_stream, expert_stream));
        if (pl.Measure(a).gpu.total() <= cap) return a;
      }
    }
    return std::nullopt;
  };
  // A split unit's best mix-weighted seconds with `hot` resident experts (the CPU-only unit too when hot is 0).
  auto split_best = [&](size_t i, int hot) {
    double t = hot == 0 ? pl.Node(i, kCpuOpt) : std::numeric_limits<double>::infinity();
    for (const Option& o : split_options(hot, true)) t = std::min(t, pl.Node(i, o));
    return t;
  };

  // Split layers stream their experts in decode (top-k of them at most) or in prefill too (a batch can route to
  // all of them): two variants, each with its expert staging held back before the greedy fills VRAM.
  uint64_t decode_reserve = 0, prefill_reserve = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!splits(i)) continue;
    decode_reserve = std::max(decode_reserve, pl.ExpertStagingBytes(i, SplitOpt(0, Placement::kCpu, Placement::kStream)));
    prefill_reserve =
        std::max(prefill_reserve, pl.ExpertStagingBytes(i, SplitOpt(0, Placement::kStream, Placement::kStream)));
  }
  std::vector<std::pair<uint64_t, bool>> variants;  // (unit staging threshold, experts streamed in prefill)
  for (uint64_t slot : thresholds) {
    variants.push_back({slot, false});
    if (prefill_reserve > decode_reserve) variants.push_back({slot, true});
  }

  Variant best;
  for (const auto& [slot, expert_prefill_stream] : variants) {
    prefill_experts_stream = expert_prefill_stream;
    std::vector<bool> resident(n, false);
    std::vector<int> hot(n, 0);
    // An expert cache the user asked for is held back too: decode streams into it.
    uint64_t used = pl.base_bytes() + 2 * slot + (expert_prefill_stream ? prefill_reserve : decode_reserve) +
                    pl.cache_bytes();
    for (size_t i = 0; i < n; ++i) {
      if (fixed[i] && fixed[i]->split()) {
        used += in.units[i].own_packed_bytes + pl.Tally(i, *fixed[i]).resident * in.units[i].expert_block_bytes;
      } else if (fixed[i] && AnyGpuSide(*fixed[i])) {
        used += (Resident(*fixed[i]) ? in.units[i].packed_bytes : 0) + pl.kv(i);
      }
      if (splits(i)) used += in.units[i].own_packed_bytes;
    }
    if (has_gpu && used <= cap) {
      // Greedy by predicted seconds saved per VRAM byte: whole units, and one more hot expert of a split layer
      // (whose gain is taken again after each step, as the layer's CPU and GPU sides rebalance).
      const std::vector<std::vector<Option>> nonres = allowed_for(resident, hot, slot, true, true);
      struct Cand {
        size_t i;
        double gain;
        uint64_t bytes;
      };
      std::vector<Cand> cands;
      // Listed last layer first: between equal candidates the later layers become resident, as with counts.
      for (size_t i = n; i-- > 0;) {
        if (fixed[i] || splits(i) || in.units[i].kind == UnitKind::kEmbd || !pl.Runs(i, 1)) continue;
        double alt = std::numeric_limits<double>::infinity();
        for (const Option& o : nonres[i]) alt = std::min(alt, pl.Node(i, o));
        const double gain = alt - pl.Node(i, kGpuOpt);
        if (gain > 0) cands.push_back({i, gain, in.units[i].packed_bytes + pl.kv(i)});
      }
      auto better = [](const Cand& x, const Cand& y) {
        return x.gain * static_cast<double>(std::max<uint64_t>(y.bytes, 1)) >
               y.gain * static_cast<double>(std::max<uint64_t>(x.bytes, 1));
      };
      std::stable_sort(cands.begin(), cands.end(), better);
      // Per split unit, its next step: one more hot expert, or all the rest at once when that saves more per byte
      // (a layer whose experts are all resident needs no routing back and no CPU side: tiny experts pay only so).
      struct ExpertStep {
        size_t i;
        double gain;
        uint64_t bytes;
        int steps;
      };
      std::vector<double> now(n, 0);
      auto step_of = [&](size_t i, bool single) {
        const int left = static_cast<int>(pl.HotShare(i).size()) - hot[i];
        const uint64_t block = in.units[i].expert_block_bytes;
        ExpertStep one{i, now[i] - split_best(i, hot[i] + 1), block, 1};
        if (single || left <= 1) return one;
        ExpertStep all{i, now[i] - split_best(i, hot[i] + left), block * left, left};
        return better(Cand{i, all.gain, all.bytes}, Cand{i, one.gain, one.bytes}) ? all : one;
      };
      std::vector<ExpertStep> next_expert;
      for (size_t i = n; i-- > 0;) {
        if (!splits(i)) continue;
        now[i] = split_best(i, 0);
        next_expert.push_back(step_of(i, false));
      }
      size_t next_unit = 0;
      while (true) {
        auto e = std::min_element(next_expert.begin(), next_expert.end(), [&](const ExpertStep& x, const ExpertStep& y) {
          return better(Cand{x.i, x.gain, x.bytes}, Cand{y.i, y.gain, y.bytes});
        });
        const bool unit_left = next_unit < cands.size();
        const bool expert_left = e != next_expert.end() && e->gain > 0;
        if (!unit_left && !expert_left) break;
        if (unit_left && (!expert_left || !better(Cand{e->i, e->gain, e->bytes}, cands[next_unit]))) {
          const Cand& c = cands[next_unit++];
          if (used + c.bytes <= cap) {
            resident[c.i] = true;
            used += c.bytes;
          }
          continue;
        }
        const size_t i = e->i;
        if (used + e->bytes > cap) {
          if (e->steps > 1) {
            *e = step_of(i, true);
          } else {  // every expert of a model is one size: none fits any more
            next_expert.clear();
          }
          continue;
        }
        used += e->bytes;
        hot[i] += e->steps;
        now[i] = split_best(i, hot[i]);
        if (hot[i] >= static_cast<int>(pl.HotShare(i).size())) {
          next_expert.erase(e);
        } else {
          *e = step_of(i, false);
        }
      }
    }
    std::optional<Assignment> a = solve(resident, hot, slot);
    if (!a) continue;
    double obj = pl.Objective(*a);
    // Residents that do not pay for their transfers are dropped (they matter for tiny models).
    for (size_t i = 0; i < n; ++i) {
      if (!resident[i]) continue;
      resident[i] = false;
      std::optional<Assignment> b = solve(resident, hot, slot);
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

  size_t n_res = 0, n_sp = 0, n_sd = 0, n_split = 0, n_hot = 0;
  for (const Option& o : best.a) {
    n_res += Resident(o);
    n_sp += o.prefill == Placement::kStream;
    n_sd += o.decode == Placement::kStream;
    n_split += o.split();
    n_hot += o.split() ? o.hot : 0;
  }
  std::string why = has_gpu ? Cat("auto: ", n_res, " units resident, ", n_sp, " streamed in prefill, ", n_sd,
                                  " streamed in decode",
                                  n_split > 0 ? Cat(", ", n_split, " MoE layers split by expert (", n_hot,
                                                    " experts resident)")
                                              : "",
                                  ", for ", in.prompt_tokens, " prompt + ", in.gen_tokens, " generated tokens")
                            : "auto: no GPU device, everything on the CPU";
  if (in.devices.size() > 1) why += Cat(", on ", in.devices[0].name, " only (counts spread layers over devices)");
  if (RuleCount(fixed) > 0) why += Cat("; --place rules fixed ", RuleCount(fixed), " units");
  return pl.Finish(best.a, cap, why);
}

}  // namespace tandem::partition_internal

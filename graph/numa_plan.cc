#include "graph/numa_plan.h"

#include <algorithm>

#include "core/status.h"
#include "cpu_backend/thread_pinning.h"

namespace tandem {
namespace {

// Picks the workers: one per physical core, its first PU; when fewer are wanted, cores are taken one per node
// in turn so that every node keeps threads for as long as possible. Fills each node's thread range.
void ChooseWorkers(const Topology& topo, int max_threads, NumaPlan& plan) {
  const auto& nodes = topo.nodes();
  const int total = topo.n_cores();
  const int want = max_threads > 0 ? std::min(max_threads, total) : total;
  std::vector<size_t> taken(nodes.size(), 0);
  int n = 0;
  for (size_t round = 0; n < want; ++round) {
    for (size_t i = 0; i < nodes.size() && n < want; ++i) {
      if (round < nodes[i].cores.size()) {
        ++taken[i];
        ++n;
      }
    }
  }
  plan.nodes.assign(nodes.size(), NumaNodeShare{});
  for (size_t i = 0; i < nodes.size(); ++i) {
    plan.nodes[i].first_thread = static_cast<int>(plan.workers.size());
    plan.nodes[i].n_threads = static_cast<int>(taken[i]);
    for (size_t c = 0; c < taken[i]; ++c) {
      const TopoCore& core = nodes[i].cores[c];
      plan.workers.push_back(NumaWorker{.node = static_cast<int>(i), .core = core.logical_index, .pu = core.pus[0]});
    }
  }
}

// Nodes that can hold and run weights: with workers and memory. When no node reports its memory, hwloc did not
// know it, and every node with workers counts.
std::vector<int> ShardNodes(const Topology& topo, const NumaPlan& plan) {
  std::vector<int> with_memory, with_threads;
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    if (plan.nodes[i].n_threads == 0) continue;
    with_threads.push_back(static_cast<int>(i));
    if (topo.nodes()[i].memory_bytes > 0) with_memory.push_back(static_cast<int>(i));
  }
  return topo.total_memory() > 0 ? with_memory : with_threads;
}

// Rows of a dense tensor per node: boundaries at the nodes' cumulative thread share, rounded to the nearest
// multiple of `align`; the last boundary is the tensor's end.
std::vector<int64_t> RowBounds(int64_t rows, const std::vector<int>& threads, int64_t align) {
  int64_t total = 0;
  for (int t : threads) total += t;
  std::vector<int64_t> bounds = {0};
  int64_t cum = 0;
  for (size_t k = 0; k + 1 < threads.size(); ++k) {
    cum += threads[k];
    const int64_t unit = total * align;
    int64_t b = (rows * cum + unit / 2) / unit * align;
    b = std::clamp(b, bounds.back(), rows);
    bounds.push_back(b);
  }
  bounds.push_back(rows);
  return bounds;
}

absl::Status CheckTensor(const WeightTensor& t) {
  if (t.rows < 1) return InvalidArgument("tensor ", t.name, " has ", t.rows, " rows");
  const uint64_t slices = t.is_expert() ? static_cast<uint64_t>(t.n_experts) : 1;
  if (t.bytes % slices != 0 || (t.bytes / slices) % static_cast<uint64_t>(t.rows) != 0) {
    return InvalidArgument("tensor ", t.name, ": ", t.bytes, " bytes do not split into ", slices, " x ", t.rows,
                           " equal rows");
  }
  return absl::OkStatus();
}

// One placement per expert slice (or one for a whole dense tensor), all on `node`.
void PlaceWhole(int ti, const WeightTensor& t, int node, NumaPlan& plan) {
  if (!t.is_expert()) {
    plan.placements.push_back(NumaPlacement{.tensor = ti, .row_begin = 0, .row_end = t.rows, .offset = 0,
                                            .bytes = t.bytes, .node = node});
    return;
  }
  const uint64_t slice = t.bytes / static_cast<uint64_t>(t.n_experts);
  for (int i = 0; i < t.n_experts; ++i) {
    plan.placements.push_back(NumaPlacement{.tensor = ti, .expert = t.first_expert + i, .row_begin = 0,
                                            .row_end = t.rows, .offset = slice * i, .bytes = slice, .node = node});
  }
}

void PlanShard(const std::vector<int>& shard_nodes, int row_align, NumaPlan& plan) {
  std::vector<int> threads;
  for (int n : shard_nodes) threads.push_back(plan.nodes[n].n_threads);

  // Experts: each (layer, expert) unit (its gate, up and down slices together) goes whole to the node whose
  // load, counted in bytes per thread, stays lowest after taking it. With equal nodes and equal experts this is
  // round-robin; with uneven nodes it follows their thread counts.
  std::map<std::pair<int, int>, uint64_t> unit_bytes;
  for (const WeightTensor& t : plan.tensors) {
    for (int i = 0; t.is_expert() && i < t.n_experts; ++i) {
      unit_bytes[{t.layer, t.first_expert + i}] += t.bytes / static_cast<uint64_t>(t.n_experts);
    }
  }
  std::vector<uint64_t> load(shard_nodes.size(), 0);
  for (const auto& [unit, bytes] : unit_bytes) {
    size_t best = 0;
    for (size_t k = 1; k < shard_nodes.size(); ++k) {
      // (load[k] + bytes) / threads[k] < (load[best] + bytes) / threads[best], without rounding.
      const unsigned __int128 lhs = static_cast<unsigned __int128>(load[k] + bytes) * threads[best];
      const unsigned __int128 rhs = static_cast<unsigned __int128>(load[best] + bytes) * threads[k];
      if (lhs < rhs) best = k;
    }
    load[best] += bytes;
    plan.expert_nodes[unit] = shard_nodes[best];
  }

  for (size_t ti = 0; ti < plan.tensors.size(); ++ti) {
    const WeightTensor& t = plan.tensors[ti];
    const int tensor = static_cast<int>(ti);
    if (t.is_expert()) {
      const uint64_t slice = t.bytes / static_cast<uint64_t>(t.n_experts);
      for (int i = 0; i < t.n_experts; ++i) {
        const int expert = t.first_expert + i;
        plan.placements.push_back(NumaPlacement{.tensor = tensor, .expert = expert, .row_begin = 0,
                                                .row_end = t.rows, .offset = slice * i, .bytes = slice,
                                                .node = plan.expert_nodes.at({t.layer, expert})});
      }
      continue;
    }
    const uint64_t row_bytes = t.bytes / static_cast<uint64_t>(t.rows);
    const std::vector<int64_t> bounds = RowBounds(t.rows, threads, row_align);
    for (size_t k = 0; k < shard_nodes.size(); ++k) {
      if (bounds[k + 1] == bounds[k]) continue;
      plan.placements.push_back(NumaPlacement{
          .tensor = tensor, .row_begin = bounds[k], .row_end = bounds[k + 1],
          .offset = row_bytes * static_cast<uint64_t>(bounds[k]),
          .bytes = row_bytes * static_cast<uint64_t>(bounds[k + 1] - bounds[k]), .node = shard_nodes[k]});
    }
  }
}

}  // namespace

absl::StatusOr<NumaPolicy> ParseNumaPolicy(std::string_view name) {
  if (name == "auto") return NumaPolicy::kAuto;
  if (name == "off") return NumaPolicy::kOff;
  if (name == "interleave") return NumaPolicy::kInterleave;
  if (name == "shard") return NumaPolicy::kShard;
  return InvalidArgument("--numa must be auto, off, interleave or shard, got '", name, "'");
}

std::string_view NumaPolicyName(NumaPolicy p) {
  switch (p) {
    case NumaPolicy::kAuto: return "auto";
    case NumaPolicy::kOff: return "off";
    case NumaPolicy::kInterleave: return "interleave";
    case NumaPolicy::kShard: return "shard";
  }
  return "?";
}

namespace {

// One tensor as its schema entry describes it: an expert stack holds one slice per expert, the last dimension; a
// tensor of the per-expert spelling is one expert's.
WeightTensor WeightTensorOf(const GgufTensorInfo& info, const TensorClaim* claim, const TensorEntry* entry) {
  WeightTensor t{.name = info.name, .bytes = info.nbytes, .rows = info.ne[1] * info.ne[2] * info.ne[3],
                 .layer = claim != nullptr ? claim->layer : -1};
  if (entry == nullptr || !entry->expert_stack()) return t;
  if (claim->expert >= 0) {
    t.n_experts = 1;
    t.first_expert = claim->expert;
    return t;
  }
  t.n_experts = static_cast<int>(info.ne[std::max(info.n_dims, 1) - 1]);
  t.rows = 1;
  for (int d = 1; d + 1 < info.n_dims; ++d) t.rows *= info.ne[d];
  return t;
}

}  // namespace

std::vector<WeightTensor> WeightTensorsOf(const ModelSchema& model) {
  const std::span<const GgufTensorInfo> tensors = model.match.tensors();
  std::vector<WeightTensor> out;
  out.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorClaim& claim = model.match.claim(i);
    out.push_back(WeightTensorOf(tensors[i], &claim, &model.match.schema()[claim.entry]));
  }
  return out;
}

std::vector<WeightTensor> WeightTensorsOf(std::span<const GgufTensorInfo> tensors, const ModelConfig& cfg) {
  const Architecture* arch = FindArchitecture(cfg.arch);
  std::vector<WeightTensor> out;
  out.reserve(tensors.size());
  for (const GgufTensorInfo& info : tensors) {
    const std::optional<TensorClaim> claim = arch != nullptr ? ClaimTensorName(arch->schema(), info.name) : std::nullopt;
    out.push_back(WeightTensorOf(info, claim ? &*claim : nullptr, claim ? &arch->schema()[claim->entry] : nullptr));
  }
  return out;
}

std::vector<int> NumaPlan::WorkerPus() const {
  std::vector<int> pus;
  for (const NumaWorker& w : workers) pus.push_back(w.pu);
  return pus;
}

int NumaPlan::ExpertNode(int layer, int expert) const {
  const auto it = expert_nodes.find({layer, expert});
  return it == expert_nodes.end() ? -1 : it->second;
}

absl::StatusOr<NumaPlan> PlanNuma(const Topology& topo, std::vector<WeightTensor> tensors,
                                  const NumaPlanOptions& opts) {
  if (opts.row_align < 1) return InvalidArgument("row alignment must be at least 1, got ", opts.row_align);
  if (opts.max_threads < 0) return InvalidArgument("thread count must not be negative, got ", opts.max_threads);
  for (const WeightTensor& t : tensors) TANDEM_RETURN_IF_ERROR(CheckTensor(t));

  NumaPlan plan;
  plan.tensors = std::move(tensors);
  ChooseWorkers(topo, opts.max_threads, plan);
  const std::vector<int> shard_nodes = ShardNodes(topo, plan);
  plan.policy = opts.policy;
  if (plan.policy == NumaPolicy::kAuto) plan.policy = shard_nodes.size() > 1 ? NumaPolicy::kShard : NumaPolicy::kOff;
  // One node leaves nothing to shard: it is the same as off.
  if (plan.policy == NumaPolicy::kShard && shard_nodes.size() <= 1) plan.policy = NumaPolicy::kOff;

  if (plan.policy == NumaPolicy::kShard) {
    PlanShard(shard_nodes, opts.row_align, plan);
  } else {
    const int node = plan.policy == NumaPolicy::kInterleave ? kInterleavedNode : 0;
    for (size_t ti = 0; ti < plan.tensors.size(); ++ti) PlaceWhole(static_cast<int>(ti), plan.tensors[ti], node, plan);
  }
  for (const NumaPlacement& p : plan.placements) {
    if (p.node >= 0) plan.nodes[p.node].bytes += p.bytes;
  }
  return plan;
}

absl::StatusOr<std::vector<MemoryRegion>> NumaMemoryRegions(const NumaPlan& plan, const GgufFile& file) {
  std::vector<MemoryRegion> regions;
  if (plan.policy == NumaPolicy::kOff) return regions;
  for (const NumaPlacement& p : plan.placements) {
    const WeightTensor& t = plan.tensors.at(p.tensor);
    const GgufTensorInfo* info = file.FindTensor(t.name);
    if (info == nullptr) return InvalidArgument("the NUMA plan names tensor ", t.name, ", which the file lacks");
    if (p.offset + p.bytes > info->nbytes) {
      return InvalidArgument("the NUMA plan places bytes [", p.offset, ", ", p.offset + p.bytes, ") of ", t.name,
                             ", which has ", info->nbytes);
    }
    const uint8_t* addr = file.TensorData(*info) + p.offset;
    // Neighbours bound to the same node are one range: fewer calls, and no page lost between them.
    if (!regions.empty() && regions.back().node == p.node &&
        static_cast<const uint8_t*>(regions.back().addr) + regions.back().bytes == addr) {
      regions.back().bytes += p.bytes;
    } else {
      regions.push_back(MemoryRegion{.addr = addr, .bytes = p.bytes, .node = p.node});
    }
  }
  return regions;
}

std::vector<MemoryRegion> CopyRegions(std::span<const MemoryRegion> file_regions, const WeightMatrix& original,
                                      const void* copy, int64_t group_rows, size_t group_bytes) {
  std::vector<MemoryRegion> out;
  const auto base = reinterpret_cast<uintptr_t>(original.data);
  const size_t stride = original.row_stride;
  if (stride == 0 || original.rows <= 0 || group_rows <= 0) return out;
  const uintptr_t end = base + static_cast<size_t>(original.rows) * stride;
  const int64_t n_groups = (original.rows + group_rows - 1) / group_rows;
  int64_t next_group = 0;  // groups already given a node: a group straddling two regions keeps the first
  for (const MemoryRegion& r : file_regions) {
    const auto lo = std::max(base, reinterpret_cast<uintptr_t>(r.addr));
    const auto hi = std::min(end, reinterpret_cast<uintptr_t>(r.addr) + r.bytes);
    if (lo >= hi) continue;
    const auto first_row = static_cast<int64_t>((lo - base) / stride);
    const auto last_row = static_cast<int64_t>((hi - base + stride - 1) / stride);  // exclusive
    const int64_t g0 = std::max(next_group, first_row / group_rows);
    const int64_t g1 = std::min(n_groups, (last_row + group_rows - 1) / group_rows);
    if (g0 >= g1) continue;
    const uint8_t* addr = static_cast<const uint8_t*>(copy) + static_cast<size_t>(g0) * group_bytes;
    const size_t bytes = static_cast<size_t>(g1 - g0) * group_bytes;
    const bool continues = !out.empty() && out.back().node == r.node &&
                           static_cast<const uint8_t*>(out.back().addr) + out.back().bytes == addr;
    if (continues) {
      out.back().bytes += bytes;
    } else {
      out.push_back(MemoryRegion{.addr = addr, .bytes = bytes, .node = r.node});
    }
    next_group = g1;
  }
  return out;
}

absl::StatusOr<MembindReport> ApplyNumaPlan(const Topology& topo, const NumaPlan& plan, const GgufFile& file,
                                            const MembindOptions& opts) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<MemoryRegion> regions, NumaMemoryRegions(plan, file));
  TANDEM_ASSIGN_OR_RETURN(MembindReport report, BindRegions(topo, regions, opts));
  const std::vector<int> pus = plan.WorkerPus();
  TANDEM_RETURN_IF_ERROR(PinOpenMpThreads(topo, pus));
  return report;
}

}  // namespace tandem

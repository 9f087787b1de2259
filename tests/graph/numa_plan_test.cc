// PlanNuma on synthetic and saved topologies, for a Mixtral-8x7B-shaped tensor list (built here, Q4_K sizes)
// and for tests/data/models/tiny-mixtral-Q4_0.gguf. The invariants are checked from the plan's output alone:
// every expert's bytes on exactly one node, bytes conserved, dense rows covered once, one pinned worker per
// physical core; balance is held to a bound derived from the unit sizes.
#include "graph/numa_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/dtype.h"
#include "cpu_backend/repack.h"
#include "cpu_backend/thread_pinning.h"
#include "arch/arch.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

std::unique_ptr<Topology> Load(absl::StatusOr<std::unique_ptr<Topology>> t) {
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}
std::unique_ptr<Topology> Xml(const std::string& file) {
  return Load(Topology::FromXmlFile(test::DataPath("topology/" + file)));
}

GgufTensorInfo Info(const std::string& name, DType type, std::vector<int64_t> ne) {
  GgufTensorInfo t;
  t.name = name;
  t.type = type;
  t.n_dims = static_cast<int>(ne.size());
  int64_t rows = 1;
  for (size_t i = 0; i < ne.size(); ++i) {
    t.ne[i] = ne[i];
    if (i > 0) rows *= ne[i];
  }
  t.nbytes = RowBytes(type, ne[0]) * static_cast<uint64_t>(rows);
  return t;
}

// Mixtral-8x7B's tensors with every matrix in Q4_K (norms and the router F32), as in a GGUF file.
std::vector<GgufTensorInfo> MixtralShaped(ModelConfig& cfg) {
  cfg.arch = "llama";
  cfg.n_layer = 32;
  cfg.n_embd = 4096;
  cfg.n_ff = 14336;
  cfg.n_expert = 8;
  cfg.n_expert_used = 2;
  const int64_t E = 4096, F = 14336, V = 32000, KV = 1024, X = 8;
  std::vector<GgufTensorInfo> t = {Info("token_embd.weight", DType::kQ4_K, {E, V})};
  for (int l = 0; l < 32; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    t.push_back(Info(p + "attn_norm.weight", DType::kF32, {E}));
    t.push_back(Info(p + "attn_q.weight", DType::kQ4_K, {E, E}));
    t.push_back(Info(p + "attn_k.weight", DType::kQ4_K, {E, KV}));
    t.push_back(Info(p + "attn_v.weight", DType::kQ4_K, {E, KV}));
    t.push_back(Info(p + "attn_output.weight", DType::kQ4_K, {E, E}));
    t.push_back(Info(p + "ffn_norm.weight", DType::kF32, {E}));
    t.push_back(Info(p + "ffn_gate_inp.weight", DType::kF32, {E, X}));
    t.push_back(Info(p + "ffn_gate_exps.weight", DType::kQ4_K, {E, F, X}));
    t.push_back(Info(p + "ffn_up_exps.weight", DType::kQ4_K, {E, F, X}));
    t.push_back(Info(p + "ffn_down_exps.weight", DType::kQ4_K, {F, E, X}));
  }
  t.push_back(Info("output_norm.weight", DType::kF32, {E}));
  t.push_back(Info("output.weight", DType::kQ4_K, {E, V}));
  return t;
}

uint64_t TotalBytes(const std::vector<WeightTensor>& ts) {
  uint64_t b = 0;
  for (const WeightTensor& t : ts) b += t.bytes;
  return b;
}

// The node (index) holding each PU, read from the topology.
std::map<int, int> PuNode(const Topology& topo) {
  std::map<int, int> m;
  for (size_t i = 0; i < topo.nodes().size(); ++i) {
    for (const TopoCore& c : topo.nodes()[i].cores) {
      for (int pu : c.pus) m[pu] = static_cast<int>(i);
    }
  }
  return m;
}

// Invariants every plan keeps, whatever the policy.
void CheckPlan(const Topology& topo, const NumaPlan& plan, int row_align = 16) {
  ASSERT_NE(plan.policy, NumaPolicy::kAuto);
  const int n_nodes = static_cast<int>(topo.nodes().size());
  ASSERT_EQ(plan.nodes.size(), topo.nodes().size());

  // Bytes: each tensor's placements tile [0, bytes) in order, so nothing is lost or placed twice.
  std::vector<uint64_t> next(plan.tensors.size(), 0);
  std::vector<uint64_t> per_node(n_nodes, 0);
  uint64_t placed = 0;
  for (const NumaPlacement& p : plan.placements) {
    ASSERT_GE(p.tensor, 0);
    ASSERT_LT(p.tensor, static_cast<int>(plan.tensors.size()));
    EXPECT_EQ(p.offset, next[p.tensor]) << plan.tensors[p.tensor].name;
    next[p.tensor] = p.offset + p.bytes;
    EXPECT_GT(p.bytes, 0u);
    placed += p.bytes;
    if (plan.policy == NumaPolicy::kInterleave) {
      EXPECT_EQ(p.node, kInterleavedNode);
    } else {
      ASSERT_GE(p.node, 0);
      ASSERT_LT(p.node, n_nodes);
      per_node[p.node] += p.bytes;
    }
    if (plan.policy == NumaPolicy::kOff) {
      EXPECT_EQ(p.node, 0);
    }
  }
  for (size_t i = 0; i < plan.tensors.size(); ++i) EXPECT_EQ(next[i], plan.tensors[i].bytes) << plan.tensors[i].name;
  EXPECT_EQ(placed, TotalBytes(plan.tensors));
  for (int k = 0; k < n_nodes; ++k) {
    EXPECT_EQ(plan.nodes[k].bytes, plan.policy == NumaPolicy::kInterleave ? 0 : per_node[k]);
  }

  // Experts: one placement per slice, and all of an expert's slices (gate, up, down) on one node.
  std::map<std::pair<int, int>, std::set<int>> expert_nodes;
  std::map<std::pair<int, int>, int> slices;
  for (const NumaPlacement& p : plan.placements) {
    const WeightTensor& t = plan.tensors[p.tensor];
    if (!t.is_expert()) {
      EXPECT_EQ(p.expert, -1);
      continue;
    }
    EXPECT_EQ(p.bytes, t.bytes / t.n_experts) << t.name;
    EXPECT_EQ(p.row_begin, 0);
    EXPECT_EQ(p.row_end, t.rows);
    ++slices[{p.tensor, p.expert}];
    expert_nodes[{t.layer, p.expert}].insert(p.node);
  }
  for (const auto& [key, count] : slices) EXPECT_EQ(count, 1) << "tensor " << key.first << " expert " << key.second;
  for (const auto& [unit, nodes] : expert_nodes) {
    EXPECT_EQ(nodes.size(), 1u) << "layer " << unit.first << " expert " << unit.second << " is on several nodes";
    if (plan.policy == NumaPolicy::kShard) {
      EXPECT_EQ(plan.ExpertNode(unit.first, unit.second), *nodes.begin());
    }
  }

  // Dense tensors: row ranges in order, covering every row once, starting on multiples of row_align.
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const WeightTensor& t = plan.tensors[i];
    if (t.is_expert()) continue;
    int64_t row = 0;
    for (const NumaPlacement& p : plan.placements) {
      if (p.tensor != static_cast<int>(i)) continue;
      EXPECT_EQ(p.row_begin, row) << t.name;
      EXPECT_GT(p.row_end, p.row_begin) << t.name;
      EXPECT_EQ(p.row_begin % row_align, 0) << t.name;
      EXPECT_EQ(p.bytes, t.bytes / t.rows * (p.row_end - p.row_begin)) << t.name;
      row = p.row_end;
    }
    EXPECT_EQ(row, t.rows) << t.name;
  }

  // Workers: one per physical core, each pinned to a PU of its own core, on its node; no PU twice.
  const std::map<int, int> pu_node = PuNode(topo);
  std::set<int> pus, cores;
  for (size_t w = 0; w < plan.workers.size(); ++w) {
    const NumaWorker& wk = plan.workers[w];
    EXPECT_TRUE(pus.insert(wk.pu).second) << "PU " << wk.pu << " twice";
    EXPECT_TRUE(cores.insert(wk.core).second) << "core " << wk.core << " twice";
    ASSERT_TRUE(pu_node.count(wk.pu)) << "PU " << wk.pu << " is not in the topology";
    EXPECT_EQ(pu_node.at(wk.pu), wk.node);
    bool in_core = false;
    for (const TopoCore& c : topo.nodes()[wk.node].cores) {
      if (c.logical_index == wk.core) in_core = std::count(c.pus.begin(), c.pus.end(), wk.pu) == 1;
    }
    EXPECT_TRUE(in_core) << "PU " << wk.pu << " is not a thread of core " << wk.core;
    const NumaNodeShare& share = plan.nodes[wk.node];
    EXPECT_GE(static_cast<int>(w), share.first_thread);
    EXPECT_LT(static_cast<int>(w), share.first_thread + share.n_threads);
  }
}

// Under shard, each node's bytes against its thread share. Experts go whole, so a node may be off by one expert
// unit (all of one expert's slices in a layer); a dense tensor's boundary moves by at most row_align/2 rows,
// twice per node. Returns the worst deviation as a fraction of the total.
double CheckBalance(const NumaPlan& plan, int row_align = 16) {
  std::map<std::pair<int, int>, uint64_t> units;
  uint64_t dense_slack = 0;
  for (const WeightTensor& t : plan.tensors) {
    if (t.is_expert()) {
      for (int e = 0; e < t.n_experts; ++e) units[{t.layer, t.first_expert + e}] += t.bytes / t.n_experts;
    } else {
      dense_slack += static_cast<uint64_t>(row_align) * (t.bytes / t.rows);
    }
  }
  uint64_t max_unit = 0;
  for (const auto& [k, b] : units) max_unit = std::max(max_unit, b);
  int threads = 0;
  for (const NumaNodeShare& n : plan.nodes) threads += n.n_threads;
  const double total = static_cast<double>(TotalBytes(plan.tensors));
  double worst = 0;
  for (size_t k = 0; k < plan.nodes.size(); ++k) {
    const double target = total * plan.nodes[k].n_threads / threads;
    const double dev = std::abs(static_cast<double>(plan.nodes[k].bytes) - target);
    EXPECT_LE(dev, static_cast<double>(max_unit + dense_slack)) << "node " << k;
    worst = std::max(worst, dev / total);
  }
  return worst;
}

TEST(NumaPolicy, Parse) {
  EXPECT_EQ(*ParseNumaPolicy("auto"), NumaPolicy::kAuto);
  EXPECT_EQ(*ParseNumaPolicy("off"), NumaPolicy::kOff);
  EXPECT_EQ(*ParseNumaPolicy("interleave"), NumaPolicy::kInterleave);
  EXPECT_EQ(*ParseNumaPolicy("shard"), NumaPolicy::kShard);
  for (const char* bad : {"", "Shard", "on", "numa"}) {
    EXPECT_EQ(ParseNumaPolicy(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  for (NumaPolicy p : {NumaPolicy::kAuto, NumaPolicy::kOff, NumaPolicy::kInterleave, NumaPolicy::kShard}) {
    EXPECT_EQ(*ParseNumaPolicy(NumaPolicyName(p)), p);
  }
}

TEST(WeightTensors, ClassifiesMixtral) {
  ModelConfig cfg;
  const std::vector<GgufTensorInfo> infos = MixtralShaped(cfg);
  const std::vector<WeightTensor> ts = WeightTensorsOf(infos, cfg);
  ASSERT_EQ(ts.size(), infos.size());
  int experts = 0;
  for (const WeightTensor& t : ts) {
    if (t.name.find("_exps") != std::string::npos) {
      ++experts;
      EXPECT_EQ(t.n_experts, 8);
      EXPECT_EQ(t.rows, t.name.find("down") != std::string::npos ? 4096 : 14336);
    } else {
      EXPECT_FALSE(t.is_expert()) << t.name;
    }
  }
  EXPECT_EQ(experts, 96);
  EXPECT_EQ(ts.front().layer, -1);                  // token_embd
  EXPECT_EQ(ts[1 + 10 * 5].layer, 5);               // blk.5.attn_norm
  EXPECT_EQ(ts[1 + 10 * 5].name, "blk.5.attn_norm.weight");
  EXPECT_EQ(ts[1 + 10 * 5 + 6].rows, 8);            // the router: 8 rows of n_embd
  // One Q4_K expert slice of ffn_gate_exps: 14336 rows of 4096/256 blocks of 144 bytes.
  EXPECT_EQ(ts[1 + 7].bytes / 8, 14336ull * 16 * 144);
}

TEST(WeightTensors, LegacyPerExpertTensors) {
  ModelConfig cfg;
  cfg.arch = "llama";
  cfg.n_expert = 4;
  cfg.legacy_experts = true;
  const std::vector<GgufTensorInfo> infos = {Info("blk.2.ffn_up.3.weight", DType::kQ8_0, {64, 96}),
                                             Info("blk.2.ffn_norm.weight", DType::kF32, {64})};
  const std::vector<WeightTensor> ts = WeightTensorsOf(infos, cfg);
  EXPECT_EQ(ts[0].n_experts, 1);
  EXPECT_EQ(ts[0].first_expert, 3);
  EXPECT_EQ(ts[0].layer, 2);
  EXPECT_EQ(ts[0].rows, 96);
  EXPECT_FALSE(ts[1].is_expert());
}

TEST(NumaPlan, MixtralShardOnTwoPackagesOfTwoNodes) {
  auto topo = Load(Topology::Synthetic("pack:2 numa:2 core:8 pu:2"));
  ASSERT_TRUE(topo);
  ModelConfig cfg;
  const std::vector<GgufTensorInfo> infos = MixtralShaped(cfg);
  absl::StatusOr<NumaPlan> plan = PlanNuma(*topo, WeightTensorsOf(infos, cfg), {.policy = NumaPolicy::kAuto});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->policy, NumaPolicy::kShard);  // auto with 4 nodes
  CheckPlan(*topo, *plan);
  ASSERT_EQ(plan->workers.size(), 32u);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(plan->nodes[k].n_threads, 8);
  // Equal nodes and equal experts: 64 of the 256 experts on each node, exactly.
  std::vector<int> per_node(4, 0);
  for (const auto& [unit, node] : plan->expert_nodes) ++per_node[node];
  EXPECT_EQ(per_node, (std::vector<int>{64, 64, 64, 64}));
  const double worst = CheckBalance(*plan);
  std::printf("Mixtral 8x7B on 4 nodes: %.2f GB, worst node off its share by %.4f%%\n",
              TotalBytes(plan->tensors) / 1e9, worst * 100);
  EXPECT_LT(worst, 0.005);  // stated tolerance: 0.5% of the model per node
}

TEST(NumaPlan, MixtralShardOnUnevenNodes) {
  auto topo = Xml("synthetic-4node-uneven.xml");  // 8, 2, 5 and 1 cores
  ASSERT_TRUE(topo);
  ModelConfig cfg;
  const std::vector<GgufTensorInfo> infos = MixtralShaped(cfg);
  absl::StatusOr<NumaPlan> plan = PlanNuma(*topo, WeightTensorsOf(infos, cfg), {.policy = NumaPolicy::kShard});
  ASSERT_TRUE(plan.ok()) << plan.status();
  CheckPlan(*topo, *plan);
  EXPECT_EQ(plan->workers.size(), 16u);
  // 256 equal experts in proportion 8:2:5:1 of 16 threads is 128:32:80:16, which bytes-per-thread greedy hits.
  std::vector<int> per_node(4, 0);
  for (const auto& [unit, node] : plan->expert_nodes) ++per_node[node];
  EXPECT_EQ(per_node, (std::vector<int>{128, 32, 80, 16}));
  const double worst = CheckBalance(*plan);
  std::printf("Mixtral 8x7B on 8/2/5/1-core nodes: worst node off its share by %.4f%%\n", worst * 100);
  EXPECT_LT(worst, 0.005);
}

TEST(NumaPlan, RealTwoSocketServer) {
  auto topo = Xml("hwloc-32em64t-2n8c2t-pci-noio.xml");
  ASSERT_TRUE(topo);
  ModelConfig cfg;
  const std::vector<GgufTensorInfo> infos = MixtralShaped(cfg);
  absl::StatusOr<NumaPlan> plan = PlanNuma(*topo, WeightTensorsOf(infos, cfg));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->policy, NumaPolicy::kShard);
  CheckPlan(*topo, *plan);
  // One worker per core on its first hardware thread: PUs 0-7 on socket 0, 8-15 on socket 1 (see the README).
  std::vector<int> want;
  for (int pu = 0; pu < 16; ++pu) want.push_back(pu);
  EXPECT_EQ(plan->WorkerPus(), want);
  EXPECT_EQ(plan->nodes[0].first_thread, 0);
  EXPECT_EQ(plan->nodes[1].first_thread, 8);
  // Equal sockets: round-robin, so expert e of layer l sits on node (8l + e) % 2.
  for (int l = 0; l < 32; ++l) {
    for (int e = 0; e < 8; ++e) EXPECT_EQ(plan->ExpertNode(l, e), (8 * l + e) % 2);
  }
  EXPECT_LT(CheckBalance(*plan), 0.005);
}

TEST(NumaPlan, TinyMixtralFile) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(test::DataPath("models/tiny-mixtral-Q4_0.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<ModelConfig> cfg = LoadModelConfig(**file);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const std::vector<WeightTensor> ts = WeightTensorsOf((*file)->tensors(), *cfg);
  int expert_tensors = 0;
  for (const WeightTensor& t : ts) expert_tensors += t.is_expert() ? 1 : 0;
  EXPECT_EQ(expert_tensors, 3 * cfg->n_layer);

  for (const char* xml : {"synthetic-2pack-16core.xml", "hwloc-32em64t-2n8c2t-pci-noio.xml",
                          "synthetic-4node-uneven.xml"}) {
    SCOPED_TRACE(xml);
    auto topo = Xml(xml);
    ASSERT_TRUE(topo);
    absl::StatusOr<NumaPlan> plan = PlanNuma(*topo, ts, {.policy = NumaPolicy::kShard});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->policy, NumaPolicy::kShard);
    CheckPlan(*topo, *plan);
    const double worst = CheckBalance(*plan);
    std::printf("tiny-mixtral-Q4_0 on %s: worst node off its share by %.2f%%\n", xml, worst * 100);

    // The ranges to bind are inside the file's data and cover every tensor byte once.
    absl::StatusOr<std::vector<MemoryRegion>> regions = NumaMemoryRegions(*plan, **file);
    ASSERT_TRUE(regions.ok()) << regions.status();
    uint64_t bytes = 0;
    const uint8_t* lo = (*file)->base() + (*file)->data_offset();
    const uint8_t* hi = (*file)->base() + (*file)->file_size();
    for (const MemoryRegion& r : *regions) {
      bytes += r.bytes;
      EXPECT_GE(static_cast<const uint8_t*>(r.addr), lo);
      EXPECT_LE(static_cast<const uint8_t*>(r.addr) + r.bytes, hi);
    }
    EXPECT_EQ(bytes, TotalBytes(ts));
    EXPECT_LT(regions->size(), plan->placements.size());  // same-node neighbours were merged

    // Binding against a topology that is not the host runs the whole path on hwloc's empty hooks.
    absl::StatusOr<MembindReport> report = BindRegions(*topo, *regions);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_FALSE(report->single_node);
    EXPECT_GT(report->regions, 0u);
    EXPECT_LE(report->bytes, bytes);
  }
}

// A repacked copy follows its file rows: groups of 16 rows go to the node of their rows.
TEST(CopyRegions, GroupsFollowTheirRowsByHand) {
  static uint8_t file[64 * 100];  // a 64-row matrix, 100 bytes a row
  static uint8_t copy[4 * 1000];  // its copy: 4 groups of 16 rows, 1000 bytes a group
  const WeightMatrix m{.type = DType::kQ4_0, .data = file, .rows = 64, .cols = 32, .row_stride = 100};
  // Rows [0, 32) on node 1, rows [32, 48) on node 0, rows [48, 64) on node 1.
  const MemoryRegion in[] = {{file, 3200, 1}, {file + 3200, 1600, 0}, {file + 4800, 1600, 1}};
  const std::vector<MemoryRegion> out = CopyRegions(in, m, copy, 16, 1000);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].addr, copy);
  EXPECT_EQ(out[0].bytes, 2000u);
  EXPECT_EQ(out[0].node, 1);
  EXPECT_EQ(out[1].addr, copy + 2000);
  EXPECT_EQ(out[1].bytes, 1000u);
  EXPECT_EQ(out[1].node, 0);
  EXPECT_EQ(out[2].addr, copy + 3000);
  EXPECT_EQ(out[2].bytes, 1000u);
  EXPECT_EQ(out[2].node, 1);
  // A region that starts inside a group leaves that group to the region before it.
  const MemoryRegion split[] = {{file, 2000, 0}, {file + 2000, 4400, 1}};  // rows [0, 20) and [20, 64)
  const std::vector<MemoryRegion> out2 = CopyRegions(split, m, copy, 16, 1000);
  ASSERT_EQ(out2.size(), 2u);
  EXPECT_EQ(out2[0].bytes, 2000u);  // groups 0 and 1 (rows 16..19 pull group 1 along)
  EXPECT_EQ(out2[1].addr, copy + 2000);
  EXPECT_EQ(out2[1].bytes, 2000u);
  // Regions elsewhere in the file place nothing.
  const MemoryRegion away[] = {{file + sizeof(file), 100, 0}};
  EXPECT_TRUE(CopyRegions(away, m, copy, 16, 1000).empty());
}

// Under shard, every expert's repacked copy lands whole on the node that holds (and runs) the expert.
TEST(CopyRegions, ShardKeepsEachRepackedExpertOnItsNode) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(test::DataPath("models/tiny-mixtral-Q4_0.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<ModelConfig> cfg = LoadModelConfig(**file);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto topo = Load(Topology::Synthetic("pack:2 numa:2 core:8 pu:2"));
  absl::StatusOr<NumaPlan> plan =
      PlanNuma(*topo, WeightTensorsOf((*file)->tensors(), *cfg), {.policy = NumaPolicy::kShard});
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<std::vector<MemoryRegion>> file_regions = NumaMemoryRegions(*plan, **file);
  ASSERT_TRUE(file_regions.ok()) << file_regions.status();
  absl::StatusOr<ModelSchema> model = ReadModelSchema(**file);
  ASSERT_TRUE(model.ok()) << model.status();
  const TensorData data_of = [&](const GgufTensorInfo& t) { return (*file)->TensorData(t); };
  int checked = 0;
  for (int il = 0; il < cfg->n_layer; ++il) {
    const UnitWeights w = BindUnit(*model, UnitKind::kFfn, il, data_of);
    // Expert slots hold [slot * n_expert + e]: each of the gate, up and down stacks, expert by expert.
    for (size_t i = 0; i < w.expert_slots.size(); ++i) {
      const int e = static_cast<int>(i % cfg->n_expert);
      const WeightMatrix* m = &w.expert_slots[i];
      ASSERT_TRUE(cpu::CanRepack(*m));
      std::vector<uint8_t> copy(cpu::PackedBytes(*m));
      const size_t group_bytes = copy.size() / static_cast<size_t>(m->rows / cpu::kPackRows);
      const std::vector<MemoryRegion> r = CopyRegions(*file_regions, *m, copy.data(), cpu::kPackRows, group_bytes);
      ASSERT_EQ(r.size(), 1u) << "layer " << il << " expert " << e;
      EXPECT_EQ(r[0].addr, copy.data());
      EXPECT_EQ(r[0].bytes, copy.size());
      EXPECT_EQ(r[0].node, plan->ExpertNode(il, e));
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 * cfg->n_layer * cfg->n_expert);
}

TEST(NumaPlan, AutoOnOneNodeIsOff) {
  auto topo = Load(Topology::Synthetic("numa:1 core:4 pu:2"));
  ASSERT_TRUE(topo);
  ModelConfig cfg;
  const std::vector<GgufTensorInfo> infos = MixtralShaped(cfg);
  for (NumaPolicy p : {NumaPolicy::kAuto, NumaPolicy::kOff, NumaPolicy::kShard}) {
    absl::StatusOr<NumaPlan> plan = PlanNuma(*topo, WeightTensorsOf(infos, cfg), {.policy = p});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->policy, NumaPolicy::kOff) << NumaPolicyName(p);  // nothing to shard on one node
    CheckPlan(*topo, *plan);
    EXPECT_EQ(plan->WorkerPus(), (std::vector<int>{0, 2, 4, 6}));  // first PU of each 2-PU core
    EXPECT_EQ(plan->ExpertNode(0, 0), -1);
  }
}

TEST(NumaPlan, OffOnManyNodesKeepsNodeZero) {
  auto topo = Load(Topology::Synthetic("pack:2 numa:2 core:8 pu:2"));
  ASSERT_TRUE(topo);
  ModelConfig cfg;
  const std::vector<GgufTensorInfo> infos = MixtralShaped(cfg);
  absl::StatusOr<NumaPlan> plan = PlanNuma(*topo, WeightTensorsOf(infos, cfg), {.policy = NumaPolicy::kOff});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->policy, NumaPolicy::kOff);
  CheckPlan(*topo, *plan);
  EXPECT_EQ(plan->nodes[0].bytes, TotalBytes(plan->tensors));
  EXPECT_EQ(plan->workers.size(), 32u);  // threads still one per core on every node
}

TEST(NumaPlan, InterleaveMarksEveryPlacement) {
  auto topo = Load(Topology::Synthetic("pack:2 numa:2 core:8 pu:2"));
  ASSERT_TRUE(topo);
  ModelConfig cfg;
  const std::vector<GgufTensorInfo> infos = MixtralShaped(cfg);
  absl::StatusOr<NumaPlan> plan = PlanNuma(*topo, WeightTensorsOf(infos, cfg), {.policy = NumaPolicy::kInterleave});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->policy, NumaPolicy::kInterleave);
  CheckPlan(*topo, *plan);  // checks node == kInterleavedNode on every placement
  EXPECT_TRUE(plan->expert_nodes.empty());
}

TEST(NumaPlan, DenseRowBoundsByHand) {
  auto topo = Load(Topology::Synthetic("numa:4 core:2 pu:1"));
  ASSERT_TRUE(topo);
  const std::vector<WeightTensor> ts = {{.name = "w", .bytes = 100 * 32, .rows = 100}};
  absl::StatusOr<NumaPlan> plan = PlanNuma(*topo, ts, {.policy = NumaPolicy::kShard});
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Quarter points 25, 50, 75 rounded to the nearest multiple of 16: 32, 48, 80.
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 32}, {32, 48}, {48, 80}, {80, 100}};
  ASSERT_EQ(plan->placements.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(plan->placements[k].row_begin, want[k].first);
    EXPECT_EQ(plan->placements[k].row_end, want[k].second);
    EXPECT_EQ(plan->placements[k].offset, static_cast<uint64_t>(want[k].first) * 32);
    EXPECT_EQ(plan->placements[k].node, k);
  }
  // A 1-row vector cannot be split: it goes whole to one node.
  plan = PlanNuma(*topo, {{.name = "norm", .bytes = 64, .rows = 1}}, {.policy = NumaPolicy::kShard});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->placements.size(), 1u);
  EXPECT_EQ(plan->placements[0].bytes, 64u);
}

TEST(NumaPlan, FewerThreadsTakeCoresRoundRobin) {
  auto topo = Xml("synthetic-4node-uneven.xml");  // 8, 2, 5 and 1 cores
  ASSERT_TRUE(topo);
  absl::StatusOr<NumaPlan> plan = PlanNuma(*topo, {}, {.policy = NumaPolicy::kShard, .max_threads = 6});
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Rounds: one core of every node (4), then one more of nodes 0 and 1.
  std::vector<int> n_threads;
  for (const NumaNodeShare& n : plan->nodes) n_threads.push_back(n.n_threads);
  EXPECT_EQ(n_threads, (std::vector<int>{2, 2, 1, 1}));
  EXPECT_EQ(plan->WorkerPus(), (std::vector<int>{0, 1, 8, 9, 16, 24}));
  CheckPlan(*topo, *plan);
}

TEST(NumaPlan, BadTensorsAreErrors) {
  auto topo = Load(Topology::Synthetic("numa:2 core:2 pu:1"));
  ASSERT_TRUE(topo);
  EXPECT_EQ(PlanNuma(*topo, {{.name = "x", .bytes = 10, .rows = 3}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanNuma(*topo, {{.name = "e", .bytes = 100, .rows = 1, .n_experts = 8}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanNuma(*topo, {}, {.row_align = 0}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NumaPlan, AppliesOnTheHost) {
  auto topo = Load(Topology::Host());
  ASSERT_TRUE(topo);
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(test::DataPath("models/tiny-mixtral-Q4_0.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<ModelConfig> cfg = LoadModelConfig(**file);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  absl::StatusOr<NumaPlan> plan = PlanNuma(*topo, WeightTensorsOf((*file)->tensors(), *cfg));
  ASSERT_TRUE(plan.ok()) << plan.status();
  CheckPlan(*topo, *plan);
  EXPECT_EQ(plan->workers.size(), static_cast<size_t>(topo->n_cores()));
  absl::StatusOr<MembindReport> report = ApplyNumaPlan(*topo, *plan, **file);
  ASSERT_TRUE(report.ok()) << report.status();
  if (topo->nodes().size() == 1) {
    EXPECT_TRUE(report->single_node);
  }
  absl::StatusOr<std::vector<int>> bound = OpenMpThreadBindings(*topo, static_cast<int>(plan->workers.size()));
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ(*bound, plan->WorkerPus());

  // The kernel accepts binding the model's mmap'd (read-only, file-backed) pages: interleave makes regions, and
  // the calls are made even on one node.
  plan = PlanNuma(*topo, WeightTensorsOf((*file)->tensors(), *cfg), {.policy = NumaPolicy::kInterleave});
  ASSERT_TRUE(plan.ok()) << plan.status();
  report = ApplyNumaPlan(*topo, *plan, **file, {.even_on_one_node = true});
  if (!report.ok() && report.status().message().find("not permitted") != std::string_view::npos) {
    GTEST_SKIP() << "this sandbox forbids mbind: " << report.status();
  }
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_GT(report->regions, 0u);
  EXPECT_GT(report->bytes, 0u);
}

}  // namespace
}  // namespace tandem

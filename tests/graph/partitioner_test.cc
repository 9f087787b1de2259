// The partitioner without devices: determinism, the count convention, errors that say what fits, the VRAM
// account against the budget, cost-driven choices with synthetic profiles, --place rules, real GGUF unit lists.
#include "graph/partitioner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <regex>

#include "core/gguf.h"
#include "arch/model_config.h"
#include "graph/plan_report.h"
#include "tests/graph/mixtral_units.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using test::CpuProfile;
using test::MixtralInput;

constexpr uint64_t kGiB = 1ull << 30;

PlaceRule Rule(const std::string& spec) { return ParsePlaceRule(spec).value(); }

// The account recomputed from the plan's units, independently of the partitioner's own bookkeeping.
struct Recount {
  uint64_t weights = 0, kv = 0, slot = 0, expert_staging = 0;
};
// A split MoE layer holds its router and its resident experts; its streamed experts need staging for the most a
// batch routes to: top-k in decode, up to all of them in a prefill batch.
Recount RecountGpu(const Plan& p, const std::vector<UnitSpec>& units, int k = 2) {
  Recount r;
  for (size_t i = 0; i < p.units.size(); ++i) {
    const UnitPlan& u = p.units[i];
    EXPECT_EQ(u.name, units[i].name);
    if (u.split()) {
      int resident = 0;
      for (const ExpertPlacement& e : u.experts) resident += e.prefill == Placement::kGpu || e.decode == Placement::kGpu;
      r.weights += units[i].own_packed_bytes + resident * units[i].expert_block_bytes;
      const uint64_t most = std::max<uint64_t>(
          std::min<uint64_t>(u.CountExperts(Phase::kPrefill, Placement::kStream), uint64_t(p.prefill_batch) * k),
          std::min<uint64_t>(u.CountExperts(Phase::kDecode, Placement::kStream), k));
      r.expert_staging = std::max(r.expert_staging, most * units[i].expert_block_bytes);
    } else if (u.prefill == Placement::kGpu || u.decode == Placement::kGpu) {
      r.weights += units[i].packed_bytes;
    } else if (u.prefill == Placement::kStream || u.decode == Placement::kStream) {
      r.slot = std::max(r.slot, units[i].packed_bytes);
    }
    if (u.kind == UnitKind::kAttn && (GpuSide(u.prefill) || GpuSide(u.decode))) r.kv += u.kv_bytes;
  }
  return r;
}

// Decode PCIe bytes recomputed from the units: streamed weights, the token's id and position to the GPU when
// anything runs there, activations at side changes, logits back.
uint64_t RecountPcieDecode(const Plan& p, uint64_t n_embd, uint64_t n_vocab) {
  uint64_t bytes = 0;
  bool prev = false;  // the token enters on the host
  bool any_gpu = false;
  for (const UnitPlan& u : p.units) {
    if (u.decode == Placement::kStream) bytes += u.weight_bytes;
    if (u.split()) {
      // Uniform routing over 8 experts, top-2: each streamed expert is routed with chance 2/8; the routing comes
      // back, and with CPU experts their weights, the input row and their slots cross too.
      const int n_cpu = u.CountExperts(Phase::kDecode, Placement::kCpu);
      const int n_stream = u.CountExperts(Phase::kDecode, Placement::kStream);
      bytes += static_cast<uint64_t>(n_stream * 0.25 * static_cast<double>(u.expert_block_bytes));
      if (n_cpu > 0) bytes += 2 * 2 * sizeof(int32_t) + n_embd * sizeof(float) + 2 * n_embd * sizeof(float);
      if (n_cpu == 0 && n_stream > 0) bytes += 2 * sizeof(int32_t);
    }
    if (&u != &p.units.front() && GpuSide(u.decode) != prev) bytes += n_embd * sizeof(float);
    prev = GpuSide(u.decode);
    any_gpu = any_gpu || prev;
  }
  if (any_gpu) bytes += 2 * sizeof(int32_t);
  if (prev) bytes += n_vocab * sizeof(float);
  return bytes;
}

void ExpectAttentionOnOneSide(const Plan& p) {
  for (const UnitPlan& u : p.units) {
    if (u.kind == UnitKind::kAttn) {
      EXPECT_EQ(GpuSide(u.prefill), GpuSide(u.decode)) << u.name << " changes side between phases";
    }
  }
}

const UnitPlan& Find(const Plan& p, const std::string& name) {
  for (const UnitPlan& u : p.units) {
    if (u.name == name) return u;
  }
  ADD_FAILURE() << "no unit " << name;
  return p.units.front();
}

TEST(Partitioner, MixtralUnitsHaveTheExpectedBytes) {
  PartitionInput in = MixtralInput("none", CpuProfile(50, 500));
  ASSERT_EQ(in.units.size(), 66u);
  EXPECT_EQ(in.units.front().name, "embd");
  EXPECT_EQ(in.units[1].name, "blk.0.attn");
  EXPECT_EQ(in.units[2].name, "blk.0.ffn");
  EXPECT_EQ(in.units.back().name, "output");
  // Q4_K: 144 bytes per 256 weights. Attention: q and o 4096x4096, k and v 4096x1024, plus an F32 norm.
  const uint64_t attn = (2ull * 4096 * 4096 + 2ull * 4096 * 1024) / 256 * 144 + 4096 * 4;
  EXPECT_EQ(in.units[1].weight_bytes, attn);
  // FFN: 3 x 8 experts of 4096x14336, router 4096x8 F32, norm.
  const uint64_t experts = 3ull * 8 * 4096 * 14336 / 256 * 144;
  EXPECT_EQ(in.units[2].expert_bytes, experts);
  EXPECT_EQ(in.units[2].weight_bytes, experts + 4096ull * 8 * 4 + 4096 * 4);
  // What a decoded token does, counted from the units' functions: the router and 2 of the 8 experts; q, k, v, o.
  EXPECT_DOUBLE_EQ(WorkOf(in.units[2], 1, 0, 2).flops, 2.0 * (4096.0 * 8 + 2 * 3.0 * 4096 * 14336));
  EXPECT_DOUBLE_EQ(WorkOf(in.units[1], 1, 0, 2).flops, 2.0 * (2.0 * 4096 * 4096 + 2.0 * 4096 * 1024));
  // The last layer's cache-only share of a 64-token prompt: wk and wv.
  EXPECT_DOUBLE_EQ(WorkOf(in.units[1], 64, 0, 2, /*n_live=*/0).flops, 2.0 * 64 * (2.0 * 4096 * 1024));
  EXPECT_EQ(in.units[1].KvBytes(4096, 2, 512), 2ull * 4096 * 1024 * 2);
  // Packed for the device, each tensor on a 256-byte boundary: the 16 KiB norm and the 128 KiB router already are.
  EXPECT_EQ(in.units[1].packed_bytes, in.units[1].weight_bytes);
  EXPECT_EQ(in.units[2].packed_bytes, in.units[2].weight_bytes);
}

TEST(Partitioner, SameInputsGiveTheSamePlan) {
  for (const char* dev : {"sim:12GiB", "sim:24GiB,pcie=2", "none"}) {
    PartitionInput in = MixtralInput(dev, CpuProfile(50, 300));
    const Plan a = Partition(in).value();
    const PartitionInput copy = in;
    const Plan b = Partition(copy).value();
    EXPECT_EQ(PlanJson(a, true).dump(), PlanJson(b, true).dump()) << dev;
  }
}

TEST(Partitioner, CountsPutCpuLayersFirstThenStreamThenGpuLast) {
  PartitionInput in = MixtralInput("sim:80GiB", CpuProfile(50, 500));
  in.request.expert_level = false;  // whole units: a streamed MoE layer copies all its experts
  in.request.cpu_layers = 20;
  in.request.stream_layers = 4;  // gpu takes the remaining 8
  const Plan p = Partition(in).value();
  for (const UnitPlan& u : p.units) {
    Placement want = Placement::kCpu;
    if (u.layer >= 24) {
      want = Placement::kGpu;
    } else if (u.layer >= 20) {
      want = Placement::kStream;
    }
    if (u.kind == UnitKind::kOutput) want = Placement::kGpu;  // follows the last layer
    EXPECT_EQ(u.prefill, want) << u.name;
    EXPECT_EQ(u.decode, want) << u.name;
  }
  EXPECT_EQ(Find(p, "embd").prefill, Placement::kCpu);
  // Staging holds the largest streamed unit, twice.
  EXPECT_EQ(p.staging_slot_bytes, in.units[2].packed_bytes);
  EXPECT_EQ(p.gpu.staging, 2 * in.units[2].packed_bytes);
  // Streamed units cross PCIe every token.
  EXPECT_GE(p.pcie_bytes_per_decode_token, 4 * (in.units[1].weight_bytes + in.units[2].weight_bytes));
}

TEST(Partitioner, StreamedMoeLayersCopyOnlyTheRoutedExperts) {
  PartitionInput in = MixtralInput("sim:80GiB", CpuProfile(50, 500));
  in.request.cpu_layers = 20;
  in.request.stream_layers = 4;
  const Plan p = Partition(in).value();
  PartitionInput whole_in = in;
  whole_in.request.expert_level = false;
  const Plan whole = Partition(whole_in).value();
  for (const UnitPlan& u : p.units) {
    if (u.kind != UnitKind::kFfn || u.layer < 20 || u.layer >= 24) {
      EXPECT_FALSE(u.split()) << u.name;
      continue;
    }
    // The router resident, every expert streamed when routed.
    ASSERT_TRUE(u.split()) << u.name;
    EXPECT_EQ(u.prefill, Placement::kGpu);
    EXPECT_EQ(u.CountExperts(Phase::kDecode, Placement::kStream), 8);
    EXPECT_EQ(u.CountExperts(Phase::kPrefill, Placement::kStream), 8);
    EXPECT_EQ(u.expert_block_bytes, in.units[2].expert_block_bytes);
  }
  // No unit staging for the FFNs (only the streamed attention units), and expert staging for a prefill batch's
  // worst case: all 8 experts.
  EXPECT_EQ(p.staging_slot_bytes, in.units[1].packed_bytes);
  EXPECT_EQ(p.expert_staging_bytes, 8 * in.units[2].expert_block_bytes);
  EXPECT_EQ(p.gpu.staging, 2 * in.units[1].packed_bytes + 8 * in.units[2].expert_block_bytes);
  // Decode copies 2 of 8 experts per streamed layer instead of all 8: a quarter of the layer-level bytes.
  const double expert_bytes = 4 * 2 * static_cast<double>(in.units[2].expert_block_bytes);
  EXPECT_NEAR(static_cast<double>(p.pcie_bytes_per_decode_token) - 4.0 * in.units[1].weight_bytes, expert_bytes,
              0.01 * expert_bytes);
  EXPECT_LT(p.pcie_bytes_per_decode_token, whole.pcie_bytes_per_decode_token / 3);
  EXPECT_EQ(p.pcie_bytes_per_decode_token, RecountPcieDecode(p, 4096, 32000));
  EXPECT_GT(p.predicted_decode_tps, whole.predicted_decode_tps);
}

TEST(Partitioner, AnExpertCacheCutsStreamedCopiesAsLruWould) {
  PartitionInput in = MixtralInput("sim:80GiB", CpuProfile(50, 500));
  in.request.cpu_layers = 20;
  in.request.stream_layers = 4;
  const Plan none = Partition(in).value();
  const uint64_t block = in.units[2].expert_block_bytes;
  // Uniform routing over 8 experts: with c of a layer's 8 in the cache, Che's approximation gives each a hit chance
  // of c / 8, exactly.
  for (int per_layer : {2, 4, 8}) {
    in.request.expert_cache = 4 * per_layer * block;
    const Plan p = Partition(in).value();
    EXPECT_EQ(p.expert_cache_slots, 4 * per_layer);
    EXPECT_EQ(p.expert_cache_bytes, 4 * per_layer * block);
    EXPECT_NEAR(p.expected_cache_hit_rate, per_layer / 8.0, 1e-6) << per_layer;
    // The cache takes the place of decode's staging; prefill still stages a batch's experts.
    EXPECT_EQ(p.gpu.staging, none.gpu.staging + 4 * per_layer * block - 0) << per_layer;
    // Decode copies what the cache misses: 4 layers x 2 picks x (1 - hit) blocks.
    const double copies = 4 * 2 * (1 - per_layer / 8.0) * static_cast<double>(block);
    const double expected = static_cast<double>(none.pcie_bytes_per_decode_token) - 4 * 2 * static_cast<double>(block) +
                            copies;
    EXPECT_NEAR(static_cast<double>(p.pcie_bytes_per_decode_token), expected, 0.001 * expected) << per_layer;
    EXPECT_GE(p.predicted_decode_tps, none.predicted_decode_tps);
  }
  in.request.expert_cache = block;  // fewer slots than a token routes to
  const absl::StatusOr<Plan> tiny = Partition(in);
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(Message(tiny.status()).find("a token routes to 2"), std::string::npos) << tiny.status();
}

TEST(Partitioner, ExpertLevelBeatsLayerLevelWhenExpertsDoNotFit) {
  for (const char* dev : {"sim:12GiB", "sim:24GiB"}) {
    PartitionInput in = MixtralInput(dev, CpuProfile(50, 300));
    const Plan p = Partition(in).value();
    in.request.expert_level = false;
    const Plan whole = Partition(in).value();
    EXPECT_GE(p.predicted_decode_tps, whole.predicted_decode_tps) << dev;
    const Recount r = RecountGpu(p, in.units);
    EXPECT_EQ(p.gpu.weights, r.weights) << dev;
    // Hot experts are resident: the expected hit rate is the resident share (uniform routing: gpu / 8).
    for (const UnitPlan& u : p.units) {
      if (!u.split()) continue;
      EXPECT_NEAR(u.expected_gpu_hit_rate, u.CountExperts(Phase::kDecode, Placement::kGpu) / 8.0, 1e-9) << u.name;
    }
  }
}

TEST(Partitioner, RecordedRoutingPutsTheHottestExpertsInVram) {
  PartitionInput in = MixtralInput("sim:12GiB", CpuProfile(50, 300));
  const Plan uniform = Partition(in).value();
  // Every layer: expert 7 takes half the picks, expert 3 a quarter, the rest share what is left.
  auto stats = std::make_shared<RoutingStats>(RoutingStats::Empty(32, 8, 2));
  for (int l = 0; l < 32; ++l) {
    std::vector<int32_t> ids;
    for (int t = 0; t < 1000; ++t) {
      ids.push_back(t % 2 == 0 ? 7 : (t % 4 == 1 ? 3 : t % 7));
      ids.push_back(t % 7 == ids.back() ? (ids.back() + 1) % 7 : t % 7);
    }
    ASSERT_TRUE(stats->Add(l, ids, 1000, 2).ok());
  }
  in.routing = stats;
  const Plan p = Partition(in).value();
  int split = 0;
  for (const UnitPlan& u : p.units) {
    if (!u.split()) continue;
    ++split;
    const std::vector<int> order = stats->HotOrder(u.layer);
    const int resident = u.CountExperts(Phase::kDecode, Placement::kGpu);
    double share = 0;
    for (int j = 0; j < 8; ++j) {
      // The resident experts are the layer's most picked.
      EXPECT_EQ(u.experts[order[j]].decode == Placement::kGpu, j < resident) << u.name << " expert " << order[j];
      if (j < resident) share += stats->Share(u.layer, order[j]);
    }
    EXPECT_NEAR(u.expected_gpu_hit_rate, share / 2, 1e-9) << u.name;
  }
  EXPECT_GT(split, 0);
  // Skew makes a few experts carry most picks: the same VRAM serves more of them.
  EXPECT_GT(p.predicted_decode_tps, uniform.predicted_decode_tps);
  // A recording of another model is refused, not read out of range.
  in.routing = std::make_shared<RoutingStats>(RoutingStats::Empty(32, 16, 2));
  EXPECT_EQ(Partition(in).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Partitioner, ExpertRulesPlaceNamedExpertsAndTheRestOnTheCpu) {
  PartitionInput in = MixtralInput("sim:24GiB", CpuProfile(50, 500));
  in.request.rules = {Rule("blk\\.3\\.ffn_.*_exps@1,5=stream"), Rule("ffn_.*_exps@0-3=gpu"), Rule("attn=gpu")};
  const Plan p = Partition(in).value();
  for (const UnitPlan& u : p.units) {
    if (u.kind != UnitKind::kFfn) continue;
    ASSERT_TRUE(u.split()) << u.name;
    EXPECT_EQ(u.prefill, Placement::kGpu) << u.name;  // the router stays resident
    for (int e = 0; e < 8; ++e) {
      Placement want = e < 4 ? Placement::kGpu : Placement::kCpu;
      if (u.layer == 3 && (e == 1 || e == 5)) want = Placement::kStream;  // the first rule naming it wins
      EXPECT_EQ(u.experts[e].prefill, want) << u.name << " expert " << e;
      EXPECT_EQ(u.experts[e].decode, want) << u.name << " expert " << e;
    }
  }
  const Recount r = RecountGpu(p, in.units);
  EXPECT_EQ(p.gpu.weights, r.weights);
  EXPECT_EQ(p.gpu.staging, 2 * r.slot + r.expert_staging);
  EXPECT_EQ(p.expert_staging_bytes, 2 * in.units[2].expert_block_bytes);  // layer 3's two streamed experts
  // Rules that do not fit the model are errors that say why.
  in.request.rules = {Rule("ffn_.*_exps@8=gpu")};
  absl::StatusOr<Plan> bad = Partition(in);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(Message(bad.status()).find("the model has 8"), std::string::npos) << bad.status();
  in.request.rules = {Rule("ffn_.*_exps@0-7=gpu")};  // all 32 layers' experts: 25 GiB into 24
  EXPECT_EQ(Partition(in).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(Partitioner, GpuLayersAloneLeaveTheRestOnTheCpu) {
  PartitionInput in = MixtralInput("sim:24GiB", CpuProfile(50, 500));
  in.request.gpu_layers = 10;
  const Plan p = Partition(in).value();
  for (const UnitPlan& u : p.units) {
    if (u.layer >= 0) {
      EXPECT_EQ(u.prefill, u.layer >= 22 ? Placement::kGpu : Placement::kCpu) << u.name;
    }
  }
  EXPECT_NE(p.why.find("10 gpu"), std::string::npos) << p.why;
}

TEST(Partitioner, CountsThatDoNotAddUpSayWhatWould) {
  PartitionInput in = MixtralInput("sim:80GiB", CpuProfile(50, 500));
  in.request.gpu_layers = 10;
  in.request.cpu_layers = 10;
  in.request.stream_layers = 10;
  absl::StatusOr<Plan> p = Partition(in);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string m = Message(p.status());
  EXPECT_NE(m.find("30"), std::string::npos) << m;
  EXPECT_NE(m.find("32"), std::string::npos) << m;
  EXPECT_NE(m.find("--cpu-layers 12"), std::string::npos) << m;  // the fix that adds up

  in.request = {};
  in.request.gpu_layers = 40;
  p = Partition(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(Message(p.status()).find("the model has 32"), std::string::npos) << p.status();
}

TEST(Partitioner, GpuCountsWithoutADeviceAreAnError) {
  PartitionInput in = MixtralInput("none", CpuProfile(50, 500));
  in.request.gpu_layers = 4;
  absl::StatusOr<Plan> p = Partition(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(Message(p.status()).find("no GPU"), std::string::npos) << p.status();
  in.request = {};
  in.request.rules.push_back(Rule("attn=gpu"));
  p = Partition(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(Message(p.status()).find("needs a GPU"), std::string::npos) << p.status();
}

TEST(Partitioner, ImpossibleBudgetSaysHowManyLayersFit) {
  PartitionInput in = MixtralInput("sim:80GiB", CpuProfile(50, 500));
  in.request.gpu_layers = 30;
  in.request.vram_budget = 12 * kGiB;
  absl::StatusOr<Plan> p = Partition(in);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string m = Message(p.status());
  std::printf("%s\n", m.c_str());
  EXPECT_NE(m.find("--gpu-layers 30 needs"), std::string::npos) << m;
  EXPECT_NE(m.find("--vram-budget is 12 GiB"), std::string::npos) << m;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(m, match, std::regex("at most (\\d+) layers fit"))) << m;
  const int fit = std::stoi(match[1]);
  // Independently: that many fit, one more does not.
  in.request.gpu_layers = fit;
  absl::StatusOr<Plan> ok = Partition(in);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_LE(ok->gpu.total(), 12 * kGiB);
  in.request.gpu_layers = fit + 1;
  EXPECT_FALSE(Partition(in).ok());
  // A layer is ~0.83 GB (Q4_K experts, attention, KV): about 15 fit in 12 GiB next to the buffers and head.
  EXPECT_GE(fit, 12);
  EXPECT_LE(fit, 16);
}

TEST(Partitioner, ImplicitBudgetKeepsTenPercentHeadroom) {
  PartitionInput in = MixtralInput("sim:12GiB", CpuProfile(50, 500));
  in.request.gpu_layers = 30;
  absl::StatusOr<Plan> p = Partition(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(Message(p.status()).find("10% headroom"), std::string::npos) << p.status();
  in.request.gpu_layers = 1;
  const Plan ok = Partition(in).value();
  EXPECT_EQ(ok.vram_budget, 12 * kGiB - 12 * kGiB / 10);
}

TEST(Partitioner, VramAccountNeverExceedsTheBudget) {
  for (uint64_t gib : {1, 2, 3, 4, 6, 8, 12, 16, 20, 24, 32, 48, 64}) {
    for (bool explicit_budget : {false, true}) {
      for (double pcie : {2.0, 25.0}) {
        PartitionInput in = MixtralInput(Cat("sim:", gib, "GiB,pcie=", pcie), CpuProfile(40, 200));
        if (explicit_budget) in.request.vram_budget = gib * kGiB;
        const uint64_t cap = explicit_budget ? gib * kGiB : gib * kGiB - gib * kGiB / 10;
        absl::StatusOr<Plan> p = Partition(in);
        ASSERT_TRUE(p.ok()) << gib << " GiB: " << p.status();
        EXPECT_LE(p->gpu.total(), cap) << gib << " GiB";
        EXPECT_LE(p->gpu.total(), gib * kGiB);
        const Recount r = RecountGpu(*p, in.units);
        EXPECT_EQ(p->gpu.weights, r.weights);
        EXPECT_EQ(p->gpu.kv, r.kv);
        EXPECT_EQ(p->gpu.staging, 2 * r.slot + r.expert_staging);
        ExpectAttentionOnOneSide(*p);
        EXPECT_GT(p->predicted_decode_tps, 0);
        EXPECT_GT(p->predicted_prefill_tps, 0);
      }
    }
  }
}

TEST(Partitioner, SlowLinkDecodesOffloadedUnitsOnTheCpu) {
  // pcie=2: copying a 0.8 GiB expert block takes 0.4 s, reading the 2 routed experts from RAM ~4 ms.
  PartitionInput in = MixtralInput("sim:12GiB,pcie=2", CpuProfile(50, 500));
  const Plan p = Partition(in).value();
  int offloaded = 0;
  for (const UnitPlan& u : p.units) {
    if (u.split()) {  // experts placed one by one: the ones not resident decode on the CPU
      for (const ExpertPlacement& e : u.experts) {
        if (e.decode == Placement::kGpu) continue;
        ++offloaded;
        EXPECT_EQ(e.decode, Placement::kCpu) << u.name;
      }
      continue;
    }
    if (u.kind == UnitKind::kEmbd || u.resident()) continue;
    ++offloaded;
    EXPECT_EQ(u.decode, Placement::kCpu) << u.name;
  }
  EXPECT_GT(offloaded, 10);
  EXPECT_EQ(p.pcie_bytes_per_decode_token, RecountPcieDecode(p, 4096, 32000));
}

TEST(Partitioner, FastLinkStreamsPrefillFromASlowCpu) {
  // pcie=50 and a 50 GFLOP/s CPU: a 512-token batch through one expert layer (2 of 8 experts per token) is
  // ~0.36 TFLOP, 7 s on the CPU, against 16 ms to copy the layer's weights.
  PartitionInput in = MixtralInput("sim:12GiB,pcie=50", CpuProfile(50, 50));
  const Plan p = Partition(in).value();
  int offloaded_ffn = 0;
  for (const UnitPlan& u : p.units) {
    if (u.layer == 31) continue;  // past the last attention only the prompt's last token goes on: the CPU may do
    if (u.split()) {  // the experts not resident stream in prefill
      offloaded_ffn += u.CountExperts(Phase::kPrefill, Placement::kGpu) < static_cast<int>(u.experts.size());
      for (const ExpertPlacement& e : u.experts) {
        if (e.prefill != Placement::kGpu) {
          EXPECT_EQ(e.prefill, Placement::kStream) << u.name;
        }
      }
      continue;
    }
    if (u.kind != UnitKind::kFfn || u.resident()) continue;
    ++offloaded_ffn;
    EXPECT_EQ(u.prefill, Placement::kStream) << u.name;
  }
  EXPECT_GT(offloaded_ffn, 10);
  EXPECT_GT(p.pcie_bytes_per_prefill_token, 0u);
}

TEST(Partitioner, ExpertsOnCpuWithAttentionOnGpu) {
  PartitionInput in = MixtralInput("sim:24GiB", CpuProfile(50, 500));
  in.request.rules.push_back(Rule("ffn_.*_exps=cpu"));
  const Plan p = Partition(in).value();
  for (const UnitPlan& u : p.units) {
    if (u.kind == UnitKind::kFfn) {
      EXPECT_EQ(u.prefill, Placement::kCpu) << u.name;
      EXPECT_EQ(u.decode, Placement::kCpu) << u.name;
    }
    if (u.kind == UnitKind::kAttn) {
      EXPECT_EQ(u.prefill, Placement::kGpu) << u.name;
      EXPECT_EQ(u.decode, Placement::kGpu) << u.name;
    }
  }
  EXPECT_NE(p.why.find("--place"), std::string::npos) << p.why;
  // The same with counts: every layer "on the GPU", the rule takes the experts back.
  in.request.gpu_layers = 32;
  const Plan q = Partition(in).value();
  EXPECT_EQ(Find(q, "blk.7.ffn").decode, Placement::kCpu);
  EXPECT_EQ(Find(q, "blk.7.attn").decode, Placement::kGpu);
}

TEST(Partitioner, FirstMatchingRuleWinsAndBadRulesAreErrors) {
  PartitionInput in = MixtralInput("sim:24GiB", CpuProfile(50, 500));
  in.request.rules = {Rule("blk\\.3\\.ffn=stream"), Rule("ffn=cpu")};
  const Plan p = Partition(in).value();
  EXPECT_EQ(Find(p, "blk.3.ffn").prefill, Placement::kStream);
  EXPECT_EQ(Find(p, "blk.3.ffn").decode, Placement::kStream);
  EXPECT_EQ(Find(p, "blk.4.ffn").decode, Placement::kCpu);

  in.request.rules = {Rule("no_such_tensor=cpu")};
  absl::StatusOr<Plan> bad = Partition(in);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(Message(bad.status()).find("matches no tensor"), std::string::npos) << bad.status();

  in.request.rules = {Rule("ffn=gpu")};  // 25 GiB of experts into 24 GiB
  bad = Partition(in);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(Message(bad.status()).find("--place rules need"), std::string::npos) << bad.status();
}

// A unit runs in one place: rules may match its tensors one by one, but where their first matches disagree the plan
// is refused, naming both rules and tensors. Between an expert rule and a whole-unit rule, the earlier wins.
TEST(Partitioner, RulesThatWouldSplitAUnitAreAnErrorAndTheFirstRuleWins) {
  PartitionInput in = MixtralInput("sim:24GiB", CpuProfile(50, 500));
  in.request.rules = {Rule("ffn_gate_inp=gpu"), Rule("exps=cpu")};
  absl::StatusOr<Plan> bad = Partition(in);
  ASSERT_FALSE(bad.ok());
  const std::string msg = Message(bad.status());
  for (const char* want : {"'ffn_gate_inp=gpu' matches blk.0.ffn_gate_inp.weight", "'exps=cpu' matches blk.0.ffn_",
                           "both of blk.0.ffn", "@EXPERTS"}) {
    EXPECT_NE(msg.find(want), std::string::npos) << want << " in: " << msg;
  }
  // Rules that agree on every tensor of a unit place it together.
  in.request.rules = {Rule("ffn_gate_inp=cpu"), Rule("exps=cpu")};
  const Plan agree = Partition(in).value();
  EXPECT_EQ(Find(agree, "blk.0.ffn").decode, Placement::kCpu);
  EXPECT_FALSE(Find(agree, "blk.0.ffn").split());

  // The whole-unit rule for layer 3 comes first: it takes that layer; the expert rule takes the others.
  in.request.rules = {Rule("blk\\.3\\.ffn=cpu"), Rule("ffn_.*_exps@0-1=gpu")};
  const Plan unit_first = Partition(in).value();
  EXPECT_FALSE(Find(unit_first, "blk.3.ffn").split());
  EXPECT_EQ(Find(unit_first, "blk.3.ffn").decode, Placement::kCpu);
  ASSERT_TRUE(Find(unit_first, "blk.4.ffn").split());
  EXPECT_EQ(Find(unit_first, "blk.4.ffn").CountExperts(Phase::kDecode, Placement::kGpu), 2);
  // Reversed, the expert rule comes first and takes layer 3 too.
  in.request.rules = {Rule("ffn_.*_exps@0-1=gpu"), Rule("blk\\.3\\.ffn=cpu")};
  const Plan experts_first = Partition(in).value();
  ASSERT_TRUE(Find(experts_first, "blk.3.ffn").split());
  EXPECT_EQ(Find(experts_first, "blk.3.ffn").CountExperts(Phase::kDecode, Placement::kGpu), 2);
}

TEST(Partitioner, NoGpuPutsEverythingOnTheCpu) {
  const Plan p = Partition(MixtralInput("none", CpuProfile(50, 500))).value();
  for (const UnitPlan& u : p.units) {
    EXPECT_EQ(u.prefill, Placement::kCpu);
    EXPECT_EQ(u.decode, Placement::kCpu);
  }
  EXPECT_EQ(p.gpu.total(), 0u);
  EXPECT_EQ(p.pcie_bytes_per_decode_token, 0u);
  EXPECT_EQ(p.host.kv, 32ull * 2 * 4096 * 1024 * 2);
}

TEST(Partitioner, MixtralOnTwelveAndTwentyFourGiB) {
  const Plan p12 = Partition(MixtralInput("sim:12GiB", CpuProfile(50, 300))).value();
  const Plan p24 = Partition(MixtralInput("sim:24GiB", CpuProfile(50, 300))).value();
  std::printf("---- Mixtral-8x7B Q4_K shape on sim:12GiB ----\n%s", PlanTable(p12).c_str());
  std::printf("---- Mixtral-8x7B Q4_K shape on sim:24GiB ----\n%s", PlanTable(p24).c_str());
  // Attention is read every token and is small: it is resident in both.
  for (const Plan* p : {&p12, &p24}) {
    for (const UnitPlan& u : p->units) {
      if (u.kind == UnitKind::kAttn) {
        EXPECT_TRUE(u.resident()) << u.name;
      }
    }
  }
  EXPECT_GT(p24.gpu.weights, p12.gpu.weights + 8 * kGiB);
  EXPECT_GT(p24.predicted_decode_tps, p12.predicted_decode_tps);
}

TEST(Partitioner, ZeroTokensInEitherPhaseStillPlan) {
  PartitionInput in = MixtralInput("sim:12GiB", CpuProfile(50, 300));
  in.gen_tokens = 0;
  EXPECT_TRUE(Partition(in).ok());
  in.gen_tokens = 128;
  in.prompt_tokens = 0;
  EXPECT_TRUE(Partition(in).ok());
  in.prompt_tokens = -1;
  EXPECT_FALSE(Partition(in).ok());
}

// Units built from real files: every tensor in one unit, bytes add up.
void CheckRealModel(const std::string& path) {
  std::unique_ptr<GgufFile> f = GgufFile::Open(path).value();
  const ModelConfig cfg = LoadModelConfig(*f).value();
  const std::vector<UnitSpec> units = BuildUnits(*f, cfg).value();
  ASSERT_EQ(units.size(), 2u + 2u * cfg.n_layer);
  std::map<std::string, int> seen;
  uint64_t unit_bytes = 0;
  for (const UnitSpec& u : units) {
    unit_bytes += u.weight_bytes;
    EXPECT_GE(u.packed_bytes, u.weight_bytes);
    size_t n_matrices = 0;  // each starts on a 256-byte boundary, expert slices too
    UnitWeights w = u.program->weights;
    w.ForEach([&](WeightMatrix&) { ++n_matrices; });
    EXPECT_LT(u.packed_bytes, u.weight_bytes + 256 * n_matrices);
    for (const std::string& t : u.tensors) ++seen[t];
  }
  uint64_t file_bytes = 0;
  for (const GgufTensorInfo& t : f->tensors()) {
    file_bytes += t.nbytes;
    const int want = (cfg.tied_output && t.name == "token_embd.weight") ? 2 : 1;
    EXPECT_EQ(seen[t.name], want) << t.name;
  }
  const uint64_t tied = cfg.tied_output ? f->FindTensor("token_embd.weight")->nbytes : 0;
  EXPECT_EQ(unit_bytes, file_bytes + tied);
  if (cfg.is_moe()) {
    EXPECT_GT(units[2].expert_bytes, 0u);
    EXPECT_EQ(units[2].program->weights.n_expert, cfg.n_expert);
  }

  PartitionInput in;
  in.config = cfg;
  in.units = units;
  in.profile = SimProfile(CpuProfile(20, 100), ParseSimSpec("sim:64MiB").value());
  in.devices = {DeviceDesc{.name = "sim:64MiB", .capacity = 64ull << 20, .supports = SimSupports}};
  in.n_ctx = 256;
  const Plan p = Partition(in).value();
  EXPECT_LE(p.gpu.total(), 64ull << 20);
  ExpectAttentionOnOneSide(p);
}

TEST(Partitioner, RealModelsStories260KMoe) { CheckRealModel(test::ModelPath("stories260K-moe4.gguf")); }
TEST(Partitioner, RealModelsTinyMixtral) { CheckRealModel(test::DataPath("models/tiny-mixtral-Q4_0.gguf")); }

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// A device that cannot run some unit's ops: auto keeps those units on the CPU, and counts that put them there are
// an error that names the device, the unit and the op.
TEST(Partitioner, UnitsGoOnlyWhereTheDeviceSupportsTheirOps) {
  PartitionInput in = MixtralInput("sim:24GiB", CpuProfile(50, 500));
  // A device without Q4_K matmuls: the experts (MoeExperts on Q4_K) and the attention (MatMul on Q4_K) cannot go.
  in.devices[0].supports = [](Op op, DType t) { return !(op == Op::kMoeExperts && t == DType::kQ4_K); };
  const Plan automatic = Partition(in).value();
  int ffn_on_gpu = 0, attn_on_gpu = 0;
  for (const UnitPlan& u : automatic.units) {
    if (u.kind == UnitKind::kFfn) ffn_on_gpu += GpuSide(u.prefill) || GpuSide(u.decode);
    if (u.kind == UnitKind::kAttn) attn_on_gpu += GpuSide(u.prefill) || GpuSide(u.decode);
  }
  EXPECT_EQ(ffn_on_gpu, 0) << automatic.why;
  EXPECT_GT(attn_on_gpu, 0) << automatic.why;  // the rest still uses the device

  in.request.gpu_layers = 2;
  const absl::StatusOr<Plan> counts = Partition(in);
  ASSERT_FALSE(counts.ok());
  const std::string msg(counts.status().message());
  EXPECT_NE(msg.find("sim:24GiB cannot run blk.30.ffn"), std::string::npos) << msg;
  EXPECT_NE(msg.find("MoeExperts for Q4_K"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tandem

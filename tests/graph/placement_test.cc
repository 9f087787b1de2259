// The placement request: --place rules, layer counts and their convention, the VRAM cap, byte formatting.
#include "graph/placement.h"

#include <gtest/gtest.h>

#include "core/status.h"

namespace tandem {
namespace {

TEST(Placement, ParsesRules) {
  PlaceRule r = ParsePlaceRule("ffn_.*_exps=cpu").value();
  EXPECT_EQ(r.pattern, "ffn_.*_exps");
  EXPECT_EQ(r.target, Placement::kCpu);
  EXPECT_TRUE(r.Matches("blk.3.ffn_up_exps.weight"));  // searched, not anchored
  EXPECT_FALSE(r.Matches("blk.3.ffn_up.weight"));
  EXPECT_EQ(ParsePlaceRule("attn=gpu")->target, Placement::kGpu);
  EXPECT_EQ(ParsePlaceRule("attn=stream")->target, Placement::kStream);
  // The target follows the last '=': the regex may hold one.
  r = ParsePlaceRule("a=b=stream").value();
  EXPECT_EQ(r.pattern, "a=b");
  EXPECT_TRUE(r.Matches("xa=by"));
}

TEST(Placement, BadRulesAreErrors) {
  for (const char* bad : {"ffn", "=cpu", "ffn=", "ffn=disk", "([=cpu"}) {
    absl::StatusOr<PlaceRule> r = ParsePlaceRule(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(Message(ParsePlaceRule("([=cpu").status()).find("regular expression"), std::string::npos);
}

TEST(Placement, ExpertSelectorsParse) {
  PlaceRule r = ParsePlaceRule("ffn_.*_exps@0-3,8,10-11=gpu").value();
  EXPECT_EQ(r.pattern, "ffn_.*_exps");
  EXPECT_EQ(r.experts, (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(r.target, Placement::kGpu);
  r = ParsePlaceRule("blk\\.3\\.ffn_.*_exps@5,1,5=stream").value();  // sorted, no repeats
  EXPECT_EQ(r.experts, (std::vector<int>{1, 5}));
  // An '@' that is not followed by a list belongs to the regex.
  r = ParsePlaceRule("a@b=cpu").value();
  EXPECT_EQ(r.pattern, "a@b");
  EXPECT_TRUE(r.experts.empty());
  for (const char* bad : {"exps@3-1=gpu", "exps@1,,2=gpu", "exps@-2=gpu", "exps@1-=gpu", "exps@9999999=gpu"}) {
    const absl::StatusOr<PlaceRule> b = ParsePlaceRule(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(Message(b.status()).find("expert list"), std::string::npos) << bad << ": " << b.status();
  }
}

TEST(Placement, FirstMatchingRuleWins) {
  const std::vector<PlaceRule> rules = {ParsePlaceRule("blk\\.1\\.=gpu").value(), ParsePlaceRule("ffn=cpu").value()};
  const std::vector<std::string> l1 = {"blk.1.ffn_norm.weight", "blk.1.ffn_up.weight"};
  const std::vector<std::string> l2 = {"blk.2.ffn_norm.weight"};
  const std::vector<std::string> attn = {"blk.2.attn_q.weight"};
  EXPECT_EQ(FirstMatchingRule(rules, l1), 0u);
  EXPECT_EQ(FirstMatchingRule(rules, l2), 1u);
  EXPECT_FALSE(FirstMatchingRule(rules, attn).has_value());
}

TEST(Placement, UnsetCountsTakeTheRest) {
  PlacementRequest r;
  r.gpu_layers = 10;
  LayerCounts c = ResolveCounts(r, 32, true).value();
  EXPECT_EQ(c.cpu, 22);
  EXPECT_EQ(c.stream, 0);
  EXPECT_EQ(c.gpu, 10);

  r = {};
  r.cpu_layers = 12;
  c = ResolveCounts(r, 32, true).value();
  EXPECT_EQ(c.gpu, 20);

  r = {};
  r.gpu_layers = 4;
  r.stream_layers = 8;
  c = ResolveCounts(r, 32, true).value();
  EXPECT_EQ(c.cpu, 20);

  r = {};
  r.cpu_layers = 2;
  r.gpu_layers = 2;
  c = ResolveCounts(r, 32, true).value();
  EXPECT_EQ(c.stream, 28);
}

TEST(Placement, CpuLayersFirstStreamNextGpuLast) {
  const LayerCounts c{.cpu = 2, .stream = 3, .gpu = 4};
  const Placement want[] = {Placement::kCpu,    Placement::kCpu,    Placement::kStream,
                            Placement::kStream, Placement::kStream, Placement::kGpu,
                            Placement::kGpu,    Placement::kGpu,    Placement::kGpu};
  for (int l = 0; l < 9; ++l) EXPECT_EQ(c.For(l), want[l]) << l;
}

TEST(Placement, CountErrorsSayWhatWouldAddUp) {
  PlacementRequest r;
  r.gpu_layers = 10;
  r.cpu_layers = 10;
  r.stream_layers = 10;
  absl::StatusOr<LayerCounts> c = ResolveCounts(r, 32, true);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(Message(c.status()).find("adds up to 30 layers but the model has 32"), std::string::npos) << c.status();
  EXPECT_NE(Message(c.status()).find("--cpu-layers 12"), std::string::npos) << c.status();

  r = {};
  r.gpu_layers = 33;
  c = ResolveCounts(r, 32, true);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(Message(c.status()).find("the model has 32"), std::string::npos) << c.status();

  r = {};
  r.gpu_layers = -1;
  EXPECT_FALSE(ResolveCounts(r, 32, true).ok());

  r = {};
  r.gpu_layers = 1;
  c = ResolveCounts(r, 32, false);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(Message(c.status()).find("no GPU"), std::string::npos) << c.status();

  r = {};
  r.cpu_layers = 32;
  EXPECT_TRUE(ResolveCounts(r, 32, false).ok());
  r.cpu_layers = 31;  // the last layer would go to the missing GPU
  EXPECT_FALSE(ResolveCounts(r, 32, false).ok());
}

TEST(Placement, VramCap) {
  PlacementRequest r;
  const uint64_t g = 1ull << 30;
  EXPECT_EQ(EffectiveVramCap(r, false, 12 * g), 0u);
  EXPECT_EQ(EffectiveVramCap(r, true, 10 * g), 9 * g);  // 10% headroom
  r.vram_budget = 6 * g;
  EXPECT_EQ(EffectiveVramCap(r, true, 10 * g), 6 * g);  // explicit: exactly
  r.vram_budget = 16 * g;
  EXPECT_EQ(EffectiveVramCap(r, true, 10 * g), 10 * g);  // never above the device
  EXPECT_EQ(EffectiveVramCap(r, true, 0), 16 * g);       // unknown capacity: the budget
}

TEST(Placement, FormatsBytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(12ull << 30), "12 GiB");
  EXPECT_EQ(FormatBytes(static_cast<uint64_t>(25.1 * (1ull << 30))), "25.1 GiB");
  EXPECT_EQ(FormatBytes(3ull << 20), "3 MiB");
}

TEST(Placement, DescribesCounts) {
  PlacementRequest r;
  r.gpu_layers = 30;
  r.stream_layers = 2;
  EXPECT_EQ(r.DescribeCounts(), "--gpu-layers 30 --stream-layers 2");
  EXPECT_TRUE(r.counts_given());
  EXPECT_FALSE(PlacementRequest{}.counts_given());
}

}  // namespace
}  // namespace tandem

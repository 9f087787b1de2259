// `tandem sweep`: its pure parts (points, knee, CSV, SVG) and the command end to end on a simulated GPU.
#include <expat.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/profile.h"
#include "tests/graph/mixtral_units.h"
#include "tests/testutil.h"
#include "tools/sweep.h"
#include "tools/sweep_output.h"
#include "tools/sweep_svg.h"

namespace tandem {
namespace {

using cli::SweepAxis;
using cli::SweepResult;
using test::CmdResult;
using test::RunCommand;
using test::TandemBin;

// ---- pure parts ----

TEST(SweepCounts, FromNoneToAllInAtMostMaxPoints) {
  EXPECT_EQ(cli::SweepCounts(4, 12), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(cli::SweepCounts(32, 12), (std::vector<int>{0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 32}));
  for (int n_layer : {1, 5, 11, 12, 13, 47, 80}) {
    const std::vector<int> c = cli::SweepCounts(n_layer, 12);
    EXPECT_LE(c.size(), 12u) << n_layer;
    EXPECT_EQ(c.front(), 0);
    EXPECT_EQ(c.back(), n_layer);
    EXPECT_TRUE(std::is_sorted(c.begin(), c.end()));
  }
}

TEST(SweepPoints, LayersSetGpuLayersAndEndWithAuto) {
  cli::PlacementFlags base;
  base.device = "sim:1GiB";
  auto points = cli::MakeSweepPoints(base, SweepAxis::kLayers, 3, false, 12);
  ASSERT_TRUE(points.ok()) << points.status();
  ASSERT_EQ(points->size(), 5u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*points)[i].placement.gpu_layers, i);
    EXPECT_EQ((*points)[i].placement.device, "sim:1GiB");
  }
  EXPECT_TRUE(points->back().is_auto);
  EXPECT_FALSE(points->back().placement.any_count());
}

TEST(SweepPoints, ExpertsPutTheFirstLayersExpertsOnTheCpuAfterTheUsersRules) {
  cli::PlacementFlags base;
  base.place = {"output=cpu"};
  auto points = cli::MakeSweepPoints(base, SweepAxis::kExperts, 3, true, 12);
  ASSERT_TRUE(points.ok()) << points.status();
  const cli::SweepPoint& one = (*points)[1];  // experts of the last layer on the GPU
  EXPECT_EQ(one.placement.gpu_layers, 3);
  ASSERT_EQ(one.placement.place.size(), 2u);
  EXPECT_EQ(one.placement.place[0], "output=cpu");
  EXPECT_EQ(one.placement.place[1], "^blk\\.(0|1)\\.ffn_.*_exps=cpu");
  EXPECT_EQ((*points)[3].placement.place.size(), 1u);  // all experts resident: no rule of ours
}

TEST(SweepPoints, RefuseCountsAndExpertsWithoutExperts) {
  cli::PlacementFlags counted;
  counted.gpu_layers = 2;
  EXPECT_FALSE(cli::MakeSweepPoints(counted, SweepAxis::kLayers, 3, false, 12).ok());
  EXPECT_FALSE(cli::MakeSweepPoints(cli::PlacementFlags{}, SweepAxis::kExperts, 3, false, 12).ok());
}

TEST(SweepPosition, ResidentShareOfTheLayersBytes) {
  Plan plan;
  plan.units = {{.name = "embd", .kind = UnitKind::kEmbd, .weight_bytes = 1000},
                {.name = "blk.0.attn", .kind = UnitKind::kAttn, .layer = 0, .weight_bytes = 10},
                {.name = "blk.0.ffn", .kind = UnitKind::kFfn, .layer = 0, .weight_bytes = 90},
                {.name = "blk.1.attn", .kind = UnitKind::kAttn, .layer = 1, .decode = Placement::kGpu,
                 .weight_bytes = 10},
                {.name = "blk.1.ffn", .kind = UnitKind::kFfn, .layer = 1, .decode = Placement::kStream,
                 .weight_bytes = 90}};
  EXPECT_DOUBLE_EQ(cli::PlanPosition(plan, SweepAxis::kLayers, 2), 2 * 10.0 / 200);
  EXPECT_DOUBLE_EQ(cli::PlanPosition(plan, SweepAxis::kExperts, 2), 0.0);  // streamed is not resident
}

SweepResult Measured(int count, double decode_tps) {
  SweepResult r;
  r.point.label = Cat("gpu-layers ", count);
  r.point.count = count;
  r.x = count;
  r.ok = true;
  r.decode_tps = decode_tps;
  r.prefill_tps = 10 * decode_tps;
  r.predicted_decode_tps = decode_tps * 1.1;
  r.predicted_prefill_tps = 9 * decode_tps;
  r.peak_vram_bytes = static_cast<uint64_t>(count) << 20;
  r.predicted_vram_bytes = static_cast<uint64_t>(count) << 20;
  r.vram_budget_bytes = 5 << 20;
  return r;
}

cli::SweepReport Report() {
  cli::SweepReport rep{.model = "tiny <mixtral>", .device = "sim:8MiB", .n_layer = 4, .n_prompt = 32, .n_gen = 8,
                       .reps = 1, .n_threads = 2};
  rep.results = {Measured(0, 10), Measured(1, 14), Measured(2, 19.5), Measured(3, 20), Measured(4, 0)};
  rep.results[4].ok = false;
  rep.results[4].note = "infeasible: --gpu-layers 4 needs 9 MiB, the budget is 8 MiB";
  SweepResult a = Measured(0, 19.8);
  a.point = {.label = "auto", .is_auto = true};
  a.x = 2.5;
  rep.results.push_back(a);
  cli::MarkSweep(rep);
  return rep;
}

TEST(SweepKnee, FewestLayersWithinFivePercentOfTheBestSweptPoint) {
  const cli::SweepReport rep = Report();
  ASSERT_TRUE(rep.best.has_value());
  EXPECT_EQ(*rep.best, 3u);  // 20 tok/s; auto (19.8) and the infeasible point do not count
  ASSERT_TRUE(rep.knee.has_value());
  EXPECT_EQ(*rep.knee, 2u);  // 19.5 >= 0.95 * 20, and 14 is not
  ASSERT_TRUE(rep.auto_index.has_value());
  EXPECT_EQ(*rep.auto_index, 5u);
  EXPECT_FALSE(cli::FindKnee({}).has_value());
}

std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells(1);
    bool quoted = false;
    for (size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (c == '"' && quoted && i + 1 < line.size() && line[i + 1] == '"') {
        cells.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = !quoted;
      } else if (c == ',' && !quoted) {
        cells.emplace_back();
      } else {
        cells.back() += c;
      }
    }
    rows.push_back(cells);
  }
  return rows;
}

std::map<std::string, std::string> Row(const std::vector<std::vector<std::string>>& csv, size_t i) {
  std::map<std::string, std::string> row;
  for (size_t c = 0; c < csv[0].size() && c < csv[i].size(); ++c) row[csv[0][c]] = csv[i][c];
  return row;
}

TEST(SweepCsv, OneRowPerPointWithStatusAndMarks) {
  const auto csv = ParseCsv(cli::SweepCsv(Report()));
  ASSERT_EQ(csv.size(), 7u);  // header, 5 swept, auto
  std::vector<std::string> want;
  for (int i = 0; cli::kSweepCsvColumns[i] != nullptr; ++i) want.push_back(cli::kSweepCsvColumns[i]);
  EXPECT_EQ(csv[0], want);
  for (size_t i = 1; i < csv.size(); ++i) EXPECT_EQ(csv[i].size(), want.size()) << i;
  EXPECT_EQ(Row(csv, 3)["is_knee"], "1");
  EXPECT_EQ(Row(csv, 4)["is_best"], "1");
  EXPECT_EQ(Row(csv, 5)["status"], "infeasible");
  EXPECT_NE(Row(csv, 5)["note"].find("needs 9 MiB"), std::string::npos);
  EXPECT_EQ(Row(csv, 6)["point"], "auto");
  EXPECT_EQ(Row(csv, 6)["is_auto"], "1");
  EXPECT_EQ(Row(csv, 6)["x"], "2.500");
}

// The SVG through a real XML parser: element ids, and each element's attributes.
struct SvgElements {
  std::vector<std::string> names;
  std::set<std::string> ids;
  std::set<std::string> classes;
  std::string text;  // all character data
};

SvgElements ParseSvg(const std::string& svg, std::string* error) {
  SvgElements out;
  XML_Parser parser = XML_ParserCreate(nullptr);
  XML_SetUserData(parser, &out);
  XML_SetElementHandler(
      parser,
      [](void* data, const XML_Char* name, const XML_Char** attrs) {
        auto* e = static_cast<SvgElements*>(data);
        e->names.push_back(name);
        for (int i = 0; attrs[i] != nullptr; i += 2) {
          if (std::string(attrs[i]) == "id") e->ids.insert(attrs[i + 1]);
          if (std::string(attrs[i]) == "class") e->classes.insert(attrs[i + 1]);
        }
      },
      [](void*, const XML_Char*) {});
  XML_SetCharacterDataHandler(parser, [](void* data, const XML_Char* s, int len) {
    static_cast<SvgElements*>(data)->text.append(s, len);
  });
  if (XML_Parse(parser, svg.data(), static_cast<int>(svg.size()), 1) == XML_STATUS_ERROR) {
    *error = Cat(XML_ErrorString(XML_GetErrorCode(parser)), " at line ", XML_GetCurrentLineNumber(parser));
  }
  XML_ParserFree(parser);
  return out;
}

void ExpectSweepSvg(const std::string& svg, bool infeasible, bool budget_line) {
  std::string error;
  const SvgElements e = ParseSvg(svg, &error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_FALSE(e.names.empty());
  EXPECT_EQ(e.names.front(), "svg");
  for (const char* id : {"decode-measured", "decode-predicted", "prefill-measured", "prefill-predicted",
                         "vram-measured", "vram-predicted", "pcie-measured", "pcie-predicted", "knee", "legend",
                         "title", "x-label", "auto-why"}) {
    EXPECT_TRUE(e.ids.count(id)) << id;
  }
  // The budget is a line when the use comes near it, else a note in the panel's title.
  EXPECT_EQ(e.ids.count("vram-budget"), budget_line ? 1u : 0u);
  EXPECT_EQ(e.text.find("is far above") == std::string::npos, budget_line);
  EXPECT_TRUE(e.classes.count("auto-plan"));
  EXPECT_EQ(e.classes.count("infeasible"), infeasible ? 1u : 0u);
  for (const char* words : {"tandem sweep", "decode tokens/s", "prefill tokens/s", "VRAM", "PCIe", "knee", "auto"}) {
    EXPECT_NE(e.text.find(words), std::string::npos) << words;
  }
}

TEST(SweepSvg, WellFormedWithEverySeriesAndMarker) {
  const std::string svg = cli::SweepSvg(Report());
  ExpectSweepSvg(svg, /*infeasible=*/true, /*budget_line=*/true);
  EXPECT_NE(svg.find("tiny &lt;mixtral&gt; on sim:8MiB"), std::string::npos);  // escaped title
}

// ---- the command ----

class SweepCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = ::testing::TempDir() + "/tandem_sweep_test_" + std::to_string(getpid());
    ASSERT_EQ(RunCommand("mkdir -p " + dir_).exit_code, 0);
    profile_ = dir_ + "/profile.json";
    ASSERT_TRUE(SaveProfile(profile_, test::CpuProfile(/*gemv_gbps=*/20, /*gemm_gflops=*/100)).ok());
    // 16 experts, 2 used, in tiny shapes: the whole sweep runs in seconds.
    model_ = dir_ + "/moe16.gguf";
    const CmdResult r = RunCommand(TandemBin() +
                                   " synth --arch mixtral --layers 3 --embd 64 --ff 64 --expert-ff 64 --heads 4 --kv-heads 2"
                                   " --experts 16 --experts-used 2 --vocab 512 --type Q4_0 -o " + model_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  CmdResult Sweep(const std::string& args) {
    return RunCommand(TandemBin() + " sweep --profile " + profile_ + " -m " + model_ + " -p 8 -n 4 -r 1 -t 2 " +
                      args);
  }
  static std::string dir_, profile_, model_;
};
std::string SweepCli::dir_, SweepCli::profile_, SweepCli::model_;

TEST_F(SweepCli, WritesCsvAndSvgForEveryLayerCountAndAuto) {
  const std::string out = dir_ + "/layers";
  const CmdResult r = Sweep("--device sim:64MiB -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("best swept point"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("sweep 5/5"), std::string::npos) << r.err;  // plain progress lines off a terminal
  const auto csv = ParseCsv(test::ReadFile(out + ".csv"));
  ASSERT_EQ(csv.size(), 6u);  // header, gpu-layers 0..3, auto
  int knees = 0;
  for (size_t i = 1; i < csv.size(); ++i) {
    auto row = Row(csv, i);
    EXPECT_EQ(row["status"], "ok") << row["note"];
    EXPECT_GT(std::stod(row["decode_tps"]), 0);
    EXPECT_GT(std::stod(row["prefill_tps"]), 0);
    EXPECT_GT(std::stod(row["predicted_decode_tps"]), 0);
    knees += row["is_knee"] == "1";
    if (i <= 4) {
      EXPECT_EQ(row["point"], Cat("gpu-layers ", i - 1));
      EXPECT_NE(row["plan"].find(Cat(i - 1, " gpu layers")), std::string::npos) << row["plan"];
    }
  }
  EXPECT_EQ(knees, 1);
  EXPECT_EQ(Row(csv, 1)["peak_vram_bytes"], "0");  // nothing on the GPU, nothing allocated there
  EXPECT_GT(std::stoull(Row(csv, 4)["peak_vram_bytes"]), std::stoull(Row(csv, 2)["peak_vram_bytes"]));
  EXPECT_EQ(Row(csv, 5)["point"], "auto");
  ExpectSweepSvg(test::ReadFile(out + ".svg"), /*infeasible=*/false, /*budget_line=*/false);  // 0.4 MiB used of 58
}

TEST_F(SweepCli, InfeasiblePointIsARowNotAFailure) {
  // Find a budget the first layers fit and all layers do not: the plan of 3 layers, less a little.
  const CmdResult plan = RunCommand(TandemBin() + " plan --profile " + profile_ + " -m " + model_ +
                                    " --device sim:64MiB --gpu-layers 3 -c 9 -b 8 --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const uint64_t all = nlohmann::json::parse(plan.out)["memory"]["gpu"]["total"].get<uint64_t>();
  const std::string out = dir_ + "/tight";
  const CmdResult r = Sweep(Cat("--device sim:64MiB --vram-budget ", all - 1, " --format json -o ", out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("note: gpu-layers 3: infeasible"), std::string::npos) << r.err;
  const nlohmann::json j = test::ReadJson(out + ".json");
  ASSERT_EQ(j["points"].size(), 5u);
  EXPECT_EQ(j["points"][3]["status"], "infeasible");
  EXPECT_NE(j["points"][3]["note"].get<std::string>().find("VRAM"), std::string::npos);
  EXPECT_EQ(j["points"][0]["status"], "ok");
  EXPECT_EQ(j["points"][4]["status"], "ok");  // auto fits itself to the budget
  ExpectSweepSvg(test::ReadFile(out + ".svg"), /*infeasible=*/true, /*budget_line=*/true);
}

TEST_F(SweepCli, OverExpertsKeepsAttentionOnTheGpu) {
  const std::string out = dir_ + "/experts";
  const CmdResult r = Sweep("--device sim:64MiB --over experts --format json -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = test::ReadJson(out + ".json");
  EXPECT_EQ(j["axis"], "experts");
  ASSERT_EQ(j["points"].size(), 5u);
  EXPECT_EQ(j["points"][0]["point"], "expert-layers 0");
  EXPECT_NE(j["points"][0]["plan"].get<std::string>().find("--place rules fixed 3 units"), std::string::npos)
      << j["points"][0]["plan"];
  // All attention resident even with no experts on the GPU, so VRAM is in use from the first point on.
  EXPECT_GT(j["points"][0]["measured"]["peak_vram_bytes"].get<uint64_t>(), 0u);
}

TEST_F(SweepCli, BadFlagsAreOneLineErrors) {
  for (const std::string& args :
       {std::string("--device sim:64MiB"), std::string("--device sim:64MiB -o x --gpu-layers 2"),
        std::string("--device none -o x"), std::string("--device sim:64MiB -o x --over heads"),
        std::string("--device sim:64MiB -o x --format xml"), std::string("--device sim:64MiB -o x -r 0")}) {
    const CmdResult r = Sweep(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace tandem

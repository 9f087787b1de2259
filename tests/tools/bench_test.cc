// `tandem bench` as llama-bench's users script it: -t lists, and the JSON keys llama-bench writes.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "tests/testutil.h"

namespace tandem {
namespace {

using test::RunCommand;
using test::TandemBin;

TEST(Bench, ThreadListsRunEveryTestAtEachCount) {
  const test::CmdResult r = RunCommand(TandemBin() + " bench -p 8 -n 4 -r 2 -t 1,2 --no-probe -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 4u);
  const std::vector<std::pair<int, int>> want = {{1, 8}, {1, 0}, {2, 8}, {2, 0}};  // (threads, n_prompt)
  for (size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& row = rows[i];
    EXPECT_EQ(row["n_threads"], want[i].first) << i;
    EXPECT_EQ(row["n_prompt"], want[i].second) << i;
    for (const char* key : {"build_commit", "model_filename", "model_type", "model_size", "model_n_params", "n_batch",
                            "n_gpu_layers", "type_k", "type_v", "test_time", "n_gen", "avg_ns", "stddev_ns",
                            "avg_ts", "stddev_ts", "samples_ns", "samples_ts"}) {
      EXPECT_TRUE(row.contains(key)) << key;
    }
    // samples_ts are the repetitions' tokens/s, whose mean avg_ts is.
    const std::vector<double> ts = row["samples_ts"];
    ASSERT_EQ(ts.size(), 2u);
    EXPECT_NEAR(std::accumulate(ts.begin(), ts.end(), 0.0) / 2, row["avg_ts"].get<double>(),
                1e-6 * row["avg_ts"].get<double>());
    EXPECT_EQ(row["n_gpu_layers"], 0);  // CPU only
    // llama-bench's build_commit is the git commit, as `tandem --version` prints it.
    const std::string commit = row["build_commit"];
    EXPECT_NE(RunCommand(TandemBin() + " --version").out.find("(commit " + commit + ")"), std::string::npos) << commit;
    const test::CmdResult git = RunCommand("git -C " + test::DataPath("") + " rev-parse --short=9 HEAD");
    if (git.exit_code == 0) {
      EXPECT_EQ(commit.substr(0, 9), git.out.substr(0, 9));
    } else {
      EXPECT_EQ(commit, "unknown");
    }
  }
  // All layers on a simulated GPU: llama-bench's n_gpu_layers counts them.
  const test::CmdResult gpu = RunCommand(TandemBin() + " bench -p 0 -n 4 -r 1 --no-probe --device sim:64MiB -ngl 99 -o json");
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  EXPECT_EQ(nlohmann::json::parse(gpu.out)[0]["n_gpu_layers"], 5);  // stories260K's 5 layers
  // A bad list is a one-line error.
  const test::CmdResult bad = RunCommand(TandemBin() + " bench -t 1,0");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.err.rfind("error: ", 0), 0u) << bad.err;
}

// A long prefill test says, before it starts, how long the plan expects it to take (here 2048 tokens x 10000
// repetitions); the run is cut off once the note is out.
TEST(Bench, LongPrefillTestsAreAnnounced) {
  // Waits for the note (at most a minute: a first run here may calibrate), then stops the bench.
  const test::CmdResult r = RunCommand(
      "(f=$(mktemp); " + TandemBin() + " bench -p 2048 -n 0 -r 10000 --no-probe -o json 2>\"$f\" >/dev/null & p=$!; "
      "for i in $(seq 600); do grep -q 'note: the prefill' \"$f\" && break; kill -0 $p 2>/dev/null || break; "
      "sleep 0.1; done; kill $p 2>/dev/null; wait $p 2>/dev/null; cat \"$f\" >&2; rm -f \"$f\")");
  EXPECT_NE(r.err.find("note: the prefill tests (2048 tokens, 10000 repetitions each) take about "), std::string::npos)
      << r.err;
  const test::CmdResult quick = RunCommand(TandemBin() + " bench -p 8 -n 0 -r 1 --no-probe -o json");
  ASSERT_EQ(quick.exit_code, 0) << quick.err;
  EXPECT_EQ(quick.err.find("note: the prefill tests"), std::string::npos) << quick.err;
}

}  // namespace
}  // namespace tandem

// libFuzzer target over the routing-statistics reader (`--routing FILE`): any bytes are either refused with an
// error or give statistics that hold together: picks summing to tokens * k per layer, shares summing to k, a hot
// order that is a permutation, and a file that reads back the same once written.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "graph/routing_stats.h"

namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "routing_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<tandem::RoutingStats> parsed = tandem::ParseRoutingStats(text);
  if (!parsed.ok()) {
    Check(!parsed.status().message().empty(), "an error without a message");
    return 0;
  }
  const tandem::RoutingStats& s = *parsed;
  Check(s.n_layer > 0 && s.n_expert > 0 && s.k > 0 && s.k <= s.n_expert, "bad shape accepted");
  Check(s.tokens.size() == static_cast<size_t>(s.n_layer), "tokens of the wrong length");
  Check(s.picks.size() == static_cast<size_t>(s.n_layer) * s.n_expert, "picks of the wrong length");
  for (int l = 0; l < s.n_layer; ++l) {
    uint64_t sum = 0;
    double share = 0;
    for (int e = 0; e < s.n_expert; ++e) {
      sum += s.picks[static_cast<size_t>(l) * s.n_expert + e];
      share += s.Share(l, e);
    }
    Check(sum == s.tokens[l] * static_cast<uint64_t>(s.k), "picks do not sum to tokens * k");
    Check(std::fabs(share - s.k) < 1e-6 * s.k, "shares do not sum to k");
    std::vector<int> order = s.HotOrder(l);
    std::vector<int> sorted(order);
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> all(static_cast<size_t>(s.n_expert));
    std::iota(all.begin(), all.end(), 0);
    Check(sorted == all, "the hot order is not a permutation");
  }
  // What is written reads back the same.
  const std::string path = "/tmp/routing_fuzz_" + std::to_string(getpid()) + ".json";
  if (tandem::SaveRoutingStats(s, path).ok()) {
    const absl::StatusOr<tandem::RoutingStats> again = tandem::LoadRoutingStats(path);
    Check(again.ok() && again->tokens == s.tokens && again->picks == s.picks && again->k == s.k,
          "a saved file does not read back");
    std::remove(path.c_str());
  }
  return 0;
}

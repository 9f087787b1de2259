// How an MoE model's routers spread tokens over experts: picks per layer and expert, recorded from real runs
// (`tandem run --routing-out FILE`, ExecutorOptions::on_routing) and read by the planner (`--routing FILE`) to
// choose hot experts and to predict how many distinct experts a batch reaches and how often a resident set is hit.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem {

struct RoutingStats {
  int n_layer = 0;
  int n_expert = 0;
  int k = 0;                     // experts per token
  std::vector<uint64_t> tokens;  // [layer]: tokens routed
  std::vector<uint64_t> picks;   // [layer * n_expert + e]: tokens that picked expert e

  static RoutingStats Empty(int n_layer, int n_expert, int k);
  // Adds one batch's routing of `layer`: ids [n_tok][k], each in [0, n_expert).
  absl::Status Add(int layer, std::span<const int32_t> ids, int64_t n_tok, int k);
  bool has_layer(int layer) const { return layer >= 0 && layer < n_layer && tokens[layer] > 0; }
  // The chance that one token picks expert e in `layer` (the picks over the tokens; they sum to k). Uniform k/n
  // for a layer with no tokens.
  double Share(int layer, int e) const;
  // The layer's experts, most picked first (ties: lower index first).
  std::vector<int> HotOrder(int layer) const;
};

// Expected distinct experts a batch of n_tok tokens reaches, when a token picks expert e with chance share[e]
// (independently across tokens): sum over e of 1 - (1 - share[e])^n_tok. With every share k/n it is
// n (1 - (1 - k/n)^n_tok), the uniform formula.
double ExpectedDistinctExperts(std::span<const double> share, int64_t n_tok);

// The share of a layer's routed picks that land in `set` (expert indices), predicted from `stats`: the sum of
// the set's shares over k.
double PredictedHitRate(const RoutingStats& stats, int layer, std::span<const int> set);
// The same measured on another recording: picks of the set over all picks in that layer (0 when it has none).
double MeasuredHitRate(const RoutingStats& measured, int layer, std::span<const int> set);

// JSON: {"n_layer":..,"n_expert":..,"k":..,"layers":[{"tokens":T,"picks":[...]}, ...]}. Loading checks every
// field (a hostile or truncated file is a one-line error): bounds (n_layer <= 4096, n_expert <= 1024,
// 1 <= k <= n_expert), one picks entry per expert, each at most the layer's tokens, summing to tokens x k.
absl::Status SaveRoutingStats(const RoutingStats& stats, const std::string& path);
absl::StatusOr<RoutingStats> LoadRoutingStats(const std::string& path);
absl::StatusOr<RoutingStats> ParseRoutingStats(std::string_view json);
// Checks a loaded file against the model the planner places: same layers, experts and k.
absl::Status CheckRoutingMatches(const RoutingStats& stats, int n_layer, int n_expert, int k);

}  // namespace tandem

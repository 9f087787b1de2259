#include "graph/routing_stats.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "core/status.h"
#include "nlohmann/json.hpp"

namespace tandem {
namespace {

using nlohmann::json;

// Bounds a file may claim: far beyond real models (DeepSeek V3: 61 layers of 256 experts), small enough that the
// tables stay within 32 MiB and sums cannot overflow (picks <= tokens < 2^50, times 1024 experts < 2^60).
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxExperts = 1024;
constexpr uint64_t kMaxTokens = uint64_t{1} << 50;
// 4096 layers x 1024 experts of 16-digit counts is about 70 MiB; anything far larger is not a routing file.
constexpr uint64_t kMaxFileBytes = uint64_t{256} << 20;

// j[key] as an integer in lo..hi, or a one-line error naming the key.
absl::StatusOr<int64_t> ReadInt(const json& j, const char* key, int64_t lo, int64_t hi) {
  if (!j.contains(key)) return InvalidArgument("routing: '", key, "' is missing");
  const json& v = j.at(key);
  // Unsigned first: a value above int64's range would wrap when read as signed.
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo) {
      return InvalidArgument("routing: '", key, "' must be in ", lo, "..", hi, ", got ", u);
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (s < lo || s > hi) return InvalidArgument("routing: '", key, "' must be in ", lo, "..", hi, ", got ", s);
    return s;
  }
  return InvalidArgument("routing: '", key, "' must be an integer");
}

// A count: a non-negative integer no larger than `hi` (`limit` says what hi is).
absl::StatusOr<uint64_t> ReadCount(const json& v, uint64_t hi, const std::string& where, std::string_view limit) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
    return InvalidArgument("routing: ", where, " must be a non-negative integer");
  }
  const uint64_t u = v.get<uint64_t>();
  if (u > hi) return InvalidArgument("routing: ", where, " is ", u, ", more than ", limit, " (", hi, ")");
  return u;
}

absl::StatusOr<RoutingStats> FromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("routing: not a JSON object");
  TANDEM_ASSIGN_OR_RETURN(const int64_t n_layer, ReadInt(j, "n_layer", 1, kMaxLayers));
  TANDEM_ASSIGN_OR_RETURN(const int64_t n_expert, ReadInt(j, "n_expert", 1, kMaxExperts));
  TANDEM_ASSIGN_OR_RETURN(const int64_t k, ReadInt(j, "k", 1, n_expert));
  if (!j.contains("layers") || !j.at("layers").is_array()) return InvalidArgument("routing: 'layers' must be an array");
  const json& layers = j.at("layers");
  if (static_cast<int64_t>(layers.size()) != n_layer) {
    return InvalidArgument("routing: 'layers' has ", layers.size(), " entries for n_layer ", n_layer);
  }
  RoutingStats s = RoutingStats::Empty(static_cast<int>(n_layer), static_cast<int>(n_expert), static_cast<int>(k));
  for (int64_t il = 0; il < n_layer; ++il) {
    const json& l = layers[static_cast<size_t>(il)];
    const std::string where = Cat("layer ", il);
    if (!l.is_object() || !l.contains("tokens") || !l.contains("picks")) {
      return InvalidArgument("routing: ", where, " must be an object with 'tokens' and 'picks'");
    }
    TANDEM_ASSIGN_OR_RETURN(const uint64_t tokens,
                            ReadCount(l.at("tokens"), kMaxTokens, where + " tokens", "the limit"));
    const json& picks = l.at("picks");
    if (!picks.is_array() || static_cast<int64_t>(picks.size()) != n_expert) {
      return InvalidArgument("routing: ", where, " picks must be an array of n_expert (", n_expert, ") counts");
    }
    uint64_t sum = 0;
    for (int64_t e = 0; e < n_expert; ++e) {
      // Top-k picks distinct experts, so one expert is picked at most once per token.
      TANDEM_ASSIGN_OR_RETURN(const uint64_t p,
                              ReadCount(picks[static_cast<size_t>(e)], tokens, Cat(where, " expert ", e, " picks"),
                                        "the layer's tokens"));
      s.picks[static_cast<size_t>(il * n_expert + e)] = p;
      sum += p;
    }
    if (sum != tokens * static_cast<uint64_t>(k)) {
      return InvalidArgument("routing: ", where, " picks sum to ", sum, ", not tokens x k = ", tokens, " x ", k);
    }
    s.tokens[static_cast<size_t>(il)] = tokens;
  }
  return s;
}

// The set's distinct in-range experts (a repeated or stray index must not count twice or read out of bounds).
std::vector<int> Distinct(std::span<const int> set, int n_expert) {
  std::vector<char> seen(static_cast<size_t>(std::max(n_expert, 0)), 0);
  std::vector<int> out;
  for (int e : set) {
    if (e < 0 || e >= n_expert || seen[e]) continue;
    seen[e] = 1;
    out.push_back(e);
  }
  return out;
}

bool Shaped(const RoutingStats& s) {
  return s.n_layer >= 0 && s.n_expert >= 0 && s.tokens.size() == static_cast<size_t>(s.n_layer) &&
         s.picks.size() == static_cast<size_t>(s.n_layer) * s.n_expert;
}

}  // namespace

RoutingStats RoutingStats::Empty(int n_layer, int n_expert, int k) {
  RoutingStats s;
  s.n_layer = n_layer;
  s.n_expert = n_expert;
  s.k = k;
  s.tokens.assign(static_cast<size_t>(std::max(n_layer, 0)), 0);
  s.picks.assign(static_cast<size_t>(std::max(n_layer, 0)) * std::max(n_expert, 0), 0);
  return s;
}

absl::Status RoutingStats::Add(int layer, std::span<const int32_t> ids, int64_t n_tok, int k_used) {
  if (layer < 0 || layer >= n_layer) return InvalidArgument("routing: layer ", layer, " of ", n_layer);
  if (k_used != k || static_cast<int64_t>(ids.size()) != n_tok * k) {
    return InvalidArgument("routing: ", ids.size(), " ids for ", n_tok, " tokens of top-", k_used, " (expected ", k,
                           ")");
  }
  for (int32_t e : ids) {
    if (e < 0 || e >= n_expert) return InvalidArgument("routing: expert ", e, " of ", n_expert);
  }
  for (int32_t e : ids) ++picks[static_cast<size_t>(layer) * n_expert + e];
  tokens[layer] += static_cast<uint64_t>(n_tok);
  return absl::OkStatus();
}

double RoutingStats::Share(int layer, int e) const {
  if (!has_layer(layer)) return n_expert > 0 ? static_cast<double>(std::min(k, n_expert)) / n_expert : 0;
  return static_cast<double>(picks[static_cast<size_t>(layer) * n_expert + e]) / static_cast<double>(tokens[layer]);
}

std::vector<int> RoutingStats::HotOrder(int layer) const {
  std::vector<int> order(static_cast<size_t>(std::max(n_expert, 0)));
  std::iota(order.begin(), order.end(), 0);
  if (!has_layer(layer)) return order;
  const uint64_t* p = picks.data() + static_cast<size_t>(layer) * n_expert;
  std::stable_sort(order.begin(), order.end(), [p](int a, int b) { return p[a] > p[b]; });
  return order;
}

double ExpectedDistinctExperts(std::span<const double> share, int64_t n_tok) {
  double d = 0;
  for (double p : share) d += 1.0 - std::pow(1.0 - std::clamp(p, 0.0, 1.0), static_cast<double>(n_tok));
  return d;
}

double PredictedHitRate(const RoutingStats& stats, int layer, std::span<const int> set) {
  if (stats.k <= 0 || stats.n_expert <= 0 || layer < 0 || layer >= stats.n_layer || !Shaped(stats)) return 0;
  double shares = 0;
  for (int e : Distinct(set, stats.n_expert)) shares += stats.Share(layer, e);
  return std::clamp(shares / std::min(stats.k, stats.n_expert), 0.0, 1.0);
}

// A layer that routed nothing has no picks to hit: 0, not the uniform guess PredictedHitRate makes.
double MeasuredHitRate(const RoutingStats& measured, int layer, std::span<const int> set) {
  if (measured.k <= 0 || !Shaped(measured) || !measured.has_layer(layer)) return 0;
  uint64_t hits = 0;
  const uint64_t* p = measured.picks.data() + static_cast<size_t>(layer) * measured.n_expert;
  for (int e : Distinct(set, measured.n_expert)) hits += p[e];
  return static_cast<double>(hits) / (static_cast<double>(measured.tokens[layer]) * measured.k);
}

absl::Status SaveRoutingStats(const RoutingStats& stats, const std::string& path) {
  if (!Shaped(stats)) return InvalidArgument("routing: the tables do not match their layer and expert counts");
  // In the documented order (json sorts keys), so that the file reads as the header describes it.
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (int il = 0; il < stats.n_layer; ++il) {
    const auto first = stats.picks.begin() + static_cast<ptrdiff_t>(il) * stats.n_expert;
    layers.push_back({{"tokens", stats.tokens[il]}, {"picks", std::vector<uint64_t>(first, first + stats.n_expert)}});
  }
  const nlohmann::ordered_json j = {
      {"n_layer", stats.n_layer}, {"n_expert", stats.n_expert}, {"k", stats.k}, {"layers", layers}};
  // Write then rename, so that a reader (or a run killed midway) never leaves half a file under the name.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return absl::UnavailableError(Cat("cannot write routing statistics '", tmp, "'"));
    f << j.dump() << "\n";
    if (!f) return absl::UnavailableError(Cat("cannot write routing statistics '", tmp, "'"));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::UnavailableError(Cat("cannot write routing statistics '", path, "': ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<RoutingStats> ParseRoutingStats(std::string_view text) {
  if (text.size() > kMaxFileBytes) return InvalidArgument("routing: ", text.size(), " bytes is too large a file");
  try {
    const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return InvalidArgument("routing: not valid JSON (truncated?)");
    return FromJson(j);
  } catch (const json::exception& e) {  // not expected with exceptions off; a hostile file must still not crash
    return InvalidArgument("routing: bad JSON: ", e.what());
  }
}

absl::StatusOr<RoutingStats> LoadRoutingStats(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxFileBytes) return InvalidArgument(path, ": ", size, " bytes is too large for a routing file");
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(Cat("cannot read routing statistics '", path, "'"));
  std::stringstream ss;
  ss << f.rdbuf();
  absl::StatusOr<RoutingStats> s = ParseRoutingStats(ss.str());
  if (!s.ok()) return InvalidArgument(path, ": ", Message(s.status()));
  return s;
}

absl::Status CheckRoutingMatches(const RoutingStats& stats, int n_layer, int n_expert, int k) {
  if (n_expert <= 0) return InvalidArgument("routing: the model has no experts: routing statistics are for MoE models");
  if (!Shaped(stats)) return InvalidArgument("routing: the tables do not match their layer and expert counts");
  if (stats.n_layer != n_layer || stats.n_expert != n_expert || stats.k != k) {
    return InvalidArgument("routing: recorded for ", stats.n_layer, " layers of ", stats.n_expert, " experts (top-",
                           stats.k, "), but the model has ", n_layer, " layers of ", n_expert, " experts (top-", k,
                           ")");
  }
  return absl::OkStatus();
}

}  // namespace tandem

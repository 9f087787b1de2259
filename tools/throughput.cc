#include "tools/throughput.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "core/status.h"
#include "graph/partitioner.h"

namespace tandem::cli {
namespace {

using Clock = std::chrono::steady_clock;

void Summarize(ThroughputResult& r) {
  const int tokens = r.n_prompt + r.n_gen;
  std::vector<double> ts;
  for (double ns : r.ns) ts.push_back(tokens * 1e9 / ns);
  auto mean_sd = [](const std::vector<double>& v, double* mean, double* sd) {
    *mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
    double ss = 0;
    for (double x : v) ss += (x - *mean) * (x - *mean);
    *sd = v.size() > 1 ? std::sqrt(ss / (v.size() - 1)) : 0.0;
  };
  mean_sd(ts, &r.avg_ts, &r.stddev_ts);
  mean_sd(r.ns, &r.avg_ns, &r.stddev_ns);
}

}  // namespace

uint64_t DecodeBytesPerToken(const ModelSchema& model) {
  double bytes = 0;
  for (const UnitSpec& u : BuildUnits(model)) bytes += WorkOf(u, 1, 1, 2).weight_bytes_read;
  return static_cast<uint64_t>(bytes);
}

ThroughputMeter::ThroughputMeter(Engine& engine, const ThroughputOptions& opts)
    : engine_(engine), opts_(opts), decode_bytes_(DecodeBytesPerToken(engine.model())) {
  if (opts_.probe) probe_ = std::make_unique<cpu::ReadBandwidthProbe>();
  const int n_vocab = engine.config().n_vocab;
  std::mt19937 rng(42);
  tokens_.resize(std::max(opts_.max_prompt, 1));
  for (int32_t& t : tokens_) t = static_cast<int32_t>(rng() % n_vocab);
  logits_.resize(n_vocab);
}

ThroughputMeter::~ThroughputMeter() = default;

absl::Status ThroughputMeter::RunPrefill(int n) {
  return engine_.Prefill(std::span<const int32_t>(tokens_.data(), n), 0, false, logits_.data());
}

// n tokens, their time summed into *ns. With `probed`, before every token the probe reads about the token's weight
// bytes, so probe and kernel alternate every few milliseconds and see the same memory load (on a shared host it
// swings by 2x within a second); the probe's bytes and seconds add up separately, untimed.
absl::Status ThroughputMeter::RunDecode(int n, bool probed, double* ns) {
  const auto slice = probed ? static_cast<double>(probe_->SliceBytes(decode_bytes_)) : 0.0;
  const int n_vocab = engine_.config().n_vocab;
  int32_t tok = tokens_[0];
  *ns = 0;
  for (int i = 0; i < n; ++i) {
    if (probed) {
      probe_sec_ += slice / (probe_->Run(decode_bytes_) * 1e9);
      probe_bytes_ += slice;
    }
    const auto t0 = Clock::now();
    TANDEM_RETURN_IF_ERROR(engine_.executor().Forward(std::span<const int32_t>(&tok, 1), i, 1, logits_.data()));
    *ns += std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    tok = static_cast<int32_t>((tok + 1) % n_vocab);
  }
  return absl::OkStatus();
}

absl::StatusOr<ThroughputResult> ThroughputMeter::Prefill(int n_prompt) {
  if (n_prompt < 1 || n_prompt > static_cast<int>(tokens_.size())) {
    return absl::InvalidArgumentError(Cat("prefill test of ", n_prompt, " tokens; the meter holds ", tokens_.size()));
  }
  ThroughputResult r{.n_prompt = n_prompt};
  TANDEM_RETURN_IF_ERROR(RunPrefill(n_prompt));  // warm-up
  for (int rep = 0; rep < opts_.reps; ++rep) {
    const auto t0 = Clock::now();
    TANDEM_RETURN_IF_ERROR(RunPrefill(n_prompt));
    r.ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
  }
  Summarize(r);
  return r;
}

absl::StatusOr<ThroughputResult> ThroughputMeter::Decode(int n_gen) {
  if (n_gen < 1) return absl::InvalidArgumentError(Cat("decode test of ", n_gen, " tokens"));
  ThroughputResult r{.n_gen = n_gen};
  double ns = 0;
  TANDEM_RETURN_IF_ERROR(RunDecode(std::min(n_gen, 4), false, &ns));  // warm-up
  probe_bytes_ = probe_sec_ = 0;
  for (int rep = 0; rep < opts_.reps; ++rep) {
    TANDEM_RETURN_IF_ERROR(RunDecode(n_gen, probe_ != nullptr, &ns));
    r.ns.push_back(ns);
  }
  Summarize(r);
  r.gbps = decode_bytes_ * r.avg_ts * 1e-9;
  if (probe_sec_ > 0) r.probe_gbps = probe_bytes_ / probe_sec_ * 1e-9;
  return r;
}

}  // namespace tandem::cli

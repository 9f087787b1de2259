// Prefill and decode tokens/s of an opened engine, timed the way `tandem bench` times them (llama-bench's way): a
// warm-up, then repetitions, mean +- stdev. Shared by bench and sweep so both report the same numbers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "cpu_backend/read_bandwidth.h"
#include "graph/engine.h"

namespace tandem::cli {

struct ThroughputResult {
  int n_prompt = 0;         // a prefill test (pp n_prompt), or
  int n_gen = 0;            // a decode test (tg n_gen)
  std::vector<double> ns;   // per repetition
  double avg_ts = 0, stddev_ts = 0, avg_ns = 0, stddev_ns = 0;
  double gbps = 0;          // decode only: weight bytes per second
  double probe_gbps = 0;    // read probe interleaved with the decode tokens
};

struct ThroughputOptions {
  int reps = 5;
  int max_prompt = 512;     // the longest prompt a Prefill call will ask for
  bool probe = false;       // decode: interleave a streaming-read probe (ThroughputResult::probe_gbps)
};

// Weight bytes one decoded token reads, as the cost model counts them from the model's own unit functions: every
// matrix once, the k routed experts of each MoE layer, one embedding row.
uint64_t DecodeBytesPerToken(const ModelSchema& model);

class ThroughputMeter {
 public:
  ThroughputMeter(Engine& engine, const ThroughputOptions& opts);
  ~ThroughputMeter();
  // pp n: one prompt of n random tokens from position 0, per repetition.
  absl::StatusOr<ThroughputResult> Prefill(int n_prompt);
  // tg n: n single-token decode steps from position 0, per repetition.
  absl::StatusOr<ThroughputResult> Decode(int n_gen);

 private:
  absl::Status RunPrefill(int n);
  absl::Status RunDecode(int n, bool probed, double* ns);

  Engine& engine_;
  ThroughputOptions opts_;
  uint64_t decode_bytes_ = 0;
  std::unique_ptr<cpu::ReadBandwidthProbe> probe_;
  std::vector<int32_t> tokens_;
  std::vector<float> logits_;
  double probe_bytes_ = 0, probe_sec_ = 0;
};

}  // namespace tandem::cli

// What /metrics reports, in Prometheus' text exposition format: the HTTP side's request counts, and the gauges and
// counters the generation worker keeps. Values that this machine or plan cannot measure are left out, not zeroed.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace tandem::serve {

// Requests answered, by endpoint and status. Endpoints outside the known routes count as "other", so that a
// client probing paths cannot grow the label set without bound.
class RequestCounters {
 public:
  void Count(std::string_view endpoint, int status);
  std::map<std::pair<std::string, int>, uint64_t> Snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> counts_;
};

// The worker's side, copied out under its lock.
struct WorkerMetrics {
  bool loaded = false;
  int queue_depth = 0;        // requests waiting for a slot
  int running = 0;            // requests generating
  int64_t kv_cells_used = 0;  // positions the running sequences hold
  int64_t kv_cells_total = 0; // context per slot, times the slots
  uint64_t prompt_tokens_total = 0;
  uint64_t generated_tokens_total = 0;
  // Continuous batching: engine steps run, the sequences they carried (summed), and the most in one step.
  uint64_t steps_total = 0;
  uint64_t step_sequences_total = 0;
  int step_sequences_max = 0;
  std::optional<double> last_prefill_tps;  // of the last request that had a prompt pass / decoded tokens
  std::optional<double> last_decode_tps;
  // Only when the plan uses an accelerator: the executor's VRAM peak (it allocates up front, so this is what is
  // held) and the bytes it moved over PCIe.
  std::optional<uint64_t> vram_bytes;
  std::optional<uint64_t> pcie_bytes_prefill;
  std::optional<uint64_t> pcie_bytes_decode;
};

// The resident set size of this process, from /proc/self/statm; nullopt where that cannot be read.
std::optional<uint64_t> ResidentBytes();

std::string RenderPrometheus(const std::map<std::pair<std::string, int>, uint64_t>& requests,
                             const WorkerMetrics& worker, std::optional<uint64_t> rss_bytes);

}  // namespace tandem::serve

#include "tools/serve_metrics.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_format.h"
#include "core/status.h"

namespace tandem::serve {

void RequestCounters::Count(std::string_view endpoint, int status) {
  const std::lock_guard<std::mutex> lock(mu_);
  ++counts_[{std::string(endpoint), status}];
}

std::map<std::pair<std::string, int>, uint64_t> RequestCounters::Snapshot() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

std::optional<uint64_t> ResidentBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size_pages = 0, resident_pages = 0;
  if (!(in >> size_pages >> resident_pages)) return std::nullopt;
  return resident_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

namespace {

// A label value with \, " and newlines escaped, as the exposition format asks.
std::string LabelValue(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Exposition {
 public:
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += Cat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  // Counts as exact integers, rates with the digits they have.
  static std::string Value(uint64_t v) { return Cat(v); }
  static std::string Value(int64_t v) { return Cat(v); }
  static std::string Value(int v) { return Cat(v); }
  static std::string Value(double v) { return absl::StrFormat("%.6g", v); }
  template <typename T>
  void Sample(std::string_view name, T value, std::string_view labels = "") {
    out_ += Cat(name, labels.empty() ? "" : "{", labels, labels.empty() ? "" : "}", " ", Value(value), "\n");
  }
  template <typename T>
  void One(std::string_view name, std::string_view type, std::string_view help, T value) {
    Family(name, type, help);
    Sample(name, value);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string RenderPrometheus(const std::map<std::pair<std::string, int>, uint64_t>& requests,
                             const WorkerMetrics& w, std::optional<uint64_t> rss_bytes) {
  Exposition e;
  e.Family("tandem_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
  for (const auto& [key, count] : requests) {
    e.Sample("tandem_requests_total", count,
             Cat("endpoint=\"", LabelValue(key.first), "\",status=\"", key.second, "\""));
  }
  e.One("tandem_model_loaded", "gauge", "1 once the model is loaded and requests are served.", int{w.loaded});
  e.One("tandem_prompt_tokens_total", "counter", "Prompt tokens processed.",
        w.prompt_tokens_total);
  e.One("tandem_generated_tokens_total", "counter", "Tokens generated.", w.generated_tokens_total);
  e.One("tandem_engine_steps_total", "counter", "Engine steps (forward passes over a batch) run.", w.steps_total);
  e.One("tandem_step_sequences_total", "counter",
        "Sequences the engine steps carried, summed (over tandem_engine_steps_total: the mean batch).",
        w.step_sequences_total);
  e.One("tandem_step_sequences_max", "gauge", "Most sequences one engine step carried.", w.step_sequences_max);
  if (w.last_prefill_tps) {
    e.One("tandem_last_prefill_tokens_per_second", "gauge", "Prompt tokens per second of the last request.",
          *w.last_prefill_tps);
  }
  if (w.last_decode_tps) {
    e.One("tandem_last_decode_tokens_per_second", "gauge",
          "Generated tokens per second of the last request (after its first token).", *w.last_decode_tps);
  }
  e.One("tandem_queue_depth", "gauge", "Requests waiting for a slot.", w.queue_depth);
  e.One("tandem_requests_running", "gauge", "Requests generating now.", w.running);
  e.One("tandem_kv_cells_used", "gauge", "KV cache cells (positions) the running sequences hold.",
        w.kv_cells_used);
  e.One("tandem_kv_cells_total", "gauge", "KV cache cells (positions) of all slots.",
        w.kv_cells_total);
  if (rss_bytes) e.One("tandem_ram_rss_bytes", "gauge", "Resident memory of the server process.", *rss_bytes);
  if (w.vram_bytes) {
    e.One("tandem_vram_bytes", "gauge",
          "VRAM the executor holds on all accelerators (its peak; it allocates at load).", *w.vram_bytes);
  }
  if (w.pcie_bytes_prefill && w.pcie_bytes_decode) {
    e.Family("tandem_pcie_bytes_total", "counter", "Bytes moved between host and accelerators, by phase.");
    e.Sample("tandem_pcie_bytes_total", *w.pcie_bytes_prefill, "phase=\"prefill\"");
    e.Sample("tandem_pcie_bytes_total", *w.pcie_bytes_decode, "phase=\"decode\"");
  }
  return e.Take();
}

}  // namespace tandem::serve

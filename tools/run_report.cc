#include "tools/run_report.h"

#include <cstdio>

#include "core/status.h"

namespace tandem::cli {

std::string HumanBytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

namespace {
double PerSecond(double n, double ms) { return ms > 0 ? n * 1000.0 / ms : 0.0; }
}  // namespace

nlohmann::json RunReportJson(const RunReport& r) {
  const double prompt_tps = PerSecond(static_cast<double>(r.prompt_tokens.size()), r.prompt_ms);
  const double gen_tps = PerSecond(static_cast<double>(r.n_decoded), r.decode_ms);
  const uint64_t gen = r.tokens.size();
  nlohmann::json j = {
      {"model", {{"arch", r.arch}, {"family", r.family}, {"name", r.model_name}}},
      {"prompt_tokens", r.prompt_tokens},
      {"tokens", r.tokens},
      {"text", r.text},
      {"timings",
       {{"prompt_ms", r.prompt_ms},
        {"prompt_tps", prompt_tps},
        {"gen_ms", r.gen_ms},
        {"gen_tps", gen_tps},
        {"ttft_ms", r.ttft_ms}}},
      {"memory", {{"peak_rss_bytes", r.peak_rss_bytes}, {"peak_vram_bytes", r.stats.peak_vram_bytes}}},
      {"pcie_bytes", r.stats.pcie_bytes},
      {"pcie_bytes_per_token", gen > 0 ? r.stats.pcie_bytes_decode / std::max<uint64_t>(r.stats.decode_tokens, 1) : 0},
  };
  if (r.plan != nullptr) {
    j["plan"] = PlanJson(*r.plan);
    j["predicted"] = {{"prefill_tps", r.plan->predicted_prefill_tps}, {"decode_tps", r.plan->predicted_decode_tps}};
  }
  return j;
}

std::string RunReportSummary(const RunReport& r) {
  const double prompt_tps = PerSecond(static_cast<double>(r.prompt_tokens.size()), r.prompt_ms);
  const double gen_tps = PerSecond(static_cast<double>(r.n_decoded), r.decode_ms);
  const uint64_t per_tok = r.stats.decode_tokens > 0 ? r.stats.pcie_bytes_decode / r.stats.decode_tokens : 0;
  std::string s;
  s += Cat("model: ", r.model_name.empty() ? "(unnamed)" : r.model_name, ", architecture ", r.arch, " (", r.family,
           ")\n");
  s += Cat("prompt: ", r.prompt_tokens.size(), " tokens in ", absl::StrFormat("%.1f", r.prompt_ms), " ms (",
           absl::StrFormat("%.1f", prompt_tps), " t/s)\n");
  s += Cat("generated: ", r.tokens.size(), " tokens, decode ", absl::StrFormat("%.1f", gen_tps), " t/s",
           " | time to first token ", absl::StrFormat("%.1f", r.ttft_ms), " ms\n");
  s += Cat("memory: peak RAM ", HumanBytes(r.peak_rss_bytes), ", peak VRAM ", HumanBytes(r.stats.peak_vram_bytes),
           " | PCIe ", HumanBytes(per_tok), " per generated token\n");
  if (r.plan != nullptr && (r.plan->predicted_decode_tps > 0 || r.plan->predicted_prefill_tps > 0)) {
    s += Cat("predicted by the plan: prefill ", absl::StrFormat("%.1f", r.plan->predicted_prefill_tps),
             " t/s, decode ", absl::StrFormat("%.1f", r.plan->predicted_decode_tps), " t/s\n");
  }
  return s;
}

}  // namespace tandem::cli

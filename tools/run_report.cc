#include "tools/run_report.h"

#include <cstdio>

#include "arch/arch.h"
#include "core/status.h"
#include "graph/profile.h"
#include "tools/cli_util.h"

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

const char* StopReasonName(StopReason r) {
  switch (r) {
    case StopReason::kLimit: return "limit";
    case StopReason::kEog: return "eos";
    case StopReason::kReversePrompt: return "reverse prompt";
    case StopReason::kContextFull: return "context full";
    case StopReason::kInterrupt: return "interrupted";
  }
  return "?";
}

std::string RunHeadline(const GgufFile& file, const ModelConfig& cfg, const Plan& plan) {
  const Architecture* a = FindArchitecture(cfg.arch);
  return Cat("model: ", cfg.name.empty() ? "(unnamed)" : cfg.name, ", ", cfg.arch, " (", a ? a->family() : "?",
             "), ", DTypeName(MainWeightType(file)), ", ", HumanBytes(file.file_size()), ", ", cfg.n_layer, " layers",
             cfg.is_moe() ? Cat(" of ", cfg.n_expert, " experts (", cfg.n_expert_used, " used)") : "",
             " | placement: ", plan.why);
}

uint64_t PredictedVram(const Plan& p) {
  uint64_t total = 0;
  for (const MemoryAccount& a : p.device_accounts) total += a.total();
  return total;
}

uint64_t PredictedRam(const Plan& p) { return p.host.total(); }

double GpuHitRate(const ExecutorStats& st, int ph) {
  return st.expert_picks[ph] > 0 ? static_cast<double>(st.expert_gpu_picks[ph]) / st.expert_picks[ph] : 0;
}

// The decode hit rate the plan expected, over the split layers the executor counts (those with an expert off the
// GPU), weighted alike: each layer routes the same picks.
double PredictedHitRate(const Plan& p) {
  double sum = 0;
  int n = 0;
  for (const UnitPlan& u : p.units) {
    if (!u.split() || u.CountExperts(Phase::kDecode, Placement::kGpu) == static_cast<int>(u.experts.size())) continue;
    sum += u.expected_gpu_hit_rate;
    ++n;
  }
  return n > 0 ? sum / n : 0;
}

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
        {"ttft_ms", r.ttft_ms},
        {"load_ms", r.load_ms}}},
      {"seed", r.seed},
      {"stop", StopReasonName(r.stop)},
      {"memory", {{"peak_rss_bytes", r.peak_rss_bytes}, {"peak_vram_bytes", r.stats.peak_vram_bytes}}},
      {"pcie_bytes", r.stats.pcie_bytes},
      {"pcie_bytes_per_token", gen > 0 ? r.stats.pcie_bytes_decode / std::max<uint64_t>(r.stats.decode_tokens, 1) : 0},
  };
  if (r.stats.expert_picks[1] > 0 || r.stats.expert_picks[0] > 0) {
    // Split MoE layers: the routed picks that found their expert on the GPU, and the streamed experts' bytes.
    auto phase = [&](int ph) {
      return nlohmann::json{{"picks", r.stats.expert_picks[ph]},
                            {"gpu_picks", r.stats.expert_gpu_picks[ph]},
                            {"gpu_hit_rate", GpuHitRate(r.stats, ph)},
                            {"streamed_bytes", r.stats.expert_stream_bytes[ph]}};
    };
    j["experts"] = {{"prefill", phase(0)}, {"decode", phase(1)},
                    {"cache_hits", r.stats.expert_cache_hits}, {"cache_misses", r.stats.expert_cache_misses}};
  }
  if (r.plan != nullptr) {
    const Plan& p = *r.plan;
    j["plan"] = PlanJson(p);
    j["predicted"] = {{"prefill_tps", p.predicted_prefill_tps}, {"decode_tps", p.predicted_decode_tps},
                      {"ttft_ms", p.predicted_ttft_s * 1e3},  {"peak_vram_bytes", PredictedVram(p)},
                      {"peak_rss_bytes", PredictedRam(p)},   {"pcie_bytes_per_token", p.pcie_bytes_per_decode_token},
                      {"rates_measured", p.rates_measured},
                      {"profile_others_cpu_share", p.profile_others_cpu_share}};
  }
  return j;
}

std::string RunReportSummary(const RunReport& r) {
  const double prompt_tps = PerSecond(static_cast<double>(r.prompt_tokens.size()), r.prompt_ms);
  const double gen_tps = PerSecond(static_cast<double>(r.n_decoded), r.decode_ms);
  const uint64_t per_tok = r.stats.decode_tokens > 0 ? r.stats.pcie_bytes_decode / r.stats.decode_tokens : 0;
  std::string s;
  s += Cat("load: ", absl::StrFormat("%.1f", r.load_ms), " ms (map, plan, repack, copies to VRAM and pinned RAM)\n");
  s += Cat("prompt: ", r.prompt_tokens.size(), " tokens in ", absl::StrFormat("%.1f", r.prompt_ms), " ms (",
           absl::StrFormat("%.1f", prompt_tps), " t/s)\n");
  s += Cat("generated: ", r.tokens.size(), " tokens (stopped: ", StopReasonName(r.stop), "), decode ",
           absl::StrFormat("%.1f", gen_tps), " t/s", " | time to first token ", absl::StrFormat("%.1f", r.ttft_ms),
           " ms | seed ", r.seed, "\n");
  s += Cat("memory: peak RAM ", HumanBytes(r.peak_rss_bytes), ", peak VRAM ", HumanBytes(r.stats.peak_vram_bytes),
           " | PCIe ", HumanBytes(per_tok), " per generated token\n");
  if (r.plan != nullptr && (r.plan->predicted_decode_tps > 0 || r.plan->predicted_prefill_tps > 0)) {
    const Plan& p = *r.plan;
    auto row = [&](const char* what, const std::string& predicted, const std::string& measured) {
      s += absl::StrFormat("  %-16s %14s %14s\n", what, predicted, measured);
    };
    const char* doubt = !p.rates_measured ? "   (default rates: `tandem calibrate` measures this machine)"
                        : p.profile_others_cpu_share > kBusyCalibration
                            ? "   (rates measured on a busy machine: `tandem calibrate` when it is idle)"
                            : "";
    s += absl::StrFormat("  %-16s %14s %14s%s\n", "the plan's", "predicted", "measured", doubt);
    row("time to first", absl::StrFormat("%.1f ms", p.predicted_ttft_s * 1e3), absl::StrFormat("%.1f ms", r.ttft_ms));
    row("prefill", absl::StrFormat("%.1f t/s", p.predicted_prefill_tps), absl::StrFormat("%.1f t/s", prompt_tps));
    row("decode", absl::StrFormat("%.1f t/s", p.predicted_decode_tps), absl::StrFormat("%.1f t/s", gen_tps));
    row("peak VRAM", HumanBytes(PredictedVram(p)), HumanBytes(r.stats.peak_vram_bytes));
    row("peak RAM", HumanBytes(PredictedRam(p)), HumanBytes(r.peak_rss_bytes));
    row("PCIe per token", HumanBytes(p.pcie_bytes_per_decode_token), HumanBytes(per_tok));
    if (r.stats.expert_picks[1] > 0) {
      row("expert GPU hits", absl::StrFormat("%.0f %%", 100 * PredictedHitRate(p)),
          absl::StrFormat("%.0f %%", 100 * GpuHitRate(r.stats, 1)));
    }
    if (const uint64_t looked = r.stats.expert_cache_hits + r.stats.expert_cache_misses; looked > 0) {
      row("expert cache hits", absl::StrFormat("%.0f %%", 100 * p.expected_cache_hit_rate),
          absl::StrFormat("%.0f %%", 100.0 * static_cast<double>(r.stats.expert_cache_hits) / looked));
    }
  }
  return s;
}

}  // namespace tandem::cli

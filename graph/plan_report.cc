#include "graph/plan_report.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_join.h"
#include "core/status.h"
#include "graph/placement.h"
#include "graph/profile.h"

namespace tandem {
namespace {

nlohmann::json AccountJson(const MemoryAccount& m) {
  return {{"weights", m.weights},         {"mapped", m.mapped},           {"repacked", m.repacked},
          {"kv", m.kv},                   {"staging", m.staging},         {"activations", m.activations},
          {"workspace", m.workspace},     {"total", m.total()}};
}

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string Pad(const std::string& s, size_t width, bool right) {
  if (s.size() >= width) return s;
  std::string out;
  out.reserve(width);
  if (right) out.append(width - s.size(), ' ');
  out.append(s);
  if (!right) out.append(width - s.size(), ' ');
  return out;
}

}  // namespace

nlohmann::json PlanJson(const Plan& plan, bool with_tensors) {
  nlohmann::json units = nlohmann::json::array();
  for (const UnitPlan& u : plan.units) {
    nlohmann::json j = {{"name", u.name},
                        {"kind", std::string(UnitKindName(u.kind))},
                        {"layer", u.layer},
                        {"prefill", PlacementName(u.prefill)},
                        {"decode", PlacementName(u.decode)},
                        {"weight_bytes", u.weight_bytes},
                        {"kv_bytes", u.kv_bytes},
                        {"predicted_prefill_ms", u.predicted_prefill_s * 1e3},
                        {"predicted_decode_ms", u.predicted_decode_s * 1e3}};
    if (u.device > 0 && static_cast<size_t>(u.device) < plan.devices.size()) {
      j["device"] = plan.devices[u.device];
      j["device_index"] = u.device;
    }
    if (u.split()) {
      auto counts = [&](Phase ph) {
        return nlohmann::json{{"gpu", u.CountExperts(ph, Placement::kGpu)},
                              {"cpu", u.CountExperts(ph, Placement::kCpu)},
                              {"stream", u.CountExperts(ph, Placement::kStream)}};
      };
      nlohmann::json each_prefill = nlohmann::json::array(), each_decode = nlohmann::json::array();
      for (const ExpertPlacement& e : u.experts) {
        each_prefill.push_back(PlacementName(e.prefill));
        each_decode.push_back(PlacementName(e.decode));
      }
      j["experts"] = {{"prefill", counts(Phase::kPrefill)},
                      {"decode", counts(Phase::kDecode)},
                      {"block_bytes", u.expert_block_bytes},
                      {"expected_gpu_hit_rate", u.expected_gpu_hit_rate},
                      {"each", {{"prefill", std::move(each_prefill)}, {"decode", std::move(each_decode)}}}};
    }
    if (with_tensors) j["tensors"] = u.tensors;
    units.push_back(std::move(j));
  }
  nlohmann::json per_device = nlohmann::json::array();
  for (size_t d = 1; d < plan.device_accounts.size() && d < plan.devices.size(); ++d) {
    per_device.push_back({{"device", plan.devices[d]}, {"memory", AccountJson(plan.device_accounts[d])}});
  }
  return {{"device", plan.device},
          {"devices", per_device},
          {"has_gpu", plan.has_gpu},
          {"why", plan.why},
          {"vram_budget", plan.vram_budget},
          {"n_ctx", plan.n_ctx},
          {"n_seq", plan.n_seq},
          {"prefill_batch", plan.prefill_batch},
          {"n_threads", plan.n_threads},
          {"kv_elem_bytes", plan.kv_elem_bytes},
          {"prompt_tokens", plan.prompt_tokens},
          {"gen_tokens", plan.gen_tokens},
          {"units", std::move(units)},
          {"memory",
           {{"gpu", AccountJson(plan.gpu)},
            {"host", AccountJson(plan.host)},
            {"staging_slot_bytes", plan.staging_slot_bytes},
            {"expert_staging_bytes", plan.expert_staging_bytes},
            {"expert_cache_bytes", plan.expert_cache_bytes},
            {"expert_cache_slots", plan.expert_cache_slots},
            {"expected_cache_hit_rate", plan.expected_cache_hit_rate},
            {"cpu_repack", plan.cpu_repack},
            {"host_ram_available", plan.host_ram_available},
            {"host_paged_bytes", plan.host_paged_bytes},
            {"disk_read_gbps", plan.disk_read_gbps},
            {"disk_bytes_per_decode_token", plan.disk_bytes_per_decode_token}}},
          {"predicted",
           {{"prefill_tps", plan.predicted_prefill_tps},
            {"decode_tps", plan.predicted_decode_tps},
            {"ttft_ms", plan.predicted_ttft_s * 1e3}}},
          {"pcie_bytes_per_token",
           {{"prefill", plan.pcie_bytes_per_prefill_token}, {"decode", plan.pcie_bytes_per_decode_token}}},
          {"warnings", plan.warnings}};
}

std::string PlanTable(const Plan& plan) {
  std::string out;
  out += Cat("device: ", plan.device, plan.has_gpu ? Cat(" (VRAM cap ", FormatBytes(plan.vram_budget), ")") : "",
             "\nplacement: ", plan.why, "\n\n");
  const bool any_split = std::any_of(plan.units.begin(), plan.units.end(), [](const UnitPlan& u) { return u.split(); });
  out += Cat(Pad("unit", 14, false), Pad("weights", 11, true), Pad("KV", 11, true), "  ", Pad("prefill", 8, false),
             Pad("decode", 8, false), Pad("prefill ms", 12, true), Pad("decode ms", 11, true),
             any_split ? Cat("  ", Pad("experts gpu/cpu/stream", 24, false), "hit") : "", "\n");
  // A split MoE layer's experts per phase ("16/48/0", or "prefill 0/0/64, decode 16/48/0" when they differ), and
  // the share of decode's picks expected on the GPU.
  auto experts = [](const UnitPlan& u) -> std::string {
    if (!u.split()) return "";
    auto counts = [&](Phase ph) {
      return Cat(u.CountExperts(ph, Placement::kGpu), "/", u.CountExperts(ph, Placement::kCpu), "/",
                 u.CountExperts(ph, Placement::kStream));
    };
    const std::string p = counts(Phase::kPrefill), d = counts(Phase::kDecode);
    return Cat("  ", Pad(p == d ? d : Cat(p, " | ", d), 24, false), Fmt("%.0f%%", 100 * u.expected_gpu_hit_rate));
  };
  const bool several = plan.devices.size() > 2;  // then each GPU-side placement names its device
  auto where = [&](const UnitPlan& u, Placement p) {
    std::string s = PlacementName(p);
    if (several && GpuSide(p)) s += Cat("@", u.device);
    return s;
  };
  for (const UnitPlan& u : plan.units) {
    out += Cat(Pad(u.name, 14, false), Pad(FormatBytes(u.weight_bytes), 11, true),
               Pad(u.kv_bytes ? FormatBytes(u.kv_bytes) : "-", 11, true), "  ", Pad(where(u, u.prefill), 8, false),
               Pad(where(u, u.decode), 8, false), Pad(Fmt("%.3f", u.predicted_prefill_s * 1e3), 12, true),
               Pad(Fmt("%.3f", u.predicted_decode_s * 1e3), 11, true), experts(u), "\n");
  }
  if (any_split) {
    out += "split MoE layers: the router resident; experts gpu (resident), cpu (computed there, beside the GPU's)\n"
           "or stream (copied when routed); prefill | decode when they differ; hit: decode picks expected on the GPU\n";
  }
  if (several) {
    for (size_t d = 1; d < plan.devices.size(); ++d) {
      const uint64_t total = d < plan.device_accounts.size() ? plan.device_accounts[d].total() : 0;
      out += Cat("@", d, " is ", plan.devices[d], ": ", FormatBytes(total), "\n");
    }
  }
  out += Cat("\n", Pad("memory", 14, false), Pad("GPU", 12, true), Pad("host", 12, true), "\n");
  const std::pair<const char*, uint64_t MemoryAccount::*> rows[] = {
      {"weights", &MemoryAccount::weights},         {"mapped", &MemoryAccount::mapped},
      {"repacked", &MemoryAccount::repacked},       {"KV cache", &MemoryAccount::kv},
      {"staging", &MemoryAccount::staging},         {"activations", &MemoryAccount::activations},
      {"workspace", &MemoryAccount::workspace}};
  for (const auto& [label, field] : rows) {
    out += Cat(Pad(label, 14, false), Pad(FormatBytes(plan.gpu.*field), 12, true),
               Pad(FormatBytes(plan.host.*field), 12, true), "\n");
  }
  out += Cat(Pad("total", 14, false), Pad(FormatBytes(plan.gpu.total()), 12, true),
             Pad(FormatBytes(plan.host.total()), 12, true), "\n");
  // What the host rows mean, for the rows this plan fills.
  std::vector<std::string> terms;
  if (plan.host.weights > 0) terms.push_back("weights are pinned copies of streamed units");
  if (plan.host.mapped > 0) terms.push_back("mapped, the model file's pages the CPU computes from");
  if (plan.host.repacked > 0) terms.push_back("repacked, the CPU's copies of its weights in its own layout");
  if (!terms.empty()) out += Cat("host: ", absl::StrJoin(terms, "; "), "\n");
  if (plan.host_ram_available > 0) {
    out += Cat("host RAM available: ", FormatBytes(plan.host_ram_available),
               plan.host_paged_bytes > 0
                   ? Cat("; ", FormatBytes(plan.host_paged_bytes), " of mapped weights paged from disk (",
                         FormatBytes(plan.disk_bytes_per_decode_token), " per decoded token at ",
                         Fmt("%.1f", plan.disk_read_gbps), " GB/s)")
                   : std::string(plan.host.total() <= plan.host_ram_available ? ", the account fits" : ""),
               "\n");
  }
  if (plan.staging_slot_bytes > 0) {
    out += Cat("staging: 2 buffers of ", FormatBytes(plan.staging_slot_bytes), "\n");
  }
  if (plan.expert_staging_bytes > 0) {
    out += Cat("expert staging: ", FormatBytes(plan.expert_staging_bytes),
               " (the most distinct streamed experts one batch routes to in a layer)\n");
  }
  if (plan.expert_cache_bytes > 0) {
    out += Cat("expert cache: ", FormatBytes(plan.expert_cache_bytes), " (", plan.expert_cache_slots,
               " experts, LRU), expected to hold ", Fmt("%.0f%%", 100 * plan.expected_cache_hit_rate),
               " of decode's picks of streamed experts\n");
  }
  // The prompt's own batches: one shorter than a full batch goes as one batch of its length.
  const int batch = plan.prompt_tokens > 0 ? std::min(plan.prefill_batch, plan.prompt_tokens) : plan.prefill_batch;
  if (plan.profile_others_cpu_share > kBusyCalibration) {
    out += Cat("\nnote: the CPU profile was measured while other processes used ",
               Fmt("%.0f", 100 * plan.profile_others_cpu_share),
               " % of the CPUs; its rates, and so these predictions, are likely low (tandem calibrate again on an "
               "idle machine)\n");
  }
  out += Cat("\npredicted: prefill ", Fmt("%.1f", plan.predicted_prefill_tps), " tok/s (", plan.prompt_tokens,
             "-token prompt in batches of ", batch, ", first token in ", Fmt("%.1f", plan.predicted_ttft_s * 1e3),
             " ms), decode ", Fmt("%.2f", plan.predicted_decode_tps), " tok/s\n");
  out += Cat("PCIe bytes per token: prefill ", FormatBytes(plan.pcie_bytes_per_prefill_token), ", decode ",
             FormatBytes(plan.pcie_bytes_per_decode_token), "\n");
  return out;
}

}  // namespace tandem

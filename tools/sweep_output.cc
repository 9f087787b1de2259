#include "tools/sweep_output.h"

#include "core/status.h"

namespace tandem::cli {

const char* const kSweepCsvColumns[] = {
    "point", "axis", "x", "status", "prefill_tps", "prefill_tps_sd", "decode_tps", "decode_tps_sd",
    "predicted_prefill_tps", "predicted_decode_tps", "peak_vram_bytes", "predicted_vram_bytes", "vram_budget_bytes",
    "pcie_bytes_per_decode_token", "predicted_pcie_bytes_per_decode_token", "pcie_bytes_per_prefill_token",
    "predicted_pcie_bytes_per_prefill_token", "is_auto", "is_knee", "is_best", "plan", "note", nullptr};

namespace {

std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

const char* Status(const SweepResult& r) {
  if (r.ok) return "ok";
  return r.note.rfind("infeasible", 0) == 0 ? "infeasible" : "failed";
}

}  // namespace

std::string SweepCsv(const SweepReport& report) {
  std::string out;
  for (int i = 0; kSweepCsvColumns[i] != nullptr; ++i) out += Cat(i == 0 ? "" : ",", kSweepCsvColumns[i]);
  out += "\n";
  for (size_t i = 0; i < report.results.size(); ++i) {
    const SweepResult& r = report.results[i];
    out += absl::StrFormat("%s,%s,%.3f,%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%s,%s\n",
                           Quoted(r.point.label), SweepAxisName(report.axis), r.x, Status(r), r.prefill_tps,
                           r.prefill_tps_sd, r.decode_tps, r.decode_tps_sd, r.predicted_prefill_tps,
                           r.predicted_decode_tps, r.peak_vram_bytes, r.predicted_vram_bytes, r.vram_budget_bytes,
                           r.pcie_bytes_per_decode_token, r.predicted_pcie_bytes_per_decode_token,
                           r.pcie_bytes_per_prefill_token, r.predicted_pcie_bytes_per_prefill_token,
                           r.point.is_auto ? 1 : 0, report.knee == i ? 1 : 0, report.best == i ? 1 : 0,
                           Quoted(r.plan_why), Quoted(r.note));
  }
  return out;
}

nlohmann::json SweepJson(const SweepReport& report) {
  nlohmann::json points = nlohmann::json::array();
  for (size_t i = 0; i < report.results.size(); ++i) {
    const SweepResult& r = report.results[i];
    points.push_back({{"point", r.point.label},
                      {"x", r.x},
                      {"status", Status(r)},
                      {"note", r.note},
                      {"plan", r.plan_why},
                      {"is_auto", r.point.is_auto},
                      {"is_knee", report.knee == i},
                      {"is_best", report.best == i},
                      {"measured",
                       {{"prefill_tps", r.prefill_tps},
                        {"prefill_tps_sd", r.prefill_tps_sd},
                        {"decode_tps", r.decode_tps},
                        {"decode_tps_sd", r.decode_tps_sd},
                        {"peak_vram_bytes", r.peak_vram_bytes},
                        {"pcie_bytes_per_decode_token", r.pcie_bytes_per_decode_token},
                        {"pcie_bytes_per_prefill_token", r.pcie_bytes_per_prefill_token}}},
                      {"predicted",
                       {{"prefill_tps", r.predicted_prefill_tps},
                        {"decode_tps", r.predicted_decode_tps},
                        {"vram_bytes", r.predicted_vram_bytes},
                        {"pcie_bytes_per_decode_token", r.predicted_pcie_bytes_per_decode_token},
                        {"pcie_bytes_per_prefill_token", r.predicted_pcie_bytes_per_prefill_token}}},
                      {"vram_budget_bytes", r.vram_budget_bytes}});
  }
  return {{"model", report.model},       {"device", report.device},   {"axis", SweepAxisName(report.axis)},
          {"n_layer", report.n_layer},   {"n_prompt", report.n_prompt}, {"n_gen", report.n_gen},
          {"reps", report.reps},         {"n_threads", report.n_threads}, {"points", points}};
}

std::string SweepSummary(const SweepReport& report) {
  if (!report.best) return "no swept point could be measured";
  const SweepResult& best = report.results[*report.best];
  std::string s = absl::StrFormat("best swept point: %s, %.2f tok/s decode", best.point.label, best.decode_tps);
  if (report.auto_index && report.results[*report.auto_index].ok) {
    const SweepResult& a = report.results[*report.auto_index];
    s += absl::StrFormat("; auto (%.1f layers' worth on the GPU): %.2f tok/s decode, %.0f%% of the best", a.x,
                         a.decode_tps, 100 * a.decode_tps / best.decode_tps);
  }
  if (report.knee) s += Cat("; knee: ", report.results[*report.knee].point.label);
  return s;
}

}  // namespace tandem::cli

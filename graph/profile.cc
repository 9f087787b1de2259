#include "graph/profile.h"

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/topology.h"
#include "cpu_backend/kernels.h"
#include "cpu_backend/onednn_matmul.h"
#include "nlohmann/json.hpp"

namespace tandem {
namespace {

using nlohmann::json;

double RateFor(const std::map<DType, double>& rates, DType t, double fallback) {
  auto it = rates.find(t);
  if (it != rates.end()) return it->second;
  if (rates.empty()) return fallback;
  double slowest = rates.begin()->second;
  for (const auto& [type, rate] : rates) slowest = std::min(slowest, rate);
  return slowest;
}

json RatesToJson(const std::map<DType, double>& rates) {
  json j = json::object();
  for (const auto& [type, rate] : rates) j[std::string(DTypeName(type))] = rate;
  return j;
}

// A map of type name -> number: rates must be > 0; spreads (positive = false) >= 0, 0 being a steady figure.
absl::Status RatesFromJson(const json& j, const char* key, std::map<DType, double>* out, bool positive = true) {
  if (!j.contains(key)) return absl::OkStatus();
  const json& m = j.at(key);
  if (!m.is_object()) return InvalidArgument("profile: '", key, "' must be an object of type name -> number");
  out->clear();
  for (const auto& [name, value] : m.items()) {
    std::optional<DType> t = DTypeFromName(name);
    if (!t) return InvalidArgument("profile: '", key, "' names unknown weight type '", name, "'");
    if (!value.is_number() || !(positive ? value.get<double>() > 0 : value.get<double>() >= 0)) {
      return InvalidArgument("profile: '", key, ".", name, "' must be a number ", positive ? "> 0" : ">= 0");
    }
    (*out)[*t] = value.get<double>();
  }
  return absl::OkStatus();
}

// A map of type name -> batch size: types the route takes (onednn_matmul.h), batches above decode.
absl::Status QuantMinTokensFromJson(const json& j, const char* key, std::map<DType, int64_t>* out) {
  if (!j.contains(key)) return absl::OkStatus();
  const json& m = j.at(key);
  if (!m.is_object()) return InvalidArgument("profile: '", key, "' must be an object of type name -> tokens");
  out->clear();
  for (const auto& [name, value] : m.items()) {
    const std::optional<DType> t = DTypeFromName(name);
    if (!t || !cpu::OneDnnQuantTakesType(*t)) {
      return InvalidArgument("profile: '", key, "' names '", name, "', not a packed quantized type (Q4_0, Q8_0, ",
                             "MXFP4, Q4_K, Q5_K, Q6_K)");
    }
    if (!value.is_number_integer() || value.get<int64_t>() <= cpu::kOneDnnMaxDecodeTokens ||
        value.get<int64_t>() > (int64_t{1} << 20)) {
      return InvalidArgument("profile: '", key, ".", name, "' must be a batch size in ",
                             cpu::kOneDnnMaxDecodeTokens + 1, "..1048576");
    }
    (*out)[*t] = value.get<int64_t>();
  }
  return absl::OkStatus();
}

// Reads j[key] into *out when present; rates must be positive, overheads non-negative.
absl::Status ReadNumber(const json& j, const char* key, bool positive, double* out) {
  if (!j.contains(key)) return absl::OkStatus();
  const json& v = j.at(key);
  if (!v.is_number()) return InvalidArgument("profile: '", key, "' must be a number");
  const double d = v.get<double>();
  if (positive ? !(d > 0) : !(d >= 0)) {
    return InvalidArgument("profile: '", key, "' must be ", positive ? "> 0" : ">= 0", ", got ", d);
  }
  *out = d;
  return absl::OkStatus();
}

absl::Status ReadBytes(const json& j, const char* key, uint64_t* out) {
  if (!j.contains(key)) return absl::OkStatus();
  const json& v = j.at(key);
  if (!v.is_number_unsigned()) return InvalidArgument("profile: '", key, "' must be a non-negative integer");
  *out = v.get<uint64_t>();
  return absl::OkStatus();
}

constexpr std::pair<ProfileKind, std::string_view> kKindNames[] = {
    {ProfileKind::kDefault, "default"},
    {ProfileKind::kSettings, "settings"},
    {ProfileKind::kQuick, "quick"},
    {ProfileKind::kFull, "full"},
};

json HostToJson(const HostIdentity& h) {
  return json{{"cpu_model", h.cpu_model}, {"cores", h.n_cores}, {"threads", h.n_pus}, {"numa_nodes", h.n_numa_nodes}};
}

absl::Status HostFromJson(const json& j, HostIdentity* h) {
  if (!j.is_object()) return InvalidArgument("profile: 'host' must be an object");
  if (j.contains("cpu_model")) {
    if (!j["cpu_model"].is_string()) return InvalidArgument("profile: 'host.cpu_model' must be a string");
    h->cpu_model = j["cpu_model"].get<std::string>();
  }
  for (auto [key, out] : {std::pair{"cores", &h->n_cores}, std::pair{"threads", &h->n_pus},
                          std::pair{"numa_nodes", &h->n_numa_nodes}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < 0 || j[key].get<int64_t>() > (1 << 20)) {
      return InvalidArgument("profile: 'host.", key, "' must be a non-negative integer");
    }
    *out = j[key].get<int>();
  }
  return absl::OkStatus();
}

}  // namespace

std::string HostIdentity::Describe() const {
  return Cat(cpu_model.empty() ? "unknown CPU" : cpu_model, " (", n_cores, n_cores == 1 ? " core, " : " cores, ",
             n_pus, n_pus == 1 ? " thread, " : " threads, ", n_numa_nodes,
             n_numa_nodes == 1 ? " NUMA node)" : " NUMA nodes)");
}

const HostIdentity& ThisHost() {
  static const HostIdentity host = [] {
    HostIdentity h;
    if (absl::StatusOr<std::unique_ptr<Topology>> t = Topology::Host(); t.ok()) {
      h.cpu_model = (*t)->cpu_model();
      h.n_cores = (*t)->n_cores();
      h.n_pus = (*t)->n_pus();
      h.n_numa_nodes = static_cast<int>((*t)->nodes().size());
    }
    return h;
  }();
  return host;
}

std::string_view ProfileKindName(ProfileKind k) {
  for (const auto& [kind, name] : kKindNames) {
    if (kind == k) return name;
  }
  return "default";
}

void ApplyKernelSettings(const MachineProfile& p) {
  std::vector<cpu::OneDnnQuantSetting> quant;
  for (const auto& [type, min_tokens] : p.cpu_onednn_quant_min_tokens) quant.push_back({type, min_tokens});
  cpu::SetOneDnnQuantMinTokens(quant);  // TANDEM_ONEDNN_QUANT, where set, wins
  if (p.cpu_decode_prefetch_bytes >= 0 && std::getenv("TANDEM_DECODE_PREFETCH") == nullptr) {
    cpu::SetDecodePrefetchBytes(static_cast<size_t>(p.cpu_decode_prefetch_bytes));
  }
  if (p.cpu_row_prefetch_bytes >= 0 && std::getenv("TANDEM_ROW_PREFETCH") == nullptr) {
    cpu::SetRowPrefetchBytes(static_cast<size_t>(p.cpu_row_prefetch_bytes));
  }
}

double MachineProfile::CpuGemvGbps(DType t) const { return RateFor(cpu_gemv_gbps, t, 10.0); }
double MachineProfile::CpuGemmGflops(DType t) const { return RateFor(cpu_gemm_gflops, t, 50.0); }

MachineProfile DefaultProfile(bool has_gpu) {
  MachineProfile p;
  p.device = has_gpu ? "gpu" : "none";
  p.has_gpu = has_gpu;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                  DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4}) {
    p.cpu_gemv_gbps[t] = 20;
    p.cpu_gemm_gflops[t] = 200;
  }
  return p;
}

std::string ProfileToJson(const MachineProfile& p) {
  json j;
  j["device"] = p.device;
  j["n_threads"] = p.n_threads;
  j["kind"] = std::string(ProfileKindName(p.kind));
  j["measured_at"] = p.measured_at;
  j["host"] = HostToJson(p.host);
  j["gpu_description"] = p.gpu_description;
  j["cpu_decode_prefetch_bytes"] = p.cpu_decode_prefetch_bytes;
  j["cpu_decode_prefetch_gain"] = p.cpu_decode_prefetch_gain;
  j["cpu_row_prefetch_bytes"] = p.cpu_row_prefetch_bytes;
  j["cpu_row_prefetch_gain"] = p.cpu_row_prefetch_gain;
  j["cpu_onednn_quant_min_tokens"] = json::object();
  for (const auto& [type, n] : p.cpu_onednn_quant_min_tokens) {
    j["cpu_onednn_quant_min_tokens"][std::string(DTypeName(type))] = n;
  }
  j["cpu_clock_ghz"] = p.cpu_clock_ghz;
  j["others_cpu_share"] = p.others_cpu_share;
  j["cpu_gemv_spread"] = RatesToJson(p.cpu_gemv_spread);
  j["cpu_gemm_spread"] = RatesToJson(p.cpu_gemm_spread);
  j["cpu_attn_spread"] = p.cpu_attn_spread;
  j["cpu_gemv_gbps"] = RatesToJson(p.cpu_gemv_gbps);
  j["cpu_gemm_gflops"] = RatesToJson(p.cpu_gemm_gflops);
  j["cpu_attn_gflops"] = p.cpu_attn_gflops;
  j["cpu_op_overhead_s"] = p.cpu_op_overhead_s;
  j["disk_read_gbps"] = p.disk_read_gbps;
  j["has_gpu"] = p.has_gpu;
  j["gpu_capacity_bytes"] = p.gpu_capacity_bytes;
  j["h2d_gbps"] = p.h2d_gbps;
  j["gpu_gemv_gbps"] = p.gpu_gemv_gbps;
  j["gpu_gemm_gflops"] = p.gpu_gemm_gflops;
  j["gpu_launch_s"] = p.gpu_launch_s;
  j["gpu_sync_s"] = p.gpu_sync_s;
  j["gpu_library_workspace_bytes"] = p.gpu_library_workspace_bytes;
  return j.dump(2) + "\n";
}

absl::StatusOr<MachineProfile> ProfileFromJson(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("profile: not a JSON object");
  MachineProfile p = DefaultProfile(false);
  if (j.contains("device")) {
    if (!j["device"].is_string()) return InvalidArgument("profile: 'device' must be a string");
    p.device = j["device"].get<std::string>();
  }
  if (j.contains("n_threads")) {
    if (!j["n_threads"].is_number_integer() || j["n_threads"].get<int64_t>() < 1 ||
        j["n_threads"].get<int64_t>() > 4096) {
      return InvalidArgument("profile: 'n_threads' must be an integer in 1..4096");
    }
    p.n_threads = j["n_threads"].get<int>();
  }
  if (j.contains("has_gpu")) {
    if (!j["has_gpu"].is_boolean()) return InvalidArgument("profile: 'has_gpu' must be true or false");
    p.has_gpu = j["has_gpu"].get<bool>();
  }
  if (j.contains("kind")) {
    const json& k = j["kind"];
    bool known = false;
    for (const auto& [kind, name] : kKindNames) {
      if (k.is_string() && k.get<std::string>() == name) {
        p.kind = kind;
        known = true;
      }
    }
    if (!known) return InvalidArgument("profile: 'kind' must be one of default, settings, quick, full");
  } else if (j.contains("cpu_gemv_gbps")) {
    p.kind = ProfileKind::kFull;  // a file of rates that predates kinds, or written by hand: the rates are its own
  }
  for (auto [key, out] : {std::pair{"measured_at", &p.measured_at}, std::pair{"gpu_description", &p.gpu_description}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_string()) return InvalidArgument("profile: '", key, "' must be a string");
    *out = j[key].get<std::string>();
  }
  if (j.contains("host")) TANDEM_RETURN_IF_ERROR(HostFromJson(j["host"], &p.host));
  for (auto [key, bytes, gain] : {std::tuple{"cpu_decode_prefetch", &p.cpu_decode_prefetch_bytes,
                                              &p.cpu_decode_prefetch_gain},
                                   std::tuple{"cpu_row_prefetch", &p.cpu_row_prefetch_bytes, &p.cpu_row_prefetch_gain}}) {
    const std::string bytes_key = Cat(key, "_bytes");
    if (j.contains(bytes_key)) {
      const json& v = j[bytes_key];
      if (!v.is_number_integer() || v.get<int64_t>() < -1 || v.get<int64_t>() > (int64_t{1} << 20)) {
        return InvalidArgument("profile: '", bytes_key, "' must be an integer in -1..1048576");
      }
      *bytes = v.get<int64_t>();
    }
    TANDEM_RETURN_IF_ERROR(ReadNumber(j, Cat(key, "_gain").c_str(), true, gain));
  }
  TANDEM_RETURN_IF_ERROR(QuantMinTokensFromJson(j, "cpu_onednn_quant_min_tokens", &p.cpu_onednn_quant_min_tokens));
  TANDEM_RETURN_IF_ERROR(ReadNumber(j, "cpu_clock_ghz", false, &p.cpu_clock_ghz));
  TANDEM_RETURN_IF_ERROR(ReadNumber(j, "others_cpu_share", false, &p.others_cpu_share));
  if (p.others_cpu_share > 1) return InvalidArgument("profile: 'others_cpu_share' must be at most 1");
  TANDEM_RETURN_IF_ERROR(ReadNumber(j, "cpu_attn_spread", false, &p.cpu_attn_spread));
  TANDEM_RETURN_IF_ERROR(RatesFromJson(j, "cpu_gemv_spread", &p.cpu_gemv_spread, /*positive=*/false));
  TANDEM_RETURN_IF_ERROR(RatesFromJson(j, "cpu_gemm_spread", &p.cpu_gemm_spread, /*positive=*/false));
  TANDEM_RETURN_IF_ERROR(ReadBytes(j, "gpu_capacity_bytes", &p.gpu_capacity_bytes));
  TANDEM_RETURN_IF_ERROR(ReadBytes(j, "gpu_library_workspace_bytes", &p.gpu_library_workspace_bytes));
  TANDEM_RETURN_IF_ERROR(RatesFromJson(j, "cpu_gemv_gbps", &p.cpu_gemv_gbps));
  TANDEM_RETURN_IF_ERROR(RatesFromJson(j, "cpu_gemm_gflops", &p.cpu_gemm_gflops));
  TANDEM_RETURN_IF_ERROR(ReadNumber(j, "cpu_attn_gflops", true, &p.cpu_attn_gflops));
  TANDEM_RETURN_IF_ERROR(ReadNumber(j, "cpu_op_overhead_s", false, &p.cpu_op_overhead_s));
  TANDEM_RETURN_IF_ERROR(ReadNumber(j, "disk_read_gbps", true, &p.disk_read_gbps));
  TANDEM_RETURN_IF_ERROR(ReadNumber(j, "h2d_gbps", true, &p.h2d_gbps));
  TANDEM_RETURN_IF_ERROR(ReadNumber(j, "gpu_gemv_gbps", true, &p.gpu_gemv_gbps));
  TANDEM_RETURN_IF_ERROR(ReadNumber(j, "gpu_gemm_gflops", true, &p.gpu_gemm_gflops));
  TANDEM_RETURN_IF_ERROR(ReadNumber(j, "gpu_launch_s", false, &p.gpu_launch_s));
  TANDEM_RETURN_IF_ERROR(ReadNumber(j, "gpu_sync_s", false, &p.gpu_sync_s));
  return p;
}

absl::Status SaveProfile(const std::string& path, const MachineProfile& p) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  // Write then rename, so a reader never sees half a profile.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return absl::UnavailableError(Cat("cannot write profile '", tmp, "'"));
    f << ProfileToJson(p);
    if (!f) return absl::UnavailableError(Cat("cannot write profile '", tmp, "'"));
  }
  fs::rename(tmp, path, ec);
  if (ec) return absl::UnavailableError(Cat("cannot write profile '", path, "': ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<MachineProfile> LoadProfile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(Cat("cannot read profile '", path, "'"));
  std::stringstream ss;
  ss << f.rdbuf();
  absl::StatusOr<MachineProfile> p = ProfileFromJson(ss.str());
  if (!p.ok()) return InvalidArgument(path, ": ", Message(p.status()));
  return p;
}

std::string ProfileCachePath(const std::string& device) {
  std::string dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] != '\0') {
    dir = std::string(xdg) + "/tandem";
  } else if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') {
    dir = std::string(home) + "/.cache/tandem";
  } else {
    dir = "/tmp/tandem-cache";
  }
  std::string safe;
  for (char c : device) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    safe += ok ? c : '_';
  }
  if (safe.empty()) safe = "default";
  // The kernel generation: a profile measured before the CPU kernels changed speed class (v2: the repacked int8
  // kernels, about 3x the prefill rate; v3: decode prefetch chosen by measurement, and profiles that name their
  // host) would mislead the planner, so each generation has its own file.
  constexpr int kKernelGeneration = 3;
  return Cat(dir, "/profile-", safe, ".v", kKernelGeneration, ".json");
}

std::string UtcNowIso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace tandem

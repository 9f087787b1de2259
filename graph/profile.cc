#include "graph/profile.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/status.h"
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

absl::Status RatesFromJson(const json& j, const char* key, std::map<DType, double>* out) {
  if (!j.contains(key)) return absl::OkStatus();
  const json& m = j.at(key);
  if (!m.is_object()) return InvalidArgument("profile: '", key, "' must be an object of type name -> rate");
  out->clear();
  for (const auto& [name, value] : m.items()) {
    std::optional<DType> t = DTypeFromName(name);
    if (!t) return InvalidArgument("profile: '", key, "' names unknown weight type '", name, "'");
    if (!value.is_number() || !(value.get<double>() > 0)) {
      return InvalidArgument("profile: '", key, ".", name, "' must be a positive number");
    }
    (*out)[*t] = value.get<double>();
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

}  // namespace

double MachineProfile::CpuGemvGbps(DType t) const { return RateFor(cpu_gemv_gbps, t, 10.0); }
double MachineProfile::CpuGemmGflops(DType t) const { return RateFor(cpu_gemm_gflops, t, 50.0); }

MachineProfile DefaultProfile(bool has_gpu) {
  MachineProfile p;
  p.device = has_gpu ? "gpu" : "none";
  p.has_gpu = has_gpu;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                  DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    p.cpu_gemv_gbps[t] = 20;
    p.cpu_gemm_gflops[t] = 200;
  }
  return p;
}

std::string ProfileToJson(const MachineProfile& p) {
  json j;
  j["device"] = p.device;
  j["n_threads"] = p.n_threads;
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
  // kernels, about 3x the prefill rate) would mislead the planner, so each generation has its own file.
  constexpr int kKernelGeneration = 2;
  return Cat(dir, "/profile-", safe, ".v", kKernelGeneration, ".json");
}

}  // namespace tandem

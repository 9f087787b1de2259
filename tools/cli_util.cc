#include "tools/cli_util.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "graph/placement.h"

namespace tandem::cli {

std::function<void(uint64_t, uint64_t)> ProgressBar(std::string label) {
  return [label = std::move(label)](uint64_t done, uint64_t total) {
    constexpr int kWidth = 40;
    const int filled = total > 0 ? static_cast<int>(kWidth * std::min(done, total) / total) : kWidth;
    std::fprintf(stderr, "\r%s [%s%s] %s / %s", label.c_str(), std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, ' ').c_str(), FormatBytes(done).c_str(), FormatBytes(total).c_str());
    if (done >= total) std::fprintf(stderr, "\n");
  };
}

void WarnIfOverHardwareThreads(int n_threads) {
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw > 0 && n_threads > static_cast<int>(hw)) {
    std::fprintf(stderr, "warning: -t %d is more than the %u hardware threads here; the extra threads only share them\n",
                 n_threads, hw);
  }
}

DType MainWeightType(const GgufFile& file) {
  std::map<DType, uint64_t> bytes_by_type;
  for (const GgufTensorInfo& t : file.tensors()) bytes_by_type[t.type] += t.nbytes;
  DType main_type = DType::kF32;
  for (const auto& [type, bytes] : bytes_by_type) {
    if (bytes > bytes_by_type[main_type]) main_type = type;
  }
  return main_type;
}

using tandem::Cat;
using tandem::Message;

int Fail(std::string_view message) {
  std::string m(message);
  for (char& c : m) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fprintf(stderr, "error: %s\n", m.c_str());
  return 1;
}

int Fail(const absl::Status& status) { return Fail(Message(status)); }

absl::StatusOr<uint64_t> ParseSize(std::string_view s) {
  std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(absl::string_view(s.data(), s.size())));
  struct Unit {
    const char* suffix;
    double mult;
  };
  static constexpr Unit kUnits[] = {
      {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
      {"kb", 1024.0},  {"mb", 1048576.0},  {"gb", 1073741824.0},  {"tb", 1099511627776.0},
      {"k", 1024.0},   {"m", 1048576.0},   {"g", 1073741824.0},   {"t", 1099511627776.0},
      {"b", 1.0},
  };
  double mult = 1.0;
  for (const Unit& u : kUnits) {
    std::string_view suf(u.suffix);
    if (t.size() > suf.size() && t.compare(t.size() - suf.size(), suf.size(), suf) == 0) {
      mult = u.mult;
      t.resize(t.size() - suf.size());
      break;
    }
  }
  double v;
  if (t.empty() || !absl::SimpleAtod(t, &v) || !std::isfinite(v) || v < 0 || v * mult > 1.8e19) {
    return absl::InvalidArgumentError(Cat("invalid size '", s, "' (use e.g. 512MiB, 12GiB or bytes)"));
  }
  return static_cast<uint64_t>(v * mult);
}

absl::StatusOr<int64_t> ParseInt(std::string_view flag, std::string_view s) {
  int64_t v;
  if (!absl::SimpleAtoi(absl::string_view(s.data(), s.size()), &v)) {
    return absl::InvalidArgumentError(Cat(flag, " expects an integer, got '", s, "'"));
  }
  return v;
}

absl::StatusOr<DType> ParseKvType(std::string_view s) {
  if (s == "f16" || s == "F16") return DType::kF16;
  if (s == "f32" || s == "F32") return DType::kF32;
  return InvalidArgument("--kv-type must be f16 or f32, got '", s, "'");
}

absl::StatusOr<double> ParseFloat(std::string_view flag, std::string_view s) {
  double v;
  if (!absl::SimpleAtod(absl::string_view(s.data(), s.size()), &v) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(Cat(flag, " expects a number, got '", s, "'"));
  }
  return v;
}

absl::StatusOr<std::string> ArgReader::Value(std::string_view flag) {
  if (i_ >= args_.size()) return absl::InvalidArgumentError(Cat(flag, " needs a value"));
  return args_[i_++];
}

absl::StatusOr<int64_t> ArgReader::Int64Value(std::string_view flag, int64_t lo, int64_t hi) {
  TANDEM_ASSIGN_OR_RETURN(std::string v, Value(flag));
  TANDEM_ASSIGN_OR_RETURN(int64_t n, ParseInt(flag, v));
  if (n < lo || n > hi) return InvalidArgument(flag, " must be between ", lo, " and ", hi, ", got ", n);
  return n;
}

absl::StatusOr<int> ArgReader::IntValue(std::string_view flag, int lo, int hi) {
  TANDEM_ASSIGN_OR_RETURN(int64_t n, Int64Value(flag, lo, hi));
  return static_cast<int>(n);
}

absl::StatusOr<float> ArgReader::FloatValue(std::string_view flag, double lo, double hi) {
  TANDEM_ASSIGN_OR_RETURN(std::string v, Value(flag));
  TANDEM_ASSIGN_OR_RETURN(double x, ParseFloat(flag, v));
  if (x < lo || x > hi) return InvalidArgument(flag, " must be between ", lo, " and ", hi, ", got ", v);
  return static_cast<float>(x);
}

uint64_t PeakRssBytes() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

std::string DefaultModelPath() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
      const fs::path cand = dir / "models" / "stories260K.gguf";
      if (fs::exists(cand, ec)) return cand.string();
    }
  }
  return std::string(TANDEM_SOURCE_DIR) + "/models/stories260K.gguf";
}

}  // namespace tandem::cli

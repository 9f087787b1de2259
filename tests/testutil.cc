#include "tests/testutil.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>

#include <gtest/gtest.h>

#include "core/status.h"
#include <cstring>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

namespace tandem::test {

// TANDEM_TEST_SOURCE_DIR and TANDEM_TEST_BIN stand in for the paths compiled in when the tests run in another
// checkout (tools/gpu-check.sh runs packed test binaries on a GPU machine).
std::string SourceDir() {
  const char* dir = std::getenv("TANDEM_TEST_SOURCE_DIR");
  return dir != nullptr ? dir : TANDEM_SOURCE_DIR;
}
std::string DataPath(const std::string& rel) {
  return std::getenv("TANDEM_TEST_SOURCE_DIR") != nullptr ? SourceDir() + "/tests/data/" + rel
                                                          : std::string(TANDEM_TESTDATA_DIR) + "/" + rel;
}
std::string ModelPath(const std::string& file) { return SourceDir() + "/models/" + file; }
std::string TandemBin() {
  const char* bin = std::getenv("TANDEM_TEST_BIN");
  return bin != nullptr ? bin : TANDEM_BIN;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

nlohmann::json ReadJson(const std::string& path) { return nlohmann::json::parse(ReadFile(path)); }

std::vector<float> ReadF32(const std::string& path) {
  std::string s = ReadFile(path);
  std::vector<float> v(s.size() / sizeof(float));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(float));
  return v;
}

double Nmse(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  if (std::isnan(num)) return std::numeric_limits<double>::infinity();
  return den > 0 ? num / den : num;
}

double MaxAbsDiff(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

std::vector<float> RandomNormal(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

CmdResult RunCommand(const std::string& cmd) {
  CmdResult r;
  char err_path[] = "/tmp/tandem_test_err_XXXXXX";
  const int fd = mkstemp(err_path);
  if (fd >= 0) close(fd);
  const std::string full = cmd + " 2>" + err_path;
  FILE* p = popen(full.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.err = ReadFile(err_path);
  std::remove(err_path);
  return r;
}

}  // namespace tandem::test

namespace tandem::test {

std::string SynthGoldenModel(const nlohmann::json& golden) {
  static std::map<std::string, std::string> made;  // flags -> file, once per process
  const std::string flags = golden.at("tandem_synth").get<std::string>();
  if (!made.count(flags)) {
    // CTest runs tests in parallel processes: the file is shared between them, named by the flags and the binary
    // that writes it, and appears whole (written aside, then renamed).
    const std::string bin = TandemBin();
    const auto stamp = std::filesystem::last_write_time(bin).time_since_epoch().count();
    const std::string path = Cat(::testing::TempDir(), "/tandem-golden-",
                                 std::hash<std::string>{}(Cat(flags, "|", bin, "|", stamp)), "-",
                                 golden.at("model").get<std::string>());
    if (!std::filesystem::exists(path)) {
      const std::string tmp = Cat(path, ".", getpid());
      const CmdResult r = RunCommand(bin + " synth " + flags + " -o " + tmp);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      std::filesystem::rename(tmp, path);
    }
    made[flags] = path;
  }
  return made[flags];
}

}  // namespace tandem::test

namespace tandem::test {

std::string EscapeBytes(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string DescribeTokens(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    out += Cat(i ? ", " : "", id, id >= 0 && id < tok.n_vocab() ? Cat(":'", EscapeBytes(tok.RawPiece(id)), "'") : ":?");
  }
  return out + "]";
}

}  // namespace tandem::test

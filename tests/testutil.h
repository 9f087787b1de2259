// Shared test helpers: paths to the bundled data, error metrics, poisoning.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tandem::test {

// tests/data/<rel>
std::string DataPath(const std::string& rel);
// The bundled models (models/ at the repository root).
std::string ModelPath(const std::string& file);
// Path of the built tandem binary.
std::string TandemBin();

nlohmann::json ReadJson(const std::string& path);
std::vector<float> ReadF32(const std::string& path);
std::string ReadFile(const std::string& path);

// Normalized mean squared error: sum((a-b)^2) / sum(b^2), b the reference. Accumulated in double.
double Nmse(std::span<const float> a, std::span<const float> b);
double MaxAbsDiff(std::span<const float> a, std::span<const float> b);

// Fills with NaN so a kernel that forgets to write an element fails loudly.
inline void Poison(std::span<float> v) {
  for (float& x : v) x = std::numeric_limits<float>::quiet_NaN();
}

// Deterministic N(0, 1) values.
std::vector<float> RandomNormal(size_t n, uint64_t seed, float scale = 1.0f);

// The model of a golden whose JSON holds "tandem_synth" (the flags): written once per process into a temporary
// folder, and its path returned.
std::string SynthGoldenModel(const nlohmann::json& golden);

// Bytes outside printable ASCII as \xNN, so a failure shows exactly what was tokenized.
std::string EscapeBytes(std::string_view s);
// "[id:'piece', ...]" of a token list (ids out of the vocabulary as "id:?").
std::string DescribeTokens(const Tokenizer& tok, const std::vector<int32_t>& ids);

// Runs a command, returns exit status; stdout and stderr captured.
struct CmdResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
CmdResult RunCommand(const std::string& cmd);

}  // namespace tandem::test

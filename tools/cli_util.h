// Small helpers shared by the subcommands: one-line errors, numbers and sizes from flags.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/gguf.h"

namespace tandem::cli {

// The git commit this binary was built from: a short hash, "-dirty" when tracked files differed from it, or
// "unknown" (cmake/build_info.cmake writes it at build time).
extern const char kBuildCommit[];

// The type holding most of a model file's tensor bytes, as llama-bench names a file by its main quantization.
DType MainWeightType(const GgufFile& file);

// A progress bar on stderr for byte counts: "\rLABEL [#####     ] 1.2 GiB / 4.5 GiB", ending its line when done.
std::function<void(uint64_t done, uint64_t total)> ProgressBar(std::string label);

// A -t over this machine's hardware threads: a warning on stderr (the extra threads only share them).
void WarnIfOverHardwareThreads(int n_threads);

// Prints "error: <message>" on one line to stderr and returns 1. Newlines in the message become spaces.
int Fail(std::string_view message);
int Fail(const absl::Status& status);

// "512MiB", "12GiB", "24G", "1.5GiB" (binary units) or plain bytes.
absl::StatusOr<uint64_t> ParseSize(std::string_view s);
absl::StatusOr<int64_t> ParseInt(std::string_view flag, std::string_view s);
absl::StatusOr<double> ParseFloat(std::string_view flag, std::string_view s);
// --kv-type's value: f16 or f32 (either case).
absl::StatusOr<DType> ParseKvType(std::string_view s);

// Walks argv: Next() returns the current argument; Value(flag) consumes the value after a flag.
class ArgReader {
 public:
  explicit ArgReader(std::span<const std::string> args) : args_(args) {}
  bool Done() const { return i_ >= args_.size(); }
  const std::string& Next() { return args_[i_++]; }
  const std::string* Peek() const { return Done() ? nullptr : &args_[i_]; }  // the next argument, not consumed
  absl::StatusOr<std::string> Value(std::string_view flag);  // error if missing
  // The value as a number in [lo, hi]; out of range is an error naming the flag and the range.
  absl::StatusOr<int64_t> Int64Value(std::string_view flag, int64_t lo, int64_t hi);
  absl::StatusOr<int> IntValue(std::string_view flag, int lo, int hi);
  absl::StatusOr<float> FloatValue(std::string_view flag, double lo, double hi);
 private:
  std::span<const std::string> args_;
  size_t i_ = 0;
};

// The peak resident memory of this process so far (getrusage), in bytes.
uint64_t PeakRssBytes();

// The bundled default model: <source>/models/stories260K.gguf, or next to the binary's ../models.
std::string DefaultModelPath();

}  // namespace tandem::cli

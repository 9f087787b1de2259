// `tandem quantize`: a GGUF's tensors re-typed by one of llama.cpp's file types, as llama-quantize types them
// (tools/quant_mix.h), one tensor in memory at a time from the mmapped input.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/gguf.h"
#include "tools/quant_mix.h"

namespace tandem::cli {

struct QuantizeOptions {
  std::string input;
  std::string output;  // written as OUTPUT.tmp, renamed when whole
  QuantMix type = QuantMix::kQ4_K_M;
  // Quantized source tensors (Q4_0, Q8_0, ...) that need another type: dequantized and quantized again. Off,
  // they are an error, as in llama-quantize: a second rounding loses more than one from the original weights.
  bool allow_requantize = false;
  int n_threads = 0;  // 0: every hardware thread
  // Called as the work advances, with the source tensor bytes done and in all; null: nothing.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// What QuantizeModel wrote.
struct QuantizeReport {
  std::map<DType, int> tensors_by_type;  // in the output
  int n_tensors = 0;
  int n_fallback = 0;     // tensors whose rows the rule's block does not divide: llama.cpp's fallback type
  int n_requantized = 0;  // quantized sources dequantized and quantized again
  uint64_t input_bytes = 0;   // file sizes
  uint64_t output_bytes = 0;
};

// Per tensor of `file` (its order), the type it gets and where it came from.
struct QuantizePlanEntry {
  DType type = DType::kF32;
  bool fell_back = false;
};
// The plan for `file`, or the first reason llama-quantize would refuse it: no architecture or layer count, a
// split file, a quantized source tensor without allow_requantize, a row no type or fallback divides.
absl::StatusOr<std::vector<QuantizePlanEntry>> PlanQuantize(const GgufFile& file, QuantMix type,
                                                            bool allow_requantize);

// Reads o.input, writes o.output. On error no output is left behind (nor the .tmp).
absl::StatusOr<QuantizeReport> QuantizeModel(const QuantizeOptions& o);

}  // namespace tandem::cli

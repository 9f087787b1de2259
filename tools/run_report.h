// The end-of-run numbers of `tandem run`: the stderr summary and the --json object.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arch/model_config.h"
#include "core/gguf.h"
#include "graph/executor.h"
#include "graph/plan.h"
#include "graph/plan_report.h"
#include "nlohmann/json.hpp"

namespace tandem::cli {

// Why generation ended: -n tokens generated, an end-of-generation token, a reverse prompt, the context full, or
// Ctrl-C.
enum class StopReason { kLimit, kEog, kReversePrompt, kContextFull, kInterrupt };
const char* StopReasonName(StopReason r);  // "limit", "eos", "reverse prompt", "context full", "interrupted"

struct RunReport {
  std::string arch;        // general.architecture
  std::string family;      // its module's family, for people
  std::string model_name;  // general.name
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;  // generated
  std::string text;             // generated text
  double prompt_ms = 0;         // prefill wall time
  double gen_ms = 0;            // from the end of prefill to the last token
  double ttft_ms = 0;           // from the start to the first generated token
  int64_t n_decoded = 0;        // generated tokens that needed a decode step
  double decode_ms = 0;         // time of those decode steps
  uint64_t peak_rss_bytes = 0;
  double load_ms = 0;           // opening the model: mapping, planning, repacking, copies to VRAM and pinned RAM
  uint64_t seed = 0;            // the sampler's
  StopReason stop = StopReason::kLimit;
  ExecutorStats stats;
  const Plan* plan = nullptr;
};

// The line `run` starts with: the model, its family, main weight type, size and shape, and how it is placed.
std::string RunHeadline(const GgufFile& file, const ModelConfig& cfg, const Plan& plan);
nlohmann::json RunReportJson(const RunReport& r);
std::string RunReportSummary(const RunReport& r);
// "1.23 GiB" style.
std::string HumanBytes(uint64_t bytes);
// What the plan expects the run to hold at its peak: on the accelerators, and in RAM (its own buffers and the
// weights the CPU computes with).
uint64_t PredictedVram(const Plan& p);
uint64_t PredictedRam(const Plan& p);

}  // namespace tandem::cli

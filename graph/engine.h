// An opened model ready to run: the file, its config and tokenizer, the backends, the plan and the executor.
// run, bench and the tests use this; flags stay in tools/.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "arch/arch.h"
#include "core/gguf.h"
#include "core/tokenizer.h"
#include "core/topology.h"
#include "cpu_backend/cpu_backend.h"
#include "graph/executor.h"
#include "graph/numa_plan.h"
#include "graph/placement.h"
#include "graph/plan.h"
#include "graph/routing_stats.h"
#include "runtime/devices.h"

namespace tandem {

struct EngineOptions {
  std::string model_path;
  std::string device = "auto";        // auto|none, or accelerators joined by '+': cuda[:I], sim:...
  PlacementRequest placement;         // counts, --place rules, budget; none given = auto
  std::string profile_path;           // machine profile to plan with; empty: the cached calibration
  int prompt_tokens = 512;            // the expected mix auto placement optimises for
  int gen_tokens = 128;
  int n_ctx = 0;                      // 0: min(4096, the model's training context)
  int n_batch = 512;                  // prefill batch
  int n_seq = 1;                      // KV sequences (serve --parallel), each of n_ctx positions
  int n_threads = 0;                  // 0: one per core
  std::string numa = "auto";          // auto|off|interleave|shard
  Repack repack = Repack::kAuto;      // the CPU's MatMul weight layout (cpu_backend/cpu_backend.h)
  DType kv_type = DType::kF16;
  ExecutorOptions::DumpFn dump;       // named intermediates, for debugging and tests
  ExecutorOptions::ProgressFn progress;
  ExecutorOptions::RoutingFn on_routing;  // --routing-out: each MoE layer's routing
  // Recorded routing the planner picks hot experts and predicts hit rates with (--routing); null: uniform.
  std::shared_ptr<const RoutingStats> routing;
};

// What a load checks of a file before it plans or maps anything: the family's config and tensor schema, and a
// tokenizer that runs and agrees with the token embeddings. `inspect` refuses what this refuses.
struct CheckedModel {
  ModelSchema model;
  std::unique_ptr<Tokenizer> tokenizer;
};
absl::StatusOr<CheckedModel> CheckModelFile(const GgufFile& file);

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Open(const EngineOptions& opts);
  ~Engine();

  const ModelConfig& config() const { return model_.cfg; }
  const ModelSchema& model() const { return model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const GgufFile& file() const { return *file_; }
  Executor& executor() { return *executor_; }
  const Plan& plan() const { return executor_->plan(); }
  int n_ctx() const { return n_ctx_; }
  int n_batch() const { return n_batch_; }
  // The first accelerator, when the plan uses it; device(i) is the plan's device i (null when unused).
  Backend* gpu() { return devices_->size() > 1 ? device(1) : nullptr; }
  Backend* device(int i) { return devices_->backend_or_null(i); }
  const NumaPlan& numa() const { return numa_; }

  // Runs the prompt in batches of n_batch from position pos0 of KV sequence `seq`. Writes the logits of every
  // position when all_logits (logits: [n][n_vocab]), else of the last one (logits: [n_vocab]).
  absl::Status Prefill(std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* logits, int seq = 0);

 private:
  Engine() = default;
  std::unique_ptr<GgufFile> file_;
  ModelSchema model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  CpuBackendApi* cpu_ = nullptr;             // owned by devices_, as device 0
  std::unique_ptr<DeviceRegistry> devices_;  // the host CPU and the accelerators the plan uses
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<Topology> topology_;
  NumaPlan numa_;  // where the CPU units' weights live and which threads run them
  int n_ctx_ = 0;
  int n_batch_ = 0;
};

}  // namespace tandem

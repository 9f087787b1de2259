#include "graph/engine.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "absl/container/flat_hash_set.h"

#include "core/status.h"
#include "cpu_backend/cpu_backend.h"
#include "cpu_backend/repack.h"
#include "graph/calibrate.h"
#include "graph/planning.h"

namespace tandem {

absl::StatusOr<CheckedModel> CheckModelFile(const GgufFile& file) {
  CheckedModel m;
  TANDEM_ASSIGN_OR_RETURN(m.model, ReadModelSchema(file));
  TANDEM_ASSIGN_OR_RETURN(m.tokenizer, Tokenizer::FromGguf(file));
  if (m.tokenizer->n_vocab() != m.model.cfg.n_vocab) {
    return InvalidArgument("tokenizer has ", m.tokenizer->n_vocab(), " tokens but the token embeddings have ",
                           m.model.cfg.n_vocab, " rows");
  }
  return m;
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Open(const EngineOptions& opts) {
  std::unique_ptr<Engine> e(new Engine());
  TANDEM_ASSIGN_OR_RETURN(e->file_, GgufFile::Open(opts.model_path));
  TANDEM_ASSIGN_OR_RETURN(CheckedModel checked, CheckModelFile(*e->file_));
  e->model_ = std::move(checked.model);
  e->tokenizer_ = std::move(checked.tokenizer);
  const ModelConfig& cfg = e->model_.cfg;
  const int train_ctx = cfg.n_ctx_train > 0 ? cfg.n_ctx_train : 4096;
  e->n_ctx_ = opts.n_ctx > 0 ? opts.n_ctx : std::min(4096, train_ctx);
  if (opts.n_batch < 1) return InvalidArgument("batch size must be at least 1, got ", opts.n_batch);
  e->n_batch_ = std::min(opts.n_batch, e->n_ctx_);

  TANDEM_ASSIGN_OR_RETURN(DeviceSetup dev,
                          SetupDevice(opts.device, DeviceSetupOptions{
                                                       .n_threads = opts.n_threads,
                                                       .profile_path = opts.profile_path,
                                                       .cuda_vram_budget = opts.placement.vram_budget.value_or(0)}));
  for (const std::string& note : dev.notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  if (opts.n_seq < 1 || opts.n_seq > e->n_batch_) {
    return InvalidArgument("sequences: ", opts.n_seq, " (from 1 to the batch size, ", e->n_batch_, ")");
  }
  const PlanOptions po{.n_ctx = e->n_ctx_, .n_batch = e->n_batch_, .n_seq = opts.n_seq, .n_threads = std::max(opts.n_threads, 1),
                       .kv_elem_bytes = opts.kv_type == DType::kF16 ? 2 : 4, .prompt_tokens = opts.prompt_tokens,
                       .gen_tokens = opts.gen_tokens, .repack = opts.repack, .routing = opts.routing};
  TANDEM_ASSIGN_OR_RETURN(Plan plan, PlanModel(*e->file_, cfg, dev, opts.placement, po));
  for (const std::string& w : plan.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  // This CPU's kernel settings, measured once (about a second) when no profile holds them; after planning, so that
  // a plan that cannot work fails first.
  if (KernelSettingsMissing(dev.profile)) {
    std::vector<std::string> notes;
    TANDEM_RETURN_IF_ERROR(EnsureKernelSettings(CalibrateOptions{.n_threads = opts.n_threads}, &notes).status());
    for (const std::string& note : notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  }
  // The plan decided whether the CPU repacks (it may not, when the copies would not fit in RAM).
  std::unique_ptr<CpuBackendApi> cpu = CreateCpuBackend(
      CpuBackendOptions{.n_threads = opts.n_threads, .repack = plan.cpu_repack ? Repack::kOn : Repack::kOff});
  e->cpu_ = cpu.get();
  e->devices_ = std::make_unique<DeviceRegistry>(std::move(cpu));
  // An accelerator the plan leaves empty is closed: nothing is allocated there.
  for (size_t d = 0; d < dev.accelerators.size(); ++d) {
    AcceleratorSetup& a = dev.accelerators[d];
    const bool used = d + 1 < plan.device_accounts.size() && plan.device_accounts[d + 1].total() > 0;
    e->devices_->Add(a.spec, used ? std::move(a.backend) : nullptr);
  }

  // NUMA: the weights of units that run on the CPU go to their nodes, and the workers are pinned, one per core.
  TANDEM_ASSIGN_OR_RETURN(const NumaPolicy numa_policy, ParseNumaPolicy(opts.numa));
  TANDEM_ASSIGN_OR_RETURN(e->topology_, Topology::Host());
  absl::flat_hash_set<std::string> cpu_tensors;
  for (const UnitPlan& u : plan.units) {
    if (u.prefill != Placement::kCpu && u.decode != Placement::kCpu) continue;
    cpu_tensors.insert(u.tensors.begin(), u.tensors.end());
  }
  std::vector<WeightTensor> weights = WeightTensorsOf(e->model_);
  std::erase_if(weights, [&](const WeightTensor& t) { return !cpu_tensors.contains(t.name); });
  TANDEM_ASSIGN_OR_RETURN(e->numa_, PlanNuma(*e->topology_, std::move(weights),
                                             NumaPlanOptions{.policy = numa_policy, .max_threads = opts.n_threads}));
  // Under shard on several nodes, each worker's node steers which rows it computes (CpuBackendApi).
  if (e->numa_.policy == NumaPolicy::kShard) {
    std::vector<int> thread_node;
    for (const NumaWorker& w : e->numa_.workers) thread_node.push_back(w.node);
    if (std::adjacent_find(thread_node.begin(), thread_node.end(), std::not_equal_to<>()) != thread_node.end()) {
      e->cpu_->SetThreadNodes(std::move(thread_node));
    }
  }
  // Binding can be refused (containers without CAP_SYS_NICE); the answers are the same, only slower.
  if (absl::StatusOr<MembindReport> bound = ApplyNumaPlan(*e->topology_, e->numa_, *e->file_); !bound.ok()) {
    std::fprintf(stderr, "warning: NUMA placement not applied: %s\n", Message(bound.status()).c_str());
  }
  ExecutorOptions xo{.n_ctx = e->n_ctx_, .n_seq = opts.n_seq, .max_batch = e->n_batch_, .kv_type = opts.kv_type, .dump = opts.dump,
                     .progress = opts.progress, .on_routing = opts.on_routing};
  // The CPU's repacked copies go where the plan put the file's pages: each group of 16 rows with its rows.
  TANDEM_ASSIGN_OR_RETURN(std::vector<MemoryRegion> file_regions, NumaMemoryRegions(e->numa_, *e->file_));
  if (!file_regions.empty()) {
    xo.on_cpu_copy = [file_regions, topo = e->topology_.get(), cpu = e->cpu_, warned = false](
                         const WeightMatrix& original, const WeightMatrix& copy) mutable -> absl::Status {
      if (!cpu::IsPacked(copy)) return absl::OkStatus();
      const size_t group_bytes = cpu::PackedBytes(original) / static_cast<size_t>(original.rows / cpu::kPackRows);
      const std::vector<MemoryRegion> regions =
          CopyRegions(file_regions, original, copy.data, cpu::kPackRows, group_bytes);
      // The same ranges, as row groups, so the CPU's threads compute the rows of their own node.
      std::vector<cpu::RowNodeRange> ranges;
      for (const MemoryRegion& r : regions) {
        const auto first = static_cast<int64_t>((static_cast<const uint8_t*>(r.addr) -
                                                 static_cast<const uint8_t*>(copy.data)) / group_bytes);
        ranges.push_back({first, first + static_cast<int64_t>(r.bytes / group_bytes), r.node});
      }
      cpu->SetRowNodes(copy.data, std::move(ranges));
      if (absl::StatusOr<MembindReport> bound = BindRegions(*topo, regions); !bound.ok() && !warned) {
        std::fprintf(stderr, "warning: NUMA placement of repacked weights not applied: %s\n",
                     Message(bound.status()).c_str());
        warned = true;
      }
      return absl::OkStatus();
    };
  }
  const std::vector<Backend*> devices = e->devices_->all();
  TANDEM_ASSIGN_OR_RETURN(e->executor_, Executor::Create(*e->file_, e->model_, plan, devices, xo));
  return e;
}

Engine::~Engine() {
  executor_.reset();  // frees its buffers through the backends, so it goes first
  devices_.reset();
}

absl::Status Engine::Prefill(std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* logits,
                             int seq) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return InvalidArgument("empty prompt: nothing to evaluate");
  for (int64_t start = 0; start < n; start += n_batch_) {
    const int64_t len = std::min<int64_t>(n_batch_, n - start);
    const bool last = start + len == n;
    const int64_t rows = all_logits ? len : (last ? 1 : 0);
    float* out = all_logits ? logits + start * model_.cfg.n_vocab : logits;
    const BatchSegment segment[] = {{.row0 = 0, .n_tok = len, .pos0 = pos0 + start, .seq = seq}};
    TANDEM_RETURN_IF_ERROR(executor_->Forward(tokens.subspan(start, len), segment, rows, out));
  }
  return absl::OkStatus();
}

}  // namespace tandem

// tandem plan: where each unit runs in prefill and decode, the memory per device, and the predicted cost.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <filesystem>

#include "core/gguf.h"
#include "arch/model_config.h"
#include "core/status.h"
#include "gpu_backend/cuda_backend.h"
#include "graph/plan_report.h"
#include "graph/planning.h"
#include "graph/profile.h"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/placement_flags.h"
#include "tools/placement_request.h"

namespace tandem::cli {
namespace {

constexpr const char* kPlanUsage =
    R"(usage: tandem plan [-m MODEL] [placement flags] [-c CTX] [-b BATCH] [-t THREADS] [--json]
  -m, --model FILE     GGUF model (default: the bundled stories260K)
  -c, --ctx-size N     KV cache length (default: min(4096, the model's training context))
  -b, --batch-size N   prefill batch (default 512)
  -t, --threads N      CPU threads (default: all cores)
  --prompt-tokens N    expected prompt length auto placement optimises for (default 512)
  --gen-tokens N       expected generated tokens (default 128)
  --profile FILE       machine profile to plan with (default: the cached calibration, measured once)
  --json               one JSON object on stdout
  -h, --help           this text
)";

struct PlanFlags {
  std::string model;
  PlacementFlags placement;
  int64_t n_ctx = 0;
  int64_t n_batch = 512;
  int64_t n_threads = 0;
  int64_t prompt_tokens = 512;
  int64_t gen_tokens = 128;
  std::string profile;
  bool json = false;
  bool help = false;
};

absl::Status ParseFlags(std::span<const std::string> args, PlanFlags* f) {
  ArgReader r(args);
  auto number = [&](const std::string& flag, int64_t lo, int64_t hi, int64_t* out) -> absl::Status {
    TANDEM_ASSIGN_OR_RETURN(std::string v, r.Value(flag));
    TANDEM_ASSIGN_OR_RETURN(*out, ParseInt(flag, v));
    if (*out < lo || *out > hi) return InvalidArgument(flag, " must be in ", lo, "..", hi, ", got ", *out);
    return absl::OkStatus();
  };
  while (!r.Done()) {
    const std::string& flag = r.Next();
    TANDEM_ASSIGN_OR_RETURN(const bool placement, ParsePlacementFlag(flag, r, f->placement));
    if (placement) continue;
    if (flag == "-m" || flag == "--model") {
      TANDEM_ASSIGN_OR_RETURN(f->model, r.Value(flag));
    } else if (flag == "-c" || flag == "--ctx-size") {
      TANDEM_RETURN_IF_ERROR(number(flag, 0, 1 << 24, &f->n_ctx));
    } else if (flag == "-b" || flag == "--batch-size") {
      TANDEM_RETURN_IF_ERROR(number(flag, 1, 1 << 20, &f->n_batch));
    } else if (flag == "-t" || flag == "--threads") {
      TANDEM_RETURN_IF_ERROR(number(flag, 0, 4096, &f->n_threads));
    } else if (flag == "--prompt-tokens") {
      TANDEM_RETURN_IF_ERROR(number(flag, 0, 1 << 24, &f->prompt_tokens));
    } else if (flag == "--gen-tokens") {
      TANDEM_RETURN_IF_ERROR(number(flag, 0, 1 << 24, &f->gen_tokens));
    } else if (flag == "--profile") {
      TANDEM_ASSIGN_OR_RETURN(f->profile, r.Value(flag));
    } else if (flag == "--json") {
      f->json = true;
    } else if (flag == "-h" || flag == "--help") {
      f->help = true;
    } else {
      return InvalidArgument("plan: unknown flag '", flag, "' (see tandem plan --help)");
    }
  }
  return absl::OkStatus();
}

}  // namespace

int CmdPlan(std::span<const std::string> args) {
  PlanFlags f;
  if (absl::Status s = ParseFlags(args, &f); !s.ok()) return Fail(s);
  if (f.help) {
    std::fputs(kPlanUsage, stdout);
    std::fputs(PlacementFlagsHelp(), stdout);
    return 0;
  }
  if (f.model.empty()) f.model = DefaultModelPath();
  absl::StatusOr<PlacementRequest> req = ToPlacementRequest(f.placement);
  if (!req.ok()) return Fail(req.status());
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(f.model);
  if (!file.ok()) return Fail(file.status());
  absl::StatusOr<ModelConfig> cfg = LoadModelConfig(**file);
  if (!cfg.ok()) return Fail(cfg.status());
  absl::StatusOr<std::shared_ptr<const RoutingStats>> routing = LoadRoutingFlag(f.placement, *cfg);
  if (!routing.ok()) return Fail(routing.status());

  DeviceSetupOptions dopts;
  dopts.n_threads = static_cast<int>(f.n_threads);
  dopts.open_backend = false;  // a plan needs the device's size, not the device
  dopts.profile_path = f.profile;
  dopts.cuda_vram_budget = f.placement.vram_budget.value_or(0);
  // With no accelerator nothing is measured (SetupDevice plans with the default CPU numbers).
  const std::string& spec = f.placement.device;
  const bool has_accelerator = spec != "none" && spec != "cpu" && (spec != "auto" || CudaDeviceCount() > 0);
  if (has_accelerator && f.profile.empty() && !std::filesystem::exists(ProfileCachePath("cpu"))) {
    std::fprintf(stderr, "calibrating this CPU once (cached in %s)...\n", ProfileCachePath("cpu").c_str());
  }
  absl::StatusOr<DeviceSetup> dev = SetupDevice(f.placement.device, dopts);
  if (!dev.ok()) return Fail(dev.status());
  for (const std::string& note : dev->notes) std::fprintf(stderr, "note: %s\n", note.c_str());

  PlanOptions popts;
  popts.n_ctx = static_cast<int>(f.n_ctx);
  popts.n_batch = static_cast<int>(f.n_batch);
  popts.n_threads = dev->profile.n_threads;
  popts.prompt_tokens = static_cast<int>(f.prompt_tokens);
  popts.gen_tokens = static_cast<int>(f.gen_tokens);
  popts.routing = *routing;
  absl::StatusOr<Plan> plan = PlanModel(**file, *cfg, *dev, *req, popts);
  if (!plan.ok()) return Fail(plan.status());
  for (const std::string& w : plan->warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  // An expert-level plan is shown against the layer-level plan the same request makes.
  std::optional<Plan> layer_level;
  if (std::any_of(plan->units.begin(), plan->units.end(), [](const UnitPlan& u) { return u.split(); })) {
    PlacementRequest whole = *req;
    whole.expert_level = false;
    if (absl::StatusOr<Plan> p = PlanModel(**file, *cfg, *dev, whole, popts); p.ok()) layer_level = *std::move(p);
  }

  if (f.json) {
    nlohmann::json j = PlanJson(*plan);
    j["model"] = {{"path", f.model},       {"name", cfg->name},         {"arch", cfg->arch},
                  {"n_layer", cfg->n_layer}, {"n_expert", cfg->n_expert}, {"n_expert_used", cfg->n_expert_used},
                  {"n_ctx_train", cfg->n_ctx_train},
                  {"file_bytes", (*file)->file_size()}};
    if (layer_level) {
      j["layer_level"] = {{"why", layer_level->why},
                          {"predicted", {{"prefill_tps", layer_level->predicted_prefill_tps},
                                         {"decode_tps", layer_level->predicted_decode_tps}}},
                          {"pcie_bytes_per_token", {{"prefill", layer_level->pcie_bytes_per_prefill_token},
                                                    {"decode", layer_level->pcie_bytes_per_decode_token}}}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const std::string experts =
      cfg->is_moe() ? Cat(", ", cfg->n_expert, " experts, ", cfg->n_expert_used, " used") : std::string();
  std::printf("model: %s (%s, %d layers%s)\n", f.model.c_str(), cfg->arch.c_str(), cfg->n_layer, experts.c_str());
  std::printf("%s", PlanTable(*plan).c_str());
  if (layer_level) {
    std::printf("layer-level plan (--expert-level off): prefill %.1f tok/s, decode %.2f tok/s, PCIe per token: "
                "prefill %s, decode %s\n",
                layer_level->predicted_prefill_tps, layer_level->predicted_decode_tps,
                FormatBytes(layer_level->pcie_bytes_per_prefill_token).c_str(),
                FormatBytes(layer_level->pcie_bytes_per_decode_token).c_str());
  }
  return 0;
}

}  // namespace tandem::cli

#include "tools/placement_flags.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "core/status.h"

namespace tandem::cli {

absl::StatusOr<std::vector<std::string>> OverrideTensorRules(std::string_view value) {
  std::vector<std::string> rules;
  for (absl::string_view part : absl::StrSplit(absl::string_view(value.data(), value.size()), ',')) {
    const std::string_view item(part.data(), part.size());
    const size_t eq = item.rfind('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size()) {
      return InvalidArgument("-ot expects REGEX=BUFFER[,REGEX=BUFFER...] (e.g. exps=CPU), got '", item, "'");
    }
    const std::string buffer = absl::AsciiStrToUpper(std::string(item.substr(eq + 1)));
    const char* target = nullptr;
    if (buffer == "CPU") {
      target = "cpu";
    } else if (buffer == "CUDA0") {
      target = "gpu";
    } else {
      return InvalidArgument("-ot buffer '", item.substr(eq + 1),
                             "': tandem takes CPU or CUDA0 (its rules place on the first GPU; --place REGEX=stream "
                             "streams)");
    }
    rules.push_back(Cat(item.substr(0, eq), "=", target));
  }
  return rules;
}

absl::StatusOr<bool> ParsePlacementFlag(const std::string& flag, ArgReader& args, PlacementFlags& out) {
  auto count = [&](std::optional<int>& dst) -> absl::Status {
    TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
    TANDEM_ASSIGN_OR_RETURN(int64_t n, ParseInt(flag, v));
    if (n < 0 || n > 100000) return InvalidArgument(flag, " must be between 0 and the layer count, got ", n);
    dst = static_cast<int>(n);
    return absl::OkStatus();
  };
  if (flag == "--device") {
    TANDEM_ASSIGN_OR_RETURN(out.device, args.Value(flag));
  } else if (flag == "--gpu-layers" || flag == "-ngl" || flag == "--n-gpu-layers") {
    TANDEM_RETURN_IF_ERROR(count(out.gpu_layers));
    out.gpu_layers_at_most = flag != "--gpu-layers";
  } else if (flag == "-ot" || flag == "--override-tensor") {
    TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
    TANDEM_ASSIGN_OR_RETURN(std::vector<std::string> rules, OverrideTensorRules(v));
    out.place.insert(out.place.end(), rules.begin(), rules.end());
  } else if (flag == "--cpu-moe") {
    out.cpu_moe_layers = kAllLayers;
  } else if (flag == "--n-cpu-moe") {
    TANDEM_RETURN_IF_ERROR(count(out.cpu_moe_layers));
  } else if (flag == "--cpu-layers") {
    TANDEM_RETURN_IF_ERROR(count(out.cpu_layers));
  } else if (flag == "--stream-layers") {
    TANDEM_RETURN_IF_ERROR(count(out.stream_layers));
  } else if (flag == "--vram-budget") {
    TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
    TANDEM_ASSIGN_OR_RETURN(out.vram_budget, ParseSize(v));
  } else if (flag == "--host-ram") {
    TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
    TANDEM_ASSIGN_OR_RETURN(out.host_ram, ParseSize(v));
    if (*out.host_ram == 0) return InvalidArgument("--host-ram must be more than 0 bytes");
  } else if (flag == "--place") {
    TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
    const size_t eq = v.rfind('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument("--place expects REGEX=cpu|gpu|stream, got '", v, "'");
    }
    const std::string where = v.substr(eq + 1);
    if (where != "cpu" && where != "gpu" && where != "stream") {
      return InvalidArgument("--place target must be cpu, gpu or stream, got '", where, "'");
    }
    out.place.push_back(v);
  } else if (flag == "--expert-level") {
    absl::StatusOr<std::string> v = args.Value(flag);
    if (!v.ok()) return v.status();
    if (*v != "on" && *v != "off") return InvalidArgument("--expert-level must be on or off, got '", *v, "'");
    out.expert_level = *v == "on";
  } else if (flag == "--expert-cache") {
    TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
    TANDEM_ASSIGN_OR_RETURN(out.expert_cache, ParseSize(v));
  } else if (flag == "--numa") {
    TANDEM_ASSIGN_OR_RETURN(out.numa, args.Value(flag));
    if (out.numa != "auto" && out.numa != "off" && out.numa != "interleave" && out.numa != "shard") {
      return InvalidArgument("--numa must be auto, off, interleave or shard, got '", out.numa, "'");
    }
  } else if (flag == "--routing") {
    TANDEM_ASSIGN_OR_RETURN(out.routing, args.Value(flag));
  } else {
    return false;
  }
  return true;
}

const char* PlacementFlagsHelp() {
  return R"(placement:
  --device auto|none|cuda[:I]|sim:VRAM[,pcie=GBPS][,gpu_gbps=GBPS]   (default auto)
                       several accelerators joined by '+' (sim:12GiB+sim:12GiB): resident layers split over them
  --gpu-layers N       layers resident on the GPU (the last N layers)
  --cpu-layers N       layers computed on the CPU (weights never cross PCIe)
  --stream-layers N    layers computed on the GPU with weights streamed just in time
  --vram-budget SIZE   hard cap on everything tandem allocates on the GPU (e.g. 12GiB)
  --host-ram SIZE      RAM to plan for (default: this machine's MemAvailable); what does not fit is paged
  --place REGEX=cpu|gpu|stream   per-tensor rule, may repeat, matched in order
  --place REGEX@EXPERTS=cpu|gpu|stream   MoE: experts 0-15 or 1,5,9 of each layer the regex matches (others: cpu)
  llama.cpp's spellings, with its meaning:
  -ngl, --n-gpu-layers N   --gpu-layers N, where N at or over the layer count means all (-ngl 99); the output
                       goes with the last layer (llama.cpp counts it as one more)
  -ot, --override-tensor REGEX=BUFFER[,...]   --place REGEX=cpu for BUFFER CPU, =gpu for CUDA0 (any case)
  --cpu-moe            every MoE layer's FFN (experts and router) on the CPU, as -ot exps=CPU
  --n-cpu-moe N        the same for the first N MoE layers
  --expert-level on|off   MoE: place experts one by one (on, the default) or whole FFN layers (off)
  --expert-cache SIZE  MoE: VRAM for an LRU cache of the experts decode streams (an expert routed again is not
                       copied again)
  --numa auto|off|interleave|shard
  --routing FILE       MoE: routing recorded by `tandem run --routing-out`; the hottest experts get the VRAM
)";
}

}  // namespace tandem::cli

#include "tools/sampling_flags.h"

#include "core/status.h"

namespace tandem::cli {

const char* const kSamplingHelp = R"(sampling (llama.cpp's defaults):
  --temp T             temperature (default 0.8; 0 is greedy, ties to the lowest id)
  --top-k K            (default 40; 0 disables)      --top-p P   (default 0.95; 1 disables)
  --min-p P            (default 0.05; 0 disables)
  --repeat-penalty R   (default 1.0, off)            --repeat-last-n N   the penalties' window (default 64; 0 off, -1 the context)
  --presence-penalty P (default 0, off)              --frequency-penalty F   (default 0, off): a token seen c times in
                       the window loses c*F + P from its logit
  -s, --seed N         (default -1: random; the seed used is in the summary)
)";

absl::StatusOr<bool> ParseSamplingFlag(const std::string& flag, ArgReader& args, SamplerOptions& sampling,
                                       std::optional<uint64_t>* seed) {
  if (flag == "--temp") {
    TANDEM_ASSIGN_OR_RETURN(sampling.temp, args.FloatValue(flag, 0, 100));
  } else if (flag == "--top-k") {
    TANDEM_ASSIGN_OR_RETURN(sampling.top_k, args.IntValue(flag, 0, 1 << 24));
  } else if (flag == "--top-p") {
    TANDEM_ASSIGN_OR_RETURN(sampling.top_p, args.FloatValue(flag, 0, 1));
  } else if (flag == "--min-p") {
    TANDEM_ASSIGN_OR_RETURN(sampling.min_p, args.FloatValue(flag, 0, 1));
  } else if (flag == "--repeat-penalty") {
    TANDEM_ASSIGN_OR_RETURN(sampling.repeat_penalty, args.FloatValue(flag, 0, 100));
  } else if (flag == "--presence-penalty") {
    TANDEM_ASSIGN_OR_RETURN(sampling.presence_penalty, args.FloatValue(flag, -100, 100));
  } else if (flag == "--frequency-penalty") {
    TANDEM_ASSIGN_OR_RETURN(sampling.frequency_penalty, args.FloatValue(flag, -100, 100));
  } else if (flag == "--repeat-last-n") {
    TANDEM_ASSIGN_OR_RETURN(sampling.repeat_last_n, args.IntValue(flag, -1, 1 << 24));  // -1: the whole history
  } else if (flag == "-s" || flag == "--seed") {
    TANDEM_ASSIGN_OR_RETURN(const int64_t s, args.Int64Value(flag, -1, int64_t{0xFFFFFFFF}));
    *seed = s < 0 ? std::nullopt : std::optional<uint64_t>(static_cast<uint64_t>(s));
  } else {
    return false;
  }
  return true;
}

}  // namespace tandem::cli

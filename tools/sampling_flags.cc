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
  auto int64_value = [&](int64_t lo, int64_t hi) -> absl::StatusOr<int64_t> {
    TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
    TANDEM_ASSIGN_OR_RETURN(int64_t n, ParseInt(flag, v));
    if (n < lo || n > hi) return InvalidArgument(flag, " must be between ", lo, " and ", hi, ", got ", n);
    return n;
  };
  auto float_value = [&](double lo, double hi) -> absl::StatusOr<float> {
    TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
    TANDEM_ASSIGN_OR_RETURN(double x, ParseFloat(flag, v));
    if (x < lo || x > hi) return InvalidArgument(flag, " must be between ", lo, " and ", hi, ", got ", v);
    return static_cast<float>(x);
  };
  if (flag == "--temp") {
    TANDEM_ASSIGN_OR_RETURN(sampling.temp, float_value(0, 100));
  } else if (flag == "--top-k") {
    TANDEM_ASSIGN_OR_RETURN(const int64_t k, int64_value(0, 1 << 24));
    sampling.top_k = static_cast<int>(k);
  } else if (flag == "--top-p") {
    TANDEM_ASSIGN_OR_RETURN(sampling.top_p, float_value(0, 1));
  } else if (flag == "--min-p") {
    TANDEM_ASSIGN_OR_RETURN(sampling.min_p, float_value(0, 1));
  } else if (flag == "--repeat-penalty") {
    TANDEM_ASSIGN_OR_RETURN(sampling.repeat_penalty, float_value(0, 100));
  } else if (flag == "--presence-penalty") {
    TANDEM_ASSIGN_OR_RETURN(sampling.presence_penalty, float_value(-100, 100));
  } else if (flag == "--frequency-penalty") {
    TANDEM_ASSIGN_OR_RETURN(sampling.frequency_penalty, float_value(-100, 100));
  } else if (flag == "--repeat-last-n") {
    TANDEM_ASSIGN_OR_RETURN(const int64_t n, int64_value(-1, 1 << 24));  // -1: the whole history
    sampling.repeat_last_n = static_cast<int>(n);
  } else if (flag == "-s" || flag == "--seed") {
    TANDEM_ASSIGN_OR_RETURN(const int64_t s, int64_value(-1, int64_t{0xFFFFFFFF}));
    *seed = s < 0 ? std::nullopt : std::optional<uint64_t>(static_cast<uint64_t>(s));
  } else {
    return false;
  }
  return true;
}

}  // namespace tandem::cli

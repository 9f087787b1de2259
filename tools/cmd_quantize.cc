// tandem quantize: llama-quantize's command line, on tandem's quantizers.
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "graph/placement.h"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/quant_mix.h"
#include "tools/quantize.h"

namespace tandem::cli {
namespace {

constexpr const char* kQuantizeUsage = R"(usage: tandem quantize [--allow-requantize] [-t N] IN.gguf OUT.gguf TYPE [N]
       tandem quantize [--allow-requantize] [-t N] IN.gguf TYPE [N]   (writes ggml-model-TYPE.gguf beside IN)
Writes IN's tensors in the llama.cpp file type TYPE, each tensor typed as llama-quantize types it, and copies the
metadata (general.file_type becomes TYPE's number, general.quantization_version 2). The flags may come anywhere;
a trailing number is the thread count, as llama-quantize reads it.
TYPE (case-insensitive, or llama.cpp's file type number):
  Q4_0    2   Q4_0 matrices, a Q6_K output head
  Q8_0    7   Q8_0 everywhere
  Q4_K_M 15   Q4_K, with Q6_K for the head and for attn_v and ffn_down in the layers that need more bits (alias Q4_K)
  Q5_K_M 17   the same on Q5_K (alias Q5_K)
  Q6_K   18   Q6_K everywhere
  With 8 experts attn_k and attn_v are Q8_0 (and attn_output Q5_K in Q4_K_M). Norms, routers and 1-D tensors keep
  their type. Rows a K-quant block does not divide fall back as in llama.cpp: Q4_K -> Q5_0, Q5_K -> Q5_1,
  Q6_K -> Q8_0, then F16; Q8_0 and Q4_0 have no fallback, so a row 32 does not divide is an error there.
  MXFP4_MOE 38   MXFP4 expert stacks (gpt-oss's format), Q8_0 for every other matrix, the head included
Sources: F32, F16 or BF16 tensors; a tensor quantized already is an error unless --allow-requantize.
options:
  --allow-requantize  quantize tensors that are quantized already, from their dequantized values (default: off)
  -t, --threads N     threads (default: every hardware thread, here %u)
  -h, --help          this text
The output is written as OUT.tmp and renamed to OUT when complete.
)";

bool IsThreadCount(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// Names llama-quantize accepts that tandem does not write (yet): a clearer error than "unknown type".
bool IsLlamaQuantizeType(const std::string& upper) {
  static const char* const kNames[] = {"Q1_0",   "Q2_0",   "Q4_1",   "Q5_0",   "Q5_1",   "IQ2_XXS", "IQ2_XS",
                                       "IQ2_S",  "IQ2_M",  "IQ1_S",  "IQ1_M",  "TQ1_0",  "TQ2_0",   "Q2_K",
                                       "Q2_K_S", "IQ3_XXS", "IQ3_S", "IQ3_M",  "Q3_K",   "IQ3_XS",  "Q3_K_S",
                                       "Q3_K_M", "Q3_K_L", "IQ4_NL", "IQ4_XS", "Q4_K_S", "Q5_K_S",  "F16",
                                       "BF16",   "F32",    "COPY"};
  for (const char* n : kNames) {
    if (upper == n) return true;
  }
  return false;
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// llama-quantize has no plain MXFP4 file type; MXFP4_MOE is the one.
bool IsMxfp4(const std::string& upper) { return upper == "MXFP4"; }

// A word llama-quantize would read as a type (so `IN TYPE` is the two-argument form).
bool LooksLikeType(const std::string& s) {
  const std::string upper = Upper(s);
  return QuantizeTypeFromName(s).has_value() || IsMxfp4(upper) || IsLlamaQuantizeType(upper);
}

absl::StatusOr<QuantMix> ParseType(const std::string& s) {
  if (std::optional<QuantMix> t = QuantizeTypeFromName(s)) return *t;
  const std::string upper = Upper(s);
  constexpr const char* kList = "Q8_0, Q4_0, Q4_K_M, Q5_K_M, Q6_K, Q4_K, Q5_K, MXFP4_MOE";
  if (IsMxfp4(upper)) {
    return InvalidArgument("quantize: there is no plain MXFP4 file type; MXFP4_MOE puts the experts in MXFP4 (one of ",
                           kList, ")");
  }
  if (IsLlamaQuantizeType(upper)) {
    return Unimplemented("quantize: type ", s, " is not supported (one of ", kList, ")");
  }
  return InvalidArgument("quantize: unknown type '", s, "' (one of ", kList, ")");
}

std::string TypeCounts(const std::map<DType, int>& by_type) {
  std::string s;
  for (const auto& [type, n] : by_type) s += Cat(s.empty() ? "" : ", ", n, " ", DTypeName(type));
  return s;
}

}  // namespace

int CmdQuantize(std::span<const std::string> argv) {
  QuantizeOptions o;
  std::vector<std::string> positional;
  bool threads_flag = false;
  ArgReader args(argv);
  while (!args.Done()) {
    const std::string arg = args.Next();
    if (arg == "--help" || arg == "-h") {
      std::printf(kQuantizeUsage, std::thread::hardware_concurrency());
      return 0;
    }
    if (arg == "--allow-requantize") {
      o.allow_requantize = true;
    } else if (arg == "-t" || arg == "--threads") {
      absl::StatusOr<std::string> v = args.Value(arg);
      if (!v.ok()) return Fail(v.status());
      absl::StatusOr<int64_t> n = ParseInt(arg, *v);
      if (!n.ok() || *n < 1 || *n > 1024) {
        return Fail(Cat(arg, " must be an integer between 1 and 1024, got '", *v, "'"));
      }
      o.n_threads = static_cast<int>(*n);
      threads_flag = true;
    } else if (arg.size() > 1 && arg[0] == '-') {
      return Fail("unknown flag '" + arg + "' for quantize (see tandem quantize --help)");
    } else {
      positional.push_back(arg);
    }
  }
  // IN OUT TYPE [N] or, as llama-quantize reads a type in second place, IN TYPE [N].
  if (positional.size() < 2) return Fail("quantize needs IN.gguf OUT.gguf TYPE (see tandem quantize --help)");
  const bool out_named = !LooksLikeType(positional[1]);
  const size_t n_fixed = out_named ? 3 : 2;
  if (positional.size() < n_fixed) return Fail("quantize needs a TYPE after " + positional[1]);
  if (positional.size() > n_fixed + 1) return Fail("quantize: unexpected argument '" + positional[n_fixed + 1] + "'");
  const std::string& type_word = positional[n_fixed - 1];
  absl::StatusOr<QuantMix> type = ParseType(type_word);
  if (!type.ok()) return Fail(type.status());
  o.type = *type;
  o.input = positional[0];
  if (out_named) {
    o.output = positional[1];
  } else {
    const size_t slash = o.input.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "" : o.input.substr(0, slash + 1);
    const std::string name = IsThreadCount(type_word) ? std::string(QuantMixName(o.type)) : Upper(type_word);
    o.output = dir + "ggml-model-" + name + ".gguf";
  }
  if (positional.size() == n_fixed + 1) {
    const std::string& n = positional[n_fixed];
    if (threads_flag) return Fail("quantize: the thread count is given twice (-t and '" + n + "')");
    if (!IsThreadCount(n) || n.size() > 4) return Fail("quantize: the thread count must be a number, got '" + n + "'");
    o.n_threads = std::stoi(n);  // 0: every hardware thread, as llama-quantize reads it
  }
  if (o.n_threads > 0) WarnIfOverHardwareThreads(o.n_threads);
  if (isatty(STDERR_FILENO)) o.progress = ProgressBar("quantizing");

  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<QuantizeReport> report = QuantizeModel(o);
  if (!report.ok()) return Fail(report.status());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string notes;
  if (report->n_fallback > 0) notes += Cat(", ", report->n_fallback, " fell back (rows a block does not divide)");
  if (report->n_requantized > 0) notes += Cat(", ", report->n_requantized, " requantized");
  std::printf("wrote %s: %s, %d tensors (%s), %s -> %s in %.2f s%s\n", o.output.c_str(),
              std::string(QuantMixName(o.type)).c_str(), report->n_tensors, TypeCounts(report->tensors_by_type).c_str(),
              FormatBytes(report->input_bytes).c_str(), FormatBytes(report->output_bytes).c_str(), seconds,
              notes.c_str());
  return 0;
}

}  // namespace tandem::cli

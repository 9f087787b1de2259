#include "tools/run_flags.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/status.h"
#include "tools/cli_util.h"
#include "tools/sampling_flags.h"

namespace tandem::cli {

const char* const kRunUsage = R"(usage: tandem run [-m MODEL] [-p PROMPT | -f PROMPT_FILE] [-n N_PREDICT] [-t THREADS] [-c CTX]
                  [-b BATCH] [sampling flags] [--no-bos] [--kv-type f16|f32] [placement flags] [--json]
                  [--logits-out FILE] [--routing-out FILE [--routing-append]]
Without -m, runs the bundled stories260K model. -p "" generates from BOS alone. The prompt is echoed before the
continuation (--no-display-prompt drops it); the summary goes to stderr, or everything as JSON with --json.
  -m, --model FILE     the GGUF model (default: the bundled stories260K)
  -p, --prompt TEXT    the prompt (default "Once upon a time"; "" generates from BOS alone)
  -f, --file FILE      the prompt is FILE's text
  -n, --n-predict N    tokens to generate (default 128); generation also stops at an end-of-generation token,
                       a reverse prompt, or when the context is full, and the summary says which
  -c, --ctx-size N     context (default: the model's trained context, at most 4096)
  -b, --batch-size N   prompt tokens per forward pass (default 512)
  -t, --threads N      CPU threads (default: the cores)
  -e, --escape         process \n \r \t \' \" \\ \xHH in the prompt and reverse prompts (default);
      --no-escape      take them as written
  -r, --reverse-prompt TEXT   stop once the generated text ends with TEXT (may repeat)
  --ignore-eos         never sample an end-of-generation token; generate all -n tokens
  --kv-type f16|f32    the KV cache's element type (default f16)
  --json               one JSON object on stdout: tokens, text, timings, memory, the plan and its predictions
  --logits-out FILE    every prompt position's logits, [n_prompt][n_vocab] float32
  --routing-out FILE   how an MoE model's routers spread this run's tokens (prompt and generated) over the
                       experts, per layer, for --routing FILE of plan, run, bench and sweep
  --routing-append     add this run's counts to those FILE holds (a recording of a model of the same shape), so
                       that one run per prompt of a calibration set builds one file
  -fa, --flash-attn [on|auto]   accepted: attention is always one fused kernel here ('off' is refused)
  --no-mmap, --mlock   refused with a reason: weights are always mapped, and locking is not offered
  -h, --help           this text
)";

std::string ProcessEscapes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[i + 1];
    switch (c) {
      case 'n': out += '\n'; ++i; break;
      case 'r': out += '\r'; ++i; break;
      case 't': out += '\t'; ++i; break;
      case '\'': case '"': case '\\': out += c; ++i; break;
      case 'x':
        if (i + 3 < s.size() && hex(s[i + 2]) >= 0 && hex(s[i + 3]) >= 0) {
          out += static_cast<char>(hex(s[i + 2]) * 16 + hex(s[i + 3]));
          i += 3;
          break;
        }
        [[fallthrough]];
      default: out += '\\';  // not an escape: the backslash stays, and the next character is read as usual
    }
  }
  return out;
}

absl::StatusOr<RunFlags> ParseRunFlags(std::span<const std::string> argv, bool* help) {
  RunFlags f;
  ArgReader args(argv);
  bool have_prompt = false, escape = true;
  while (!args.Done()) {
    const std::string flag = args.Next();
    TANDEM_ASSIGN_OR_RETURN(bool placed, ParsePlacementFlag(flag, args, f.placement));
    if (placed) continue;
    TANDEM_ASSIGN_OR_RETURN(bool sampled, ParseSamplingFlag(flag, args, f.sampling, &f.seed));
    if (sampled) continue;
    if (flag == "--help" || flag == "-h") {
      *help = true;
      return f;
    } else if (flag == "-m" || flag == "--model") {
      TANDEM_ASSIGN_OR_RETURN(f.model, args.Value(flag));
    } else if (flag == "-p" || flag == "--prompt") {
      TANDEM_ASSIGN_OR_RETURN(f.prompt, args.Value(flag));
      have_prompt = true;
    } else if (flag == "-f" || flag == "--file") {
      TANDEM_ASSIGN_OR_RETURN(std::string path, args.Value(flag));
      std::error_code ec;
      if (std::filesystem::is_directory(path, ec)) {
        return InvalidArgument("-f '", path, "' is a directory, not a prompt file");
      }
      std::ifstream in(path, std::ios::binary);
      if (!in) return InvalidArgument("cannot read prompt file '", path, "'");
      std::stringstream ss;
      ss << in.rdbuf();
      f.prompt = ss.str();
      have_prompt = true;
    } else if (flag == "-n" || flag == "--n-predict") {
      TANDEM_ASSIGN_OR_RETURN(f.n_predict, args.IntValue(flag, 0, 1 << 24));
    } else if (flag == "-t" || flag == "--threads") {
      TANDEM_ASSIGN_OR_RETURN(f.n_threads, args.IntValue(flag, 1, 4096));
    } else if (flag == "-c" || flag == "--ctx-size") {
      TANDEM_ASSIGN_OR_RETURN(f.n_ctx, args.IntValue(flag, 1, 1 << 24));
    } else if (flag == "-b" || flag == "--batch-size") {
      TANDEM_ASSIGN_OR_RETURN(f.n_batch, args.IntValue(flag, 1, 1 << 16));
    } else if (flag == "-e" || flag == "--escape") {
      escape = true;
    } else if (flag == "--no-escape") {
      escape = false;
    } else if (flag == "-r" || flag == "--reverse-prompt") {
      TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
      if (v.empty()) return InvalidArgument(flag, " needs a non-empty text");
      f.reverse_prompts.push_back(std::move(v));
    } else if (flag == "--ignore-eos") {
      f.ignore_eos = true;
    } else if (flag == "--no-display-prompt") {
      f.display_prompt = false;
    } else if (flag == "-fa" || flag == "--flash-attn") {
      // llama.cpp's -fa takes on|off|auto now and no value before; attention here is always one fused kernel.
      if (const std::string* v = args.Peek(); v != nullptr && (*v == "on" || *v == "off" || *v == "auto")) {
        if (*v == "off") return InvalidArgument(flag, " off: tandem's attention is always one fused kernel");
        args.Next();
      }
    } else if (flag == "--no-mmap") {
      return InvalidArgument("--no-mmap: tandem maps the model and drops the pages it has copied (to VRAM, pinned RAM "
                             "or the CPU's repacked layout), so reading the file whole would only add a copy");
    } else if (flag == "--mlock") {
      return InvalidArgument("--mlock is not supported yet: the mapped weights may be paged out under memory pressure");
    } else if (flag == "--no-bos") {
      f.add_bos = false;
    } else if (flag == "--json") {
      f.json = true;
    } else if (flag == "--logits-out") {
      TANDEM_ASSIGN_OR_RETURN(f.logits_out, args.Value(flag));
    } else if (flag == "--routing-out") {
      TANDEM_ASSIGN_OR_RETURN(f.routing_out, args.Value(flag));
    } else if (flag == "--routing-append") {
      f.routing_append = true;
    } else if (flag == "--kv-type") {
      TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
      TANDEM_ASSIGN_OR_RETURN(f.kv_type, ParseKvType(v));
    } else {
      return InvalidArgument("unknown flag '", flag, "' for run (see tandem run --help)");
    }
  }
  if (!have_prompt) f.prompt = "Once upon a time";
  if (escape) {
    f.prompt = ProcessEscapes(f.prompt);
    for (std::string& r : f.reverse_prompts) r = ProcessEscapes(r);
  }
  if (f.model.empty()) f.model = DefaultModelPath();
  if (f.routing_append && f.routing_out.empty()) return InvalidArgument("--routing-append needs --routing-out FILE");
  return f;
}

}  // namespace tandem::cli

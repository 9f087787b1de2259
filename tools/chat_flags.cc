#include "tools/chat_flags.h"

#include "core/status.h"
#include "tools/cli_util.h"
#include "tools/sampling_flags.h"

namespace tandem::cli {

const char* const kChatUsage = R"(usage: tandem chat [-m MODEL] [--chat-template NAME|FILE] [-sys TEXT] [-n N] [-t THREADS] [-c CTX]
                   [-b BATCH] [sampling flags] [--kv-type f16|f32] [placement flags]
A conversation in the terminal: each line you type is a user message, rendered with the model's chat template
(as `serve` renders /v1/chat/completions) and answered on stdout. A line ending in \ continues on the next.
/exit (or Ctrl-D) ends the chat, /clear starts a new conversation; Ctrl-C stops the answer being written, and
at the prompt ends the chat. The run report goes to stderr at the end.
  -m, --model FILE     the GGUF model (default: the bundled stories260K)
  --chat-template NAME|FILE   chatml, llama3, mistral, a template the file names, or a Jinja file (default:
                       the model's tokenizer.chat_template)
  -sys, --system-prompt TEXT  the system message the conversation starts with
  -n, --n-predict N    tokens per answer at most (default -1: until the end of the turn or a full context)
  -c, --ctx-size N     context, for the whole conversation (default: the model's trained context, at most 4096)
  -b, --batch-size N   prompt tokens per forward pass (default 512)
  -t, --threads N      CPU threads (default: the cores)
  --ignore-eos         never sample an end-of-generation token (answers end at -n or a full context)
  --kv-type f16|f32    the KV cache's element type (default f16)
  -p, --prompt, -f, --file   refused: chat reads its messages from stdin (`tandem run` takes a prompt)
  -h, --help           this text
)";

absl::StatusOr<ChatFlags> ParseChatFlags(std::span<const std::string> argv, bool* help) {
  ChatFlags f;
  ArgReader args(argv);
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
    } else if (flag == "--chat-template") {
      TANDEM_ASSIGN_OR_RETURN(f.chat_template, args.Value(flag));
      if (f.chat_template.empty()) return InvalidArgument("--chat-template needs a name or a file");
    } else if (flag == "-sys" || flag == "--system-prompt") {
      TANDEM_ASSIGN_OR_RETURN(f.system_prompt, args.Value(flag));
    } else if (flag == "-n" || flag == "--n-predict") {
      TANDEM_ASSIGN_OR_RETURN(f.n_predict, args.IntValue(flag, -1, 1 << 24));
    } else if (flag == "-t" || flag == "--threads") {
      TANDEM_ASSIGN_OR_RETURN(f.n_threads, args.IntValue(flag, 1, 4096));
    } else if (flag == "-c" || flag == "--ctx-size") {
      TANDEM_ASSIGN_OR_RETURN(f.n_ctx, args.IntValue(flag, 1, 1 << 24));
    } else if (flag == "-b" || flag == "--batch-size") {
      TANDEM_ASSIGN_OR_RETURN(f.n_batch, args.IntValue(flag, 1, 1 << 16));
    } else if (flag == "--ignore-eos") {
      f.ignore_eos = true;
    } else if (flag == "--kv-type") {
      TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
      TANDEM_ASSIGN_OR_RETURN(f.kv_type, ParseKvType(v));
    } else if (flag == "-p" || flag == "--prompt" || flag == "-f" || flag == "--file") {
      return InvalidArgument(flag, ": chat reads its messages from the terminal (stdin); `tandem run` takes a prompt");
    } else {
      return InvalidArgument("unknown flag '", flag, "' for chat (see tandem chat --help)");
    }
  }
  if (f.model.empty()) f.model = DefaultModelPath();
  return f;
}

}  // namespace tandem::cli

#include "tools/serve_flags.h"

#include <fstream>
#include <string_view>

#include "core/status.h"
#include "tools/cli_util.h"

namespace tandem::cli {

const char* const kServeUsage = R"(usage: tandem serve -m MODEL [placement flags] [-c CTX] [--host HOST] [--port PORT] [--parallel N]
                    [--api-key KEY | --api-key-file FILE] [--chat-template NAME|FILE] [-t N]
Serves the OpenAI API (/v1/completions, /v1/chat/completions, /v1/models) with /health and Prometheus /metrics.
It listens first and loads the model after, so /health answers "loading" meanwhile. SIGINT or SIGTERM stops it
after the requests it holds are answered (a second signal stops it at once).
  -m, --model FILE     the GGUF model (required)
  -a, --alias NAME     the model's id in the API (default: the file's name)
  --host HOST          address to listen on (default 127.0.0.1: this machine only)
  --port PORT          (default 8080; 0 picks a free port, printed in the "listening on" line)
  -np, --parallel N    requests generated at once, batched together, each with its own KV cache of -c
                       positions (default 1)
  --max-queue N        requests that may wait for a free slot; more get 503 (default 8)
  --api-key KEY        ask every request but /health for "Authorization: Bearer KEY"
  --api-key-file FILE  the same, with the key read from FILE's first line (keeps it out of the process list)
  --chat-template NAME|FILE   the chat template (default: the model's tokenizer.chat_template)
  --max-body SIZE      largest request body; larger ones get 413 (default 4MiB)
  -c, --ctx-size N     context per sequence (default: the model's trained context, at most 4096)
  -b, --batch-size N   prompt tokens per forward pass (default 512)
  -t, --threads N      CPU threads (default: the cores)
  --kv-type f16|f32    the KV cache's element type (default f16)
  -h, --help           this text
)";

absl::StatusOr<ServeFlags> ParseServeFlags(std::span<const std::string> argv, bool* help) {
  ServeFlags f;
  ArgReader args(argv);
  std::string api_key_file;
  while (!args.Done()) {
    const std::string flag = args.Next();
    TANDEM_ASSIGN_OR_RETURN(bool placed, ParsePlacementFlag(flag, args, f.placement));
    if (placed) continue;
    if (flag == "--help" || flag == "-h") {
      *help = true;
      return f;
    } else if (flag == "-m" || flag == "--model") {
      TANDEM_ASSIGN_OR_RETURN(f.model, args.Value(flag));
    } else if (flag == "-a" || flag == "--alias") {
      TANDEM_ASSIGN_OR_RETURN(f.alias, args.Value(flag));
    } else if (flag == "--host") {
      TANDEM_ASSIGN_OR_RETURN(f.host, args.Value(flag));
    } else if (flag == "--port") {
      TANDEM_ASSIGN_OR_RETURN(f.port, args.IntValue(flag, 0, 65535));
    } else if (flag == "-np" || flag == "--parallel") {
      TANDEM_ASSIGN_OR_RETURN(f.parallel, args.IntValue(flag, 1, 4096));
    } else if (flag == "--max-queue") {
      TANDEM_ASSIGN_OR_RETURN(f.max_queue, args.IntValue(flag, 0, 4096));
    } else if (flag == "--api-key") {
      TANDEM_ASSIGN_OR_RETURN(f.api_key, args.Value(flag));
      if (f.api_key.empty()) return InvalidArgument("--api-key needs a non-empty key");
    } else if (flag == "--api-key-file") {
      TANDEM_ASSIGN_OR_RETURN(api_key_file, args.Value(flag));
    } else if (flag == "--chat-template") {
      TANDEM_ASSIGN_OR_RETURN(f.chat_template, args.Value(flag));
    } else if (flag == "--max-body") {
      TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
      TANDEM_ASSIGN_OR_RETURN(f.max_body_bytes, ParseSize(v));
      if (f.max_body_bytes == 0) return InvalidArgument("--max-body must be more than 0 bytes");
    } else if (flag == "-c" || flag == "--ctx-size") {
      TANDEM_ASSIGN_OR_RETURN(f.n_ctx, args.IntValue(flag, 0, 1 << 24));
    } else if (flag == "-b" || flag == "--batch-size") {
      TANDEM_ASSIGN_OR_RETURN(f.n_batch, args.IntValue(flag, 1, 1 << 16));
    } else if (flag == "-t" || flag == "--threads") {
      TANDEM_ASSIGN_OR_RETURN(f.n_threads, args.IntValue(flag, 1, 1 << 16));
    } else if (flag == "--kv-type") {
      TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
      TANDEM_ASSIGN_OR_RETURN(f.kv_type, ParseKvType(v));
    } else {
      return InvalidArgument("unknown flag '", flag, "' for serve (see tandem serve --help)");
    }
  }
  if (f.model.empty()) return InvalidArgument("serve needs -m MODEL");
  if (f.parallel > f.n_batch) {
    return InvalidArgument("--parallel ", f.parallel, " is more than the batch size (-b ", f.n_batch,
                           "): each step carries one token of every sequence");
  }
  if (!api_key_file.empty()) {
    if (!f.api_key.empty()) return InvalidArgument("--api-key and --api-key-file: give one of them");
    std::ifstream in(api_key_file);
    if (!in || !std::getline(in, f.api_key)) return InvalidArgument("cannot read a key from '", api_key_file, "'");
    while (!f.api_key.empty() && (f.api_key.back() == '\r' || f.api_key.back() == ' ')) f.api_key.pop_back();
    if (f.api_key.empty()) return InvalidArgument("--api-key-file '", api_key_file, "' holds an empty key");
  }
  return f;
}

}  // namespace tandem::cli

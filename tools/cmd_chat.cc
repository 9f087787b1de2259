// tandem chat: a conversation in the terminal. Flags per spec/cli.md.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "arch/arch.h"
#include "core/chat_template.h"
#include "core/status.h"
#include "graph/engine.h"
#include "tools/chat_flags.h"
#include "tools/chat_session.h"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/placement_request.h"
#include "tools/run_report.h"
#include "tools/sampling_flags.h"

namespace tandem::cli {
namespace {

// Ctrl-C: stops the answer being written; at the prompt (or a second time while stopping), ends the chat.
volatile std::sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) {
  if (g_interrupted != 0) _exit(130);
  g_interrupted = 1;
}

// One message from stdin: a line, joined with the next while it ends in a backslash. Empty at the end of the
// input or on Ctrl-C.
std::optional<std::string> ReadMessage(bool show_prompt) {
  std::string msg;
  char* line = nullptr;
  size_t cap = 0;
  for (bool first = true;; first = false) {
    if (show_prompt) {
      std::fputs(first ? "> " : ". ", stdout);
      std::fflush(stdout);
    }
    errno = 0;
    const ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {  // the end, or EINTR from Ctrl-C (the handler has no SA_RESTART)
      std::free(line);
      return std::nullopt;
    }
    std::string_view l(line, static_cast<size_t>(n));
    if (!l.empty() && l.back() == '\n') l.remove_suffix(1);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (!l.empty() && l.back() == '\\') {
      msg.append(l.substr(0, l.size() - 1)).push_back('\n');
      continue;
    }
    msg.append(l);
    std::free(line);
    return msg;
  }
}

}  // namespace

int CmdChat(std::span<const std::string> argv) {
  bool help = false;
  absl::StatusOr<ChatFlags> parsed = ParseChatFlags(argv, &help);
  if (!parsed.ok()) return Fail(parsed.status());
  if (help) {
    std::printf("%s%s\n%s", kChatUsage, kSamplingHelp, PlacementFlagsHelp());
    return 0;
  }
  const ChatFlags& f = *parsed;
  WarnIfOverHardwareThreads(f.n_threads);
  absl::StatusOr<PlacementRequest> placement = ToPlacementRequest(f.placement);
  if (!placement.ok()) return Fail(placement.status());
  EngineOptions eo{.model_path = f.model, .device = f.placement.device, .placement = *placement, .n_ctx = f.n_ctx,
                   .n_batch = f.n_batch, .n_threads = f.n_threads, .numa = f.placement.numa, .kv_type = f.kv_type};
  absl::StatusOr<std::shared_ptr<const RoutingStats>> routing = LoadRoutingFlag(f.placement, f.model);
  if (!routing.ok()) return Fail(routing.status());
  eo.routing = *routing;
  if (isatty(STDERR_FILENO)) eo.progress = ProgressBar("loading");
  using Clock = std::chrono::steady_clock;
  const auto t_open = Clock::now();
  absl::StatusOr<std::unique_ptr<Engine>> engine_or = Engine::Open(eo);
  if (!engine_or.ok()) return Fail(engine_or.status());
  Engine& engine = **engine_or;
  const double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_open).count();
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::ForModel(engine.file(), engine.tokenizer(), f.chat_template);
  if (!tmpl.ok()) return Fail(tmpl.status());
  const std::string template_name = tmpl->name();
  SamplerOptions sampling = f.sampling;
  sampling.seed = f.seed ? *f.seed : std::random_device{}();
  ChatSession chat(engine, *std::move(tmpl),
                   ChatSessionOptions{.sampling = sampling, .max_tokens = f.n_predict, .ignore_eos = f.ignore_eos,
                                      .system_prompt = f.system_prompt});
  const bool interactive = isatty(STDIN_FILENO);
  std::fprintf(stderr, "%s\n", RunHeadline(engine.file(), engine.config(), engine.plan()).c_str());
  if (interactive) {
    std::fprintf(stderr, "chat: template %s; /exit or Ctrl-D ends, /clear starts over, Ctrl-C stops an answer\n",
                 template_name.c_str());
  }

  // Installed only now: a Ctrl-C while loading exits as usual.
  struct sigaction sa {}, old {};
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old);

  RunReport total;  // the whole conversation's numbers, in run's report
  total.load_ms = load_ms;
  total.seed = sampling.seed;
  int answers = 0;
  int status = 0;
  // g_interrupted is a Ctrl-C since the last answer began. It is cleared as an answer begins, and after one it
  // stopped, never at the top of the loop: a Ctrl-C that lands between an answer's last byte and the next read
  // (a loaded CI host hit that window) would be wiped there and the read would wait for ever.
  for (;;) {
    if (g_interrupted != 0) break;
    const std::optional<std::string> msg = ReadMessage(interactive);
    if (!msg || g_interrupted != 0) break;
    if (*msg == "/exit" || *msg == "/quit") break;
    if (*msg == "/clear") {
      chat.Clear();
      continue;
    }
    if (msg->empty()) continue;
    g_interrupted = 0;
    absl::StatusOr<ChatTurn> turn = chat.Reply(
        *msg,
        [](std::string_view piece) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        },
        &g_interrupted);
    if (!turn.ok()) {
      if (absl::IsInvalidArgument(turn.status())) {  // this message, not the chat: say so and go on
        std::fprintf(stderr, "error: %s\n", std::string(turn.status().message()).c_str());
        continue;
      }
      status = Fail(turn.status());
      break;
    }
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (turn->stop == StopReason::kInterrupt) {
      std::fputs("[stopped]\n", stderr);
      g_interrupted = 0;  // spent on stopping the answer
    }
    ++answers;
    total.prompt_tokens.resize(total.prompt_tokens.size() + static_cast<size_t>(turn->prompt_fed));
    total.tokens.resize(total.tokens.size() + static_cast<size_t>(turn->generated));
    total.prompt_ms += turn->prompt_ms;
    total.decode_ms += turn->decode_ms;
    total.n_decoded += turn->n_decoded;
    if (answers == 1) total.ttft_ms = turn->ttft_ms;
    total.stop = turn->stop;
  }
  sigaction(SIGINT, &old, nullptr);
  std::fflush(stdout);
  total.gen_ms = total.decode_ms;
  total.peak_rss_bytes = PeakRssBytes();
  total.stats = engine.executor().stats();
  std::fprintf(stderr, "chat: %d answers\n%s", answers, RunReportSummary(total).c_str());
  return status;
}

}  // namespace tandem::cli

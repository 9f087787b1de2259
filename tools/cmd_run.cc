// tandem run: generate text. Flags per spec/cli.md.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "arch/arch.h"
#include "arch/model_config.h"
#include "core/gguf.h"
#include "core/sampler.h"
#include "core/status.h"
#include "core/tokenizer.h"
#include "graph/engine.h"
#include "graph/routing_stats.h"
#include "nlohmann/json.hpp"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/placement_flags.h"
#include "tools/placement_request.h"
#include "tools/run_flags.h"
#include "tools/run_report.h"
#include "tools/sampling_flags.h"

namespace tandem::cli {
namespace {

double Ms(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Ctrl-C: the first stops generation at the next token (the summary still prints); a second exits at once.
volatile std::sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) {
  if (g_interrupted != 0) _exit(130);
  g_interrupted = 1;
}
class InterruptGuard {
 public:
  InterruptGuard() {
    struct sigaction sa {};
    sa.sa_handler = OnInterrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_);
  }
  ~InterruptGuard() { sigaction(SIGINT, &old_, nullptr); }
 private:
  struct sigaction old_ {};
};

// True when the last `added` bytes of `text` completed one of the reverse prompts (a token may carry more
// after it).
bool CompletesAny(const std::string& text, size_t added, const std::vector<std::string>& prompts) {
  for (const std::string& r : prompts) {
    const size_t from = text.size() >= added + r.size() ? text.size() - added - r.size() + 1 : 0;
    if (text.find(r, from) != std::string::npos) return true;
  }
  return false;
}

// The prompt in batches, asking for every row's logits and keeping the last row's in `last`. The last layer
// computes only the rows whose logits are read, so this is how --routing-out sees it route every prompt token.
absl::Status PrefillEveryRow(Engine& e, std::span<const int32_t> prompt, float* last) {
  const size_t n = prompt.size(), batch = static_cast<size_t>(e.n_batch());
  const size_t n_vocab = static_cast<size_t>(e.config().n_vocab);
  std::vector<float> rows(std::min(batch, n) * n_vocab);
  for (size_t start = 0; start < n; start += batch) {
    const size_t len = std::min(batch, n - start);
    TANDEM_RETURN_IF_ERROR(e.executor().Forward(prompt.subspan(start, len), static_cast<int64_t>(start),
                                                static_cast<int64_t>(len), rows.data()));
    if (start + len == n) std::copy_n(rows.data() + (len - 1) * n_vocab, n_vocab, last);
  }
  return absl::OkStatus();
}

}  // namespace

int CmdRun(std::span<const std::string> argv) {
  bool help = false;
  absl::StatusOr<RunFlags> parsed = ParseRunFlags(argv, &help);
  if (!parsed.ok()) return Fail(parsed.status());
  if (help) {
    std::printf("%s%s\n%s", kRunUsage, kSamplingHelp, PlacementFlagsHelp());
    return 0;
  }
  const RunFlags& f = *parsed;
  WarnIfOverHardwareThreads(f.n_threads);
  // From here on a Ctrl-C ends the run after the current step, with its summary: during loading or prefill, before
  // the first token.
  const InterruptGuard interrupt_guard;

  absl::StatusOr<PlacementRequest> placement = ToPlacementRequest(f.placement);
  if (!placement.ok()) return Fail(placement.status());
  EngineOptions eo{.model_path = f.model, .device = f.placement.device, .placement = *placement, .n_ctx = f.n_ctx,
                   .n_batch = f.n_batch, .n_threads = f.n_threads, .kv_type = f.kv_type};
  // The plan is made for this run, its prompt's length and the tokens asked for, so that what it predicts is
  // what the run measures. A file that fails here fails again, with the engine's message, just below (unless a
  // routing flag needs its config now).
  absl::StatusOr<ModelConfig> cfg0 = absl::UnknownError("no model");
  if (absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(f.model); file.ok()) {
    cfg0 = LoadModelConfig(**file);
    if (absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromGguf(**file); t.ok()) {
      eo.prompt_tokens = static_cast<int>((*t)->Encode(f.prompt, TokenizeOptions{.add_bos = f.add_bos}).size());
      eo.gen_tokens = f.n_predict;
    }
  } else {
    cfg0 = file.status();
  }
  // --routing-out: every MoE layer's routing of every token this run evaluates, saved at the end.
  RoutingStats recorded;
  absl::Status record_status;
  if (!f.routing_out.empty() || !f.placement.routing.empty()) {
    if (!cfg0.ok()) return Fail(cfg0.status());
    absl::StatusOr<std::shared_ptr<const RoutingStats>> routing = LoadRoutingFlag(f.placement, *cfg0);
    if (!routing.ok()) return Fail(routing.status());
    eo.routing = *routing;
  }
  if (!f.routing_out.empty()) {
    if (!cfg0->is_moe()) return Fail(Cat("--routing-out: ", f.model, " is not an MoE model: it routes nothing"));
    recorded = RoutingStats::Empty(cfg0->n_layer, cfg0->n_expert, cfg0->n_expert_used);
    if (f.routing_append && std::filesystem::exists(f.routing_out)) {
      absl::StatusOr<RoutingStats> earlier = LoadRoutingStats(f.routing_out);
      absl::Status st = earlier.status();
      if (st.ok()) st = CheckRoutingMatches(*earlier, cfg0->n_layer, cfg0->n_expert, cfg0->n_expert_used);
      if (!st.ok()) return Fail(Cat("--routing-append ", f.routing_out, ": ", st.message()));
      recorded = *std::move(earlier);
    }
    eo.on_routing = [&recorded, &record_status](int layer, std::span<const int32_t> ids, int64_t n_tok, int k) {
      if (record_status.ok()) record_status = recorded.Add(layer, ids, n_tok, k);
    };
  }
  eo.numa = f.placement.numa;
  // A progress bar for weights going to VRAM or pinned RAM, only on a terminal and never with --json.
  if (!f.json && isatty(STDERR_FILENO)) eo.progress = ProgressBar("loading");
  using Clock = std::chrono::steady_clock;
  const auto t_open = Clock::now();
  auto engine_or = Engine::Open(eo);
  if (!engine_or.ok()) return Fail(engine_or.status());
  Engine& engine = **engine_or;
  const double load_ms = Ms(Clock::now() - t_open);
  const ModelConfig& cfg = engine.config();
  const Tokenizer& tok = engine.tokenizer();

  const std::vector<int32_t> prompt = tok.Encode(f.prompt, TokenizeOptions{.add_bos = f.add_bos});
  if (prompt.empty()) {
    return Fail(f.add_bos ? "the prompt is empty and the model's vocab adds no BOS token to start from"
                          : "the prompt is empty and --no-bos leaves no token to start from");
  }
  if (static_cast<int64_t>(prompt.size()) > engine.n_ctx()) {
    return Fail(Cat("the prompt has ", prompt.size(), " tokens but the context holds ", engine.n_ctx(),
                    " (raise -c)"));
  }
  const int n_vocab = cfg.n_vocab;
  const bool all_logits = !f.logits_out.empty();
  std::vector<float> logits(static_cast<size_t>(all_logits ? prompt.size() : 1) * n_vocab);
  std::vector<int32_t> history(prompt);  // prompt + generated, sized once
  history.reserve(prompt.size() + f.n_predict);
  std::vector<int32_t> generated;
  generated.reserve(f.n_predict);
  // The seed: given, or random as llama.cpp's default (-1) is; either way the summary and the JSON say which.
  SamplerOptions sampling = f.sampling;
  sampling.seed = f.seed ? *f.seed : std::random_device{}();
  Sampler sampler(sampling, n_vocab);
  std::vector<int32_t> eog_ids;  // --ignore-eos: their logits are masked before every sample
  if (f.ignore_eos) {
    for (int32_t id = 0; id < n_vocab; ++id) {
      if (tok.IsEog(id)) eog_ids.push_back(id);
    }
  }
  if (!f.json) std::fprintf(stderr, "%s\n", RunHeadline(engine.file(), cfg, engine.plan()).c_str());
  if (!f.json && f.display_prompt) {  // the prompt before its continuation, as llama-cli shows it
    std::fwrite(f.prompt.data(), 1, f.prompt.size(), stdout);
    std::fflush(stdout);
  }

  const auto t0 = Clock::now();
  absl::Status prefilled = all_logits || f.routing_out.empty() ? engine.Prefill(prompt, 0, all_logits, logits.data())
                                                                : PrefillEveryRow(engine, prompt, logits.data());
  if (!prefilled.ok()) return Fail(prefilled);
  const auto t_prefill = Clock::now();
  if (all_logits) {
    std::ofstream out(f.logits_out, std::ios::binary);
    out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
    if (!out) return Fail(Cat("cannot write logits to '", f.logits_out, "'"));
  }

  // Decode: sample from the last row, feed the token back, one at a time.
  std::span<float> last(logits.data() + (all_logits ? (prompt.size() - 1) * n_vocab : 0), n_vocab);
  std::string text;
  text.reserve(static_cast<size_t>(f.n_predict) * 16);  // pieces are short: no allocation while decoding
  Clock::time_point t_first = t_prefill;
  // Generating from BOS alone: SentencePiece's first piece carries the space the encoder would have prefixed.
  const bool strip_leading_space = prompt.size() == 1 && prompt[0] == tok.bos_id() && tok.add_space_prefix();
  StopReason stop = StopReason::kLimit;
  for (int i = 0; i < f.n_predict; ++i) {
    if (g_interrupted != 0) {
      stop = StopReason::kInterrupt;
      break;
    }
    for (int32_t e : eog_ids) last[e] = -std::numeric_limits<float>::infinity();
    const int32_t id = sampler.Sample(last, history);
    if (i == 0) t_first = Clock::now();
    generated.push_back(id);
    history.push_back(id);
    if (tok.IsEog(id)) {
      stop = StopReason::kEog;
      break;
    }
    std::string piece = tok.Piece(id);
    if (i == 0 && strip_leading_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    text += piece;
    if (!f.json) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (CompletesAny(text, piece.size(), f.reverse_prompts)) {
      stop = StopReason::kReversePrompt;
      break;
    }
    if (i + 1 == f.n_predict) break;
    const int64_t pos = static_cast<int64_t>(history.size()) - 1;
    if (pos >= engine.n_ctx()) {
      stop = StopReason::kContextFull;
      break;
    }
    const int32_t next = id;
    if (absl::Status st = engine.executor().Forward(std::span<const int32_t>(&next, 1), pos, 1, last.data());
        !st.ok()) {
      return Fail(st);
    }
  }
  const auto t_end = Clock::now();
  if (!f.json) {
    std::printf("\n");
    std::fflush(stdout);  // the text ends before the summary starts on stderr
  }

  if (!f.routing_out.empty()) {
    if (!record_status.ok()) return Fail(record_status);
    if (absl::Status st = SaveRoutingStats(recorded, f.routing_out); !st.ok()) return Fail(st);
    const uint64_t routed = *std::max_element(recorded.tokens.begin(), recorded.tokens.end());
    std::fprintf(stderr, "routing: %llu tokens per MoE layer %s %s\n", static_cast<unsigned long long>(routed),
                 f.routing_append ? "now in" : "written to", f.routing_out.c_str());
  }

  RunReport r;
  r.arch = cfg.arch;
  if (const Architecture* a = FindArchitecture(cfg.arch)) r.family = a->family();
  r.model_name = cfg.name;
  r.prompt_tokens = prompt;
  r.tokens = generated;
  r.text = text;
  r.prompt_ms = Ms(t_prefill - t0);
  r.gen_ms = Ms(t_end - t_prefill);
  r.ttft_ms = Ms(t_first - t0);
  r.n_decoded = std::max<int64_t>(0, static_cast<int64_t>(generated.size()) - 1);  // the first came from prefill
  r.decode_ms = generated.empty() ? 0 : Ms(t_end - t_first);
  r.peak_rss_bytes = PeakRssBytes();
  r.load_ms = load_ms;
  r.seed = sampling.seed;
  r.stop = stop;
  r.stats = engine.executor().stats();
  r.plan = &engine.plan();
  if (f.json) {
    std::printf("%s\n", RunReportJson(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fputs(RunReportSummary(r).c_str(), stderr);
  }
  return stop == StopReason::kInterrupt ? 130 : 0;
}

}  // namespace tandem::cli

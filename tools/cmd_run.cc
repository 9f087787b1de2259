// tandem run: generate text. Flags per spec/cli.md.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
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
#include "tools/run_report.h"

namespace tandem::cli {
namespace {

constexpr const char* kRunUsage = R"(usage: tandem run [-m MODEL] [-p PROMPT | -f PROMPT_FILE] [-n N_PREDICT] [-t THREADS] [-c CTX]
                  [-b BATCH] [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]
                  [--seed S] [--no-bos] [--kv-type f16|f32] [placement flags] [--json] [--logits-out FILE]
                  [--routing-out FILE [--routing-append]]
Without -m, runs the bundled stories260K model. -p "" generates from BOS alone. --temp 0 is greedy.
--routing-out FILE writes how an MoE model's routers spread this run's tokens (prompt and generated) over the
experts, per layer, for --routing FILE of plan, run, bench and sweep. With --routing-append the run's counts are
added to those FILE already holds (a recording of a model of the same shape), so that one run per prompt of a
calibration set builds one file.
)";

struct RunFlags {
  std::string model;
  std::string prompt;
  int n_predict = 128;
  int n_threads = 0;
  int n_ctx = 0;
  int n_batch = 512;
  bool add_bos = true;
  bool json = false;
  std::string logits_out;
  std::string routing_out;  // --routing-out FILE
  bool routing_append = false;  // --routing-append: add to FILE's counts instead of replacing them
  DType kv_type = DType::kF16;
  SamplerOptions sampling;
  PlacementFlags placement;
};

absl::StatusOr<RunFlags> ParseRunFlags(std::span<const std::string> argv, bool* help) {
  RunFlags f;
  ArgReader args(argv);
  bool have_prompt = false;
  while (!args.Done()) {
    const std::string flag = args.Next();
    TANDEM_ASSIGN_OR_RETURN(bool placed, ParsePlacementFlag(flag, args, f.placement));
    if (placed) continue;
    auto int_value = [&](int lo, int hi) -> absl::StatusOr<int> {
      TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
      TANDEM_ASSIGN_OR_RETURN(int64_t n, ParseInt(flag, v));
      if (n < lo || n > hi) return InvalidArgument(flag, " must be between ", lo, " and ", hi, ", got ", n);
      return static_cast<int>(n);
    };
    auto float_value = [&](double lo, double hi) -> absl::StatusOr<float> {
      TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
      TANDEM_ASSIGN_OR_RETURN(double x, ParseFloat(flag, v));
      if (x < lo || x > hi) return InvalidArgument(flag, " must be between ", lo, " and ", hi, ", got ", v);
      return static_cast<float>(x);
    };
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
      std::ifstream in(path, std::ios::binary);
      if (!in) return InvalidArgument("cannot read prompt file '", path, "'");
      std::stringstream ss;
      ss << in.rdbuf();
      f.prompt = ss.str();
      have_prompt = true;
    } else if (flag == "-n" || flag == "--n-predict") {
      TANDEM_ASSIGN_OR_RETURN(f.n_predict, int_value(0, 1 << 24));
    } else if (flag == "-t" || flag == "--threads") {
      TANDEM_ASSIGN_OR_RETURN(f.n_threads, int_value(1, 4096));
    } else if (flag == "-c" || flag == "--ctx-size") {
      TANDEM_ASSIGN_OR_RETURN(f.n_ctx, int_value(1, 1 << 24));
    } else if (flag == "-b" || flag == "--batch-size") {
      TANDEM_ASSIGN_OR_RETURN(f.n_batch, int_value(1, 1 << 16));
    } else if (flag == "--temp") {
      TANDEM_ASSIGN_OR_RETURN(f.sampling.temp, float_value(0, 100));
    } else if (flag == "--top-k") {
      TANDEM_ASSIGN_OR_RETURN(f.sampling.top_k, int_value(0, 1 << 24));
    } else if (flag == "--top-p") {
      TANDEM_ASSIGN_OR_RETURN(f.sampling.top_p, float_value(0, 1));
    } else if (flag == "--min-p") {
      TANDEM_ASSIGN_OR_RETURN(f.sampling.min_p, float_value(0, 1));
    } else if (flag == "--repeat-penalty") {
      TANDEM_ASSIGN_OR_RETURN(f.sampling.repeat_penalty, float_value(0, 100));
    } else if (flag == "--seed") {
      TANDEM_ASSIGN_OR_RETURN(std::string v, args.Value(flag));
      TANDEM_ASSIGN_OR_RETURN(int64_t s, ParseInt(flag, v));
      f.sampling.seed = static_cast<uint64_t>(s);
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
      if (v == "f16" || v == "F16") {
        f.kv_type = DType::kF16;
      } else if (v == "f32" || v == "F32") {
        f.kv_type = DType::kF32;
      } else {
        return InvalidArgument("--kv-type must be f16 or f32, got '", v, "'");
      }
    } else {
      return InvalidArgument("unknown flag '", flag, "' for run (see tandem run --help)");
    }
  }
  if (!have_prompt) f.prompt = "Once upon a time";
  if (f.model.empty()) f.model = DefaultModelPath();
  if (f.routing_append && f.routing_out.empty()) return InvalidArgument("--routing-append needs --routing-out FILE");
  return f;
}

uint64_t PeakRssBytes() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

double Ms(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

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
    std::printf("%s\n%s", kRunUsage, PlacementFlagsHelp());
    return 0;
  }
  const RunFlags& f = *parsed;

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
  if (!f.json && isatty(STDERR_FILENO)) {
    eo.progress = [](uint64_t done, uint64_t total) {
      const int width = 40;
      const int filled = total > 0 ? static_cast<int>(width * done / total) : width;
      std::fprintf(stderr, "\rloading [%s%s] %s / %s", std::string(filled, '#').c_str(),
                   std::string(width - filled, ' ').c_str(), HumanBytes(done).c_str(), HumanBytes(total).c_str());
      if (done >= total) std::fprintf(stderr, "\n");
    };
  }
  auto engine_or = Engine::Open(eo);
  if (!engine_or.ok()) return Fail(engine_or.status());
  Engine& engine = **engine_or;
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
  Sampler sampler(f.sampling, n_vocab);

  using Clock = std::chrono::steady_clock;
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
  for (int i = 0; i < f.n_predict; ++i) {
    const int32_t id = sampler.Sample(last, history);
    if (i == 0) t_first = Clock::now();
    generated.push_back(id);
    history.push_back(id);
    if (tok.IsEog(id)) break;
    std::string piece = tok.Piece(id);
    if (i == 0 && strip_leading_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    text += piece;
    if (!f.json) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (i + 1 == f.n_predict) break;
    const int64_t pos = static_cast<int64_t>(history.size()) - 1;
    if (pos >= engine.n_ctx()) break;  // context full
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
  r.stats = engine.executor().stats();
  r.plan = &engine.plan();
  if (f.json) {
    std::printf("%s\n", RunReportJson(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fputs(RunReportSummary(r).c_str(), stderr);
  }
  return 0;
}

}  // namespace tandem::cli

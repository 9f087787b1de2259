// tandem synth: write a random-weight GGUF of real model shapes.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"

#include "core/status.h"
#include "graph/placement.h"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/quant_mix.h"
#include "tools/synth.h"

namespace tandem::cli {
namespace {

constexpr const char* kSynthUsage = R"(usage: tandem synth --arch SHAPE [--layers N] [--embd D] [--ff F] [--expert-ff F] [--heads H]
                    [--kv-heads K] [--head-dim D] [--experts E] [--experts-used U] [--vocab V] [--vocab-file F]
                    [--shared-ff F] [--seed S] [--router-skew S] [--zeros] [--llama3-rope]
                    [--yarn FACTOR[:ORIG_CTX]] [--swa N] --type TYPE -o FILE
SHAPE is a family's default or a named real shape (--shape is the same flag):
  mixtral  = mixtral-8x7b     llama    = llama-2-7b       llama3   = llama-3.1-8b    (also llama-3.1-70b,
  qwen2    = qwen2.5-7b       qwen3    = qwen3-8b         qwen3moe = qwen3-30b-a3b   llama-3.2-1b, qwen3-235b-a22b,
  qwen2moe = qwen1.5-moe-a2.7b gpt-oss = gpt-oss-20b                             qwen2-57b-a14b, gpt-oss-120b)
The other flags override the shape. Llama 3 and Qwen shapes write their family's real vocabulary (built by
tools/make_vocab_gguf.py into the build's vocab/ folder; --vocab-file or TANDEM_VOCAB_DIR point elsewhere), so a
synthetic file tokenizes as the real model does; the others a SentencePiece filler vocab of --vocab pieces.
TYPE: F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K MXFP4, or the mixes Q4_K_M, Q5_K_M and MXFP4_MOE: each matrix typed
as llama.cpp's quantizer types it (a Q6_K output head, Q6_K attention values and FFN down projections in some
layers, ...; MXFP4_MOE: MXFP4 experts, Q8_0 for the rest, as gpt-oss ships). Norms, biases and the router stay F32.
--router-skew S (MoE) widens the low experts' router rows (expert 0's by 1 + S, the last's by 1), so the routers
have hot experts as real ones do; 0, the default, routes every expert alike.
--zeros leaves every weight zero, as holes in a sparse file: instant and free on disk, for `tandem plan`.
--llama3-rope writes rope_freqs.weight, Llama 3.1's RoPE scaling (factor 8, low 1, high 4, original context 8192)
as llama.cpp's converter writes it (the Llama 3 shapes have it already).
--yarn FACTOR[:ORIG_CTX] writes YaRN RoPE scaling (rope.scaling.type yarn, its factor and original context).
--shared-ff F sets the width of a shared expert (qwen2moe; the default is the shape's).
--swa N sets the sliding window of the windowed layers (gpt-oss: 128, on the even layers).
Each flag's default is the shape's value (tandem inspect on the output shows them all), except:
  --seed S (default 1)  --router-skew S (default 0)  --vocab-file F (default: the build's vocab/ folder)
  --type TYPE (required)  -o, --output FILE (required)  -h, --help (this text)
)";

std::string ShapeNames() {
  std::string s;
  for (const SynthShape& sh : SynthShapes()) {
    s += Cat(s.empty() ? "" : ", ", sh.alias.empty() ? "" : Cat(sh.alias, "|"), sh.name);
  }
  return s;
}

}  // namespace

int CmdSynth(std::span<const std::string> argv) {
  // The shape picks the defaults, so find it first.
  std::string shape = "mixtral";
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--arch" || argv[i] == "--shape") shape = argv[i + 1];
  }
  const SynthShape* preset = FindSynthShape(shape);
  if (preset == nullptr) return Fail("--arch: unknown shape '" + shape + "' (one of " + ShapeNames() + ")");
  SynthOptions o = preset->options;
  bool have_type = false;
  ArgReader args(argv);
  while (!args.Done()) {
    const std::string flag = args.Next();
    if (flag == "--help" || flag == "-h") {
      std::fputs(kSynthUsage, stdout);
      return 0;
    }
    if (flag == "--zeros") {
      o.zeros = true;
      continue;
    }
    if (flag == "--llama3-rope") {
      o.llama3_rope_factor = 8;
      continue;
    }
    absl::StatusOr<std::string> v = args.Value(flag);
    if (!v.ok()) return Fail(v.status());
    auto as_int = [&](int lo, int hi, int* dst) -> bool {
      absl::StatusOr<int64_t> n = ParseInt(flag, *v);
      if (!n.ok() || *n < lo || *n > hi) {
        Fail(Cat(flag, " must be an integer between ", lo, " and ", hi, ", got '", *v, "'"));
        return false;
      }
      *dst = static_cast<int>(*n);
      return true;
    };
    bool ok = true;
    if (flag == "--arch" || flag == "--shape") {
      continue;
    } else if (flag == "--layers") {
      ok = as_int(1, 1024, &o.n_layer);
    } else if (flag == "--embd") {
      ok = as_int(1, 1 << 20, &o.n_embd);
    } else if (flag == "--ff") {
      ok = as_int(1, 1 << 22, &o.n_ff);
    } else if (flag == "--expert-ff") {
      ok = as_int(1, 1 << 22, &o.n_ff_expert);
    } else if (flag == "--swa") {
      ok = as_int(1, 1 << 20, &o.n_swa);
    } else if (flag == "--shared-ff") {
      ok = as_int(1, 1 << 22, &o.n_ff_shexp);
    } else if (flag == "--yarn") {
      const size_t colon = v->find(':');
      double factor = 0;
      int64_t orig = 0;
      ok = absl::SimpleAtod(v->substr(0, colon), &factor) && factor > 0 && factor <= 1e4 &&
           (colon == std::string::npos || (absl::SimpleAtoi(v->substr(colon + 1), &orig) && orig >= 1 &&
                                           orig <= (int64_t{1} << 24)));
      if (!ok) return Fail(Cat("--yarn must be FACTOR (0 to 10000] or FACTOR:ORIG_CTX, got '", *v, "'"));
      o.yarn_factor = static_cast<float>(factor);
      o.yarn_orig_ctx = static_cast<int>(orig);
    } else if (flag == "--heads") {
      ok = as_int(1, 4096, &o.n_head);
    } else if (flag == "--kv-heads") {
      ok = as_int(1, 4096, &o.n_head_kv);
    } else if (flag == "--head-dim") {
      ok = as_int(2, 4096, &o.head_dim);
    } else if (flag == "--experts") {
      ok = as_int(1, 1024, &o.n_expert);
    } else if (flag == "--experts-used") {
      ok = as_int(1, 1024, &o.n_expert_used);
    } else if (flag == "--vocab") {
      if (!o.vocab.empty()) {
        return Fail(Cat("--vocab: shape ", o.shape, " writes the real '", o.vocab, "' vocabulary of ", o.n_vocab,
                        " tokens"));
      }
      ok = as_int(259, 1 << 22, &o.n_vocab);
    } else if (flag == "--vocab-file") {
      o.vocab_file = *v;
    } else if (flag == "--router-skew") {
      double skew = 0;
      ok = absl::SimpleAtod(*v, &skew) && skew >= 0 && skew <= 100;
      if (!ok) return Fail(Cat("--router-skew must be a number between 0 and 100, got '", *v, "'"));
      o.router_skew = static_cast<float>(skew);
    } else if (flag == "--seed") {
      int s = 0;
      ok = as_int(0, 1 << 30, &s);
      o.seed = static_cast<uint64_t>(s);
    } else if (flag == "--type") {
      o.mix = QuantMixFromName(*v);
      const std::optional<DType> t = o.mix ? DType::kQ4_K : DTypeFromName(*v);
      if (!t) return Fail("--type: unknown type '" + *v + "'");
      o.type = *t;
      have_type = true;
    } else if (flag == "-o" || flag == "--output") {
      o.output = *v;
    } else {
      return Fail("unknown flag '" + flag + "' for synth (see tandem synth --help)");
    }
    if (!ok) return 1;
  }
  if (!have_type) return Fail("synth needs --type (e.g. Q4_0)");
  if ((o.n_expert > 0) != (preset->options.n_expert > 0)) {
    return Fail(Cat("synth: shape ", o.shape, " is ", preset->options.n_expert > 0 ? "an MoE" : "a dense",
                    " model; --experts cannot change that"));
  }
  if (isatty(STDERR_FILENO)) o.progress = ProgressBar("writing");
  absl::StatusOr<SynthWritten> written = WriteSyntheticModel(o);
  if (!written.ok()) return Fail(written.status());
  const std::string type = o.mix ? std::string(QuantMixName(*o.mix)) : std::string(DTypeName(o.type));
  const std::string experts = o.n_expert > 0 ? Cat(" x ", o.n_expert, " experts (", o.n_expert_used, " used)") : "";
  std::printf("wrote %s: %s, %d layer%s%s, n_embd %d, %s, %zu tensors, %s%s\n", o.output.c_str(), o.arch.c_str(),
              o.n_layer, o.n_layer == 1 ? "" : "s", experts.c_str(), o.n_embd, type.c_str(), written->n_tensors,
              FormatBytes(written->tensor_bytes).c_str(), o.zeros ? " of zeros (file holes)" : "");
  return 0;
}

}  // namespace tandem::cli

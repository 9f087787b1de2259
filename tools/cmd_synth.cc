// tandem synth: write a random-weight GGUF of real model shapes.
#include <cstdio>

#include "core/status.h"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/synth.h"

namespace tandem::cli {
namespace {

constexpr const char* kSynthUsage = R"(usage: tandem synth --arch llama|mixtral [--layers N] [--embd D] [--ff F] [--heads H] [--kv-heads K]
                    [--experts E] [--experts-used U] [--vocab V] [--seed S] [--zeros] [--llama3-rope]
                    --type TYPE -o FILE
Defaults: --arch mixtral is Mixtral-8x7B (4096 embd, 32/8 heads, 14336 ff, 8 experts top-2, 32000 vocab, 32 layers);
--arch llama is Llama-2-7B. TYPE: F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K (norms and the router stay F32).
--zeros leaves every weight zero, as holes in a sparse file: instant and free on disk, for `tandem plan`.
--llama3-rope writes rope_freqs.weight, Llama 3.1's RoPE scaling (factor 8, low 1, high 4, original context 8192)
as llama.cpp's converter writes it.
)";

}  // namespace

int CmdSynth(std::span<const std::string> argv) {
  // The architecture picks the defaults, so find it first.
  std::string arch = "mixtral";
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--arch") arch = argv[i + 1];
  }
  if (arch != "llama" && arch != "mixtral") return Fail("--arch must be llama or mixtral, got '" + arch + "'");
  SynthOptions o = SynthDefaults(arch);
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
      o.llama3_rope = true;
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
    if (flag == "--arch") {
      continue;
    } else if (flag == "--layers") {
      ok = as_int(1, 1024, &o.n_layer);
    } else if (flag == "--embd") {
      ok = as_int(1, 1 << 20, &o.n_embd);
    } else if (flag == "--ff") {
      ok = as_int(1, 1 << 22, &o.n_ff);
    } else if (flag == "--heads") {
      ok = as_int(1, 4096, &o.n_head);
    } else if (flag == "--kv-heads") {
      ok = as_int(1, 4096, &o.n_head_kv);
    } else if (flag == "--experts") {
      ok = as_int(1, 1024, &o.n_expert);
    } else if (flag == "--experts-used") {
      ok = as_int(1, 1024, &o.n_expert_used);
    } else if (flag == "--vocab") {
      ok = as_int(259, 1 << 22, &o.n_vocab);
    } else if (flag == "--seed") {
      int s = 0;
      ok = as_int(0, 1 << 30, &s);
      o.seed = static_cast<uint64_t>(s);
    } else if (flag == "--type") {
      const std::optional<DType> t = DTypeFromName(*v);
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
  if (absl::Status st = WriteSyntheticModel(o); !st.ok()) return Fail(st);
  return 0;
}

}  // namespace tandem::cli

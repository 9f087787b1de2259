#!/bin/bash
# Expert-level against layer-level placement on the simulated GPU, with a skewed routing trace: for VRAM budgets
# that hold about 25 % and 50 % of the experts, the decode speed `tandem run` predicts and measures for
#   - the expert-level plan (auto, --routing TRACE),
#   - the layer-level plans: auto with --expert-level off, and every --gpu-layers count (the best one is the peer).
# docs/performance.md records the table.
#   bench/expert_plan_check.sh            (DEVICE=cuda for a real GPU, budgets through --vram-budget as here;
#                                          THREADS=1: the sim's compute worker takes the other core; GEN=48;
#                                          GPU_GBPS=12: below what one core reaches, so the throttle rules;
#                                          TYPE=Q4_0: the experts' weight type; SKEW=1: synth --router-skew;
#                                          ISA=scalar: the CPU kernels calibrate and run compute-bound, so the
#                                          CPU side and the sim's core no longer share the memory bus's limit)
set -euo pipefail
TANDEM=${TANDEM:-$(dirname "$0")/../build/tandem}
threads=${THREADS:-1}
gen=${GEN:-48}
gpu_gbps=${GPU_GBPS:-12}
pcie=${PCIE:-8}
type=${TYPE:-Q4_0}
skew=${SKEW:-1}
isa=(env)
[ -n "${ISA:-}" ] && isa=(env TANDEM_ISA="$ISA")  # the calibration, plans and runs; not synth or the trace
tmp=${TMPDIR_KEEP:-$(mktemp -d)}
device=${DEVICE:-sim:64GiB,pcie=$pcie,gpu_gbps=$gpu_gbps}
model="$tmp/moe16-$type-skew$skew.gguf"
# 4 layers of 16 experts (top-2), 19.5 MiB each at Q4_0 (36.8 at Q8_0): weights dominate every step.
[ -f "$model" ] || "$TANDEM" synth --arch mixtral --layers 4 --embd 2048 --ff 5632 --heads 16 --kv-heads 4 \
  --experts 16 --experts-used 2 --vocab 4000 --router-skew "$skew" --type "$type" -o "$model" > /dev/null
# A calibration set of 8 texts for the routing trace, and the start of a 9th, held out, that the measured runs
# continue: the routers of one text pick alike, so a trace of one text misjudges another's hit rate
# (routing_stats_test.cc). The held-out prompt is short so that attention, which the sim computes with the CPU's
# kernels while the planner prices it at a GPU's rate, stays a small part of each decoded token.
python3 - "$tmp" <<'PY'
import random, sys
words = ("the quick brown fox jumps over a lazy dog while seven small birds sing in the old green tree near "
         "river stone house where children play with red balls and tall men read long books about ships").split()
for i in range(9):
    rng = random.Random(7 + i)
    pool = rng.sample(words, 16)
    n = 120 if i < 8 else 10
    open(f"{sys.argv[1]}/prompt{i}.txt", "w").write(" ".join(rng.choice(pool) for _ in range(n)) + "\n")
PY
routing="$tmp/routing-$type-skew$skew.json"
if [ ! -f "$routing" ]; then
  for i in 0 1 2 3 4 5 6 7; do
    "$TANDEM" run -m "$model" -f "$tmp/prompt$i.txt" -n 32 -t "$threads" --device none \
      --routing-out "$routing.part" --routing-append > /dev/null 2>&1
  done
  mv "$routing.part" "$routing"
fi
# This machine's CPU rates at this thread count, the calibration every plan and run below uses.
export XDG_CACHE_HOME="$tmp/cache${ISA:+-$ISA}"
[ -d "$XDG_CACHE_HOME" ] || "${isa[@]}" "$TANDEM" calibrate --device none -t "$threads" > /dev/null 2>&1
# Everything but the experts on the GPU: the budget's fixed part.
fixed=$("${isa[@]}" "$TANDEM" plan -m "$model" --device "$device" -t "$threads" --place 'ffn_.*_exps=cpu' --gpu-layers 4 --json | python3 -c '
import json, sys; print(json.load(sys.stdin)["memory"]["gpu"]["total"])')
experts=$("$TANDEM" inspect -m "$model" --json | python3 -c '
import json, sys; print(json.load(sys.stdin)["groups"]["experts"])')
run() {  # name budget flags...: one run's predicted and measured decode t/s
  local name=$1 budget=$2; shift 2
  "${isa[@]}" "$TANDEM" run -m "$model" -f "$tmp/prompt8.txt" -n "$gen" -t "$threads" --temp 0 \
    --device "$device" --vram-budget "$budget" \
    --routing "$routing" --json "$@" > "$tmp/$name.json" 2> "$tmp/$name.err" || { echo "$name: $(tail -n 1 "$tmp/$name.err")"; rm -f "$tmp/$name.json"; return 0; }
  python3 - "$tmp/$name.json" "$name" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
p, t = j["predicted"], j["timings"]
e = j.get("experts", {}).get("decode", {})
split = [u["experts"]["expected_gpu_hit_rate"] for u in j["plan"]["units"]
         if "experts" in u and u["experts"]["decode"]["gpu"] < sum(u["experts"]["decode"].values())]
hit = (f" | hits predicted {100 * sum(split) / len(split):.0f} % measured {100 * e['gpu_hit_rate']:.0f} %"
       if e and split else "")
print(f"{sys.argv[2]:28s} predicted {p['decode_tps']:7.2f} t/s  measured {t['gen_tps']:7.2f} t/s  "
      f"ratio {t['gen_tps'] / p['decode_tps']:.2f}  PCIe/token {j['pcie_bytes_per_token'] / 2**20:.1f} MiB{hit}")
PY
}
for share in 25 50; do
  budget=$((fixed + experts * share / 100))
  echo "== budget $((budget / 1048576)) MiB: the non-expert part + ${share} % of the experts"
  run "expert-$share" "$budget"
  run "layer-auto-$share" "$budget" --expert-level off
  for g in 0 1 2 3; do run "layer-gpu$g-$share" "$budget" --expert-level off --gpu-layers "$g"; done
done
# Per budget: the expert-level plan against the best layer-level one, as predicted and as measured.
python3 - "$tmp" <<'PY'
import glob, json, os, sys
for share in (25, 50):
    def tps(name):
        j = json.load(open(name))
        return j["predicted"]["decode_tps"], j["timings"]["gen_tps"]
    ep, em = tps(f"{sys.argv[1]}/expert-{share}.json")
    layers = {os.path.basename(f)[:-5]: tps(f) for f in glob.glob(f"{sys.argv[1]}/layer-*-{share}.json")}
    best = max(layers, key=lambda n: layers[n][1])
    lp, lm = layers[best]
    print(f"{share} % of the experts: expert-level / best layer-level ({best}): predicted {ep / max(layers[n][0] for n in layers):.2f}x, "
          f"measured {em / lm:.2f}x; expert-level measured / predicted {em / ep:.2f}")
PY
echo "(files in $tmp)"

#!/bin/bash
# Expert-level against layer-level placement on the simulated GPU, with a skewed routing trace: for VRAM budgets
# that hold about 25 % and 50 % of the experts, the decode speed `tandem run` predicts and measures for
#   - the expert-level plan (auto, --routing TRACE),
#   - the layer-level plans: auto with --expert-level off, and every --gpu-layers count (the best one is the peer).
# docs/performance.md records the table.
#   bench/expert_plan_check.sh            (DEVICE=cuda for a real GPU, budgets through --vram-budget as here;
#                                          THREADS=1: the sim's compute worker takes the other core; GEN=48;
#                                          GPU_GBPS=12: below what one core reaches, so the throttle rules)
set -euo pipefail
TANDEM=${TANDEM:-$(dirname "$0")/../build/tandem}
threads=${THREADS:-1}
gen=${GEN:-48}
gpu_gbps=${GPU_GBPS:-12}
pcie=${PCIE:-8}
tmp=${TMPDIR_KEEP:-$(mktemp -d)}
device=${DEVICE:-sim:64GiB,pcie=$pcie,gpu_gbps=$gpu_gbps}
model="$tmp/moe16.gguf"
# 4 layers of 16 experts (top-2), 19.5 MiB each at Q4_0: weights dominate every step.
[ -f "$model" ] || "$TANDEM" synth --arch mixtral --layers 4 --embd 2048 --ff 5632 --heads 16 --kv-heads 4 \
  --experts 16 --experts-used 2 --vocab 4000 --router-skew 1 --type Q4_0 -o "$model" > /dev/null
python3 - > "$tmp/prompt.txt" <<'PY'
import random
random.seed(7)
words = "the quick brown fox jumps over a lazy dog while seven small birds sing in the old green tree".split()
print(" ".join(random.choice(words) for _ in range(150)))
PY
# The routing trace, and this machine's CPU rates at this thread count.
[ -f "$tmp/routing.json" ] || "$TANDEM" run -m "$model" -f "$tmp/prompt.txt" -n 64 -t "$threads" --device none \
  --routing-out "$tmp/routing.json" > /dev/null 2>&1
export XDG_CACHE_HOME="$tmp/cache"  # the calibration every plan and run below uses
[ -d "$tmp/cache" ] || "$TANDEM" calibrate --device none -t "$threads" > /dev/null 2>&1
# Everything but the experts on the GPU: the budget's fixed part.
fixed=$("$TANDEM" plan -m "$model" --device "$device" -t "$threads" --place 'ffn_.*_exps=cpu' --gpu-layers 4 --json | python3 -c '
import json, sys; print(json.load(sys.stdin)["memory"]["gpu"]["total"])')
experts=$(python3 -c "print(4 * 16 * 3 * 2048 * 5632 * 18 // 32)")
run() {  # name budget flags...: one run's predicted and measured decode t/s
  local name=$1 budget=$2; shift 2
  "$TANDEM" run -m "$model" -p "Once upon a time there was" -n "$gen" -t "$threads" --temp 0 \
    --device "$device" --vram-budget "$budget" \
    --routing "$tmp/routing.json" --json "$@" > "$tmp/$name.json" 2> "$tmp/$name.err" || { echo "$name: failed"; cat "$tmp/$name.err"; return 0; }
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
echo "(files in $tmp)"

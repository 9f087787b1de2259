#!/bin/bash
# How far the cost model's predictions sit from what runs measure, on the CPU alone: ROUNDS times, a fresh full
# calibration (in a cache of its own) and then `tandem run` of the same file, whose --json holds the plan's
# predictions for that very run beside its measurements. Prints each round and the medians, and the spread of the
# predictions across calibrations (docs/performance.md records the result).
#   bench/prediction_check.sh MODEL.gguf        (ROUNDS=5, THREADS=2, PROMPT_WORDS=400, GEN=64 by default)
set -euo pipefail
model=${1:?usage: prediction_check.sh MODEL.gguf}
TANDEM=${TANDEM:-$(dirname "$0")/../build/tandem}
rounds=${ROUNDS:-5}
threads=${THREADS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A prompt of ordinary words, about PROMPT_WORDS of them (a few hundred tokens in most vocabularies).
python3 - "${PROMPT_WORDS:-400}" > "$tmp/prompt.txt" <<'PY'
import sys
words = "the quick brown fox jumps over a lazy dog while seven small birds sing in the old green tree".split()
print(" ".join(words[i % len(words)] for i in range(int(sys.argv[1]))))
PY
for r in $(seq 1 "$rounds"); do
  XDG_CACHE_HOME="$tmp/cache$r" "$TANDEM" calibrate --device none -t "$threads" > "$tmp/cal$r.txt" 2>&1
  XDG_CACHE_HOME="$tmp/cache$r" "$TANDEM" run -m "$model" -f "$tmp/prompt.txt" -n "${GEN:-64}" -t "$threads" \
    --temp 0 --device none --json > "$tmp/run$r.json" 2> "$tmp/run$r.err"
done
python3 - "$tmp" "$rounds" <<'PY'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
rows = []
for r in range(1, rounds + 1):
    j = json.load(open(f"{tmp}/run{r}.json"))
    p, t = j["predicted"], j["timings"]
    rows.append((p["prefill_tps"], t["prompt_tps"], p["decode_tps"], t["gen_tps"], p["ttft_ms"], t["ttft_ms"],
                 len(j["prompt_tokens"])))
    print(f"round {r}: prompt {rows[-1][6]} tokens | prefill predicted {p['prefill_tps']:.1f} measured "
          f"{t['prompt_tps']:.1f} t/s | decode predicted {p['decode_tps']:.2f} measured {t['gen_tps']:.2f} t/s | "
          f"first token predicted {p['ttft_ms']:.0f} measured {t['ttft_ms']:.0f} ms")
med = [statistics.median(x[i] for x in rows) for i in range(6)]
def spread(i):
    v = [x[i] for x in rows]
    return (max(v) - min(v)) / statistics.median(v)
print(f"median prefill: predicted {med[0]:.1f}, measured {med[1]:.1f} t/s, predicted/measured {med[0]/med[1]:.2f}"
      f" (predictions spread {spread(0):.0%} across calibrations)")
print(f"median decode: predicted {med[2]:.2f}, measured {med[3]:.2f} t/s, predicted/measured {med[2]/med[3]:.2f}"
      f" (predictions spread {spread(2):.0%} across calibrations)")
print(f"median first token: predicted {med[4]:.0f}, measured {med[5]:.0f} ms")
PY

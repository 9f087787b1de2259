#!/bin/bash
# Side-by-side runs of tandem, llama.cpp and ik_llama.cpp on the same GGUF files with the same thread count, one
# program after another, round after round (this is how docs/performance.md was measured). The peers are built
# outside the repository; point at their llama-bench binaries:
#   LLAMA_BENCH=/path/llama.cpp/build/bin/llama-bench IK_BENCH=/path/ik_llama.cpp/build/bin/llama-bench \
#     bench/side_by_side.sh prefill|decode FILE.gguf...
# prefill: pp512 and tg64, -r 3, three rounds. decode: tg32, -r 2, eight short rounds, so that every program meets
# the host's bandwidth swings alike. ROUNDS and THREADS override the defaults. With PROBE=build/bench/matmul_bench
# a read-bandwidth probe runs before every program and after the last, so each run can be set against the
# bandwidth the host gave around it ("probe GB/s" lines).
set -u
mode=${1:?prefill or decode}
shift
TANDEM=${TANDEM:-$(dirname "$0")/../build/tandem}
THREADS=${THREADS:-2}
case "$mode" in
  prefill) args=(-p 512 -n 64 -r 3); rounds=${ROUNDS:-3} ;;
  decode) args=(-p 0 -n 32 -r 2); rounds=${ROUNDS:-8} ;;
  *) echo "side_by_side.sh: mode must be prefill or decode" >&2; exit 2 ;;
esac
probe() {  # the median probe GB/s of a 14336 x 4096 one-token matmul run (its sixth column)
  [ -n "${PROBE:-}" ] || return 0
  echo "probe GB/s $("$PROBE" --rows 14336 --cols 4096 --types q8_0 --ntok 1 --reps 5 2>&1 | tail -1 | awk '{print $6}')"
}
for round in $(seq 1 "$rounds"); do
  for model in "$@"; do
    echo "== $(basename "$model") round $round $(date +%T)"
    probe
    "$TANDEM" bench -m "$model" "${args[@]}" -t "$THREADS" 2>&1 | grep -E '\| (pp|tg)[0-9]' || echo "tandem failed"
    if [ -n "${LLAMA_BENCH:-}" ]; then
      probe
      "$LLAMA_BENCH" -m "$model" "${args[@]}" -t "$THREADS" 2>&1 | grep -E '(pp|tg)[0-9]'
    fi
    if [ -n "${IK_BENCH:-}" ]; then
      probe
      "$IK_BENCH" -m "$model" "${args[@]}" -t "$THREADS" -fmoe 1 -rtr 1 2>&1 | grep -E '(pp|tg)[0-9]'
    fi
    probe
  done
done

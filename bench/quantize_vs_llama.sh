#!/bin/bash
# tandem quantize against llama-quantize on an 8B-shaped F16 file: Llama 3.1 8B's shapes (its 128256-token head
# and embeddings, 4096 wide, 14336 FFN) with LAYERS of its 32 layers, 4 by default (3.9 GB; 32 is the real 16 GB
# model). Same TYPE and thread count, the two programs alternating which goes first, ROUNDS rounds (this is how
# docs/performance.md was measured). llama.cpp is built outside the repository; point at its quantizer:
#   LLAMA_QUANTIZE=/path/llama.cpp/build/bin/llama-quantize bench/quantize_vs_llama.sh [DIR]
# DIR (default /tmp) keeps the F16 file between runs; each output is removed after its run. TYPE (Q4_K_M),
# THREADS (2), LAYERS (4) and ROUNDS (3) override the defaults. Prints every run's wall and CPU seconds, the host
# and its load before each run, then the medians and the ratio.
set -eu
TANDEM=${TANDEM:-$(dirname "$0")/../build/tandem}
LLAMA_QUANTIZE=${LLAMA_QUANTIZE:?set LLAMA_QUANTIZE to llama.cpp\'s llama-quantize}
TYPE=${TYPE:-Q4_K_M}
THREADS=${THREADS:-2}
LAYERS=${LAYERS:-4}
ROUNDS=${ROUNDS:-3}
dir=${1:-/tmp}
src=$dir/tandem-bench-llama-3.1-8b-${LAYERS}L-F16.gguf
out=$dir/tandem-bench-quantized-$$.gguf
times=$(mktemp)
trap 'rm -f "$out" "$out.tmp" "$times" "$times.one"' EXIT

[ -f "$src" ] || "$TANDEM" synth --arch llama-3.1-8b --layers "$LAYERS" --type F16 -o "$src"
echo "host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $TYPE, $THREADS threads, $(du -h "$src" | cut -f1) source"
cat "$src" > /dev/null  # both programs start from a warm page cache

run() {  # NAME COMMAND...: one timed run, its output checked and removed
  local name=$1
  shift
  echo "== $name $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -f "%e %U %S" -o "$times.one" "$@" > /dev/null 2>&1 || { echo "$name failed"; exit 1; }
  local wall cpu
  read -r wall cpu < <(awk '{ print $1, $2 + $3 }' "$times.one")
  echo "$name wall ${wall}s cpu ${cpu}s output $(du -h "$out" | cut -f1)"
  echo "$name $wall $cpu" >> "$times"
  rm -f "$out"
}
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then
    run tandem "$TANDEM" quantize "$src" "$out" "$TYPE" -t "$THREADS"
    run llama "$LLAMA_QUANTIZE" "$src" "$out" "$TYPE" "$THREADS"
  else
    run llama "$LLAMA_QUANTIZE" "$src" "$out" "$TYPE" "$THREADS"
    run tandem "$TANDEM" quantize "$src" "$out" "$TYPE" -t "$THREADS"
  fi
done
median() {  # NAME COLUMN
  awk -v n="$1" -v c="$2" '$1 == n { print $c }' "$times" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
tw=$(median tandem 2) lw=$(median llama 2) tc=$(median tandem 3) lc=$(median llama 3)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "median wall: tandem ${tw}s, llama-quantize ${lw}s: llama-quantize / tandem = $(ratio "$lw" "$tw")"
echo "median cpu:  tandem ${tc}s, llama-quantize ${lc}s: llama-quantize / tandem = $(ratio "$lc" "$tc")"

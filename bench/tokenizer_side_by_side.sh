#!/bin/bash
# Tokenizer throughput, tandem against llama.cpp, on the same GGUF vocabularies and the same text: a deterministic
# mix of English prose, code and several scripts (SIZE_MB, default 4), tokenized whole without BOS by
#   tandem tokenize -m VOCAB --no-bos --ids -f TEXT      and      llama-tokenize -m VOCAB -f TEXT --no-bos --ids
# one program after the other, round after round (ROUNDS, default 3), both pinned to the same CPU (CPU, default 0).
# Each run's load time (the same command on a one-word file, best of the rounds) is taken off, so MB/s is the
# tokenizer's alone. Also checks both give the same number of tokens.
#   LLAMA_TOKENIZE=/path/llama.cpp/build/bin/llama-tokenize bench/tokenizer_side_by_side.sh [VOCAB.gguf...]
# VOCAB defaults to the build's vocab folder (build/vocab/{llama3,qwen3,o200k}.gguf; tools/make_vocab_gguf.py).
set -u
here=$(cd "$(dirname "$0")" && pwd)
TANDEM=${TANDEM:-$here/../build/tandem}
LLAMA_TOKENIZE=${LLAMA_TOKENIZE:?set LLAMA_TOKENIZE to llama.cpp\'s llama-tokenize}
VOCAB_DIR=${VOCAB_DIR:-$here/../build/vocab}
ROUNDS=${ROUNDS:-3}
SIZE_MB=${SIZE_MB:-4}
CPU=${CPU:-0}
export LD_LIBRARY_PATH=$(dirname "$LLAMA_TOKENIZE")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ $# -gt 0 ] || set -- "$VOCAB_DIR/llama3.gguf" "$VOCAB_DIR/qwen3.gguf" "$VOCAB_DIR/o200k.gguf"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work/text.txt" "$SIZE_MB" <<'EOF'
import random, sys
rng = random.Random(20261201)
prose = ("The quick brown fox jumps over the lazy dog. It's 3.14159 o'clock, and we've got 1234567 reasons; "
         "THEY'LL say it isn't so. Numbers like 42, 1,000,000 and 2026-12-01 appear now and then.\n").split(" ")
code = ["def f(x):\n", "    return x ** 2  # square\n", "for (int i = 0; i < n; ++i) {\n", "\tsum += a[i];\n",
        "}\n", "    if err != nil { return err }\n", '{"key": [1, 2.5, null], "ok": true}\n', "\n\n"]
words = ["Привет", "мир", "我爱北京天安门", "こんにちは", "안녕하세요", "مرحبا", "नमस्ते", "Γειά", "café", "naïve",
         "Tiếng Việt", "👍🏽", "🦙", "ภาษาไทย", "שלום", "１２３"]
out, size, target = [], 0, int(float(sys.argv[2]) * 1e6)
while size < target:
    kind = rng.random()
    if kind < 0.6:
        s = " ".join(rng.choice(prose) for _ in range(rng.randint(5, 40))) + "\n"
    elif kind < 0.85:
        s = "".join(rng.choice(code) for _ in range(rng.randint(2, 12)))
    else:
        s = " ".join(rng.choice(words) for _ in range(rng.randint(3, 20))) + "\n"
    out.append(s)
    size += len(s.encode())
open(sys.argv[1], "w", encoding="utf-8").write("".join(out))
EOF
printf 'Hello' > "$work/tiny.txt"
bytes=$(stat -c %s "$work/text.txt")

tandem_reads_files=1
"$TANDEM" tokenize --help 2>&1 | grep -qE '(^|[ ,])-f([ ,]|$)|--file' || tandem_reads_files=0
[ $tandem_reads_files = 1 ] || echo "tandem tokenize cannot read a file (no -f): measuring llama.cpp only" >&2

pin() { if command -v taskset >/dev/null; then taskset -c "$CPU" "$@"; else "$@"; fi; }
run_tandem() { pin "$TANDEM" tokenize -m "$1" --no-bos --ids -f "$2"; }
run_llama() { pin "$LLAMA_TOKENIZE" -m "$1" -f "$2" --no-escape --no-parse-special --no-bos --ids --log-disable -t 1; }
# seconds a command takes, its stdout's token count to $work/count
timed() {
  local t0 t1
  t0=$(date +%s.%N)
  "$@" > "$work/out" 2>/dev/null || { echo "failed: $*" >&2; echo -1; return; }
  t1=$(date +%s.%N)
  tr -cd ',' < "$work/out" | wc -c | awk '{print $1 + 1}' > "$work/count"
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", b - a }'
}
min() { printf '%s\n' "$@" | sort -g | head -1; }
mbs() { awk -v n="$bytes" -v t="$1" -v l="$2" 'BEGIN { printf "%.3f\n", n / 1e6 / (t - l) }'; }  # MB/s, load time off

echo "text: $bytes bytes, $ROUNDS rounds, CPU $CPU"
printf '%-22s %10s %10s %10s %8s\n' vocab tandem_MB/s llama_MB/s ratio tokens
for vocab in "$@"; do
  tl=() tt=() ll=() lt=() tc=0 lc=0
  for r in $(seq 1 "$ROUNDS"); do
    if [ $tandem_reads_files = 1 ]; then
      tl+=("$(timed run_tandem "$vocab" "$work/tiny.txt")")
      tt+=("$(timed run_tandem "$vocab" "$work/text.txt")"); tc=$(cat "$work/count")
    fi
    ll+=("$(timed run_llama "$vocab" "$work/tiny.txt")")
    lt+=("$(timed run_llama "$vocab" "$work/text.txt")"); lc=$(cat "$work/count")
    t_last=n/a; [ ${#tt[@]} -gt 0 ] && t_last=${tt[-1]}
    echo "  $(basename "$vocab") round $r: tandem $t_last s, llama.cpp ${lt[-1]} s (load ${ll[-1]} s)" >&2
  done
  lmbs=$(mbs "$(min "${lt[@]}")" "$(min "${ll[@]}")")
  if [ $tandem_reads_files = 1 ]; then
    tmbs=$(mbs "$(min "${tt[@]}")" "$(min "${tl[@]}")")
    ratio=$(awk -v a="$tmbs" -v b="$lmbs" 'BEGIN { printf "%.3f\n", a / b }')
    [ "$tc" = "$lc" ] || echo "  $(basename "$vocab"): token counts differ: tandem $tc, llama.cpp $lc" >&2
  else
    tmbs=n/a ratio=n/a
  fi
  printf '%-22s %10s %10s %10s %8s\n' "$(basename "$vocab")" "$tmbs" "$lmbs" "$ratio" "$lc"
done

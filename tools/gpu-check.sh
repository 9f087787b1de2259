#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, its driver and the CUDA toolkit (nothing else installed), runs
# the GPU tests and the GPU benchmark from the folder tools/pack-gpu-check.sh made, and prints a summary table
# last. Meant to finish in under 8 minutes on one H200; every step has its own time limit.
#
# usage: tools/gpu-check.sh [--quick] [--no-sanitizer] [PACK_DIR]     (PACK_DIR defaults to build-gpu)
#   --quick         smaller benchmark
#   --no-sanitizer  skip the compute-sanitizer memcheck pass over the kernel tests
# Logs go to $GPU_CHECK_LOGS (default PACK_DIR/logs). Exit status: 0 when every test passed on a device, 1 when
# one failed, 2 for a usage or setup problem, 3 when no CUDA device was visible (the GPU tests skipped).
set -uo pipefail
cd "$(dirname "$0")/.."
t_start=$(date +%s)

pack=build-gpu
quick=""
sanitizer=1
for arg in "$@"; do
  case "$arg" in
    --quick) quick="--quick" ;;
    --no-sanitizer) sanitizer=0 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) echo "gpu-check: unknown option $arg" >&2; exit 2 ;;
    *) pack="$arg" ;;
  esac
done
bin="$pack/bin"
logs="${GPU_CHECK_LOGS:-$pack/logs}"
if [ ! -d "$bin" ]; then
  echo "gpu-check: $bin not found: run tools/pack-gpu-check.sh where the project builds, then carry $pack/" >&2
  exit 2
fi
mkdir -p "$logs"
rm -f "$logs"/*.log
elapsed() { echo $(( $(date +%s) - t_start )); }
# Each phase ends by a fixed second of the run so the whole check stays under 8 minutes even when something
# hangs: tests by 150 s, memcheck by 270 s, the benchmark by 420 s, end-to-end by 465 s.
budget() { local left=$(( $1 - $(elapsed) )); [ "$left" -lt 10 ] && left=10; echo "$left"; }
say() { printf '[gpu-check %3ss] %s\n' "$(elapsed)" "$*"; }

# ---- Libraries: unpack the compressed ones, then the pack's folder first on the search path ----
for f in "$pack"/lib/*.xz; do
  [ -e "$f" ] || continue
  out="${f%.xz}"
  if [ ! -s "$out" ] || [ "$f" -nt "$out" ]; then
    xz -dc "$f" >"$out.tmp" && mv "$out.tmp" "$out" || { echo "gpu-check: cannot unpack $f" >&2; exit 2; }
  fi
done
cuda_libs=""
for d in "${CUDA_HOME:-}" /usr/local/cuda /usr/local/cuda-13 /usr/local/cuda-13.0; do
  if [ -n "$d" ] && [ -d "$d/lib64" ]; then cuda_libs="$d/lib64"; break; fi
done
export LD_LIBRARY_PATH="$pack/lib${cuda_libs:+:$cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# This machine's C++ runtime may be older than the build machine's: then use the packed one.
if ldd "$bin/tandem" 2>&1 | grep -q "GLIBCXX_.*not found\|CXXABI_.*not found\|libstdc++.*not found"; then
  export LD_LIBRARY_PATH="$pack/lib/fallback:$LD_LIBRARY_PATH"
  say "using the packed libstdc++ (this machine's is older)"
fi
missing=$(for b in "$bin"/*; do ldd "$b" 2>&1 | grep "not found"; done | sort -u)
if [ -n "$missing" ]; then
  echo "gpu-check: libraries not found (is the CUDA toolkit's lib64 on LD_LIBRARY_PATH?):" >&2
  echo "$missing" >&2
fi

say "pack: $(sed -n 2p "$pack/MANIFEST" 2>/dev/null), $(grep 'cuda architecture' "$pack/MANIFEST" 2>/dev/null)"
if command -v nvidia-smi >/dev/null; then
  say "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
else
  say "gpu: nvidia-smi not found"
fi

# ---- Tests ----
rows=()
failures=0
for t in "$bin"/gpu_backend_*_test; do
  name=$(basename "$t")
  t0=$(date +%s)
  timeout "$(budget 150)" "$t" --gtest_color=no >"$logs/$name.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$logs/$name.log" | grep -oE '[0-9]+$' | tail -1)
  failed=$(grep -oE '^\[  FAILED  \] [0-9]+ tests?,' "$logs/$name.log" | grep -oE '[0-9]+' | tail -1)
  skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+ tests?,' "$logs/$name.log" | grep -oE '[0-9]+' | tail -1)
  case $rc in
    0) status=ok ;;
    124) status="TIMEOUT"; failures=$((failures + 1)) ;;
    *) status="FAIL (exit $rc)"; failures=$((failures + 1)) ;;
  esac
  say "$name: $status, ${passed:-0} passed, ${failed:-0} failed, ${skipped:-0} skipped, ${secs}s"
  if [ "$rc" -ne 0 ]; then
    grep -E '^\[  FAILED  \] [A-Za-z]|Failure|Expected|Which is|actual|error' "$logs/$name.log" | head -40
  fi
  rows+=("$(printf '| %-34s | %6s | %6s | %7s | %4ss | %-16s |' "$name" "${passed:-0}" "${failed:-0}" \
    "${skipped:-0}" "$secs" "$status")")
done

# ---- compute-sanitizer memcheck over the kernel tests: out-of-bounds and misaligned accesses ----
sanitizer_row=""
if [ "$sanitizer" -eq 1 ] && command -v compute-sanitizer >/dev/null; then
  san_status=clean
  for name in gpu_backend_ops_test gpu_backend_attention_test gpu_backend_moe_test gpu_backend_matmul_test; do
    [ -x "$bin/$name" ] || continue
    if [ "$(elapsed)" -gt 255 ]; then san_status="partial (time)"; break; fi
    filter="*"
    # The full matmul suite is long under memcheck: every type once on each path is enough here.
    [ "$name" = gpu_backend_matmul_test ] && filter="*MatMulTest.DecodeBatches*:*GemmOnly*:*SmallWorkspace*"
    timeout "$(budget 270)" compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 \
      "$bin/$name" --gtest_color=no --gtest_filter="$filter" >"$logs/memcheck-$name.log" 2>&1
    rc=$?
    if [ "$rc" -eq 124 ]; then
      san_status="partial (timeout in $name)"
    elif [ "$rc" -ne 0 ]; then
      san_status="ERRORS in $name"
      failures=$((failures + 1))
      grep -E 'Invalid|out of bounds|misaligned|Error|FAILED' "$logs/memcheck-$name.log" | head -20
    fi
    say "memcheck $name: exit $rc"
  done
  sanitizer_row="compute-sanitizer memcheck: $san_status"
elif [ "$sanitizer" -eq 1 ]; then
  sanitizer_row="compute-sanitizer memcheck: not available on this machine"
fi

# ---- Benchmark ----
say "gpu_bench $quick"
timeout "$(budget 420)" "$bin/gpu_bench" $quick 2>&1 | tee "$logs/gpu_bench.log"
bench_rc=${PIPESTATUS[0]}
[ "$bench_rc" -ne 0 ] && say "gpu_bench: exit $bench_rc"

# ---- End-to-end: the hybrid suite on the real device, then tokens/s on a Mixtral-shaped model -------------------
# The sim-based hybrid tests run again with --device cuda (same answers as CPU-only for every plan kind).
e2e_log="$logs/tandem_bench.log"
: >"$e2e_log"
if [ -x "$bin/graph_hybrid_test" ]; then
  say "graph_hybrid_test on cuda"
  TANDEM_TEST_DEVICE=cuda TANDEM_TEST_SOURCE_DIR="$PWD" TANDEM_TEST_BIN="$PWD/$bin/tandem" \
    timeout "$(budget 300)" "$bin/graph_hybrid_test" --gtest_brief=1 2>&1 | tail -n 20 | tee -a "$e2e_log"
fi
if [ -x "$bin/graph_expert_split_test" ]; then
  say "graph_expert_split_test on cuda"
  TANDEM_TEST_DEVICE=cuda TANDEM_TEST_SOURCE_DIR="$PWD" \
    timeout "$(budget 300)" "$bin/graph_expert_split_test" --gtest_brief=1 2>&1 | tail -n 20 |
    tee -a "$e2e_log"
fi
# A 2-layer Mixtral-8x7B-shaped Q4_K file with real random weights (a few seconds on 16 cores); GPU_CHECK_FULL=1
# also writes the 32-layer model (26 GB) and runs it under 24 and 12 GiB budgets.
mix2="${TMPDIR:-/tmp}/tandem-mix2-q4k.gguf"
"$bin/tandem" synth --arch mixtral --layers 2 --type Q4_K -o "$mix2" 2>&1 | tee -a "$e2e_log"
for budget in "" "--vram-budget 1GiB"; do
  say "tandem bench mixtral-2L-Q4_K --device cuda $budget"
  timeout "$(budget 420)" "$bin/tandem" bench -m "$mix2" -p 512 -n 64 -r 3 --device cuda $budget -o md 2>&1 | tee -a "$e2e_log"
done
# The same on a 2-layer Qwen3-30B-A3B-shaped Q4_K_M file (128 experts, top-8; the pack carries its vocabulary).
if [ -f "$pack/vocab/qwen3.gguf" ]; then
  q2="${TMPDIR:-/tmp}/tandem-qwen3moe2-q4km.gguf"
  TANDEM_VOCAB_DIR="$pack/vocab" "$bin/tandem" synth --arch qwen3moe --layers 2 --type Q4_K_M -o "$q2" 2>&1 |
    tee -a "$e2e_log"
  say "tandem bench qwen3moe-2L-Q4_K_M --device cuda"
  timeout "$(budget 300)" "$bin/tandem" bench -m "$q2" -p 512 -n 64 -r 3 --device cuda -o md 2>&1 | tee -a "$e2e_log"
fi
if [ "${GPU_CHECK_FULL:-0}" = 1 ]; then
  # Experts placed one by one against layer-level plans at 25 % and 50 % of the experts in VRAM (issue #21).
  say "bench/expert_plan_check.sh --device cuda"
  DEVICE=cuda THREADS="$(nproc)" TANDEM="$PWD/$bin/tandem" timeout "$(budget 400)" bench/expert_plan_check.sh 2>&1 |
    tee -a "$e2e_log"
  mix32="${TMPDIR:-/tmp}/tandem-mix32-q4k.gguf"
  "$bin/tandem" synth --arch mixtral --layers 32 --type Q4_K -o "$mix32" 2>&1 | tee -a "$e2e_log"
  for budget in 24GiB 12GiB; do
    say "tandem bench mixtral-32L-Q4_K --device cuda --vram-budget $budget"
    "$bin/tandem" bench -m "$mix32" -p 512 -n 64 -r 2 --device cuda --vram-budget "$budget" -o md 2>&1 | tee -a "$e2e_log"
  done
fi


# ---- Summary, last ----
echo
echo "== gpu-check summary ($(elapsed)s) =="
printf '| %-34s | %6s | %6s | %7s | %5s | %-16s |\n' "test binary" passed failed skipped time status
printf '|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..36})" "--------" "--------" "---------" "-------" \
  "------------------"
for r in "${rows[@]}"; do echo "$r"; done
[ -n "$sanitizer_row" ] && echo "$sanitizer_row"
echo
if grep -q '^== summary ==' "$logs/gpu_bench.log"; then
  sed -n '/^== summary ==/,/^== summary ==/p' "$logs/gpu_bench.log" | sed '1d;$d'
else
  echo "gpu_bench: no summary (exit $bench_rc); see $logs/gpu_bench.log"
fi
grep -E '^\|' "$e2e_log" 2>/dev/null
echo "logs: $logs"
if [ "$failures" -gt 0 ]; then
  echo "gpu-check: $failures failure(s)"
  exit 1
fi
if grep -qs 'no CUDA device' "$logs"/gpu_backend_*_test.log; then
  echo "gpu-check: NO CUDA DEVICE was visible, so the GPU tests were skipped: nothing on the GPU was checked"
  exit 3
fi
echo "gpu-check: all GPU tests passed"

#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs and builds what is missing, runs every CTest test, then a
# bounded libFuzzer run over the GGUF reader, one over the tokenizers, one over the routing statistics reader and
# one over the Jinja interpreter of chat templates and one over the server's request parser (FUZZ_SECONDS each,
# default 60; 0 skips them).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer, CPU only (SANITIZE=0 skips it). The goldens
# run once there, not again on each kernel path (label graph_variant): every path's kernels meet ASan in their own
# unit tests, and the reruns are about a third of the suite's test time (296 of 834 s*proc on a Zen 4, 2026-12-04).
if [ "${SANITIZE:-1}" = 1 ]; then
  cmake -S . -B build-asan -DTANDEM_SANITIZE=ON -DTANDEM_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build-asan -j"$(nproc)" >/dev/null
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$(nproc)" --timeout 1800 -LE graph_variant
fi

fuzz_seconds="${FUZZ_SECONDS:-60}"
if [ "$fuzz_seconds" -gt 0 ] && [ -f tests/fuzz/CMakeLists.txt ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -DTANDEM_FUZZ=ON -DTANDEM_TESTS=OFF -DTANDEM_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build-fuzz --target gguf_fuzz tokenizer_fuzz routing_fuzz jinja_fuzz serve_request_fuzz \
    -j"$(nproc)" >/dev/null
  mkdir -p build-fuzz/corpus build-fuzz/corpus-tok build-fuzz/corpus-routing build-fuzz/corpus-jinja \
    build-fuzz/corpus-serve
  build-fuzz/tests/fuzz/gguf_fuzz -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -print_final_stats=1 \
    build-fuzz/corpus tests/fuzz/seeds 2>&1 | tail -n 15
  build-fuzz/tests/fuzz/tokenizer_fuzz -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -max_len=4096 \
    -print_final_stats=1 build-fuzz/corpus-tok tests/fuzz/tokenizer_seeds 2>&1 | tail -n 15
  build-fuzz/tests/fuzz/routing_fuzz -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 build-fuzz/corpus-routing tests/fuzz/routing_seeds 2>&1 | tail -n 15
  build-fuzz/tests/fuzz/jinja_fuzz -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -max_len=32768 \
    -dict=tests/fuzz/jinja.dict -print_final_stats=1 build-fuzz/corpus-jinja tests/fuzz/jinja_seeds 2>&1 | tail -n 15
  build-fuzz/tests/fuzz/serve_request_fuzz -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -max_len=65536 \
    -dict=tests/fuzz/serve_request.dict -print_final_stats=1 build-fuzz/corpus-serve tests/fuzz/serve_request_seeds \
    2>&1 | tail -n 15
fi

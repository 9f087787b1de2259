#!/usr/bin/env bash
# Builds the GPU check here (no GPU needed) and packs it to be carried to a GPU machine that has only the CUDA
# toolkit and driver: no Abseil, oneDNN or hwloc there. Result, all under build-gpu/ (kept small, < 50 MiB):
#   build-gpu/bin/   stripped gpu_backend_*_test binaries, gpu_bench and tandem
#   build-gpu/lib/   the non-CUDA shared libraries they load (found with ldd); large ones xz-compressed
#                    (tools/gpu-check.sh unpacks them); lib/fallback/ holds this machine's libstdc++ and
#                    libgcc_s, used only when the GPU machine's own are too old
#   build-gpu/MANIFEST  what was built, from which commit, for which architecture
# The CMake tree itself is build-gpu-tree/ and does not travel.
#
# usage: tools/pack-gpu-check.sh [extra cmake args...]
#   TANDEM_GPU_ARCH (default 90) picks the CUDA architecture, JOBS the build parallelism.
# Then carry build-gpu/ and run tools/gpu-check.sh there (docs/gpu-check.md).
set -euo pipefail
cd "$(dirname "$0")/.."

arch="${TANDEM_GPU_ARCH:-90}"
tree=build-gpu-tree
pack=build-gpu
jobs="${JOBS:-$(nproc)}"
max_mib=50

# CMAKE_CUDA_STANDARD: CMake 3.25 cannot pass C++20 to nvcc, and nvcc's C++17 is all the kernels need.
cmake -S . -B "$tree" -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DCMAKE_CUDA_STANDARD=17 "$@" >/dev/null
targets_help=$(cmake --build "$tree" --target help)
if ! grep -q '\btandem_gpu\b' <<<"$targets_help"; then
  echo "pack-gpu-check: the CUDA backend is not part of this build (is nvcc installed?)" >&2
  exit 1
fi
mapfile -t tests < <(grep -o '\bgpu_backend_[a-z0-9_]*_test\b' <<<"$targets_help" | sort -u)
# The hybrid suites run again on the device (TANDEM_TEST_DEVICE=cuda): every plan kind, and experts split by expert.
# Optional: left out again when the pack would be too big to carry.
optional_tests=(graph_hybrid_test graph_expert_split_test)
tests+=("${optional_tests[@]}")
echo "pack-gpu-check: building for sm_$arch: tandem gpu_bench ${tests[*]}" >&2
if ! cmake --build "$tree" --target tandem gpu_bench "${tests[@]}" -j"$jobs" >"$tree/pack-build.log" 2>&1; then
  grep -E 'error|Error' "$tree/pack-build.log" | head -30 >&2
  echo "pack-gpu-check: build failed; the whole log is $tree/pack-build.log" >&2
  exit 1
fi

rm -rf "$pack"
mkdir -p "$pack/bin" "$pack/lib/fallback"
cp "$tree/tandem" "$tree/bench/gpu_bench" "$pack/bin/"
# The Qwen3 vocabulary (6 MiB), so that `synth --arch qwen3moe` works there (the build writes it, vocab/).
cmake --build "$tree" --target tandem_vocab >/dev/null 2>&1 || true
if [ -f "$tree/vocab/qwen3.gguf" ]; then mkdir -p "$pack/vocab" && cp "$tree/vocab/qwen3.gguf" "$pack/vocab/"; fi
for t in "${tests[@]}"; do cp "$tree/tests/$t" "$pack/bin/"; done
strip --strip-unneeded "$pack"/bin/*

# Shared libraries: everything ldd resolves except the C runtime (always on the target) and CUDA's own (the
# target's toolkit and driver must match its GPU). libstdc++/libgcc_s go to fallback/.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libutil|libresolv|libcuda\.so|libcudart|libcublas|libcublasLt|libnvidia|libnvJitLink)'
for b in "$pack"/bin/*; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ "$name" =~ $skip ]]; then continue; fi
  if [[ "$name" =~ ^(libstdc\+\+|libgcc_s) ]]; then
    cp -L "$path" "$pack/lib/fallback/$name"
  else
    cp -L "$path" "$pack/lib/$name"
  fi
done
find "$pack/lib" -type f -exec chmod u+w {} + -exec strip --strip-unneeded {} \; 2>/dev/null || true

# Compress what is big (libdnnl is about 40 MiB); gpu-check.sh restores it before the first run.
for f in "$pack"/lib/*.so*; do
  if [ "$(stat -c %s "$f")" -gt $((4 << 20)) ]; then xz -T"$jobs" -6 "$f"; fi
done

{
  echo "tandem GPU check pack"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "cuda architecture: sm_$arch"
  echo "nvcc: $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo unknown)"
  echo "needs on the GPU machine: an NVIDIA driver for CUDA $(/usr/local/cuda/bin/nvcc --version 2>/dev/null |
    grep -o 'release [0-9]*' | cut -d' ' -f2)+ and libcudart/libcublas/libcublasLt of that major version"
  echo "files:"
  (cd "$pack" && find . -type f ! -name MANIFEST -printf '  %P %s\n' | sort)
} >"$pack/MANIFEST"

size_kib=$(du -sk "$pack" | cut -f1)
if [ "$size_kib" -gt $((max_mib * 1024)) ]; then
  for t in "${optional_tests[@]}"; do rm -f "$pack/bin/$t"; done
  sed -i "/bin\/graph_/d" "$pack/MANIFEST"
  echo "pack-gpu-check: left out ${optional_tests[*]} to stay under $max_mib MiB" >&2
  size_kib=$(du -sk "$pack" | cut -f1)
fi
echo "pack-gpu-check: $pack is $((size_kib / 1024)) MiB ($(find "$pack" -type f | wc -l) files)" >&2
if [ "$size_kib" -gt $((max_mib * 1024)) ]; then
  echo "pack-gpu-check: $pack is larger than $max_mib MiB: too big to carry" >&2
  exit 1
fi
echo "pack-gpu-check: carry $pack/ to the GPU machine and run tools/gpu-check.sh there" >&2

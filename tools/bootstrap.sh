#!/usr/bin/env bash
# Installs what tandem needs on a fresh Debian 12 machine (apt), then configures and builds into build/.
# Usage: tools/bootstrap.sh [extra cmake args...]   (BUILD_DIR overrides build/)
set -euo pipefail
cd "$(dirname "$0")/.."

# libdnnl-dev only recommends ocl-icd-opencl-dev, but its CMake config fails without OpenCL, so name it.
# libexpat1-dev: the sweep test reads `tandem sweep`'s SVG with a real XML parser.
# libcpp-httplib-dev: `tandem serve`'s HTTP server, and the HTTP client its tests talk to it with; curl and
# python3-pip: the server's tests through curl and through the `openai` package.
pkgs=(build-essential cmake pkg-config libdnnl-dev ocl-icd-opencl-dev libhwloc-dev hwloc libabsl-dev libgtest-dev
      libgmock-dev nlohmann-json3-dev libomp-dev clang libclang-rt-14-dev libpcre2-dev
      libexpat1-dev libcpp-httplib-dev curl python3-pip)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The build writes the BPE test vocabularies with Python (tools/make_vocab_gguf.py): quicktok-v1 ships the vocabs,
# gguf is llama.cpp's writer; openai is the official client the server's tests talk to it with.
# PIP_BREAK_SYSTEM_PACKAGES: Debian 12's Python refuses pip installs without it.
if ! python3 -c 'import importlib.metadata as m; assert m.version("quicktok-v1") == "0.4.0" and m.version("gguf") == "0.19.0" and m.version("openai") == "3.57.0"' \
    2>/dev/null; then
  echo "bootstrap: installing quicktok-v1, gguf and openai (pip)" >&2
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet quicktok-v1==0.4.0 gguf==0.19.0 openai==3.57.0
fi

# nvcc lives in /usr/local/cuda on our machines; CMake finds it there. -DTANDEM_CUDA=OFF skips it.
build_dir="${BUILD_DIR:-build}"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build_dir" -j"$(nproc)"

#!/bin/bash
# Remakes the llama.cpp goldens of the tiny random-weight models of each family tandem runs beyond Llama/Mixtral
# (tests/data/goldens/synth-*.json, tests/data/README.md). A developer tool, not run by CI: it needs llama.cpp's
# dump_logits built outside the repository (../shared/tools/golden/README.md).
#   DUMP=/tmp/dump_logits TANDEM=build/tandem tools/make_family_goldens.sh [NAME...]
# The models are written by `tandem synth` with the flags each golden's JSON keeps ("tandem_synth"), so the test
# writes the same file again. Goldens of real vocabularies keep the last prompt position's logits only (a row is
# 0.5-0.6 MiB); the greedy tokens and per-position top-16 cover the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
DUMP=${DUMP:-/tmp/dump_logits}
TANDEM=${TANDEM:-build/tandem}
PROMPT=${PROMPT:-'Once upon a time, in 2024, a naïve café owner said: "Hello, world!" 你好 🦙'}
# gpt-oss's 128-key windows need a prompt longer than the window to drop keys: about 310 tokens of this.
LONG_PROMPT='The lighthouse keeper kept a ledger of every ship that passed the point. In the first column he wrote the
date, in the second the name painted on the bow, and in the third the weather, which he described in words of his
own: "grey and patient", "bright but sharp", "a wind that argues". Over forty years the ledger grew to eleven
volumes. When the harbour authority finally replaced him with an automatic lamp in 1987, the volumes went to the
town library, where a schoolteacher named Ingrid Solberg read all of them in one winter. She counted 14,212 ships,
3,904 days of fog and exactly one entry in capital letters: "TODAY NOTHING PASSED, AND I WAS GLAD." Nobody knows
what happened on that day. Ingrid wrote to the keeper'\''s daughter, who lived in Bergen, and asked. The answer came
back on a postcard: "He never told us. He said some days belong to the sea." The library still keeps the ledger
in a glass case near the door; children press their noses against it, and on windy evenings the caretaker swears he
can hear pages turning. Café owners nearby sell a pastry called "the ledger", layered eleven times, one for each
volume. Tourists from Tokyo, São Paulo and Kraków photograph it; 灯台守の物語 has even appeared in a guidebook 📖.
The keeper'\''s pen, a black fountain pen with a cracked cap, lies beside the ledger, still uncapped.'
declare -A PROMPTS=(
  [synth-gpt-oss-MXFP4]="$LONG_PROMPT"
)
declare -A FLAGS=(
  [synth-llama3]="--arch llama3 --layers 2 --embd 64 --ff 128 --heads 4 --kv-heads 2 --type F32"
  [synth-qwen2]="--arch qwen2 --layers 2 --embd 64 --ff 128 --heads 4 --kv-heads 2 --head-dim 16 --type F32"
  [synth-qwen3]="--arch qwen3 --layers 2 --embd 64 --ff 128 --heads 4 --kv-heads 2 --head-dim 32 --type F32"
  [synth-qwen3moe]="--arch qwen3moe --layers 2 --embd 64 --ff 128 --expert-ff 32 --heads 4 --kv-heads 2 --head-dim 32 --type F32"
  [synth-llama3-Q4_K_M]="--arch llama3 --layers 2 --embd 256 --ff 512 --heads 4 --kv-heads 2 --type Q4_K_M"
  [synth-qwen2-Q4_K_M]="--arch qwen2 --layers 2 --embd 256 --ff 512 --heads 4 --kv-heads 2 --head-dim 64 --type Q4_K_M"
  [synth-qwen3-Q4_K_M]="--arch qwen3 --layers 2 --embd 256 --ff 512 --heads 4 --kv-heads 2 --head-dim 64 --type Q4_K_M"
  [synth-qwen3moe-Q4_K_M]="--arch qwen3moe --layers 2 --embd 256 --ff 512 --expert-ff 256 --heads 4 --kv-heads 2 --head-dim 64 --type Q4_K_M"
  [synth-qwen2moe]="--arch qwen2moe --layers 2 --embd 64 --ff 128 --expert-ff 32 --shared-ff 96 --heads 4 --kv-heads 2 --head-dim 16 --type F32"
  [synth-qwen2moe-Q4_K_M]="--arch qwen2moe --layers 2 --embd 256 --ff 512 --expert-ff 256 --shared-ff 512 --heads 4 --kv-heads 2 --head-dim 64 --type Q4_K_M"
  [synth-qwen2-yarn]="--arch qwen2 --layers 2 --embd 64 --ff 128 --heads 4 --kv-heads 2 --head-dim 16 --yarn 8:4096 --type F32"
  [synth-gpt-oss]="--arch gpt-oss --layers 2 --embd 64 --ff 64 --expert-ff 64 --heads 4 --kv-heads 2 --head-dim 16 --experts 4 --experts-used 2 --swa 8 --type F32"
  [synth-gpt-oss-MXFP4]="--arch gpt-oss --layers 2 --embd 64 --ff 64 --expert-ff 64 --heads 4 --kv-heads 2 --head-dim 16 --experts 4 --experts-used 2 --type MXFP4_MOE"
)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${!FLAGS[@]}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for name in "${names[@]}"; do
  flags=${FLAGS[$name]:?unknown golden $name}
  "$TANDEM" synth $flags -o "$tmp/$name.gguf"
  prompt=${PROMPTS[$name]:-$PROMPT}
  "$DUMP" "$tmp/$name.gguf" "$tmp/$name" --prompt "$prompt" --rows last1 --n-gen 32 --threads 2 2>/dev/null
  # Record how the model was made, so the test can write it again.
  python3 - "$tmp/$name.json" "$flags" "$name" <<'PY'
import hashlib, json, sys
path, flags, name = sys.argv[1:]
g = json.load(open(path))
g["model_sha256"] = hashlib.sha256(open(path[:-5] + ".gguf", "rb").read()).hexdigest()
g["tandem_synth"] = flags
g["model"] = name + ".gguf"
g["model_in_testdata"] = False
g["logits_file"] = name + ".logits.f32.bin"
json.dump(g, open(path, "w"), ensure_ascii=False)
PY
  cp "$tmp/$name.json" "$tmp/$name.logits.f32.bin" tests/data/goldens/
  echo "$name: $(python3 -c "import json;g=json.load(open('$tmp/$name.json'));print(len(g['prompt_tokens']),'prompt tokens, greedy',g['greedy_tokens'][:8])")"
done

#!/usr/bin/env bash
# `tandem serve` through curl, as a shell user calls it: models, completions and chat completions, streamed and
# not, equal to `tandem run --temp 0`; a wrong key is 401 and a prompt over the context a 400, both in OpenAI's
# error shape. Usage: serve_curl.sh TANDEM MODEL
set -euo pipefail
tandem=$1 model=$2
ctx=256 key=sesame n=24
tmp=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill -9 "$server_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
check() {  # check WHAT GOT WANT
  if [ "$2" == "$3" ]; then echo "ok   $1"; else echo "FAIL $1: got '$2', want '$3'"; failures=$((failures + 1)); fi
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1, end='')"; }
# The text of an SSE stream: each data event's completion text or chat delta, concatenated.
sse_text() {
  python3 -c '
import json, sys
out = ""
for line in sys.stdin.read().split("\n\n"):
    if not line.startswith("data: ") or line == "data: [DONE]":
        continue
    for c in json.loads(line[6:]).get("choices", []):
        out += c.get("text") or (c.get("delta") or {}).get("content") or ""
print(out, end="")'
}

printf '%s' '{%- for m in messages %}{{ m.content }}{%- endfor %}' > "$tmp/concat.jinja"
"$tandem" serve -m "$model" -t 1 -c $ctx --api-key $key --chat-template "$tmp/concat.jinja" --port 0 \
  > "$tmp/out" 2> "$tmp/err" &
server_pid=$!
for _ in $(seq 600); do grep -q "listening on" "$tmp/out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's|^listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$tmp/out")
[ -n "$port" ] || { echo "no 'listening on' line"; cat "$tmp/err"; exit 1; }
url=http://127.0.0.1:$port
for _ in $(seq 3000); do [ "$(curl -s -o /dev/null -w '%{http_code}' $url/health)" = 200 ] && break; sleep 0.1; done
auth=(-H "Authorization: Bearer $key" -H 'Content-Type: application/json')

want=$("$tandem" run -m "$model" -p "Once upon a time" -n $n -t 1 --no-escape --json --temp 0 | json 'd["text"]')
check "GET /v1/models" "$(curl -s "${auth[@]}" $url/v1/models | json 'd["data"][0]["id"]')" "$(basename "$model")"
got=$(curl -s "${auth[@]}" $url/v1/completions \
  -d "{\"prompt\": \"Once upon a time\", \"max_tokens\": $n, \"temperature\": 0}")
check "POST /v1/completions" "$(json 'd["choices"][0]["text"]' <<< "$got")" "$want"
check "completion usage" "$(json 'd["usage"]["completion_tokens"]' <<< "$got")" "$n"
check "streamed completion" "$(curl -sN "${auth[@]}" $url/v1/completions \
  -d "{\"prompt\": \"Once upon a time\", \"max_tokens\": $n, \"temperature\": 0, \"stream\": true}" | sse_text)" "$want"
messages='[{"role": "system", "content": "Once upon"}, {"role": "user", "content": " a time"}]'
check "POST /v1/chat/completions" "$(curl -s "${auth[@]}" $url/v1/chat/completions \
  -d "{\"messages\": $messages, \"max_tokens\": $n, \"temperature\": 0}" | json 'd["choices"][0]["message"]["content"]')" \
  "$want"
check "streamed chat" "$(curl -sN "${auth[@]}" $url/v1/chat/completions \
  -d "{\"messages\": $messages, \"max_tokens\": $n, \"temperature\": 0, \"stream\": true}" | sse_text)" "$want"
check "a wrong key is 401" "$(curl -s -o "$tmp/401" -w '%{http_code}' -H "Authorization: Bearer open" \
  $url/v1/completions -d '{"prompt": "Once", "max_tokens": 1}')" 401
check "401 in the error shape" "$(json 'd["error"]["type"] != "" and "message" in d["error"]' < "$tmp/401")" True
long=$(python3 -c 'print("Once upon a time " * 200)')
check "a prompt over the context is 400" "$(curl -s -o "$tmp/400" -w '%{http_code}' "${auth[@]}" \
  $url/v1/completions -d "{\"prompt\": \"$long\", \"max_tokens\": 8}")" 400
check "400 names the context" "$(json "'$ctx' in d['error']['message']" < "$tmp/400")" True

kill -TERM $server_pid
status=0
wait $server_pid || status=$?
server_pid=
check "SIGTERM exits 0" "$status" 0
[ $failures -eq 0 ] || { echo "$failures checks failed"; exit 1; }

#!/usr/bin/env python3
"""`tandem serve` through the official `openai` Python package (PyPI, installed by tools/bootstrap.sh): models,
completions and chat completions, streamed and not, equal to `tandem run --temp 0` on the same text; usage; the
errors the client raises for a wrong key and a prompt over the context. Usage: serve_openai_client.py TANDEM MODEL
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import openai

TANDEM, MODEL = sys.argv[1], sys.argv[2]
CTX = 256
KEY = "sesame"
# The messages' contents one after the other, so that a chat's rendered prompt is plain text `run` can be given.
TEMPLATE = "{%- for m in messages %}{{ m.content }}{%- endfor %}"
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run_text(prompt, n):
    out = subprocess.run([TANDEM, "run", "-m", MODEL, "-p", prompt, "-n", str(n), "-t", "1", "--no-escape",
                          "--json", "--temp", "0"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def start_server(template_path):
    proc = subprocess.Popen([TANDEM, "serve", "-m", MODEL, "-t", "1", "-c", str(CTX), "--parallel", "2",
                             "--api-key", KEY, "--chat-template", template_path, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    prefix = "listening on http://127.0.0.1:"
    if not line.startswith(prefix):
        proc.kill()
        sys.exit(f"no 'listening on' line: {line!r}; stderr: {proc.stderr.read()}")
    port = int(line[len(prefix):])
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    sys.exit("the server never became ready")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        template_path = os.path.join(tmp, "concat.jinja")
        with open(template_path, "w") as f:
            f.write(TEMPLATE)
        proc, port = start_server(template_path)
        try:
            exercise(port)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = None
            check(code == 0, f"SIGTERM exits 0 (got {code})")
    if failures:
        sys.exit(f"{len(failures)} checks failed")


def exercise(port):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0, timeout=300)
    model_id = os.path.basename(MODEL)
    ids = [m.id for m in client.models.list().data]
    check(ids == [model_id], f"models.list() names the model: {ids}")

    n = 24
    ref = run_text("Once upon a time", n)
    c = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=n, temperature=0)
    check(c.choices[0].text == ref["text"], "completions.create equals run")
    check(c.usage.prompt_tokens == len(ref["prompt_tokens"]) and c.usage.completion_tokens == len(ref["tokens"]),
          f"completion usage {c.usage.prompt_tokens}+{c.usage.completion_tokens}")
    check(c.choices[0].finish_reason in ("length", "stop"), f"finish_reason {c.choices[0].finish_reason}")

    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model=model_id, prompt="Once upon a time", max_tokens=n, temperature=0, stream=True) if ch.choices)
    check(streamed == ref["text"], "streamed completion equals run")

    messages = [{"role": "system", "content": "Once upon"}, {"role": "user", "content": " a time"}]
    chat = client.chat.completions.create(model=model_id, messages=messages, max_tokens=n, temperature=0)
    check(chat.choices[0].message.role == "assistant", "chat reply is the assistant's")
    check(chat.choices[0].message.content == ref["text"], "chat.completions.create equals run on the rendered text")
    check(chat.usage.completion_tokens == len(ref["tokens"]), f"chat usage {chat.usage.completion_tokens}")

    stream = client.chat.completions.create(model=model_id, messages=messages, max_tokens=n, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    text, usage = "", None
    for ch in stream:
        if ch.choices and ch.choices[0].delta.content:
            text += ch.choices[0].delta.content
        if ch.usage is not None:
            usage = ch.usage
    check(text == ref["text"], "streamed chat equals run")
    check(usage is not None and usage.completion_tokens == len(ref["tokens"]), "streamed chat ends with usage")

    wrong = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="open", max_retries=0)
    try:
        wrong.completions.create(model=model_id, prompt="Once", max_tokens=1)
        check(False, "a wrong key is refused")
    except openai.AuthenticationError as e:
        check(e.status_code == 401, "a wrong key is an AuthenticationError (401)")

    try:
        client.completions.create(model=model_id, prompt="Once upon a time " * 200, max_tokens=8)
        check(False, "a prompt over the context is refused")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and str(CTX) in str(e), f"a prompt over the context is a 400 naming it: {e}")


if __name__ == "__main__":
    main()

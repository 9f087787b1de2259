#!/usr/bin/env python3
"""Aggregate decode throughput of `tandem serve` beside llama.cpp's `llama-server`, on the same GGUF file and threads.

For each concurrency N, each server is started with N slots, warmed up with one request, and then sent N
non-streaming /v1/completions requests at once (greedy, ignore_eos, max_tokens tokens each). Aggregate tok/s =
N * max_tokens / the wall time from sending the first request to the last answer. Each prompt is two token ids
(BOS and one more, another per stream), so that the wall time is all but entirely decode: a text prompt would be
tokenized alike by both servers, but a synthetic file's filler vocabulary makes "Once upon a time" 26 tokens.
llama-server's output parser refuses some continuations of random weights (a byte token that is not valid UTF-8
ends the request with a 500, "does not match the expected Content-only format"), so with llama-server the
second ids are picked per concurrency, from 1000 up, by trial runs of llama-server with all N at once (a batch
rounds otherwise than one sequence), and a timed run with a refused request is run again; both servers get the
same prompts. The servers alternate, round after round,
so that both meet the host's bandwidth swings alike (this is how docs/performance.md was measured):

  bench/serve_throughput.py --model mixtral-2l-q4_0.gguf --llama-server /path/llama.cpp/build/bin/llama-server

Only the standard library: no client package stands between the servers and the clock.
"""
import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

BOS = 1  # the SentencePiece vocabularies' (tandem synth's filler vocabulary and Llama 2's)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"{path}: HTTP {r.status}: {data[:200]!r}")
    return json.loads(data)


def wait_ready(port, proc, limit=600):
    until = time.time() + limit
    while time.time() < until:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server never became ready")


def start(server, args, n, port):
    if server == "tandem":
        cmd = [args.tandem, "serve", "-m", args.model, "-t", str(args.threads), "-c", str(args.ctx),
               "--parallel", str(n), "--port", str(port), "--device", "none"]
    else:  # llama-server's -c is the whole cache, shared by its -np slots
        cmd = [args.llama_server, "-m", args.model, "-t", str(args.threads), "-tb", str(args.threads),
               "-c", str(args.ctx * n), "-np", str(n), "--port", str(port), "-ngl", "0", "--no-webui"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(port, proc)
    return proc


def request(second_id, tokens):
    return {"prompt": [BOS, second_id], "max_tokens": tokens, "temperature": 0, "ignore_eos": True}


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def pick_prompts(args, n):
    """n second ids, from 1000 up, whose greedy continuations llama-server answers when it decodes them together in
    n slots (a batch rounds differently from one sequence, so each concurrency gets its own pick): a trial run of
    all n at once, replacing each refused id with the next untried one, until a run goes through."""
    port = free_port()
    proc = start("llama-server", args, n, port)
    ids = list(range(1000, 1000 + n))
    next_id = 1000 + n
    try:
        post(port, "/v1/completions", request(ids[0], 8))  # warm-up
        for _ in range(20):
            _, failed = measure(port, ids, args.tokens)
            if not failed:
                return ids
            for i in failed:
                ids[i] = next_id
                next_id += 1
    finally:
        stop(proc)
    raise RuntimeError(f"no {n} prompts found that llama-server answers together")


def measure(port, prompts, tokens):
    """Sends one request per prompt, all at once; returns aggregate tok/s and the indices of refused requests."""
    n = len(prompts)
    results = [None] * n
    def one(i):
        try:
            results[i] = post(port, "/v1/completions", request(prompts[i], tokens))
        except RuntimeError:
            pass
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    failed = [i for i, r in enumerate(results) if r is None]
    for r in results:
        if r is not None and r["usage"]["completion_tokens"] != tokens:
            raise RuntimeError(f"a request generated {r['usage']['completion_tokens']} tokens, not {tokens}")
    return n * tokens / wall, failed


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--tandem", default=os.path.join(os.path.dirname(__file__), "..", "build", "tandem"))
    p.add_argument("--llama-server", default="")
    p.add_argument("--streams", default="1,2,4,8")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--ctx", type=int, default=512, help="context per sequence")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    servers = ["tandem"] + (["llama-server"] if args.llama_server else [])
    streams = [int(s) for s in args.streams.split(",")]
    rates = {(s, n): [] for s in servers for n in streams}
    prompts = {}
    for n in streams:
        prompts[n] = pick_prompts(args, n) if args.llama_server else list(range(1000, 1000 + n))
        print(f"streams {n}: prompts [{BOS}, id] for id in {prompts[n]}", flush=True)
    for rnd in range(1, args.rounds + 1):
        for n in streams:
            for server in servers:
                port = free_port()
                proc = start(server, args, n, port)
                try:
                    post(port, "/v1/completions", request(prompts[n][0], 8))  # warm-up
                    # A refused request (arrivals batched otherwise than in the pick) voids the run: run it again.
                    for _ in range(3):
                        rate, failed = measure(port, prompts[n], args.tokens)
                        if not failed:
                            break
                    else:
                        raise RuntimeError(f"{server} refused requests in 3 runs at {n} streams")
                finally:
                    stop(proc)
                rates[(server, n)].append(rate)
                print(f"round {rnd} {time.strftime('%H:%M:%S')} {server:12s} streams {n}: {rate:7.1f} tok/s",
                      flush=True)
    print()
    head = f"| streams | {' | '.join(f'{s} tok/s (median of {args.rounds})' for s in servers)} |"
    if len(servers) == 2:
        head += " tandem / llama-server |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for n in streams:
        med = [statistics.median(rates[(s, n)]) for s in servers]
        row = f"| {n} | " + " | ".join(f"{m:.1f}" for m in med) + " |"
        if len(servers) == 2:
            row += f" {med[0] / med[1]:.2f} |"
        print(row)


if __name__ == "__main__":
    sys.exit(main())

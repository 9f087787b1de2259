#!/usr/bin/env python3
"""Summarises the output of bench/side_by_side.sh: per file and test, tandem against the best peer.

    bench/side_by_side.sh decode FILES... > runs.txt; bench/side_by_side_summary.py runs.txt

For each file and test (pp512, tg32, ...): the mean tokens/s of each program over the rounds where all three ran,
tandem's mean over the best peer's mean, how many rounds tandem won, and each round's ratio. When the runs were
made with PROBE set, also each run's tokens/s per GB/s of the probes read just before and after it, as a ratio
to the best peer's: the host's bandwidth swings from run to run, and this is the comparison that swing disturbs
least.
"""
import re
import statistics
import sys

PROGRAMS = ("tandem", "llama.cpp", "ik_llama.cpp")


def parse(lines):
    """{(file, test): {round: [[t/s, probe before, probe after] per program in run order]}}"""
    runs, key, probe = {}, None, None
    for line in lines:
        m = re.match(r"== (\S+) round (\d+)", line)
        if m:
            key, probe = (m.group(1), int(m.group(2))), None
            continue
        m = re.match(r"probe GB/s ([\d.]+)", line)
        if m:
            probe = float(m.group(1))
            for per_test in runs.values():  # the probe after the previous run
                last = per_test.get(key[1], []) if key else []
                if last and last[-1][2] is None and last[-1][3] == key[0]:
                    last[-1][2] = probe
            continue
        m = re.search(r"\|\s*((?:pp|tg)\d+)\s*\|\s*([\d.]+) ±", line)
        if m and key:
            per_round = runs.setdefault((key[0], m.group(1)), {}).setdefault(key[1], [])
            per_round.append([float(m.group(2)), probe, None, key[0]])
    return runs


def main(path):
    with open(path) as f:
        runs = parse(f.read().splitlines())
    for (name, test), rounds in sorted(runs.items()):
        full = [r for _, r in sorted(rounds.items()) if len(r) == len(PROGRAMS)]
        if not full:
            continue
        means = [statistics.mean(r[p][0] for r in full) for p in range(len(PROGRAMS))]
        ratios = [r[0][0] / max(r[1][0], r[2][0]) for r in full]
        print(f"{name} {test}: {len(full)} rounds, mean t/s " +
              ", ".join(f"{p} {m:.1f}" for p, m in zip(PROGRAMS, means)) +
              f"; tandem / best peer {means[0] / max(means[1:]):.2f}, rounds won {sum(x >= 1 for x in ratios)}"
              f" of {len(ratios)}: " + " ".join(f"{x:.2f}" for x in ratios))
        if all(run[1] is not None and run[2] is not None for r in full for run in r):
            per_gbps = lambda run: run[0] / ((run[1] + run[2]) / 2)
            norm = [per_gbps(r[0]) / max(per_gbps(r[1]), per_gbps(r[2])) for r in full]
            print(f"  per probe GB/s: median {statistics.median(norm):.2f}, rounds won "
                  f"{sum(x >= 1 for x in norm)} of {len(norm)}: " + " ".join(f"{x:.2f}" for x in norm))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: side_by_side_summary.py RUNS.txt")
    main(sys.argv[1])

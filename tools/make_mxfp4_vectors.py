#!/usr/bin/env python3
"""Writes tests/data/quant/mxfp4-gguf-py.json: MXFP4 blocks made and decoded by gguf-py (the PyPI package gguf
0.19.0, llama.cpp's own Python, an implementation independent of ggml's C), for tests/core/mxfp4_test.cc; and
tests/data/quant/mxfp4-tensor.gguf, gguf-py's GGUFWriter's file of one MXFP4 tensor [64, 3, 2] (ne order) holding
the first 12 blocks of the first quantize case, for the GGUF reader's test.

  python3 tools/make_mxfp4_vectors.py [--dir tests/data/quant]

A developer tool, not run by the build or CI: the file it writes is committed. Floats are stored as the hex of
their little-endian float32 bytes, blocks as the hex of their 17 bytes each, so every bit is exact.

"quantize" cases: rows of float32 (multiples of 32) and gguf-py's MXFP4 bytes for them. Only inputs whose block
maxima are finite and at least 2^-125 are here: below that ggml's e = floor(log2(amax)) - 2 + 127 is negative
and its conversion to uint8 undefined (gguf-py's numpy cast wraps around); tandem clamps, tested on its own.
"dequantize": blocks covering every exponent byte 0..255 and every nibble in both halves, and gguf-py's floats.
"""
import argparse
import json
import os

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import dequantize, quantize

MX = GGMLQuantizationType.MXFP4


def f32_hex(a):
    return np.ascontiguousarray(a, dtype="<f4").tobytes().hex()


def block(values):
    """One block of 32 from a list, the rest zeros."""
    b = np.zeros(32, dtype=np.float32)
    b[: len(values)] = np.array(values, dtype=np.float32)
    return b


def quantize_cases():
    rng = np.random.default_rng(39)
    cases = []

    def add(name, x):
        x = np.asarray(x, dtype=np.float32).reshape(-1)
        assert x.size % 32 == 0
        amax = np.abs(x.reshape(-1, 32)).max(axis=1)
        assert np.all(np.isfinite(x)) and np.all((amax == 0) | (amax >= np.float32(2.0) ** -125)), name
        q = quantize(x.reshape(1, -1), MX).reshape(-1)
        cases.append({"name": name, "x": f32_hex(x), "blocks": q.tobytes().hex()})

    for scale in (1.0, 1e-3, 1e3, 1e-30, 1e30):
        add(f"normal scale {scale:g}", rng.standard_normal(32 * 64) * scale)
    add("student-t heavy tails", rng.standard_t(2, 32 * 64))
    add("zeros", np.zeros(64))
    add("negative zeros", np.full(64, -0.0))
    add("lone large value", block([0.0] * 17 + [1000.0]))
    add("lone large negative, tiny rest", block([-7.5e6] + [1e-3, -2e-3, 5e-4] * 10))
    # amax 6: e = floor(log2 6) - 2 + 127 = 127, d = 2^(e-128) = 0.5, levels 0, 0.5, 1, 1.5, 2, 3, 4, 6.
    # Every midpoint between levels, both signs, and the levels themselves: ties go to the lower index.
    levels = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    mids = [(a + b) / 2 for a, b in zip(levels, levels[1:])]
    add("midpoints", np.concatenate([block([6.0] + mids + [-m for m in mids]),
                                     block([-6.0] + levels + [-v for v in levels])]))
    # Just below, at and just above powers of two: where floor(log2(amax)) turns over (log2f rounds up just below).
    rows = []
    for k in (-125, -124, -100, -20, -1, 0, 1, 2, 3, 7, 30, 100, 126, 127):
        p = np.float32(2.0) ** np.float32(k)
        for v in (np.nextafter(p, np.float32(0)), p, np.nextafter(p, np.float32(np.inf))):
            if v < np.float32(2.0) ** -125:
                continue  # below the defined range (docstring)
            rows.append(block([v, v / 3, -v / 5, v / 7, v * 0.26, -v * 0.74]))
    add("powers of two", np.concatenate(rows))
    fmax = np.finfo(np.float32).max
    add("huge magnitudes", np.concatenate([block([fmax, -fmax / 2, fmax / 12, 1.0]), block([-3e38, 2e38, 1e38])]))
    add("tiny magnitudes", np.concatenate([block([np.float32(2.0) ** -125, np.float32(2.0) ** -126, 1e-45]),
                                           block([-1.5e-37, 3e-38, -1e-40])]))
    return cases


def dequantize_case():
    rng = np.random.default_rng(40)
    blocks = np.zeros((256 + 16, 17), dtype=np.uint8)
    blocks[:256, 0] = np.arange(256)
    blocks[:256, 1:] = rng.integers(0, 256, (256, 16))
    # Blocks 256..271: nibble pattern n in the low halves and 15 - n in the high ones, at moderate exponents.
    for n in range(16):
        blocks[256 + n, 0] = 120 + n
        blocks[256 + n, 1:] = n | (15 - n) << 4
    y = dequantize(blocks.reshape(-1), MX)
    return {"blocks": blocks.tobytes().hex(), "y": f32_hex(y)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="tests/data/quant")
    args = ap.parse_args()
    import importlib.metadata as md

    doc = {
        "made_by": "tools/make_mxfp4_vectors.py",
        "gguf": md.version("gguf"),
        "numpy": np.__version__,
        "quantize": quantize_cases(),
        "dequantize": dequantize_case(),
    }
    with open(os.path.join(args.dir, "mxfp4-gguf-py.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")

    # Rows of bytes, as GGUFWriter takes quantized data: numpy shape (2, 3, 2 * 17) is ne [64, 3, 2].
    blocks = np.frombuffer(bytes.fromhex(doc["quantize"][0]["blocks"]), dtype=np.uint8)[: 12 * 17]
    w = GGUFWriter(os.path.join(args.dir, "mxfp4-tensor.gguf"), arch="mxfp4test")
    w.add_tensor("experts.weight", blocks.reshape(2, 3, 2 * 17), raw_dtype=MX)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()

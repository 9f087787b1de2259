#!/usr/bin/env python3
"""`tandem tokenize` against quicktok (tiktoken-exact) on a megabyte of mixed-script text, for the o200k vocabularies
the build writes (tools/make_vocab_gguf.py): o200k (gpt-4o) and o200k_harmony (gpt-oss). Every id must agree. The text mixes scripts whose combining marks llama.cpp's approximation of the o200k pre-tokenizer splits
otherwise than tiktoken (Devanagari, Thai, Khmer, Tamil, Myanmar), emoji with ZWJ and modifiers, digits in several
systems, code, contractions and whitespace runs. It holds no special-token text: tandem matches that in plain text
as llama.cpp does, and quicktok's encode_ordinary does not (tests/data/tokenizer/bpe-*.json).

Llama 3.1 and Qwen3 are left out: there tandem follows llama.cpp where tiktoken differs. Qwen3's cases are in the
vectors; for Llama 3.1 this text finds one more kind: a GGUF holds merges, and merging by their ranks can end
elsewhere than tiktoken's merging by the ranks of whole byte strings (" Việta": llama.cpp d32676d77 and tandem
give " Vi", "ệ", "ta", tiktoken " Việt", "a"; 2026-12-03).

usage: bpe_quicktok_megabyte.py TANDEM VOCAB_DIR
"""
import os
import random
import subprocess
import sys
import tempfile

import quicktok

VOCABS = {"o200k": "o200k_base", "o200k_harmony": "o200k_harmony"}

PARTS = [
    "Hello", "world", "The", "quick", "brown", "fox", "naïve", "café", "Ångström", "Zürich", "straße", "ÆØÅ",
    "Привет", "мир", "ЁЖИК", "Καλημέρα", "κόσμε", "مرحبا", "بالعالم", "שלום", "漢字", "日本語のテキスト",
    "中文分词测试", "한국어", "안녕하세요", "नमस्ते", "दुनिया", "हिन्दी", "ภาษาไทย", "ง่ายนิดเดียว", "កាន់តែពិសេស",
    "தமிழ்", "ಕನ್ನಡ", "বাংলা", "မြန်မာ", "ລາວ", "Tiếng", "Việt", "e\u0301", "\u0301", "ﬁ", "…", "—", "“quoted”",
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷", "🚀", "😶\u200d🌫️",
    "0", "42", "3.14159", "1,000,000", "12345678901", "２０２６", "٣٤٥", "१२३",
    "{", "}", "();", "=>", "!=", "&&", "||", "<<=", "#include", "x->y", "a[i]", "<div>", "</p>", "$x", "@user",
    "'s", "'LL", "don't", "I'm", "we've", "HELLO's", "—'t",
    "\t", "\n", "\r\n", "  ", "    ", "\n\n\n", " \t ", "\u00a0", "\u3000", "\n \n", "   \n",
]


def mixed_text(n_bytes, seed=24):
    rng = random.Random(seed)
    out, size = [], 0
    while size < n_bytes:
        part = rng.choice(PARTS)
        if rng.random() < 0.6:
            part += " "
        out.append(part)
        size += len(part.encode("utf-8"))
    return "".join(out)


def main():
    tandem, vocab_dir = sys.argv[1], sys.argv[2]
    text = mixed_text(1 << 20)
    assert "<|" not in text
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mixed.txt")
        with open(path, "wb") as f:
            f.write(text.encode("utf-8"))
        for gguf, encoding in VOCABS.items():
            run = subprocess.run([tandem, "tokenize", "-m", os.path.join(vocab_dir, gguf + ".gguf"), "--no-bos",
                                  "--ids", "-f", path], capture_output=True, text=True)
            if run.returncode != 0:
                print(f"{gguf}: tandem tokenize failed: {run.stderr.strip()}")
                failures += 1
                continue
            ours = [int(t) for t in run.stdout.strip().strip("[]").split(",") if t.strip()]
            ref = quicktok.get_encoding(encoding).encode_ordinary(text)
            if ours == ref:
                print(f"{gguf}: {len(ref)} ids from {len(text.encode('utf-8'))} bytes agree with quicktok")
                continue
            failures += 1
            first = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
            print(f"{gguf}: differs from quicktok at id {first} of {len(ref)} (tandem {len(ours)} ids): "
                  f"tandem {ours[first:first + 6]} quicktok {ref[first:first + 6]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

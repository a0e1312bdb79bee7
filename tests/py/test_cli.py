"""The mox executable as a user meets it: inspect/synth results, determinism, chat, and one-line
errors with exit code 1 (never a signal) on bad input."""
import hashlib
import json
import subprocess
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
TINY_MODEL = Path(__file__).resolve().parents[2] / "assets" / "mox-tiny" / "mox-tiny-f16.gguf"


def run(mox_bin, *args, **kw):
    return subprocess.run([str(mox_bin), *map(str, args)], capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def tiny(mox_bin, tmp_path_factory):
    path = tmp_path_factory.mktemp("synth") / "tiny.gguf"
    r = run(mox_bin, "synth", "--preset", "tiny", "-o", path, "--seed", "3", "-t", "2")
    assert r.returncode == 0, r.stderr
    return path


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_synth_is_deterministic_and_thread_independent(mox_bin, tiny, tmp_path):
    other = tmp_path / "again.gguf"
    assert run(mox_bin, "synth", "--preset", "tiny", "-o", other, "--seed", "3", "-t", "1").returncode == 0
    assert sha(other) == sha(tiny)
    different = tmp_path / "seed4.gguf"
    assert run(mox_bin, "synth", "--preset", "tiny", "-o", different, "--seed", "4").returncode == 0
    assert sha(different) != sha(tiny)


def test_inspect_json_accounts_for_every_tensor(mox_bin, tiny):
    r = run(mox_bin, "inspect", tiny, "--json", "--bandwidth", "100GB/s", "--tensors")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["architecture"] == "qwen35moe"
    tensors = j["tensors"]
    assert len(tensors) == sum(c["tensors"] for c in j["classes"].values())
    assert sum(t["bytes"] for t in tensors) == sum(c["bytes"] for c in j["classes"].values())
    assert j["kv_bytes_per_token"]["f16"] == 2 * 2 * 2 * 64 * 2  # 2 attn layers x K,V x 2 heads x 64 x 2 B
    assert j["roofline"][0]["tokens_per_s"] == pytest.approx(100e9 / j["bytes_per_token"])
    # Routed experts: 4 of 16 are read per token.
    re = j["classes"]["routed_experts"]
    assert re["bytes_per_token"] == pytest.approx(re["bytes"] * 4 / 16)


def test_router_skew_changes_only_the_routers(mox_bin, tiny, tmp_path):
    skewed = tmp_path / "skew.gguf"
    assert run(mox_bin, "synth", "--preset", "tiny", "-o", skewed, "--seed", "3", "--router-skew", "1.2").returncode == 0
    import gguf
    a, b = gguf.GGUFReader(str(tiny)), gguf.GGUFReader(str(skewed))
    changed = {t.name for t, u in zip(a.tensors, b.tensors) if bytes(t.data.tobytes()) != bytes(u.data.tobytes())}
    assert changed and all("ffn_gate_inp.weight" in n for n in changed)


@pytest.mark.parametrize("broken", sorted((DATA / "gguf").glob("broken*.gguf"))[:40], ids=lambda p: p.name)
def test_inspect_rejects_broken_files_with_one_line(mox_bin, broken):
    r = run(mox_bin, "inspect", broken)
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mox: error: ")


def test_truncated_model_is_a_one_line_error(mox_bin, tiny, tmp_path):
    data = tiny.read_bytes()
    for cut in [10, 1000, len(data) // 2, len(data) - 1]:
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(data[:cut])
        for args in (["inspect", path], ["run", "-m", path, "-p", "x", "-n", "1"]):
            r = run(mox_bin, *args)
            assert r.returncode == 1, (cut, args, r.stderr)
            assert r.stderr.count("\n") == 1 and r.stderr.startswith("mox: error: ")


def test_missing_file_and_bad_flags(mox_bin, tmp_path):
    r = run(mox_bin, "run", "-m", tmp_path / "nope.gguf", "-p", "x")
    assert r.returncode == 1 and "nope.gguf" in r.stderr
    r = run(mox_bin, "run", "-m", TINY_MODEL, "-p", "x", "-ctk", "q9_9")
    assert r.returncode == 1 and "q9_9" in r.stderr
    r = run(mox_bin, "inspect", TINY_MODEL, "--bandwidth", "fast")
    assert r.returncode == 1 and "fast" in r.stderr


def test_kv_type_auto(mox_bin):
    # On the CPU, auto is the exact f16 cache: the same text as -ctk f16.
    common = ["run", "-m", TINY_MODEL, "-p", "Hello", "-n", "8", "--temp", "0"]
    auto = run(mox_bin, *common, "-ctk", "auto", "-ctv", "auto")
    f16 = run(mox_bin, *common, "-ctk", "f16", "-ctv", "f16")
    assert auto.returncode == 0 and f16.returncode == 0, auto.stderr + f16.stderr
    assert "auto on the CPU: f16" in auto.stderr
    assert auto.stdout == f16.stdout
    # mox bench measures given types; mox plan searches only when planning.
    r = run(mox_bin, "bench", "-m", TINY_MODEL, "-p", "8", "-n", "2", "-r", "1", "-ctk", "auto")
    assert r.returncode == 1 and "measures the KV types it is given" in r.stderr
    r = run(mox_bin, "plan", "-m", TINY_MODEL, "-ctk", "auto")
    assert r.returncode == 1 and "searched when planning" in r.stderr


def test_prompt_longer_than_context(mox_bin):
    r = run(mox_bin, "run", "-m", TINY_MODEL, "-p", "word " * 200, "-n", "4", "-c", "64")
    assert r.returncode == 1 and "context" in r.stderr


def test_chat_answers_each_line(mox_bin):
    r = run(mox_bin, "chat", "-m", TINY_MODEL, "-n", "12", "--temp", "0", input="Hello\nWho are you?\n", timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("generated") == 2  # one stats line per turn
    assert len(r.stdout.strip()) > 0


def test_same_seed_same_text(mox_bin):
    args = ["run", "-m", TINY_MODEL, "-p", "And he said", "-n", "24", "--temp", "0.9", "-s", "123"]
    a, b = run(mox_bin, *args), run(mox_bin, *args)
    assert a.returncode == 0 and a.stdout == b.stdout
    c = run(mox_bin, *args[:-1], "124")
    assert c.stdout != a.stdout


@pytest.fixture(scope="module")
def qwen3moe_tiny(mox_bin, tmp_path_factory):
    path = tmp_path_factory.mktemp("synth") / "qwen3moe-tiny.gguf"
    r = run(mox_bin, "synth", "--preset", "qwen3moe-tiny", "-o", path, "--seed", "5",
            "--chat-template", DATA / "templates" / "Qwen-Qwen3-0.6B.jinja")
    assert r.returncode == 0, r.stderr
    return path


def test_qwen3moe_synth_has_llama_cpp_layout(mox_bin, qwen3moe_tiny):
    """Every tensor of a synthetic qwen3moe file is one the gguf package lists for llama.cpp's
    QWEN3MOE architecture, and each listed kind is present in every layer."""
    import gguf
    reader = gguf.GGUFReader(str(qwen3moe_tiny))
    arch = gguf.MODEL_ARCH.QWEN3MOE
    assert bytes(reader.fields["general.architecture"].parts[-1]).decode() == gguf.MODEL_ARCH_NAMES[arch]
    n_layer = int(reader.fields["qwen3moe.block_count"].parts[-1][0])
    known = set()
    for t in gguf.MODEL_TENSORS[arch]:
        name = gguf.TENSOR_NAMES[t]
        known |= {name.format(bid=i) + ".weight" for i in range(n_layer)} if "{bid}" in name else {name + ".weight"}
    names = {t.name for t in reader.tensors}
    assert names == known


def test_qwen3moe_inspect_runs_and_chats(mox_bin, qwen3moe_tiny):
    r = run(mox_bin, "inspect", qwen3moe_tiny, "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["architecture"] == "qwen3moe"
    assert j["kv_bytes_per_token"]["f16"] == 4 * 2 * 2 * 64 * 2  # 4 attention layers x K,V x 2 heads x 64 x 2 B
    assert j["recurrent_state_bytes"] == 0
    # The Qwen3 chat template (ChatML, thinking) through the model's own metadata.
    r = run(mox_bin, "run", "-m", qwen3moe_tiny, "--chat", "-p", "Hello", "-n", "4", "--temp", "0", timeout=120)
    assert r.returncode == 0, r.stderr
    r = run(mox_bin, "chat", "-m", qwen3moe_tiny, "-n", "4", "--temp", "0", input="Hi\nAgain\n", timeout=120)
    assert r.returncode == 0, r.stderr


def test_dense_llama_file_is_refused_by_name(mox_bin, tmp_path):
    """A `llama` GGUF without experts (a dense Llama) is a one-line error, not a crash."""
    import gguf
    path = tmp_path / "dense.gguf"
    w = gguf.GGUFWriter(str(path), arch="llama")
    for key, value in [("block_count", 2), ("context_length", 4096), ("embedding_length", 64),
                       ("feed_forward_length", 128), ("attention.head_count", 4)]:
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_tensor("token_embd.weight", __import__("numpy").zeros((32, 64), dtype="float32"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = run(mox_bin, "logits", "-m", path, "--tokens", "1,2", "-o", tmp_path / "l.npy")
    assert r.returncode == 1
    assert "a dense model (no expert_count): mox runs llama with experts only (dense architectures: qwen35)" in r.stderr

"""`mox plan` on mox-tiny, checked against an independent recount: tensor sizes from the PyPI `gguf`
reader, placement rules re-derived here from llama.cpp's documented semantics (-ngl counts the
output layer as layer n_layer, overrides are regex searches where the first match wins), KV and
state bytes from the hyper-parameters in the file's metadata."""
import json
import re
import subprocess
from pathlib import Path

import gguf
import pytest

TINY_MODEL = Path(__file__).resolve().parents[2] / "assets" / "mox-tiny" / "mox-tiny-f16.gguf"


@pytest.fixture(scope="module")
def tiny():
    reader = gguf.GGUFReader(str(TINY_MODEL))

    def key(name):
        f = reader.fields["qwen35moe." + name]
        return int(f.parts[f.data[0]][0])

    hp = {k: key(k) for k in ["block_count", "attention.head_count_kv", "attention.key_length",
                              "attention.value_length", "ssm.conv_kernel", "ssm.inner_size", "ssm.state_size",
                              "ssm.time_step_rank", "ssm.group_count", "full_attention_interval", "expert_count"]}
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    return hp, sizes


def plan(mox_bin, *args):
    out = subprocess.run([str(mox_bin), "plan", "-m", str(TINY_MODEL), *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def plan_json(mox_bin, *args):
    return json.loads(plan(mox_bin, "--json", *args))


def layer_of(name):
    m = re.match(r"blk\.(\d+)\.", name)
    return int(m.group(1)) if m else -1


def expected_tiers(hp, sizes, ngl, rules):
    """name -> tier; rules: [(regex, tier)] in command-line order."""
    n_layer = hp["block_count"]
    n_gpu = n_layer + 1 if ngl < 0 else min(ngl, n_layer + 1)
    first_gpu = n_layer + 1 - n_gpu
    tiers = {}
    for name in sizes:
        index = layer_of(name)
        if name == "token_embd.weight":
            tier = "mmap_host"
        else:
            tier = "gpu" if (n_layer if index < 0 else index) >= first_gpu else "mmap_host"
        for pattern, t in rules:
            if re.search(pattern, name):
                tier = t
                break
        tiers[name] = tier
    return tiers


def bytes_by_tier(sizes, tiers):
    out = {"gpu": 0, "pinned_host": 0, "mmap_host": 0}
    for name, n in sizes.items():
        out[tiers[name]] += n
    return out


def cache_bytes(hp, n_ctx, k_bytes_per_elem, v_bytes_per_elem):
    n_layer, interval = hp["block_count"], hp["full_attention_interval"]
    attn = [i for i in range(n_layer) if (i + 1) % interval == 0]
    rec = [i for i in range(n_layer) if (i + 1) % interval != 0]
    row = hp["attention.head_count_kv"] * hp["attention.key_length"]
    kv_layer = int(row * k_bytes_per_elem + row * v_bytes_per_elem) * n_ctx
    conv_channels = 2 * hp["ssm.group_count"] * hp["ssm.state_size"] + hp["ssm.inner_size"]
    state_layer = 4 * ((hp["ssm.conv_kernel"] - 1) * conv_channels
                       + hp["ssm.time_step_rank"] * hp["ssm.state_size"] ** 2)
    return attn, rec, kv_layer, state_layer


EXPS = r"\.ffn_(gate|up|down)_exps"


def test_no_flags_everything_mapped(mox_bin, tiny):
    hp, sizes = tiny
    j = plan_json(mox_bin, "-c", "512")
    assert j["n_layer"] == hp["block_count"] and j["n_expert"] == hp["expert_count"]
    assert j["weights_bytes"] == {"gpu": 0, "pinned_host": 0, "mmap_host": sum(sizes.values()),
                                  "total": sum(sizes.values())}
    attn, rec, kv_layer, state_layer = cache_bytes(hp, 512, 2, 2)
    assert j["kv"]["host_bytes"] == len(attn) * kv_layer and j["kv"]["gpu_bytes"] == 0
    assert j["state"]["host_bytes"] == len(rec) * state_layer
    assert j["gpu_total_bytes"] == 0
    assert j["host"]["page_cache_bytes"] == sum(sizes.values())
    assert j["host"]["ram_bytes"] == len(attn) * kv_layer + len(rec) * state_layer
    assert j["allowance"]["measured"] is False
    for layer in j["layers"]:
        assert layer["experts"] == {"gpu": 0, "pinned_host": 0, "mmap_host": hp["expert_count"]}
        assert layer["kind"] == ("attention" if layer["layer"] in attn else "deltanet")


@pytest.mark.parametrize("args,ngl,rules", [
    (["-ngl", "3"], 3, []),
    (["-ngl", "1"], 1, []),
    (["-ngl", "all", "--cpu-moe"], -1, [(EXPS, "mmap_host")]),
    (["-ngl", "-1", "--n-cpu-moe", "3"], -1, [(rf"^blk\.{i}{EXPS}", "mmap_host") for i in range(3)]),
    (["-ngl", "99", "--moe-cpu-layers", "0-1,6"], 99, [(rf"^blk\.{i}{EXPS}", "mmap_host") for i in (0, 1, 6)]),
    # Command-line order decides between flags: first --n-cpu-moe, then -ot (layer 1 stays on the host).
    (["-ngl", "0", "--n-cpu-moe", "2", "-ot", r"blk\.1\.=CUDA0,blk\.[0-3]\.=pinned_host"], 0,
     [(rf"^blk\.{i}{EXPS}", "mmap_host") for i in range(2)] + [(r"blk\.1\.", "gpu"), (r"blk\.[0-3]\.", "pinned_host")]),
    (["-ot", r"blk\.1\.=CUDA0", "--n-cpu-moe", "2", "-ngl", "0"], 0,
     [(r"blk\.1\.", "gpu")] + [(rf"^blk\.{i}{EXPS}", "mmap_host") for i in range(2)]),
])
def test_flags_match_llama_cpp_rules(mox_bin, tiny, args, ngl, rules):
    hp, sizes = tiny
    j = plan_json(mox_bin, "-c", "256", "-ctk", "q8_0", "-ctv", "f16", *args)
    tiers = expected_tiers(hp, sizes, ngl, rules)
    want = bytes_by_tier(sizes, tiers)
    want["total"] = sum(sizes.values())
    assert j["weights_bytes"] == want
    for g in j["globals"]:
        assert g["tier"] == tiers[g["name"]] and g["bytes"] == sizes[g["name"]]
    n_expert = hp["expert_count"]
    for layer in j["layers"]:
        t = tiers[f"blk.{layer['layer']}.ffn_up_exps.weight"]
        assert layer["experts"][t] == n_expert
        assert layer["router"] == tiers[f"blk.{layer['layer']}.ffn_gate_inp.weight"]
    # A layer's cache lives where its mixer runs; q8_0 is 34 bytes per 32 elements.
    attn, rec, kv_layer, state_layer = cache_bytes(hp, 256, 34 / 32, 2)
    mixer_gpu = {i: all(
        tiers[n] == "gpu" for n in sizes if layer_of(n) == i and re.search(r"\.(attn_(q|k|v|output|qkv|gate)|ssm_)", n))
        for i in range(hp["block_count"])}
    kv_gpu = sum(kv_layer for i in attn if mixer_gpu[i])
    state_gpu = sum(state_layer for i in rec if mixer_gpu[i])
    assert j["kv"]["gpu_bytes"] == kv_gpu and j["kv"]["host_bytes"] == len(attn) * kv_layer - kv_gpu
    assert j["state"]["gpu_bytes"] == state_gpu and j["state"]["host_bytes"] == len(rec) * state_layer - state_gpu
    used = want["gpu"] + kv_gpu + state_gpu
    extra = j["allowance"]["cuda_context_bytes"] + j["gpu_buffers"]["device_bytes"] if used else 0
    assert j["gpu_total_bytes"] == used + extra
    host = j["host"]
    pinned_buffers = j["gpu_buffers"]["pinned_host_bytes"] if used else 0
    assert host["page_cache_bytes"] == want["mmap_host"] and host["locked_bytes"] == want["pinned_host"] + pinned_buffers
    assert host["total_bytes"] == want["mmap_host"] + want["pinned_host"] + pinned_buffers + host["ram_bytes"]


def test_text_output(mox_bin, tiny):
    hp, sizes = tiny
    out = plan(mox_bin, "-ngl", "2", "--n-cpu-moe", "8", "-c", "128")
    assert "NOT measured" in out and "mox calibrate" in out
    assert "predicted GPU memory" in out and "page cache" in out and "locked RAM" in out
    assert f"({sum(sizes.values())} B)" in out
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+\d+\s+(attention|deltanet)\s", line)]
    assert len(rows) == hp["block_count"]
    n_expert = hp["expert_count"]
    # -ngl 2: block 7 runs on the GPU, its experts stay mapped (--n-cpu-moe 8 covers every layer).
    assert rows[7][:6] == ["7", "attention", "gpu", "gpu", "gpu", "gpu"] and rows[7][6] == f"0/0/{n_expert}"
    assert rows[0][:3] == ["0", "deltanet", "mmap"]


@pytest.mark.parametrize("args,message", [
    (["-ot", r"blk\.(=CPU"], "regular expression"),
    (["-ot", "exps=CUDA1"], "CUDA0"),
    (["-ot", "exps=TPU"], "unknown device"),
    (["--moe-cpu-layers", "3-9"], "out of range"),
    (["--n-cpu-moe", "-1"], "--n-cpu-moe"),
    (["-ngl", "auto"], "auto"),
    (["-ot", r"ffn_down_exps=CPU", "-ngl", "all"], "as a whole"),
    (["-ctk", "q4_k"], "-ctk"),
    (["-c", "100000"], "trained context"),
])
def test_bad_input_is_a_one_line_error(mox_bin, args, message):
    out = subprocess.run([str(mox_bin), "plan", "-m", str(TINY_MODEL), *args], capture_output=True, text=True)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr

"""`mox plan` on mox-tiny, checked against an independent recount: tensor sizes from the PyPI `gguf`
reader, placement rules re-derived here from llama.cpp's documented semantics (-ngl counts the
output layer as layer n_layer, overrides are regex searches where the first match wins), KV and
state bytes from the hyper-parameters in the file's metadata."""
import json
import os
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
    (["--plan", "manual", "-ngl", "auto"], "-ngl auto"),
    (["-ot", r"ffn_down_exps=CPU", "-ngl", "all"], "as a whole"),
    (["-ctk", "q4_k"], "-ctk"),
    (["-c", "100000"], "trained context"),
])
def test_bad_input_is_a_one_line_error(mox_bin, args, message):
    out = subprocess.run([str(mox_bin), "plan", "-m", str(TINY_MODEL), *args], capture_output=True, text=True)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr


# ---------------------------------------------------------------------------------------------
# The search (--plan auto): a full-size Qwen3.6-35B-A3B tensor table in a sparse file (no weights)
# and the made-up profiles of the C++ tests, written by tests/tool/plan_tool. Memory and speed of
# the chosen plan are recounted here from the gguf package's tensor sizes and the profile's rates,
# following the formulas of docs/plan.md.

GIB = 1 << 30


@pytest.fixture(scope="module")
def full(tool_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("plan_full")
    model = d / "q36-sparse.gguf"
    tool = str(tool_dir / "plan_tool")
    subprocess.run([tool, "sparse-model", "q4_k_m", str(model)], check=True)
    profiles = {}
    for kind in ("h200", "3090", "cpu"):
        profiles[kind] = d / f"{kind}.json"
        subprocess.run([tool, "profile", kind, str(profiles[kind])], check=True)
    reader = gguf.GGUFReader(str(model))

    def key(name):
        f = reader.fields["qwen35moe." + name]
        return int(f.parts[f.data[0]][0])

    tensors = {t.name: {"bytes": int(t.n_bytes), "type": t.tensor_type.name, "ne": [int(x) for x in t.shape]}
               for t in reader.tensors}
    hp = {k: key(k) for k in ["block_count", "expert_count", "expert_used_count", "context_length",
                              "ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank",
                              "ssm.group_count", "full_attention_interval"]}
    return model, profiles, tensors, hp


def run_plan(mox_bin, model, *args, env=None):
    return subprocess.run([str(mox_bin), "plan", "-m", str(model), *args], capture_output=True, text=True, env=env)


def search_json(mox_bin, full, profile, *args):
    model, profiles, _, _ = full
    out = run_plan(mox_bin, model, "--profile", str(profiles[profile]), "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def rate(table, type_name):
    for k, v in table.items():
        if k.lower() == type_name.lower():
            return v * 1e9
    raise AssertionError(f"no rate for {type_name}")


def test_search_memory_and_decode_recount(mox_bin, full):
    model, profiles, tensors, hp = full
    j = search_json(mox_bin, full, "3090", "--vram-budget", "16GiB", "-c", "32768")
    plan_ = j["plan"]
    assert plan_["memory"]["gpu_total_bytes"] + j["budgets"]["vram_margin_bytes"] <= 16 * GIB
    host = plan_["host_layers"]
    assert host and len(host) < hp["block_count"]
    n_expert = hp["expert_count"]
    placed_host = [L["layer"] for L in j["placement"]["layers"] if L["experts"]["gpu"] != n_expert]
    assert placed_host == host
    for L in j["placement"]["layers"]:  # the runtime's rule: everything but experts on the GPU
        assert L["mixer"] == L["router"] == L["shared_expert"] == L["norms"] == "gpu"
        assert L["experts"]["gpu"] in (0, n_expert)

    def is_exps(name):
        return "_exps." in name

    def layer(name):
        return layer_of(name)

    gpu_weights = sum(t["bytes"] for n, t in tensors.items()
                      if n != "token_embd.weight" and not (is_exps(n) and layer(n) in host))
    assert plan_["memory"]["gpu_weights_bytes"] == gpu_weights

    # Decode at depth 0, per docs/plan.md.
    prof = json.loads(profiles["3090"].read_text())
    gpu, cpu = prof["gpu"], prof["cpu"]
    best = max(gpu["matvec_gbps"].values()) * 1e9
    k_over_n = hp["expert_used_count"] / n_expert
    conv_channels = 2 * hp["ssm.group_count"] * hp["ssm.state_size"] + hp["ssm.inner_size"]
    state = 4 * ((hp["ssm.conv_kernel"] - 1) * conv_channels + hp["ssm.time_step_rank"] * hp["ssm.state_size"] ** 2)
    n_layer, interval = hp["block_count"], hp["full_attention_interval"]
    n_rec = sum(1 for i in range(n_layer) if (i + 1) % interval != 0)

    def gpu_read(t):
        matrix = len(t["ne"]) >= 2 and t["ne"][1] > 1 and t["ne"][0] >= 32
        return t["bytes"] / (rate(gpu["matvec_gbps"], t["type"]) if matrix else best)

    gpu_s = n_rec * 2 * state / best
    gpu_bytes = cpu_bytes = cpu_s = overlap = 0.0
    rt = gpu["host_roundtrip_s"]
    for n, t in tensors.items():
        if n == "token_embd.weight":
            continue
        if is_exps(n):
            if layer(n) in host:
                cpu_bytes += k_over_n * t["bytes"]
                cpu_s += k_over_n * t["bytes"] / rate(cpu["expert_gbps"], t["type"])
            else:
                gpu_bytes += k_over_n * t["bytes"]
                gpu_s += k_over_n * t["bytes"] / rate(gpu["matvec_gbps"], t["type"])
        else:
            gpu_bytes += t["bytes"]
            gpu_s += gpu_read(t)
    for L in host:
        shexp = sum(gpu_read(t) for n, t in tensors.items() if layer(n) == L and "_shexp" in n)
        cpu_layer = sum(k_over_n * t["bytes"] / rate(cpu["expert_gbps"], t["type"])
                        for n, t in tensors.items() if layer(n) == L and is_exps(n))
        overlap += min(shexp, rt + cpu_layer)
    # 8 launches per DeltaNet layer, 10 per attention layer (the MoE input norm inside the router's
    # launch; the conv counted, as the DeltaNet probe times it), 4 for the first norm, the head and the
    # greedy token's arg max (a memset and a kernel), 5 more per host layer (its own MoE input norm,
    # top-k, publish, collect, gated add); this profile has no decode probes.
    launch = (n_rec * 8 + (n_layer - n_rec) * 10 + 4 + 5 * len(host)) * gpu["launch_gap_s"]
    d = plan_["decode"]
    assert d["gpu_weight_bytes"] == pytest.approx(gpu_bytes, rel=1e-12)
    assert d["cpu_bytes"] == pytest.approx(cpu_bytes, rel=1e-12)
    assert d["handoffs"] == len(host)
    total = gpu_s + cpu_s + len(host) * rt + launch - overlap
    assert d["total_s"] == pytest.approx(total, rel=1e-9)
    assert d["tokens_per_s"] == pytest.approx(1 / total, rel=1e-9)

    chosen = [row for row in j["table"] if row["chosen"]]
    assert len(chosen) == 1 and chosen[0]["decode_tps"] == pytest.approx(d["tokens_per_s"], rel=1e-12)
    assert chosen[0]["host_layers"] == host
    for row in j["table"]:
        assert row["fits"] == (row["why_not"] == "")
        if row["fits"]:
            assert row["vram_bytes"] + j["budgets"]["vram_margin_bytes"] <= 16 * GIB

    # The printed manual flags rebuild the same placement in manual mode.
    manual = plan_json_of(mox_bin, model, "-ngl", "all", "--moe-cpu-layers", plan_["moe_cpu_layers"],
                          "-c", "32768", "-ctk", plan_["k_type"].lower(), "-ctv", plan_["v_type"].lower())
    assert manual["weights_bytes"]["gpu"] == gpu_weights


def plan_json_of(mox_bin, model, *args):
    out = run_plan(mox_bin, model, "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_search_manual_flags_constrain(mox_bin, full):
    j = search_json(mox_bin, full, "h200", "--vram-budget", "80GiB", "--n-cpu-moe", "3", "-ctk", "q8_0")
    assert j["plan"]["host_layers"] == [0, 1, 2]
    assert j["plan"]["k_type"] == "Q8_0"
    assert all(row["k_type"] == "Q8_0" for row in j["table"])
    j = search_json(mox_bin, full, "3090", "--vram-budget", "12GiB", "-ot", r"blk\.(5|6)\.ffn_.*_exps=CUDA0",
                    "-ub", "1024")
    assert j["plan"]["host_layers"] and 5 not in j["plan"]["host_layers"] and 6 not in j["plan"]["host_layers"]
    assert j["plan"]["n_ubatch"] == 1024


def test_search_context_goal(mox_bin, full):
    _, _, _, hp = full
    j = search_json(mox_bin, full, "h200", "--goal", "context")
    assert j["plan"]["n_ctx"] == hp["context_length"]
    assert j["plan"]["k_type"] == "F16" and j["plan"]["v_type"] == "F16"
    j = search_json(mox_bin, full, "3090", "--vram-budget", "4GiB", "-c", "max")
    assert j["plan"]["n_ctx"] % 256 == 0 and j["plan"]["n_ctx"] < hp["context_length"]
    assert j["plan"]["memory"]["gpu_total_bytes"] + j["budgets"]["vram_margin_bytes"] <= 4 * GIB


def test_search_cpu_only_profile(mox_bin, full):
    j = search_json(mox_bin, full, "cpu", "--plan", "auto", "-c", "8192")
    assert j["plan"]["cpu_only"] and j["plan"]["memory"]["gpu_total_bytes"] == 0


def test_search_text_output(mox_bin, full):
    model, profiles, _, _ = full
    out = run_plan(mox_bin, model, "--profile", str(profiles["3090"]), "--vram-budget", "16GiB", "-c", "32768")
    assert out.returncode == 0, out.stderr
    assert "<- chosen" in out.stdout and "does not fit" in out.stdout
    assert "as manual flags: --moe-cpu-layers" in out.stdout
    assert "hand-written" in out.stdout


def test_search_names_the_nearest_n_cpu_moe(mox_bin, full):
    """A searched plan also says which llama.cpp --n-cpu-moe comes nearest: as many host layers, exact
    when they are the first ones."""
    model, profiles, _, _ = full
    args = ["--profile", str(profiles["3090"]), "--vram-budget", "16GiB", "-c", "32768"]
    j = json.loads(run_plan(mox_bin, model, *args, "--json").stdout)["plan"]
    host = j["host_layers"]
    assert host and j["n_cpu_moe"] == len(host)
    assert j["n_cpu_moe_exact"] == (host == list(range(len(host))))
    text = run_plan(mox_bin, model, *args).stdout
    line = next(l for l in text.splitlines() if "nearest llama.cpp flags" in l)
    assert f"-ngl 99 --n-cpu-moe {len(host)} -c 32768" in line


@pytest.mark.parametrize("args,message", [
    (["--vram-budget", "lots"], "--vram-budget"),
    (["--vram-budget", "0"], "--vram-budget"),
    (["--vram-budget", "1GiB"], "nothing fits"),
    (["--vram-budget", "16GiB", "-ngl", "10"], "-ngl"),
    (["--vram-budget", "16GiB", "-ot", "attn_q=CPU"], "attn_q"),
    (["--goal", "speed"], "--goal"),
    (["--plan", "sometimes"], "--plan"),
    (["--plan", "manual", "--vram-budget", "8G"], "--plan auto"),
    (["--goal", "context", "-c", "4096"], "-c"),
    (["-c", "lots", "--plan", "auto"], "-c lots"),
])
def test_search_bad_input_is_a_one_line_error(mox_bin, full, args, message):
    model, profiles, _, _ = full
    out = run_plan(mox_bin, model, "--profile", str(profiles["3090"]), *args)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr


def test_search_without_a_profile_measures_a_quick_one(mox_bin, full, tmp_path):
    # As `mox run/bench --plan auto`: no cached profile means a quick calibration, cached for the
    # next command; a --profile that names a missing file stays an error.
    model = full[0]
    env = dict(os.environ, MOX_CACHE_DIR=str(tmp_path))
    out = run_plan(mox_bin, model, "--vram-budget", "16GiB", "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert "measured a quick one" in out.stderr and str(tmp_path) in out.stderr
    saved = list(tmp_path.glob("hardware-*.json"))
    assert len(saved) == 1 and json.loads(out.stdout)["plan"]
    again = run_plan(mox_bin, model, "--vram-budget", "16GiB", "--json", env=env)
    assert again.returncode == 0 and "measured a quick one" not in again.stderr, again.stderr
    missing = run_plan(mox_bin, model, "--vram-budget", "16GiB", "--profile", str(tmp_path / "none.json"), env=env)
    assert missing.returncode != 0 and "none.json" in missing.stderr


def test_manual_flags_predict_the_speed_of_their_placement(mox_bin, full, tmp_path):
    # With a profile, the manual report carries the speed model's numbers for exactly these flags:
    # the same as the search's own prediction for the placement it chose (the search's flags given
    # back as manual flags), in --json and in the text.
    model, profiles, _, _ = full
    chosen = search_json(mox_bin, full, "3090", "--vram-budget", "16GiB", "-c", "32768")["plan"]
    layers = ",".join(str(l) for l in chosen["host_layers"])
    args = ["-ngl", "99", "-c", "32768", "-ub", str(chosen["n_ubatch"]), "-ctk", chosen["k_type"].lower(),
            "-ctv", chosen["v_type"].lower(), "--moe-cpu-layers", layers, "--profile", str(profiles["3090"])]
    j = plan_json_of(mox_bin, model, *args)
    assert j["speed"]["decode_tps"] == pytest.approx(chosen["decode"]["tokens_per_s"], rel=1e-12)
    assert j["speed"]["decode_half_depth"] == 16384
    assert 0 < j["speed"]["decode_half_tps"] < j["speed"]["decode_tps"]
    out = run_plan(mox_bin, model, *args)
    assert out.returncode == 0, out.stderr
    assert f"predicted decode: {j['speed']['decode_tps']:.1f} t/s at depth 0" in out.stdout
    # Without a profile the memory report stands alone and says why there is no speed.
    env = dict(os.environ, MOX_CACHE_DIR=str(tmp_path))
    j = json.loads(run_plan(mox_bin, model, "-ngl", "99", "--json", env=env).stdout)
    assert "decode_tps" not in j["speed"] and "mox calibrate" in j["speed"]["missing"]


def trace_synth(mox_bin, model, path, *extra):
    out = subprocess.run([str(mox_bin), "trace-synth", "-o", str(path), "--like", str(model), "-n", "600",
                          "--seed", "3", *map(str, extra)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return path


def test_search_weighs_an_expert_cache_from_a_routing_profile(mox_bin, full, tmp_path):
    # Uniform routing keeps the plan of whole layers (a pool is priced, none chosen); skewed, local
    # routing buys a pool, which the plan's memory counts and its manual flags name.
    model = full[0]
    args = ["--vram-budget", "8GiB", "-c", "32768", "-ctk", "f16", "-ctv", "f16"]
    plain = search_json(mox_bin, full, "h200", *args)
    uniform = search_json(mox_bin, full, "h200", *args,
                          "--routing-profile", trace_synth(mox_bin, model, tmp_path / "uniform.trace"))
    cache = uniform["plan"]["expert_cache"]
    assert cache["slots"] == 0 and cache["why_none"] and cache["policy"] == "lru"
    assert uniform["plan"]["host_layers"] == plain["plan"]["host_layers"]
    assert any(row["cache_slots"] > 0 for row in uniform["table"])
    local = search_json(mox_bin, full, "h200", *args, "--cache-policy", "lfu", "--routing-profile",
                        trace_synth(mox_bin, model, tmp_path / "local.trace", "--skew", 1.2, "--reuse", 0.4))
    cache = local["plan"]["expert_cache"]
    assert cache["slots"] > 0 and cache["policy"] == "lfu" and 0 < cache["hit_rate"] <= 1
    assert cache["pool_bytes"] == (cache["slots"] + 1) * cache["slot_bytes"]
    assert local["plan"]["decode"]["tokens_per_s"] > plain["plan"]["decode"]["tokens_per_s"]
    assert local["plan"]["memory"]["gpu_total_bytes"] + local["budgets"]["vram_margin_bytes"] <= 8 * GIB
    text = run_plan(mox_bin, model, "--profile", str(full[1]["h200"]), *args, "--routing-profile",
                    tmp_path / "local.trace")
    assert text.returncode == 0, text.stderr
    assert "pool" in text.stdout and "expert cache:" in text.stdout and "--expert-cache " in text.stdout


def test_a_routing_profile_of_another_model_is_a_one_line_error(mox_bin, full, tmp_path):
    model, profiles, _, _ = full
    other = tmp_path / "other.trace"
    out = subprocess.run([str(mox_bin), "trace-synth", "-o", str(other), "--shape", "40,128,8", "-n", "20"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    out = run_plan(mox_bin, model, "--profile", str(profiles["h200"]), "--routing-profile", str(other))
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0 and len(lines) == 1, out.stderr
    assert lines[0].startswith("mox: error: --routing-profile: the trace is of a") and "128 experts" in lines[0]

"""tools/hybrid_bench.py (bench/cuda/hybrid_h200.sh's logic) without a GPU: the --n-cpu-moe search
against brute force on made-up VRAM curves, llama.cpp's log digest on lines in llama.cpp's own format,
and a whole run driven through fake nvidia-smi / llama-bench / mox (tests/py/fake_gpu_tools.py)."""
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_gpu_tools  # noqa: E402

_spec = importlib.util.spec_from_file_location("hybrid_bench", ROOT / "tools" / "hybrid_bench.py")
hb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hb)

MIB, GIB = 1 << 20, 1 << 30
CURVES = {
    "linear": lambda n: (20000 - 450 * n) * MIB,
    "wiggly": lambda n: (2000 + 480 * (40 - n) + 60 * (n % 3)) * MIB,
    "convex": lambda n: (2000 + 11 * (40 - n) ** 2) * MIB,
    # Layers of unequal size (Q4_K_M keeps ffn_down in Q6_K in some of them): a falling staircase.
    "uneven": lambda n: (1500 + sum(400 if k % 3 else 610 for k in range(n, 40))) * MIB,
}


def search(curve, budget, kv, n_max=40, cap=4):
    measured = {0: curve(0), n_max: curve(n_max)}
    for _ in range(cap):
        n = hb.next_probe(measured, budget, kv, n_max)
        if n is None:
            break
        assert n not in measured and 0 <= n <= n_max
        measured[n] = curve(n)
    return measured


@pytest.mark.parametrize("name", sorted(CURVES))
@pytest.mark.parametrize("budget_gib", [24, 18.5, 16, 12, 8, 4.3])
@pytest.mark.parametrize("kv_mib", [0, 560, 5000])
def test_search_finds_the_smallest_fitting_n(name, budget_gib, kv_mib):
    curve, budget, kv = CURVES[name], int(budget_gib * GIB), kv_mib * MIB
    truth = [n for n in range(41) if curve(n) + kv <= budget]
    measured = search(curve, budget, kv)
    found = [n for n, v in measured.items() if v + kv <= budget]
    if not truth:
        assert not found
        return
    # Every curve here falls with N, so the smallest fitting N is the fastest configuration. Real
    # curves are near-linear (each layer's experts are the same few hundred MiB, give or take the
    # Q6_K ones): the search pins those down exactly; on a strongly curved one a secant creeps
    # in from one side, so within the probe cap it may stop a little above the truth.
    assert min(found) - min(truth) <= (3 if name == "convex" else 0)


def test_search_measures_all_layers_first_when_nothing_fits():
    curve = CURVES["linear"]
    assert hb.next_probe({0: curve(0)}, 1 * GIB, 0, 40) == 40
    assert hb.next_probe({0: curve(0), 40: curve(40)}, 1 * GIB, 0, 40) is None


def test_search_steps_over_a_failed_run():
    # N = 0 did not run (OOM): no number at lo, so the search bisects instead of interpolating.
    measured = {0: None, 40: 2000 * MIB}
    n = hb.next_probe(measured, 16 * GIB, 0, 40)
    assert n == 20


def test_fit_margin_leaves_the_budget_minus_the_missing_kv():
    free_mib, budget, kv = 140000, 16 * GIB, 512 * MIB
    margin = hb.fit_margin_mib(free_mib, budget, kv)
    assert free_mib - margin == 16 * 1024 - 512


def test_layer_ranges():
    assert hb.layer_ranges([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert hb.layer_ranges([]) == ""


def test_parse_llama_log_keeps_the_last_load():
    # A --fit run loads the model once per test; the placement reported is the last one.
    two = LLAMA_LOG + "tensor blk.7.ffn_up_exps.weight (108 MiB q4_K) buffer type overridden to CPU\n" \
                      "load_tensors: offloaded 41/41 layers to GPU\n"
    assert hb.parse_llama_log(two)["host_expert_layers"] == {7: ["ffn_up_exps"]}


# Lines as llama.cpp 0c1e570 prints them with -v (its format strings: llama-model.cpp,
# llama-kv-cache.cpp, llama-context.cpp, llama-model-loader.cpp).
LLAMA_LOG = """\
tensor blk.0.ffn_gate_exps.weight (108 MiB q4_K) buffer type overridden to CPU
tensor blk.0.ffn_down_exps.weight (140 MiB q6_K) buffer type overridden to CPU
tensor blk.0.ffn_up_exps.weight (108 MiB q4_K) buffer type overridden to CPU
tensor blk.1.ffn_gate_exps.weight (108 MiB q4_K) buffer type overridden to CPU
tensor blk.1.ffn_down_exps.weight (140 MiB q6_K) buffer type overridden to CPU
tensor blk.1.ffn_up_exps.weight (108 MiB q4_K) buffer type overridden to CPU
tensor blk.2.ffn_up_exps.weight (108 MiB q4_K) buffer type overridden to CUDA_Host
load_tensors: offloaded 41/41 layers to GPU
load_tensors:        CUDA0 model buffer size = 19012.50 MiB
load_tensors:   CPU_Mapped model buffer size =   750.00 MiB
llama_kv_cache:      CUDA0 KV buffer size =    80.00 MiB
llama_memory_recurrent:      CUDA0 RS buffer size =    62.81 MiB
sched_reserve:      CUDA0 compute buffer size =   493.00 MiB
sched_reserve:      CUDA0 compute buffer size =  2012.00 MiB
"""


def test_parse_llama_log():
    info = hb.parse_llama_log(LLAMA_LOG)
    assert info["offloaded"] == "41/41"
    assert info["cuda_buffers_mib"] == {"model": 19012.5, "KV": 80.0, "RS": 62.81, "compute": 2012.0}
    assert info["cuda_compute_mib"] == [493.0, 2012.0]
    assert info["host_expert_layers"] == {0: ["ffn_down_exps", "ffn_gate_exps", "ffn_up_exps"],
                                          1: ["ffn_down_exps", "ffn_gate_exps", "ffn_up_exps"], 2: ["ffn_up_exps"]}
    text = hb.describe_llama_log(json.loads(json.dumps(info)))  # as read back from runs.json
    assert "2 layers (0-1)" in text and "2 (ffn_up_exps)" in text


def test_describe_plan_reads_the_layer_list():
    plan = {"layers": [{"layer": i, "experts": {"gpu": 0 if i < 3 else (100 if i == 3 else 256),
                                                 "pinned_host": 256 if i < 3 else (156 if i == 3 else 0),
                                                 "mmap_host": 0}} for i in range(8)]}
    assert hb.describe_plan(plan) == "experts on the host: 3 layers (0-2); split (layer:gpu/all): 3:100/256"
    assert hb.describe_plan({"summary": "ncmoe 12"}) == "ncmoe 12"


def test_bench_plan_line_is_what_the_bench_ran():
    log = ("plan: experts of layers 0-4,7,10,16,39 in pinned host memory; -ub 4096; VRAM 23.34 GiB of 24.00 GiB "
           "(predicted); decode ~231 t/s\nother\n")
    assert hb.bench_plan_line(log) == "experts of layers 0-4,7,10,16,39 in pinned host memory; -ub 4096"
    assert hb.bench_plan_line("no plan here\n") is None


def run_fake(tmp_path, *args, env_extra=None):
    env = fake_gpu_tools.install(tmp_path / "bin")
    env.update(env_extra or {})
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "hybrid_bench.py"), "run", "--mox", "mox",
                        "--llama-bench", "llama-bench", "--model", "/fake/model.gguf", "--out", str(out), *args],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out, json.loads((out / "runs.json").read_text()), json.loads((out / "summary.json").read_text())


def test_run_with_fakes(tmp_path):
    out, doc, summary = run_fake(tmp_path, "--budgets", "16 8", "--extra", "24:262144", "--grid", "20")
    kv = fake_gpu_tools.KV_PER_TOKEN
    runs = doc["runs"]
    # Alternation: the first runs switch engine every time.
    kinds = [r["kind"].split("_")[0] for r in runs[:6]]
    assert kinds == ["llama", "mox"] * 3
    for s in summary:
        case = s["case"]
        kv_delta = (case["ctx"] - 4096) * kv
        truth = min(n for n in range(41)
                    if fake_gpu_tools.llama_vram_mib(n) * MIB + kv_delta <= case["budget_gib"] * GIB)
        assert s["best_ncmoe"]["n_cpu_moe"] == truth
        # The VRAM numbers are the poller's (peak - idle), exactly the fake's level.
        assert s["best_ncmoe"]["vram_bytes"] == fake_gpu_tools.llama_vram_mib(truth) * MIB
        assert s["checks"]["mox_ok"]
        # llama.cpp's fit per test: the pp test leaves room for the KV the real context adds; the tg
        # test (512-token context) for that KV and for the compute buffer -ub 4096 would add
        # (2012 - 493 MiB, read from the sweep's log), which its own run does not hold.
        room = {"pp": case["budget_gib"] * GIB - kv_delta,
                "tg": case["budget_gib"] * GIB - (case["ctx"] - 512) * kv}
        for part in ("pp", "tg"):
            chosen = min(n for n in range(41) if fake_gpu_tools.llama_vram_mib(n) * MIB <= room[part])
            fit = s["fit"][part]
            assert fit["rc"] == 0
            assert fit["vram_bytes"] == (fake_gpu_tools.llama_vram_mib(chosen) - (0 if part == "pp" else 1519)) * MIB
            assert f"experts on the host: {chosen} layers" in (out / "results.md").read_text()
        assert s["checks"]["decode_ratio"] == pytest.approx(s["mox"]["tg_ts"] / s["best_tg"]["tg_ts"])
        assert s["checks"]["decode_pass"] == (s["checks"]["decode_ratio"] >= 1.5)
        # The fake mox bench reports exactly its prediction: 0 error.
        assert s["checks"]["vram_err"] == 0 and s["checks"]["vram_pass"]
        assert s["checks"]["tg_err"] == pytest.approx(0.05)
        assert s["checks"]["tg_host_busy"] == pytest.approx(0.03)  # the fake rows' 2% other + 1% steal
    md = (out / "results.md").read_text()
    assert "other work on the CPU up to 3%" in md
    for title in ("## Budget 16 GiB, context 32768", "## Budget 8 GiB, context 32768",
                  "## Budget 24 GiB, context 262144", "## llama.cpp --n-cpu-moe sweep"):
        assert title in md
    assert "--fit-target" in md and "OOM 0 (target 0)" in md
    assert any(r["kind"] == "llama_ncmoe" and r["n_cpu_moe"] == 20 for r in runs)  # the grid point
    csv_lines = (out / "runs.csv").read_text().splitlines()
    assert len(csv_lines) == len(runs) + 1


def test_run_with_fakes_reports_failures(tmp_path):
    out, doc, summary = run_fake(tmp_path, "--budgets", "16 8", "--extra", "", "--grid", "", "--no-fit",
                                 env_extra={"FAKE_MOX_OOM_BUDGET": "8GiB", "FAKE_LLAMA_FAIL_N": "0"})
    by_case = {s["case"]["budget_gib"]: s for s in summary}
    assert by_case[8]["checks"]["mox_oom"] and not by_case[8]["checks"]["mox_ok"]
    assert not by_case[16]["checks"]["mox_oom"]
    n0 = next(r for r in doc["runs"] if r["kind"] == "llama_ncmoe" and r["n_cpu_moe"] == 0)
    assert n0["rc"] == 1 and n0["oom"]
    # Without N = 0's number the search still finds the smallest fitting N.
    truth = min(n for n in range(1, 41) if fake_gpu_tools.llama_vram_mib(n) * MIB + (32768 - 4096) *
                fake_gpu_tools.KV_PER_TOKEN <= 16 * GIB)
    assert by_case[16]["best_ncmoe"]["n_cpu_moe"] == truth
    md = (out / "results.md").read_text()
    assert "**OOM**" in md and "OOM 1 (target 0)" in md and "## Errors" in md
    assert math.isfinite(by_case[16]["checks"]["decode_ratio"])


def test_shell_script_with_fakes(tmp_path):
    env = fake_gpu_tools.install(tmp_path / "bin")
    env.update({"EXTRA": "", "GRID": "", "LLAMA_REPS": "1", "MOX_REPS": "1"})
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(ROOT / "bench" / "cuda" / "hybrid_h200.sh"), "mox", "llama-bench", str(model),
                        str(out), "16"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    machine = (out / "machine.txt").read_text()
    assert "mox commit: abc1234" in machine and "llama.cpp commit: 0c1e57098" in machine
    assert "Fake H200" in machine
    md = (out / "results.md").read_text()
    assert "## Budget 16 GiB, context 32768" in md and "262144" not in md
    runs = json.loads((out / "runs.json").read_text())["runs"]
    assert all(r["cmd"][r["cmd"].index("-r") + 1] == "1" for r in runs)


def test_unfinished_search_does_not_pass_a_ratio(tmp_path):
    # One probe per case: the search cannot pin the smallest fitting N down, so a faster fitting
    # llama.cpp may exist. A ratio that meets its target is then "not verified"; one that misses still fails.
    out, doc, summary = run_fake(tmp_path, "--budgets", "16", "--extra", "", "--grid", "", "--no-fit",
                                 "--max-probes", "1")
    assert doc["meta"]["unfinished_searches"] == ["16g_c32768"]
    (s,) = summary
    ch = s["checks"]
    assert ch["llama_search_unfinished"]
    for ratio, flag, target in ((ch["decode_ratio"], ch["decode_pass"], 1.5), (ch["prefill_ratio"], ch["prefill_pass"], 3.0)):
        assert flag is (None if ratio >= target else False)
    md = (out / "results.md").read_text()
    if ch["decode_pass"] is None or ch["prefill_pass"] is None:
        assert "not verified: llama.cpp's --n-cpu-moe search stopped" in md
    assert "(>= 1.5: PASS)" not in md and "(>= 3: PASS)" not in md


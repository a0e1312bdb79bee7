"""tools/plan_accuracy.py (the join behind bench/cuda/plan_accuracy.sh): the tolerance rules at their
edges, rows split per configuration, an OOM counted, and the whole script driven through fake
nvidia-smi / mox (tests/py/fake_gpu_tools.py). The fixtures describe the format, not results."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_gpu_tools  # noqa: E402

_spec = importlib.util.spec_from_file_location("plan_accuracy", ROOT / "tools" / "plan_accuracy.py")
pa = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pa)

MIB, GIB = 1 << 20, 1 << 30


def scored(measured, predicted, tg_m=100.0, tg_p=100.0):
    r = {"vram_measured": measured, "vram_predicted": predicted, "tg_measured": tg_m, "tg_predicted": tg_p,
         "pp_measured": None, "pp_predicted": None}
    pa.score(r)
    return r


def test_vram_tolerance_is_two_percent_or_256_mib():
    big = 20 * GIB  # 2% = 409.6 MiB
    assert scored(big, big + 409 * MIB)["vram_pass"]
    assert not scored(big, big + 410 * MIB)["vram_pass"]
    assert not scored(big, big - 410 * MIB)["vram_pass"]
    small = 4 * GIB  # 2% = 82 MiB, so the 256 MiB floor rules
    assert scored(small, small - 256 * MIB)["vram_pass"]
    assert not scored(small, small + 257 * MIB)["vram_pass"]


def test_decode_tolerance_is_ten_percent():
    assert scored(GIB, GIB, 100.0, 109.9)["tg_pass"]
    assert not scored(GIB, GIB, 100.0, 110.5)["tg_pass"]
    assert not scored(GIB, GIB, 100.0, 89.0)["tg_pass"]
    assert "tg_pass" not in scored(GIB, GIB, None, 90.0)


def row(n_cpu_moe, p, g, ts, vram, pred_vram, pred_ts):
    return {"n_cpu_moe": n_cpu_moe, "n_prompt": p, "n_gen": g, "median_ts": ts, "samples_ts": [ts, ts],
            "vram_bytes": vram, "predicted_vram_bytes": pred_vram, "predicted_tps": pred_ts}


def test_split_rows_and_order_guard():
    rows = [row(n, p, g, 1.0, 1, 1, 1.0) for n in (0, 10) for p, g in ((512, 0), (0, 128))]
    parts = pa.split_rows(rows, 2)
    assert [[r["n_cpu_moe"] for r in part] for part in parts] == [[0, 0], [10, 10]]
    assert pa.split_rows(rows[:3], 2) is None
    cfg = {"flags": "-c 32768 --n-cpu-moe 10"}
    assert pa.check_rows(cfg, parts[1]) == []
    assert pa.check_rows(cfg, parts[0]) == ["n_cpu_moe 0 != 10", "n_cpu_moe 0 != 10"]


def write_fixture(out):
    """Two groups as plan_accuracy.sh leaves them: a two-value --n-cpu-moe sweep that ran, and a
    one-configuration group whose bench ran out of memory."""
    (out / "plan").mkdir(parents=True)
    (out / "bench").mkdir()
    (out / "configs.tsv").write_text("ncmoe.0\tncmoe\t0\t-c 32768 --n-cpu-moe 0\n"
                                     "ncmoe.1\tncmoe\t1\t-c 32768 --n-cpu-moe 10\n"
                                     "ctx.0\tctx.0\t0\t--n-cpu-moe 20 -c 131072\n")
    rows = [row(0, 512, 0, 5000.0, 20 * GIB, 20 * GIB + 100 * MIB, 5200.0),
            row(0, 0, 128, 200.0, 20 * GIB, 20 * GIB + 100 * MIB, 230.0),
            row(10, 512, 0, 4000.0, 15 * GIB, 15 * GIB - 500 * MIB, None),
            row(10, 0, 128, 150.0, 15 * GIB, 15 * GIB - 500 * MIB, 140.0)]
    rows[2].pop("predicted_tps")
    rows[3]["host_cpu_other"], rows[3]["host_cpu_steal"] = [0.02, 0.2], [0.0, 0.05]  # a busy repetition
    (out / "bench" / "ncmoe.json").write_text(json.dumps(rows))
    (out / "bench" / "ncmoe.rc").write_text("0\n")
    (out / "bench" / "ctx.0.json").write_text("")
    (out / "bench" / "ctx.0.rc").write_text("1\n")
    (out / "bench" / "ctx.0.err").write_text("error: CUDA error: out of memory\n")
    (out / "plan" / "ncmoe.0.json").write_text(json.dumps({"gpu_total_bytes": 1}))
    (out / "plan" / "ncmoe.1.json").write_text(json.dumps({"gpu_total_bytes": 1, "prefill": {"predicted_pp_tps": 4100.0}}))
    (out / "plan" / "ctx.0.json").write_text(json.dumps({"gpu_total_bytes": 13 * GIB}))


def test_join_fixture(tmp_path):
    write_fixture(tmp_path)
    res = {r["id"]: r for r in pa.join(tmp_path)}
    a, b, c = res["ncmoe.0"], res["ncmoe.1"], res["ctx.0"]
    # The bench row's own prediction wins over the plan's.
    assert a["vram_err"] == 100 * MIB and a["vram_pass"]
    assert a["tg_err_rel"] == 230.0 / 200.0 - 1 and not a["tg_pass"]
    assert b["vram_err"] == -500 * MIB and not b["vram_pass"]
    assert b["pp_predicted"] == 4100.0  # from the plan, nested
    assert b["tg_pass"]
    assert c["oom"] and c["vram_measured"] is None and c["vram_predicted"] == 13 * GIB
    text, summary = pa.render(list(res.values()))
    assert summary == {"configurations": 3, "vram_scored": 2, "vram_pass": 1, "tg_scored": 2, "tg_pass": 1,
                       "oom": 1, "oom_invocations": 1, "failed": 1, "worst_vram_err_mib": 500.0,
                       "worst_tg_err_rel": pytest.approx(0.15)}
    assert "**OOM**" in text and "| ncmoe.1 |" in text
    assert b["notes"] == ["host busy 25% in tg"] and a["notes"] == []
    assert pa.bc.row_cpu_busy({"host_cpu_other": [0.1], "host_cpu_steal": []}) is None


def test_script_with_fakes(tmp_path):
    env = fake_gpu_tools.install(tmp_path / "bin")
    env["FAKE_MOX_VRAM_ERR_MIB"] = "300"  # measured = predicted + 300 MiB
    env["FAKE_MOX_PLAN_NO_UB"] = "1"  # the script asks again without -ub
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(ROOT / "bench" / "cuda" / "plan_accuracy.sh"), "mox", "/fake/model.gguf", str(out)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "accuracy.json").read_text())
    cfgs = doc["configurations"]
    assert doc["summary"]["configurations"] == len(cfgs) >= 20
    assert doc["summary"]["oom"] == 0 and doc["summary"]["failed"] == 0
    for c in cfgs:
        assert c["notes"] == [], c
        assert c["vram_err"] == -300 * MIB
        # 300 MiB passes only where 2% of the measured VRAM is at least that.
        assert c["vram_pass"] == (0.02 * c["vram_measured"] >= 300 * MIB)
    assert json.loads((out / "plan" / "ub4k.1.json").read_text())["n_layer"] == 40
    assert (out / "accuracy.md").read_text().startswith("# Planner accuracy")
    assert "--moe-cpu-layers" in (out / "commands.txt").read_text()
    assert list((out / "bench").glob("*.vram.csv"))


def test_script_without_polling(tmp_path):
    # POLL=0: no nvidia-smi beside the runs; the table keeps the rows' own driver numbers.
    env = fake_gpu_tools.install(tmp_path / "bin")
    env["POLL"] = "0"
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(ROOT / "bench" / "cuda" / "plan_accuracy.sh"), "mox", "/fake/model.gguf", str(out)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not list((out / "bench").glob("*.vram.csv"))
    cfgs = json.loads((out / "accuracy.json").read_text())["configurations"]
    assert all(c["vram_measured"] is not None and c["vram_poll"] is None for c in cfgs)

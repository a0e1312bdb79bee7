"""mox bench --compare against a fake llama-bench: the arguments each invocation gets, the
interleaving of the two engines, and that llama-bench's numbers reach the rows unchanged."""
import importlib.util
import json
import os
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

TINY = Path(__file__).resolve().parents[2] / "assets" / "mox-tiny" / "mox-tiny-f16.gguf"

FAKE = r'''
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LLAMA_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
if os.environ.get("FAKE_LLAMA_FAIL"):
    sys.stderr.write("llama_model_load: boom\n")
    sys.exit(2)
def value(flag):
    return args[args.index(flag) + 1]
n_prompt, n_gen, depth = int(value("-p")), int(value("-n")), int(value("-d"))
if "-pg" in args:
    n_prompt, n_gen = map(int, value("-pg").split(","))
calls = sum(1 for _ in open(os.environ["FAKE_LLAMA_LOG"]))
ts = 1000.0 * calls  # distinct per call, so the test can follow each number
ns = (n_prompt + n_gen) * 1e9 / ts
sys.stderr.write("load_tensors: lots of log lines\n" * 50)
print(json.dumps([{"build_commit": "fake123", "n_prompt": n_prompt, "n_gen": n_gen, "n_depth": depth,
                   "avg_ns": int(ns), "avg_ts": ts, "samples_ns": [int(ns)], "samples_ts": [ts]}], indent=2))
'''


def fake_llama_bench(tmp_path):
    path = tmp_path / "llama-bench"
    path.write_text(f"#!{sys.executable}\n{FAKE}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def run(mox_bin, tmp_path, *args, fail=False):
    env = dict(os.environ, FAKE_LLAMA_LOG=str(tmp_path / "log.jsonl"))
    if fail:
        env["FAKE_LLAMA_FAIL"] = "1"
    return subprocess.run([str(mox_bin), "bench", "-m", str(TINY), "--compare", str(fake_llama_bench(tmp_path)),
                           "--host-bandwidth", "10GB/s", *args], capture_output=True, text=True, env=env)


def test_interleaving_arguments_and_numbers(mox_bin, tmp_path):
    r = run(mox_bin, tmp_path, "-p", "8", "-n", "2", "-r", "2", "-t", "2", "-ctk", "f16,q8_0", "-ub", "4",
            "--compare-args", "--repack 0", "-o", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    calls = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    configs = [(k, p, g) for k in ("f16", "q8_0") for p, g in ((8, 0), (0, 2))]
    assert [(row["type_k"], row["n_prompt"], row["n_gen"]) for row in rows] == configs
    # One llama-bench call per configuration per repetition, in configuration order each round.
    assert len(calls) == 8
    for i, args in enumerate(calls):
        k, p, g = configs[i % 4]
        assert args[:6] == ["-m", str(TINY), "-r", "1", "-o", "json"]
        pairs = dict(zip(args[6:-2:2], args[7:-2:2]))
        assert pairs == {"-p": str(p), "-n": str(g), "-d": "0", "-t": "2", "-ctk": k, "-ctv": "f16", "-b": "2048",
                         "-ub": "4", "-ngl": "0", "-ncmoe": "0", "-fa": "auto"}
        assert args[-2:] == ["--repack", "0"]
    # Slots: 4 warm-ups (mox), then round 1 (mox, llama per config), round 2 (llama, mox per config).
    for i, row in enumerate(rows):
        assert row["run_slots"] == [4 + 2 * i, 12 + 2 * i + 1]
        assert row["llama_run_slots"] == [4 + 2 * i + 1, 12 + 2 * i]
        # The fake's rate is 1000 x its call number: call i (round 1) and 4 + i (round 2).
        assert row["llama_samples_ts"] == [1000.0 * (i + 1), 1000.0 * (i + 5)]
        assert row["llama_median_ts"] == 1000.0 * (i + 3)
        assert row["ratio_median_ts"] == row["median_ts"] / row["llama_median_ts"]
        assert row["llama_build_commit"] == "fake123"

    svg = tmp_path / "plot.svg"
    md = run(mox_bin, tmp_path, "-p", "8", "-n", "0", "-r", "1", "-t", "1,2", "-o", "md", "--plot", str(svg))
    assert md.returncode == 0, md.stderr
    table = [line for line in md.stdout.splitlines() if line.startswith("|")]
    assert "| llama.cpp median t/s |" in table[0] and "| mox/llama |" in table[0]
    assert "fake123" in md.stdout
    if importlib.util.find_spec("matplotlib"):  # --plot: mox hands its JSON to tools/bench_plot.py
        text = " ".join(ET.parse(svg).getroot().itertext())
        assert "mox" in text and "llama.cpp" in text and "n_threads" in text and "fake123" in text


def test_pg_and_failure(mox_bin, tmp_path):
    r = run(mox_bin, tmp_path, "-p", "0", "-n", "0", "-pg", "8,2", "-d", "4", "-r", "1", "-t", "1", "-o", "json")
    assert r.returncode == 0, r.stderr
    (args,) = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert args[6:14] == ["-p", "0", "-n", "0", "-pg", "8,2", "-d", "4"]
    bad = run(mox_bin, tmp_path, "-p", "8", "-n", "0", "-r", "1", "-t", "1", fail=True)
    assert bad.returncode == 1 and "exited with 2" in bad.stderr and "boom" in bad.stderr

"""mox bench end to end on the real tiny model: every output format, sane values, a sweep in
interleaved order, and the fingerprint recomputed here from its documented definition."""
import csv
import hashlib
import io
import json
import sqlite3
import struct
import subprocess
from pathlib import Path

import pytest

TINY = Path(__file__).resolve().parents[2] / "assets" / "mox-tiny" / "mox-tiny-f16.gguf"
SMALL = ["-p", "16", "-n", "4", "-r", "2", "-t", "2", "--host-bandwidth", "10GB/s"]


def bench(mox_bin, *args):
    r = subprocess.run([str(mox_bin), "bench", "-m", str(TINY), *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def fingerprint(path):
    data = Path(path).read_bytes()
    return hashlib.sha256(data[: 16 << 20] + struct.pack("<Q", len(data))).hexdigest()


@pytest.fixture(scope="module")
def json_rows(mox_bin):
    return json.loads(bench(mox_bin, *SMALL, "-o", "json"))


def test_json_rows_are_sane(json_rows):
    assert [(r["n_prompt"], r["n_gen"], r["n_depth"]) for r in json_rows] == [(16, 0, 0), (0, 4, 0)]
    for r in json_rows:
        assert r["model_filename"] == str(TINY)
        assert r["model_sha256"] == fingerprint(TINY)
        assert r["model_type"].startswith("qwen35moe ")
        assert 0 < r["model_size"] <= TINY.stat().st_size
        assert r["model_n_params"] > 0
        assert r["backends"] == "CPU" and r["n_threads"] == 2 and r["type_k"] == "f16"
        assert len(r["samples_ts"]) == 2 and len(r["samples_ns"]) == 2
        assert all(t > 0 for t in r["samples_ts"])
        tokens = r["n_prompt"] + r["n_gen"]
        for ns, ts in zip(r["samples_ns"], r["samples_ts"]):
            assert ts == pytest.approx(tokens * 1e9 / ns, rel=1e-9)
        assert r["avg_ts"] == pytest.approx(sum(r["samples_ts"]) / 2)
        assert min(r["samples_ts"]) <= r["median_ts"] <= max(r["samples_ts"])
        assert r["host_rss_bytes"] > 0 and r["host_peak_bytes"] >= r["host_rss_bytes"]
        assert r["cpu_cores"] >= 1 and r["cpu_info"]
        assert r["build_commit"]
        assert r["test_time"].endswith("Z")


def test_every_format_has_the_same_rows(mox_bin, json_rows):
    fields = list(json_rows[0].keys())
    rows = list(csv.reader(io.StringIO(bench(mox_bin, *SMALL, "-o", "csv"))))
    assert rows[0] == fields and len(rows) == 3 and all(len(r) == len(fields) for r in rows)
    assert [int(r[fields.index("n_prompt")]) for r in rows[1:]] == [16, 0]

    lines = bench(mox_bin, *SMALL, "-o", "jsonl").splitlines()
    assert [list(json.loads(l).keys()) for l in lines] == [fields, fields]

    db = sqlite3.connect(":memory:")
    db.executescript(bench(mox_bin, *SMALL, "-o", "sql"))
    got = db.execute("SELECT n_prompt, n_gen, avg_ts > 0, model_sha256 FROM llama_bench").fetchall()
    assert got == [(16, 0, 1, fingerprint(TINY)), (0, 4, 1, fingerprint(TINY))]

    md = bench(mox_bin, *SMALL, "-o", "md")
    table = [l for l in md.splitlines() if l.startswith("|")]
    assert len(table) == 4
    head = [c.strip() for c in table[0].strip("|").split("|")]
    assert "test" in head and "t/s" in head
    # Padded like llama-bench's: every row (the rule row too) as wide as the header, cell by cell.
    assert all([len(c) for c in l.split("|")] == [len(c) for c in table[0].split("|")] for l in table)
    assert "pp16" in table[2] and "tg4" in table[3] and " ± " in table[2]
    assert fingerprint(TINY) in md


def test_sweep_rows_and_depth(mox_bin):
    rows = json.loads(bench(mox_bin, "-p", "8", "-n", "2", "-r", "2", "-t", "2", "-ctk", "f16,q8_0", "-d", "0,8",
                            "-pg", "8,2", "-ub", "4", "--plan", "manual", "--vram-budget", "0", "--host-bandwidth", "0",
                            "-o", "json"))
    got = [(r["type_k"], r["n_depth"], r["n_prompt"], r["n_gen"]) for r in rows]
    want = [(k, d, p, g) for k in ("f16", "q8_0") for d in (0, 8) for p, g in ((8, 0), (0, 2), (8, 2))]
    assert got == want
    assert all(r["n_ubatch"] == 4 and all(t > 0 for t in r["samples_ts"]) for r in rows)
    # Interleaved: slots 0..n-1 are the warm-ups, then repetition 1 of every row, then repetition 2.
    n = len(rows)
    assert [r["run_slots"] for r in rows] == [[n + i, 2 * n + i] for i in range(n)]


def test_refusals_are_one_line_errors(mox_bin):
    for args, needle in ((["-ngl", "99"], "-ngl 99"), (["-o", "xml"], "-o 'xml'"),
                         (["-p", "5-1"], "backwards"), (["-p", "0", "-n", "0"], "no test"),
                         (["--vram-budget", "24G,16G"], "--vram-budget"), (["--plan", "manual,auto"], "--plan auto"),
                         (["--plan", "best"], "--plan 'best'"), (["--plot", "x.pdf"], ".svg or .png"),
                         (["--compare", "/nonexistent/llama-bench"], "not an executable"),
                         (["--compare-args", "--repack 0"], "needs --compare"),
                         (["--corpus", str(Path(__file__).parents[2] / "bench" / "corpus")], "is a directory")):
        r = subprocess.run([str(mox_bin), "bench", "-m", str(TINY), *args], capture_output=True, text=True)
        assert r.returncode == 1 and needle in r.stderr, (args, r.stderr)


def test_roofline_from_bandwidth_measured_in_the_run(mox_bin):
    rows = json.loads(bench(mox_bin, "-p", "0", "-n", "2", "-r", "1", "-t", "1", "-o", "json"))
    (r,) = rows
    assert r["host_read_source"] == "measured" and r["host_read_buffer_bytes"] >= 256 << 20
    assert 0.1 < r["host_read_gbps"] < 10000
    # fraction = median t/s x bytes per token / bandwidth, from the recorded fields
    assert r["roofline_fraction"] == pytest.approx(r["median_ts"] * r["decode_bytes_per_token"] / (r["host_read_gbps"] * 1e9))
    assert r["decode_bytes_per_token"] > 0 and r["vram_bytes"] is None and r["pcie_bytes"] is None
    assert r["plan"] == "manual" and r["vram_budget"] == 0


def test_json_rows_carry_nullable_gpu_fields(json_rows):
    for r in json_rows:
        assert r["vram_bytes"] is None and r["pcie_bytes"] is None and r["expert_cache_hit_rate"] is None
        assert r["host_read_source"] == "given" and r["host_read_gbps"] == pytest.approx(10.0)
    pp, tg = json_rows
    assert pp["roofline_fraction"] is None and tg["roofline_fraction"] > 0


def test_random_prompt_is_recorded_and_runs(mox_bin):
    rows = json.loads(bench(mox_bin, "-p", "16", "-n", "2", "-r", "1", "-t", "1", "--host-bandwidth", "0",
                            "--random-prompt", "-o", "json"))
    assert [r["test"] for r in rows] == ["pp16", "tg2"]
    assert all(r["prompt_corpus"] == "random token ids (seed 42)" for r in rows)
    assert all(r["median_ts"] > 0 for r in rows)

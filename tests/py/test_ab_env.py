"""bench/cuda/ab_env.sh: every variant runs in every round, in order, with its own environment (and, with
MOX=PATH, its own binary), and the table holds each variant's median over all its repetitions. A
stand-in for mox prints one bench row whose speed depends on the variable it was given."""
import json
import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "cuda" / "ab_env.sh"

FAKE_MOX = """#!/usr/bin/env python3
import json, os, sys
speed = float(os.environ.get("FAKE_SPEED", "100"))
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(os.environ.get("FAKE_SPEED", "default") + " " + " ".join(sys.argv[1:]) + "\\n")
print(json.dumps([{"test": "tg128", "n_prompt": 0, "n_gen": 128, "samples_ts": [speed, speed + 2, speed + 1]}]))
"""


def test_variants_alternate_and_aggregate(tmp_path, stand_in):
    fake = stand_in(FAKE_MOX)
    log = tmp_path / "log.txt"
    out = tmp_path / "out"
    env = dict(os.environ, FAKE_LOG=str(log), ROUNDS="2", REPS="3", TESTS="-p 0 -n 128")
    r = subprocess.run([str(SCRIPT), str(fake), "model.gguf", str(out), "-", "FAKE_SPEED=50"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    calls = log.read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["default", "50", "default", "50"]  # alternating
    assert all("-ngl 99 -r 3" in c and "-p 0 -n 128" in c and c.endswith("-o json") for c in calls)
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [(x["variant"], x["round"]) for x in runs] == [("defaults", 1), ("FAKE_SPEED=50", 1),
                                                         ("defaults", 2), ("FAKE_SPEED=50", 2)]
    table = (out / "ab.md").read_text()
    assert "| `defaults` | 101.0 (100.0..102.0, 6) |" in table
    assert "| `FAKE_SPEED=50` | 51.0 (50.0..52.0, 6) |" in table


def test_a_variant_can_name_its_own_binary(tmp_path, stand_in):
    fake = stand_in(FAKE_MOX)
    other = stand_in(FAKE_MOX.replace('os.environ.get("FAKE_SPEED", "default")', '"other"'), name="other_mox")
    log = tmp_path / "log.txt"
    out = tmp_path / "out"
    env = dict(os.environ, FAKE_LOG=str(log), ROUNDS="2", REPS="3", TESTS="-p 0 -n 128")
    r = subprocess.run([str(SCRIPT), str(fake), "model.gguf", str(out), "-", f"MOX={other} FAKE_SPEED=70"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert [c.split()[0] for c in log.read_text().splitlines()] == ["default", "other", "default", "other"]
    table = (out / "ab.md").read_text()
    assert "| `defaults` | 101.0 (100.0..102.0, 6) |" in table
    assert f"| `MOX={other} FAKE_SPEED=70` | 71.0 (70.0..72.0, 6) |" in table


def test_too_few_arguments_print_the_usage(tmp_path):
    r = subprocess.run([str(SCRIPT), "mox", "model"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "ab_env.sh MOX MODEL OUT" in r.stdout

"""bench/cuda/raw_tiles_ab.sh: both weight paths calibrate in every round, each into its own cache
directory, and the table holds each path's median rate per type and their ratio. A stand-in for mox
writes a profile whose prefill rates depend on MOX_CUDA_MM_RAW."""
import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "cuda" / "raw_tiles_ab.sh"

FAKE_MOX = """#!/usr/bin/env python3
import json, os, sys
assert sys.argv[1:] == ["calibrate"], sys.argv
direct = os.environ.get("MOX_CUDA_MM_RAW") == "0"
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(("direct" if direct else "raw") + " " + os.environ["MOX_CACHE_DIR"] + "\\n")
scale = 1.0 if direct else 1.5
n = sum(1 for _ in open(os.environ["FAKE_LOG"]))  # a different value every run: medians are checked
gpu = {"matmul_tflops": {"Q4_K": 80.0 * scale + n}, "moe_prefill_tflops": {"Q4_K": 20.0 * scale, "Q3_K": 30.0},
       "moe_prefill_large_tflops": {"Q4_K": 60.0 * scale}}
with open(os.path.join(os.environ["MOX_CACHE_DIR"], "hardware-fake.json"), "w") as f:
    json.dump({"gpu": gpu, "cpu": {}}, f)
print("calibrated")
"""


def test_paths_alternate_and_compare(tmp_path, stand_in):
    fake = stand_in(FAKE_MOX)
    log = tmp_path / "log.txt"
    out = tmp_path / "out"
    env = dict(os.environ, FAKE_LOG=str(log), ROUNDS="2")
    r = subprocess.run([str(SCRIPT), str(fake), str(out)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    calls = [c.split() for c in log.read_text().splitlines()]
    assert [c[0] for c in calls] == ["raw", "direct", "raw", "direct"]  # alternating
    assert [c[1] for c in calls] == [str(out / p / n) for n in ("1", "2") for p in ("raw", "direct")]
    table = (out / "raw_tiles.md").read_text()
    # matmul: raw runs 1 and 3 give 121 and 123 (median 122), direct runs 2 and 4 give 82 and 84 (83).
    assert "| Q4_K | 122.0 / 83.0 (1.47) | 30.0 / 20.0 (1.50) | 90.0 / 60.0 (1.50) |" in table
    assert "| Q3_K | - | 30.0 / 30.0 (1.00) | - |" in table


def test_wrong_arguments_print_the_usage(tmp_path):
    r = subprocess.run([str(SCRIPT), "mox"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "raw_tiles_ab.sh MOX OUT" in r.stdout

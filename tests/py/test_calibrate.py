"""`mox calibrate --quick` end to end: it writes a profile where --out says, the file is JSON with the
schema's keys and sane values, and `--show` (by path, or by the per-machine default under
MOX_CACHE_DIR) prints it back, as a table or as the same JSON."""
import json
import math
import os
import shutil
import socket
import subprocess

import pytest

CPU_KEYS = {"threads", "dram_gbps", "expert_gbps", "expert_gflops"}
GPU_KEYS = {"name", "total_bytes", "context_bytes", "matvec_gbps", "launch_gap_s", "h2d_pinned_gbps",
            "h2d_pageable_gbps", "host_roundtrip_s", "matmul_tflops"}


def run(mox_bin, *args, env=None):
    out = subprocess.run([str(mox_bin), "calibrate", *args], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return out


@pytest.fixture(scope="module")
def profile(mox_bin, tmp_path_factory):
    path = tmp_path_factory.mktemp("calibrate") / "sub" / "hw.json"
    out = run(mox_bin, "--quick", "--types", "q8_0", "-t", "2", "--out", str(path))
    assert str(path) in out.stderr  # says where it saved
    return path, out.stdout


def positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_profile_file_has_the_schema(profile):
    path, _ = profile
    j = json.loads(path.read_text())
    assert j["schema"] == 1
    assert j["measured"] is True
    assert j["machine"] == socket.gethostname()
    assert j["created"].endswith("Z")
    assert positive(j["host_ram_bytes"]) and positive(j["host_lockable_bytes"])
    assert j["host_lockable_bytes"] <= j["host_ram_bytes"]
    cpu = j["cpu"]
    assert set(cpu) == CPU_KEYS
    assert cpu["threads"] == 2
    assert 0.1 < cpu["dram_gbps"] < 10000
    assert set(cpu["expert_gbps"]) == {"Q8_0"} and positive(cpu["expert_gbps"]["Q8_0"])
    assert set(cpu["expert_gflops"]) == {"Q8_0"} and positive(cpu["expert_gflops"]["Q8_0"])
    gpu = j["gpu"]
    if gpu is not None:  # a CUDA build on a machine with a GPU
        assert set(gpu) == GPU_KEYS
        for k in ["total_bytes", "context_bytes", "launch_gap_s", "h2d_pinned_gbps", "h2d_pageable_gbps",
                  "host_roundtrip_s"]:
            assert positive(gpu[k]), k
        assert gpu["context_bytes"] < gpu["total_bytes"]
        assert set(gpu["matvec_gbps"]) == {"Q8_0"} and positive(gpu["matvec_gbps"]["Q8_0"])
        assert set(gpu["matmul_tflops"]) == {"Q8_0"} and positive(gpu["matmul_tflops"]["Q8_0"])


def test_table_names_units(profile):
    _, table = profile
    for word in ["DRAM", "GB/s", "GFLOP/s", "Q8_0"]:
        assert word in table


def test_show_by_path(mox_bin, profile):
    path, _ = profile
    shown = run(mox_bin, "--show", str(path)).stdout
    assert str(path) in shown and "DRAM" in shown and "Q8_0" in shown
    as_json = json.loads(run(mox_bin, "--show", str(path), "--json").stdout)
    assert as_json == json.loads(path.read_text())


def test_show_default_path_uses_the_cache_dir(mox_bin, profile, tmp_path):
    path, _ = profile
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(path, cache / f"hardware-{socket.gethostname()}.json")
    env = dict(os.environ, MOX_CACHE_DIR=str(cache))
    shown = run(mox_bin, "--show", env=env).stdout
    assert str(cache) in shown and "Q8_0" in shown


def test_show_of_a_missing_profile_fails(mox_bin, tmp_path):
    out = subprocess.run([str(mox_bin), "calibrate", "--show", str(tmp_path / "none.json")], capture_output=True,
                         text=True)
    assert out.returncode != 0
    assert "mox calibrate" in out.stderr


def test_unknown_type_is_refused(mox_bin, tmp_path):
    out = subprocess.run([str(mox_bin), "calibrate", "--quick", "--types", "q9_z", "--out", str(tmp_path / "x.json")],
                         capture_output=True, text=True)
    assert out.returncode != 0
    assert "q9_z" in out.stderr
    assert not (tmp_path / "x.json").exists()

"""The tuning values (src/core/tuning.h) as a user meets them: `mox devices` prints each with its
default or the variable that changed it, and a bad value stops any command with a one-line error."""
import os
import subprocess

import pytest

TUNING_VARS = ("MOX_SPIN_US", "MOX_CUDA_CUBLAS_MIN_TOKENS", "MOX_CUDA_ATTN_SHORT_MAX", "MOX_MATMUL_V1")


def run(mox_bin, *args, **env):
    clean = {k: v for k, v in os.environ.items() if k not in TUNING_VARS}
    return subprocess.run([str(mox_bin), *args], capture_output=True, text=True, env=dict(clean, **env))


def tuning_line(stdout):
    lines = [line for line in stdout.splitlines() if line.startswith("tuning:")]
    assert len(lines) == 1, stdout
    return lines[0]


def test_devices_prints_the_defaults(mox_bin):
    r = run(mox_bin, "devices")
    assert r.returncode == 0, r.stderr
    assert tuning_line(r.stdout) == ("tuning: spin_us=200 (default) cublas_min_tokens=128 (default) "
                                     "attn_short_max_keys=1024 (default) matmul_v1=0 (default)")


def test_devices_names_the_variable_that_set_a_value(mox_bin):
    r = run(mox_bin, "devices", MOX_SPIN_US="50", MOX_CUDA_ATTN_SHORT_MAX="512", MOX_CUDA_CUBLAS_MIN_TOKENS="")
    assert r.returncode == 0, r.stderr
    line = tuning_line(r.stdout)
    assert "spin_us=50 (MOX_SPIN_US; default 200)" in line
    assert "attn_short_max_keys=512 (MOX_CUDA_ATTN_SHORT_MAX; default 1024)" in line
    assert "cublas_min_tokens=128 (default)" in line  # empty is unset


@pytest.mark.parametrize("var,value,expected", [
    ("MOX_SPIN_US", "fast", "MOX_SPIN_US=fast: expected microseconds, 0 to 60000000"),
    ("MOX_SPIN_US", "-5", "MOX_SPIN_US=-5: expected microseconds, 0 to 60000000"),
    ("MOX_CUDA_CUBLAS_MIN_TOKENS", "64", "MOX_CUDA_CUBLAS_MIN_TOKENS=64: expected a token count, 128 to"),
    ("MOX_CUDA_ATTN_SHORT_MAX", "2048", "MOX_CUDA_ATTN_SHORT_MAX=2048: expected 256, 512 or 1024"),
    ("MOX_MATMUL_V1", "yes", "MOX_MATMUL_V1=yes: expected 0 or 1"),
])
def test_a_bad_value_is_a_one_line_error(mox_bin, var, value, expected):
    r = run(mox_bin, "devices", **{var: value})
    assert r.returncode == 1, r.stdout
    assert r.stderr.startswith("mox: error: " + expected), r.stderr
    assert r.stderr.count("\n") == 1


def test_every_command_checks_the_tuning(mox_bin, tmp_path):
    # Not only `mox devices`: the values are read before any command runs.
    r = run(mox_bin, "inspect", str(tmp_path / "nope.gguf"), MOX_SPIN_US="1e3")
    assert r.returncode == 1
    assert r.stderr == "mox: error: MOX_SPIN_US=1e3: expected microseconds, 0 to 60000000\n"

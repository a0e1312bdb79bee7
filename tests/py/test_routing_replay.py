"""Routing traces through the CLI: `mox run --routing-trace-out` records the embedded model's routing,
`--routing-trace` replays it (the same routing gives the same text; another routing another text),
cache-sim reads what run wrote, and traces or cache flags that cannot apply are one-line errors."""
import subprocess
from pathlib import Path

from test_cache_sim import one_line_error, run

TINY = Path(__file__).resolve().parents[2] / "assets" / "mox-tiny" / "mox-tiny-f16.gguf"

PROMPT = ["-p", "Once upon a time", "-n", "20", "-s", "3", "--temp", "0"]


def generate(mox_bin, *extra):
    r = run(mox_bin, "run", *PROMPT, *extra)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def test_record_then_replay_gives_the_same_text(mox_bin, tmp_path):
    trace = tmp_path / "tiny.trace"
    text, _ = generate(mox_bin, "--routing-trace-out", trace)
    replayed, err = generate(mox_bin, "--routing-trace", trace)
    assert replayed == text
    assert "routing replay" in err and str(trace) in err
    sim = run(mox_bin, "cache-sim", trace, "--per-layer", "8")
    assert sim.returncode == 0, sim.stderr
    # the prompt's tokens and every generated token but the last went through the model
    assert "8 layers" in sim.stdout.splitlines()[0] and "48 experts, k 8" in sim.stdout.splitlines()[0]


def test_another_routing_gives_another_text(mox_bin, tmp_path):
    text, _ = generate(mox_bin)
    other = tmp_path / "other.trace"
    r = run(mox_bin, "trace-synth", "-o", other, "--like", TINY, "-n", 50, "--seed", 2)
    assert r.returncode == 0, r.stderr
    replayed, _ = generate(mox_bin, "--routing-trace", other)
    assert replayed != text
    # a trace without the model's architecture (--shape) is refused
    shaped = tmp_path / "shaped.trace"
    assert run(mox_bin, "trace-synth", "-o", shaped, "--shape", "8,48,8", "-n", 50).returncode == 0
    one_line_error(run(mox_bin, "run", *PROMPT, "--routing-trace", shaped), "routing replay", "qwen35moe")


def test_a_trace_of_another_shape_or_a_broken_one_is_refused(mox_bin, tmp_path):
    model = subprocess.run([str(mox_bin), "run", "-n", "0", "-p", "x", "--routing-trace-out", tmp_path / "t"],
                           capture_output=True, text=True)
    assert model.returncode == 0, model.stderr
    wrong = tmp_path / "wrong.trace"
    assert run(mox_bin, "trace-synth", "-o", wrong, "--shape", "4,48,8", "-n", 10).returncode == 0
    one_line_error(run(mox_bin, "run", *PROMPT, "--routing-trace", wrong), "routing replay", "4 layers")
    broken = tmp_path / "broken.trace"
    broken.write_bytes((tmp_path / "t").read_bytes()[:-3])
    one_line_error(run(mox_bin, "run", *PROMPT, "--routing-trace", broken), str(broken))
    one_line_error(run(mox_bin, "run", *PROMPT, "--routing-trace", tmp_path / "missing.trace"), "missing.trace")


def test_cache_flags_on_the_cpu_are_refused_or_noted(mox_bin):
    one_line_error(run(mox_bin, "run", *PROMPT, "-ngl", "0", "--expert-cache", "1GiB"), "--expert-cache")
    one_line_error(run(mox_bin, "run", *PROMPT, "--expert-cache", "12"), "--expert-cache")
    one_line_error(run(mox_bin, "bench", "-m", TINY, "-p", "0", "-n", "4", "-r", "1", "-ngl", "0", "--expert-cache",
                       "1GiB"), "--expert-cache")

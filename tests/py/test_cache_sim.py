"""mox trace-synth and mox cache-sim as a user meets them: a synthetic trace in, a table or JSON out,
and one-line errors with exit code 1 on bad input."""
import json
import subprocess

def run(mox_bin, *args):
    return subprocess.run([str(mox_bin), *map(str, args)], capture_output=True, text=True)


def one_line_error(r, *words):
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mox: error: "), r.stderr
    for w in words:
        assert w in lines[0], lines[0]


def synth(mox_bin, path, *extra):
    r = run(mox_bin, "trace-synth", "-o", path, "--shape", "4,32,4", "-n", 300, "--skew", 1.0, "--reuse", 0.5,
            *extra)
    assert r.returncode == 0, r.stderr
    return r


def test_trace_synth_is_deterministic(mox_bin, tmp_path):
    a, b, c = tmp_path / "a.trace", tmp_path / "b.trace", tmp_path / "c.trace"
    synth(mox_bin, a, "--seed", 5)
    synth(mox_bin, b, "--seed", 5)
    synth(mox_bin, c, "--seed", 6)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_cache_sim_table_and_json(mox_bin, tmp_path):
    trace = tmp_path / "t.trace"
    synth(mox_bin, trace)
    r = run(mox_bin, "cache-sim", trace, "--per-layer", "4,8", "--policy", "all")
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith(f"trace {trace}:") and "4 layers" in first and "32 experts" in first
    assert "k 4" in first and "300 tokens" in first
    for name in ("lru", "lfu", "static", "adaptive", "lru:admit=2", "belady", "lru-curve"):
        assert name in r.stdout

    r = run(mox_bin, "cache-sim", trace, "--slots", "16,32", "--per-layer", "8", "--policy", "lru,lfu:half-life=8",
            "--warmup", 20, "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert [s["slots"] for s in j["sizes"]] == [16, 32]  # --per-layer 8 x 4 layers is 32 too
    for size in j["sizes"]:
        lru = size["policies"]["lru"]
        assert lru["hit_rate"] == size["lru_curve"]  # no admission cap: the curve is the lru policy
        assert lru["hit_rate"] <= size["belady"]
        assert lru["accesses"] == (300 - 20) * 4 * 4
        assert len(lru["layer_hit_rates"]) == 4
    assert len(j["lru_curve"]) == 33


def test_trace_synth_like_a_model(mox_bin, tmp_path):
    model = tmp_path / "tiny.gguf"
    r = run(mox_bin, "synth", "--preset", "tiny", "-o", model, "--seed", 3, "-t", 2)
    assert r.returncode == 0, r.stderr
    trace = tmp_path / "tiny.trace"
    r = run(mox_bin, "trace-synth", "-o", trace, "--like", model, "-n", 50)
    assert r.returncode == 0, r.stderr
    r = run(mox_bin, "cache-sim", trace, "--json")
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)["trace"]
    assert t["arch"] == "qwen35moe" and t["n_tokens"] == 50 and "synthetic" in t["model"]
    assert t["n_expert"] == 16 and t["k"] == 4  # the tiny preset's routed experts


def test_errors_are_one_line(mox_bin, tmp_path):
    one_line_error(run(mox_bin, "cache-sim", tmp_path / "missing.trace"), "missing.trace")
    junk = tmp_path / "junk.trace"
    junk.write_bytes(b"GGUF" + bytes(100))
    one_line_error(run(mox_bin, "cache-sim", junk), "not a routing trace")
    trace = tmp_path / "t.trace"
    synth(mox_bin, trace)
    truncated = tmp_path / "short.trace"
    truncated.write_bytes(trace.read_bytes()[:-3])
    one_line_error(run(mox_bin, "cache-sim", truncated), "truncated")
    one_line_error(run(mox_bin, "cache-sim", trace, "--policy", "mru"), "unknown cache policy 'mru'", "lru")
    one_line_error(run(mox_bin, "cache-sim", trace, "--warmup", 300), "--warmup")
    one_line_error(run(mox_bin, "trace-synth", "-o", tmp_path / "x.trace", "-n", 5), "--like", "--shape")
    one_line_error(run(mox_bin, "trace-synth", "-o", tmp_path / "x.trace", "--shape", "4,32", "-n", 5), "--shape")
    one_line_error(run(mox_bin, "trace-synth", "-o", tmp_path / "x.trace", "--shape", "4,32,4", "-n", 5,
                       "--reuse", 2), "reuse")
    one_line_error(run(mox_bin, "trace-synth", "-o", tmp_path / "no" / "dir.trace", "--shape", "4,32,4", "-n", 5),
                   "dir.trace")

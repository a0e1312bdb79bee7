"""mox's command line as a llama.cpp user meets it: the seed articles' llama.cpp command lines pasted
into the matching mox commands run or are refused in one line; llama.cpp's multi-letter single-dash
flags; one-line errors with a did-you-mean; help and version; sizes without units; the seed."""
import re
import shlex
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT.parent / "shared" / "seeds"
TINY = ROOT / "assets" / "mox-tiny" / "mox-tiny-f16.gguf"
LLAMA_TOOLS = {"llama-cli": "chat", "llama-server": "serve", "llama-bench": "bench"}


def run(mox_bin, *args, **kw):
    kw.setdefault("timeout", 300)
    return subprocess.run([str(mox_bin), *map(str, args)], capture_output=True, text=True, **kw)


def one_line_error(r):
    lines = r.stderr.strip().splitlines()
    return r.returncode == 1 and len(lines) == 1 and lines[0].startswith("mox: error: ")


def seed_command_lines():
    """Every llama.cpp command line of the seed articles: a line starting with a llama tool, joined
    with its '\\' continuation lines; prose mentions (non-ASCII text, '...' placeholders) left out."""
    found = []
    for path in sorted(SEEDS.glob("*.txt")):
        lines = path.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            line = lines[i].strip()
            tool = re.match(r"(?:\./)?(llama-\w+)\b", line)
            i += 1
            if not tool or tool.group(1) not in LLAMA_TOOLS:
                continue
            while line.endswith("\\") and i < len(lines):
                line = line[:-1] + " " + lines[i].strip()
                i += 1
            if line.isascii() and "..." not in line:
                found.append((path.name, line))
    return found


SEED_LINES = seed_command_lines()


def test_the_seed_articles_have_command_lines():
    if not SEEDS.is_dir():
        pytest.skip(f"no seed articles at {SEEDS}")
    assert len(SEED_LINES) >= 6 and {LLAMA_TOOLS[shlex.split(l)[0].lstrip("./")] for _, l in SEED_LINES} >= {"chat", "serve"}


def mox_args(line):
    """The pasted line for mox: the tool becomes its mox command, the model file mox-tiny."""
    words = shlex.split(line)
    command = LLAMA_TOOLS[words[0].removeprefix("./")]
    args = words[1:]
    for i, w in enumerate(args[:-1]):
        if w in ("-m", "--model"):
            args[i + 1] = str(TINY)
    return command, args


def run_pasted(mox_bin, command, args):
    # The articles' contexts (-c 40960) are past mox-tiny's trained 4096, which mox refuses: a
    # later -c wins.
    if command != "bench":
        args = [*args, "-c", "2048"]
    if command == "chat":
        # One short turn: -n given last wins over the article's -n 32768.
        return run(mox_bin, command, *args, "-n", "4", input="Hello\n")
    if command == "serve":
        # Serving means it took every flag and loaded the model; stop it there.
        p = subprocess.Popen([str(mox_bin), command, *args, "--port", "0"], stderr=subprocess.PIPE, text=True)
        err = []
        for line in p.stderr:
            err.append(line)
            if "serving" in line:
                break
        if any("serving" in l for l in err):
            # Answering /health: listening, so SIGTERM stops it.
            port = re.search(r"http://[^:]+:(\d+)", err[-1]).group(1)
            for _ in range(100):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
                    break
                except OSError:
                    time.sleep(0.1)
        p.terminate()
        rest = p.communicate(timeout=60)[1]
        code = 0 if any("serving" in l for l in err) else p.returncode
        return subprocess.CompletedProcess(p.args, code, "", "".join(err) + rest)
    return run(mox_bin, command, *args, "-p", "8", "-n", "2", "-r", "1")


@pytest.mark.parametrize("source,line", SEED_LINES, ids=[f"{s}:{l[:40]}" for s, l in SEED_LINES])
def test_a_pasted_seed_line_runs_or_is_refused_in_one_line(mox_bin, source, line):
    command, args = mox_args(line)
    r = run_pasted(mox_bin, command, args)
    if "-hf" in args:
        # mox reads local files: -hf is refused with the download to do instead.
        assert one_line_error(r) and "-hf" in r.stderr and "-m FILE" in r.stderr, r.stderr
        i = args.index("-hf")
        args[i:i + 2] = ["-m", str(TINY)]
        r = run_pasted(mox_bin, command, args)
    assert r.returncode == 0, (line, r.stderr)
    # Every flag mox does not act on said so on its own line.
    for flag, said in [("-sm", "-sm row"), ("-tb", "-tb"), ("--color", "--color"), ("--mlock", "--mlock")]:
        if flag in args and (flag != "-sm" or "row" in args):
            assert f"mox: note: {said}" in r.stderr, (flag, r.stderr)


@pytest.mark.parametrize("args,note", [
    (["-sm", "row"], "-sm row"),
    (["-tb", "2048", "-t", "2"], "-tb 2048"),
    (["-fa", "off"], "-fa off"),
    (["-b", "2048"], "-b 2048"),
    (["--no-mmap"], "--no-mmap"),
    (["--load-mode", "mlock"], "--load-mode mlock"),
    (["-np", "4"], "-np 4"),
])
def test_llama_flags_mox_does_not_act_on_are_notes(mox_bin, args, note):
    r = run(mox_bin, "run", "-m", TINY, "-p", "Hi", "-n", "2", *args)
    assert r.returncode == 0, r.stderr
    notes = [l for l in r.stderr.splitlines() if l.startswith("mox: note: ")]
    assert len(notes) == 1 and notes[0].startswith(f"mox: note: {note}"), r.stderr


@pytest.mark.parametrize("command,args,words", [
    ("run", ["-hf", "Qwen/Qwen3-4B-GGUF:Q8_0"], ["does not download", "--include '*Q8_0*'"]),
    ("run", ["-nkvo"], ["-nkvo", "-ctk"]),
    ("run", ["-cnv"], ["mox chat"]),
    ("chat", ["-no-cnv"], ["mox run"]),
    ("run", ["--ignore-eos"], ["end-of-generation"]),
    ("run", ["-r", "User:"], ["stop"]),
    ("run", ["--mmproj", "x.gguf"], ["text-only"]),
    ("run", ["--context-shift"], ["-c"]),
    ("run", ["-ts", "1,1"], ["one GPU"]),
    ("bench", ["-nkvo", "0,1"], ["-nkvo 1"]),
])
def test_llama_flags_mox_refuses_say_why(mox_bin, command, args, words):
    r = run(mox_bin, command, "-m", TINY, *args, input="")
    assert one_line_error(r), r.stderr
    assert all(w in r.stderr for w in words), r.stderr


def test_multi_letter_single_dash_flags_are_whole_flags(mox_bin):
    # -ctk/-ctv/-ngl/-sys: each one flag (CLI11 alone read -sm row as -s m ...).
    r = run(mox_bin, "run", "-m", TINY, "-p", "Hi", "-n", "4", "--temp", "0", "-ctk", "q8_0", "-ctv", "f16",
            "-ngl", "0", "-sys", "Be brief.")
    assert r.returncode == 0, r.stderr
    # -sys puts the prompt through the chat template, as --system with --chat does.
    chat = run(mox_bin, "run", "-m", TINY, "-p", "Hi", "-n", "4", "--temp", "0", "-ctk", "q8_0", "--chat",
               "--system", "Be brief.")
    assert chat.returncode == 0 and chat.stdout == r.stdout, chat.stderr
    # A repeated option: the last one counts, as in llama.cpp.
    twice = run(mox_bin, "run", "-m", TINY, "-p", "Hi", "-n", "9", "-n", "3", "--temp", "0")
    assert twice.returncode == 0 and "generated 3 tokens" in twice.stderr, twice.stderr


@pytest.mark.parametrize("args,words", [
    (["runn"], ["unknown command 'runn'", "did you mean 'run'?"]),
    (["frobnicate"], ["unknown command 'frobnicate'", "mox help"]),
    (["run", "--tmep", "0"], ["unknown option '--tmep'", "did you mean '--temp'?"]),
    (["run", "-ngll", "1"], ["unknown option '-ngll'", "did you mean '-ngl'?"]),
    (["bench", "--repetitons", "2"], ["did you mean '--repetitions'?"]),
    (["--verbos", "run"], ["unknown option '--verbos'", "did you mean '--verbose'?"]),
    (["run", "-n", "ten"], ["--n-predict"]),
    (["run", "--top-p", "1.5"], ["--top-p"]),
    (["run", "-c", "-5"], ["--ctx-size"]),
    (["run", "-n", "-2"], ["-n -2"]),
    (["run", "-p", ""], ["-p", "empty"]),
    (["run", "--ids-out", "/nonexistent-dir/ids.txt"], ["--ids-out", "does not exist"]),
    (["run", "--vram-budget", "12"], ["--vram-budget 12", "12GiB"]),
    (["plan", "-m", TINY, "--vram-budget", "12"], ["--vram-budget 12", "unit"]),
    (["bench", "-m", TINY, "-ngl", "99", "--vram-budget", "16"], ["--vram-budget 16", "unit"]),
    (["inspect", TINY, "--bandwidth", "936"], ["--bandwidth 936", "GB/s"]),
    (["run", "--device", "tpu"], ["--device tpu"]),
    (["help", "rnu"], ["did you mean 'run'?"]),
])
def test_errors_are_one_line_with_exit_code_1(mox_bin, args, words):
    r = run(mox_bin, *args)
    assert one_line_error(r), (r.returncode, r.stderr)
    assert all(w in r.stderr for w in words), r.stderr


def test_help_and_version(mox_bin):
    top = run(mox_bin, "help")
    assert top.returncode == 0 and all(c in top.stdout for c in ("run", "serve", "bench", "plan", "version"))
    assert run(mox_bin).stdout == top.stdout  # no command: the same list
    sub = run(mox_bin, "help", "run")
    assert sub.returncode == 0 and "--n-predict" in sub.stdout and sub.stdout == run(mox_bin, "run", "--help").stdout
    a, b = run(mox_bin, "--version"), run(mox_bin, "version")
    assert a.returncode == 0 and a.stdout == b.stdout
    assert re.fullmatch(r"mox \d+\.\d+\.\d+ \(commit \S+, (CPU|CUDA) build\)\n", a.stdout), a.stdout
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True)
    if commit.returncode == 0:  # built from a checkout: some commit of it is named (not "unknown")
        assert "unknown" not in a.stdout


def test_default_seed_is_random_and_printed_with_v(mox_bin):
    args = ["run", "-m", TINY, "-p", "And he said", "-n", "24", "--temp", "0.9"]
    runs = [run(mox_bin, *args, "-v") for _ in range(3)]
    assert all(r.returncode == 0 for r in runs)
    seeds = [int(re.search(r"sampling seed (\d+)", r.stderr).group(1)) for r in runs]
    assert len(set(seeds)) == 3
    assert len({r.stdout for r in runs}) > 1  # three random seeds do not all give one text
    again = run(mox_bin, *args, "-s", seeds[0])
    assert again.returncode == 0 and again.stdout == runs[0].stdout


def test_n_minus_one_generates_until_the_context_is_full(mox_bin):
    r = run(mox_bin, "run", "-m", TINY, "-p", "And", "-n", "-1", "-c", "24", "--temp", "0")
    assert r.returncode == 0, r.stderr
    prompt = int(re.search(r"prompt (\d+) tokens", r.stderr).group(1))
    generated = int(re.search(r"generated (\d+) tokens", r.stderr).group(1))
    assert generated == 24 - prompt or "end of generation" in r.stderr


def test_cpu_build_runs_gpu_flags_on_the_cpu_with_a_note(mox_bin):
    if "CUDA build" in run(mox_bin, "version").stdout:
        pytest.skip("a CUDA build runs -ngl on the GPU")
    r = run(mox_bin, "run", "-m", TINY, "-p", "Hi", "-n", "4", "--temp", "0", "-ngl", "99", "--n-cpu-moe", "2")
    cpu = run(mox_bin, "run", "-m", TINY, "-p", "Hi", "-n", "4", "--temp", "0")
    assert r.returncode == 0 and r.stdout == cpu.stdout, r.stderr
    assert "mox: note: -ngl 99: this mox was built without CUDA" in r.stderr
    assert one_line_error(run(mox_bin, "run", "-m", TINY, "--device", "cuda"))


def test_bench_names_the_model_as_llama_bench(mox_bin, tmp_path):
    model = tmp_path / "q4km.gguf"
    assert run(mox_bin, "synth", "--preset", "tiny", "--mix", "q4_k_m", "-o", model).returncode == 0
    r = run(mox_bin, "bench", "-m", model, "-p", "8", "-n", "0", "-r", "1", "--host-bandwidth", "0")
    assert r.returncode == 0, r.stderr
    row = [l for l in r.stdout.splitlines() if l.startswith("|")][2]
    # llama-bench: architecture, size label ("?B" for a shape llama.cpp does not name), file type.
    assert row.split("|")[1].strip() == "qwen35moe ?B Q4_K - Medium"

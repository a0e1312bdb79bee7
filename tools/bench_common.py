"""Shared pieces of the GPU benchmark scripts (tools/hybrid_bench.py, tools/plan_accuracy.py).

Pure Python 3 standard library: the GPU machine runs these next to the binaries, with nothing
installed. What lives here: reading the driver's memory counter while a process runs, running a
program with its output kept, reading llama-bench / `mox bench` JSON rows tolerantly (new keys may
appear, old ones may be missing), and formatting numbers for the markdown tables.
"""
import json
import math
import os
import re
import statistics
import subprocess
import threading
import time
from pathlib import Path

MIB = 1 << 20
GIB = 1 << 30

# Words the CUDA runtime, llama.cpp and mox print when an allocation on the device fails.
_OOM = re.compile(r"out of memory|cudaErrorMemoryAllocation|cudaMalloc\w* failed|failed to allocate .*CUDA"
                  r"|CUDA_ERROR_OUT_OF_MEMORY|\bOOM\b", re.IGNORECASE)


def looks_like_oom(text):
    return bool(_OOM.search(text or ""))


def nvidia_smi_query(fields, gpu=0):
    """One line of `nvidia-smi --query-gpu=FIELDS` for one GPU as a list of strings; None without a
    driver (the dev machine), so callers can still run against stubs."""
    try:
        r = subprocess.run(["nvidia-smi", f"--id={gpu}", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0 or not r.stdout.strip():
        return None
    return [x.strip() for x in r.stdout.strip().splitlines()[0].split(",")]


def gpu_memory_mib(gpu=0):
    """(used, free, total) MiB from the driver, or None."""
    q = nvidia_smi_query("memory.used,memory.free,memory.total", gpu)
    try:
        return tuple(int(float(x)) for x in q) if q else None
    except ValueError:
        return None


class VramPoller:
    """`nvidia-smi --query-gpu=memory.used -lms 200` in the background while a benchmark runs; the
    peak is what the process needed at its worst (llama-bench prints no VRAM number of its own).
    Samples are MiB of the whole GPU, so callers subtract the idle baseline read before the start."""

    def __init__(self, gpu=0, period_ms=200, trace_path=None):
        self.gpu, self.period_ms, self.trace_path = gpu, period_ms, trace_path
        self.samples = []  # (seconds since start, MiB used)
        self._proc = None
        self._thread = None

    def __enter__(self):
        self._t0 = time.monotonic()
        try:
            self._proc = subprocess.Popen(
                ["nvidia-smi", f"--id={self.gpu}", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                 "-lms", str(self.period_ms)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self._proc = None
            return self
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self):
        for line in self._proc.stdout:
            try:
                self.samples.append((time.monotonic() - self._t0, int(float(line.strip()))))
            except ValueError:
                pass

    def __exit__(self, *exc):
        if self._proc is not None:
            time.sleep(self.period_ms / 1000.0 * 1.5)  # one more sample after the process ended
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._thread.join(timeout=5)
        if self.trace_path:
            with open(self.trace_path, "w") as f:
                f.write("seconds,memory_used_mib\n")
                for t, mib in self.samples:
                    f.write(f"{t:.3f},{mib}\n")
        return False

    def peak_mib(self):
        return max((mib for _, mib in self.samples), default=None)


def run_logged(cmd, stdout_path, stderr_path, env=None, timeout=None):
    """Runs cmd with stdout and stderr into files; returns (exit code, seconds). A run past timeout
    seconds is killed and returns 124 (as timeout(1)), so one hung run cannot eat the whole session."""
    t0 = time.monotonic()
    with open(stdout_path, "w") as out, open(stderr_path, "w") as err:
        try:
            rc = subprocess.run([str(c) for c in cmd], stdout=out, stderr=err, env=env, timeout=timeout).returncode
        except OSError as e:
            err.write(f"cannot start {cmd[0]}: {e}\n")
            rc = 127
        except subprocess.TimeoutExpired:
            err.write(f"\nkilled after {timeout} s\n")
            rc = 124
    return rc, time.monotonic() - t0


def tail(path, n_chars=1500):
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return text[-n_chars:]


def load_json_rows(text):
    """The result rows of llama-bench's or `mox bench`'s JSON output: an array of objects, or one
    object per line (jsonl). Text around the array (a stray log line) is skipped. [] if none."""
    text = text or ""
    start = text.find("[")
    if start >= 0:
        end = text.rfind("]")
        try:
            rows = json.loads(text[start:end + 1])
            if isinstance(rows, list):
                return [r for r in rows if isinstance(r, dict)]
        except ValueError:
            pass
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                rows.append(obj)
    return rows


def load_json_file(path):
    """A JSON document from a file, or None when missing or unreadable (a failed run)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def find_key(obj, names):
    """The first value under any of `names` (searched in order, depth first through nested objects);
    (name, value) or (None, None). The keys of `mox plan --json` are not final, so readers try the
    expected name first and a few likely ones after it."""
    for name in names:
        found = _find_one(obj, name)
        if found is not None:
            return name, found
    return None, None


def _find_one(obj, name):
    if isinstance(obj, dict):
        if name in obj and obj[name] is not None:
            return obj[name]
        for v in obj.values():
            r = _find_one(v, name)
            if r is not None:
                return r
    elif isinstance(obj, list):
        for v in obj:
            r = _find_one(v, name)
            if r is not None:
                return r
    return None


def row_test(row):
    """'pp4096', 'tg512' or 'pp512+tg128' from a row's n_prompt / n_gen (both engines' rows)."""
    p, g = int(row.get("n_prompt") or 0), int(row.get("n_gen") or 0)
    if p and g:
        return f"pp{p}+tg{g}"
    return f"pp{p}" if p else f"tg{g}"


def row_median_ts(row):
    """Median tokens/s of a row: mox writes median_ts; llama-bench only samples_ts and avg_ts."""
    v = row.get("median_ts")
    if isinstance(v, (int, float)):
        return float(v)
    s = row.get("samples_ts")
    if isinstance(s, list) and s and all(isinstance(x, (int, float)) for x in s):
        return float(statistics.median(s))
    v = row.get("avg_ts")
    return float(v) if isinstance(v, (int, float)) else None


def row_cpu_busy(row):
    """The largest share of all cores' time that other work and the hypervisor took during one of a mox
    row's repetitions (host_cpu_other + host_cpu_steal), or None without such readings (llama-bench
    rows, older mox, no /proc)."""
    other, steal = (row or {}).get("host_cpu_other"), (row or {}).get("host_cpu_steal")
    if not isinstance(other, list) or not isinstance(steal, list) or len(other) != len(steal) or not other:
        return None
    return max(o + s for o, s in zip(other, steal))


def row_spread(row):
    """(min, max) of a row's samples, or None."""
    s = row.get("samples_ts")
    if isinstance(s, list) and s and all(isinstance(x, (int, float)) for x in s):
        return min(s), max(s)
    return None


def fmt_gib(n_bytes, digits=2):
    return "-" if n_bytes is None else f"{n_bytes / GIB:.{digits}f}"


def fmt_num(x, digits=1):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{digits}f}"


def fmt_ratio(a, b):
    return "-" if a is None or not b else f"{a / b:.2f}"


def md_table(header, rows):
    """A markdown table; numbers right-aligned, the first column left-aligned."""
    out = ["| " + " | ".join(header) + " |",
           "| " + " | ".join([":--"] + ["--:"] * (len(header) - 1)) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def parse_size(text):
    """'24', '24G', '24GiB', '16384MiB', '8gb' -> bytes (a bare number is GiB, as the budgets in the
    issue are given)."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)(i?b)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    unit = (m.group(2) or "g").lower()
    return int(float(m.group(1)) * {"k": 1 << 10, "m": MIB, "g": GIB, "t": 1 << 40}[unit])


def default_threads():
    return os.cpu_count() or 1

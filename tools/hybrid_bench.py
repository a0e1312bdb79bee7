#!/usr/bin/env python3
"""The hybrid CPU+GPU benchmark: mox's automatic plan against llama.cpp's best `--n-cpu-moe`
and llama.cpp's own fit, at several VRAM budgets, in one run (bench/cuda/hybrid_h200.sh calls this).

    tools/hybrid_bench.py run --mox MOX --llama-bench LB --model M --out DIR [--budgets "24 16 8"]
    tools/hybrid_bench.py summarize DIR        # rewrites DIR/results.md from DIR/runs.json

Cases: each budget at --ctx (32768), plus --extra cases "BUDGET:CTX" (default 24:262144).
Every run is one process; its VRAM is the driver's peak during the run (nvidia-smi every 200 ms)
minus the idle baseline read just before it.

llama.cpp's side, and why it is measured this way:
* llama-bench sizes its context to the test (n_prompt + n_gen), so its KV cache is the one of a 4096
  context, not of --ctx. Its VRAM "at context C" is the measured peak plus the KV bytes the missing
  context would add, from `mox plan -ngl 99 -c C --json` (the same file, so the same cache layout).
  The correction is printed next to every number.
* "Best --n-cpu-moe within a budget" is the fastest measured N whose corrected VRAM fits. Moving
  experts to the CPU only slows decode down, so the search looks for the smallest N that fits:
  N = 0 and N = all layers first, then interpolated probes between the nearest measured N that does
  not fit and the smallest that does (one more when the line leaves the next smaller N within a
  quarter of a layer of the budget; at most --max-probes per case), then an optional coarse grid
  (--grid) while time remains, so the table shows the curve.
* llama.cpp's fit is llama-bench's --fit-target MARGIN (common_fit_params: it moves expert tensors
  to the host until its projection leaves MARGIN MiB free). To make it fit a budget B on a bigger
  GPU, MARGIN = free MiB now - (B - the KV correction at C). It runs with -v; the layers it offloaded
  and the experts it kept on the host are read from its log.
Runs alternate between the engines where the queue allows (mox, llama.cpp, mox, ...).
"""
import argparse
import csv
import json
import math
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bc  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Pure logic (tested in tests/py/test_hybrid_bench.py)


def fits(vram_bytes, kv_delta, budget):
    return vram_bytes is not None and vram_bytes + kv_delta <= budget


def layer_slope(measured):
    """Bytes of VRAM one more layer of experts on the CPU saves: least squares over the measured
    (N, bytes) points; None with fewer than two."""
    pts = [(n, v) for n, v in measured.items() if v is not None]
    if len(pts) < 2:
        return None
    mn = sum(n for n, _ in pts) / len(pts)
    mv = sum(v for _, v in pts) / len(pts)
    den = sum((n - mn) ** 2 for n, _ in pts)
    if den == 0:
        return None
    slope = -sum((n - mn) * (v - mv) for n, v in pts) / den
    return slope if slope > 0 else None


def next_probe(measured, budget, kv_delta, n_max):
    """The next --n-cpu-moe to measure for one budget, or None when the smallest fitting N is known
    (or none can fit). measured: {N: VRAM bytes at the test's own context, None if the run failed}."""
    fitting = sorted(n for n, v in measured.items() if fits(v, kv_delta, budget))
    if not fitting:
        return n_max if n_max not in measured else None
    hi = fitting[0]
    lo = max((n for n in measured if n < hi), default=-1)
    if hi == 0 or hi - lo <= 1:
        return None
    if lo >= 0 and measured[lo] is not None:
        v_lo, v_hi = measured[lo] + kv_delta, measured[hi] + kv_delta
        per_layer = (v_lo - v_hi) / (hi - lo)
        if per_layer <= 0:
            return None
        n = lo + math.ceil((v_lo - budget) / per_layer)
        # Layers differ in size (Q4_K_M keeps some ffn_down in Q6_K), so a straight line can be off
        # by a fraction of a layer: when it says hi is the smallest but hi - 1 would miss the budget
        # by under a quarter of a layer, measure hi - 1 rather than trust the line.
        if n >= hi and hi - 1 > lo and hi - 1 not in measured and v_hi + per_layer - budget <= per_layer / 4:
            return hi - 1
    elif lo >= 0:
        n = (lo + hi) // 2  # lo failed to run: no number to interpolate from
    else:
        slope = layer_slope(measured)
        if slope is None:
            return None
        n = hi - math.floor((budget - (measured[hi] + kv_delta)) / slope)
    n = max(n, lo + 1, 0)
    return n if n < hi and n not in measured else None


def fit_margin_mib(free_mib, budget, reserve):
    """llama-bench's --fit-target margin that leaves (budget - reserve) bytes for llama.cpp; reserve:
    what its test context lacks against the real one (KV cache, a larger compute buffer)."""
    return int(free_mib - (budget - reserve) // bc.MIB)


_BUF = re.compile(r"(CUDA\d+)\s+(model|KV|RS|compute|output)\s+buffer size\s*=\s*([0-9.]+)\s*MiB")
_OFFLOAD = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_OVERRIDE = re.compile(r"tensor blk\.(\d+)\.(ffn_\w+_exps)\.weight .*buffer type overridden to (\S+)")


def parse_llama_log(text):
    """What llama.cpp's -v log says about placement: CUDA buffer MiB by kind (largest seen, as each
    test builds its own context), each context's CUDA compute buffer in order, offloaded layers, and
    which layers keep expert tensors on the host (of the last model load: a --fit run may load twice)."""
    bufs, compute = {}, []
    for dev, kind, mib in _BUF.findall(text):
        bufs[kind] = max(bufs.get(kind, 0.0), float(mib))
        if kind == "compute":
            compute.append(float(mib))
    off = _OFFLOAD.findall(text)
    host, last = {}, {}  # overrides of the load under way / of the last finished load
    for line in text.splitlines():
        if _OFFLOAD.search(line):  # a load's override lines come before its "offloaded" line
            last, host = host, {}
            continue
        m = _OVERRIDE.search(line)
        if m and (not m.group(3).upper().startswith("CUDA") or "HOST" in m.group(3).upper()):
            host.setdefault(int(m.group(1)), set()).add(m.group(2))
    if off:
        host = last
    return {"cuda_buffers_mib": bufs, "cuda_compute_mib": compute,
            "offloaded": f"{off[-1][0]}/{off[-1][1]}" if off else None,
            "host_expert_layers": {k: sorted(v) for k, v in sorted(host.items())}}


def layer_ranges(layers):
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    out, layers = [], sorted(layers)
    i = 0
    while i < len(layers):
        j = i
        while j + 1 < len(layers) and layers[j + 1] == layers[j] + 1:
            j += 1
        out.append(str(layers[i]) if i == j else f"{layers[i]}-{layers[j]}")
        i = j + 1
    return ",".join(out)


def describe_llama_log(info):
    # (JSON turns the layer keys into strings)
    host = {int(k): v for k, v in (info.get("host_expert_layers") or {}).items()}
    full = [l for l, t in host.items() if len(t) >= 3]
    part = {l: t for l, t in host.items() if len(t) < 3}
    s = f"offloaded {info.get('offloaded') or '?'}"
    s += f"; experts on the host: {len(full)} layers ({layer_ranges(full) or 'none'})"
    if part:
        s += "; partly: " + ", ".join(f"{l} ({'+'.join(t)})" for l, t in part.items())
    return s


def bench_plan_line(log):
    """What `mox bench --plan auto` ran, from its log's "plan: ..." line (up to the predictions), or None."""
    for line in log.splitlines():
        if line.startswith("plan: "):
            return line[len("plan: "):].split("; VRAM ")[0]
    return None


def describe_plan(plan):
    """One line about a `mox plan --json` document: a summary string if the plan has one, else the
    layers whose experts are not all on the GPU (the current schema's layers[].experts)."""
    if not isinstance(plan, dict):
        return "plan: not available"
    key, summary = bc.find_key(plan, ["summary", "description"])
    if isinstance(summary, str):
        return summary
    chosen = plan.get("plan")  # the search's document: plan.host_layers, plan.host_tier, plan.n_ubatch
    if isinstance(chosen, dict) and isinstance(chosen.get("host_layers"), list):
        host = chosen["host_layers"]
        return (f"experts on the host ({chosen.get('host_tier', '?')}): {len(host)} layers "
                f"({layer_ranges(host) or 'none'}), -ub {chosen.get('n_ubatch', '?')}, "
                f"KV {chosen.get('k_type', '?')}/{chosen.get('v_type', '?')}")
    layers = plan.get("layers")
    if isinstance(layers, list) and layers:
        host, partial = [], []
        for e in layers:
            ex = e.get("experts") if isinstance(e, dict) else None
            if not isinstance(ex, dict):
                continue
            gpu = ex.get("gpu") or 0
            other = sum(v for k, v in ex.items() if k != "gpu" and isinstance(v, int))
            if other and not gpu:
                host.append(e.get("layer"))
            elif other:
                partial.append(f"{e.get('layer')}:{gpu}/{gpu + other}")
        s = f"experts on the host: {len(host)} layers ({layer_ranges(host) or 'none'})"
        if partial:
            s += "; split (layer:gpu/all): " + " ".join(partial)
        return s
    return "plan: keys " + ", ".join(sorted(plan)[:8])


def tests_of(rows):
    """{test name: row} from one run's rows."""
    return {bc.row_test(r): r for r in rows}


# ---------------------------------------------------------------------------------------------
# Running


class Runner:
    def __init__(self, a):
        self.a = a
        self.out = Path(a.out)
        (self.out / "raw").mkdir(parents=True, exist_ok=True)
        self.records = []
        self.t0 = time.monotonic()
        self.pp, self.tg = a.pp, a.tg
        self.test_pp, self.test_tg = f"pp{a.pp}", f"tg{a.tg}"

    def elapsed(self):
        return time.monotonic() - self.t0

    def save(self):
        (self.out / "runs.json").write_text(json.dumps({"meta": self.meta, "runs": self.records}, indent=1))

    def settled_memory(self):
        """The driver's (used, free, total) once the previous run's memory is back: the baseline of
        a run must not include what the last process had not released yet (waits up to 10 s)."""
        idle = self.meta.get("gpu_used_mib") if hasattr(self, "meta") else None
        mem = bc.gpu_memory_mib(self.a.gpu)
        t0 = time.monotonic()
        while mem and idle is not None and mem[0] > idle + 64 and time.monotonic() - t0 < 10:
            time.sleep(0.25)
            mem = bc.gpu_memory_mib(self.a.gpu)
        return mem

    def measure(self, name, cmd, kind, **fields):
        mem = self.settled_memory()
        base = mem[0] if mem else None
        raw = self.out / "raw"
        print(f"[{self.elapsed():6.0f}s] {name}: {' '.join(map(str, cmd))}", flush=True)
        with bc.VramPoller(self.a.gpu, trace_path=raw / f"{name}.vram.csv") as poll:
            rc, secs = bc.run_logged(cmd, raw / f"{name}.json", raw / f"{name}.log", timeout=self.a.run_timeout_s)
        peak = poll.peak_mib()
        log = (raw / f"{name}.log").read_text(errors="replace")
        rows = bc.load_json_rows((raw / f"{name}.json").read_text(errors="replace"))
        rec = {"name": name, "kind": kind, "cmd": [str(c) for c in cmd], "rc": rc, "seconds": round(secs, 1),
               "oom": rc != 0 and bc.looks_like_oom(log), "baseline_mib": base, "free_mib": mem[1] if mem else None,
               "peak_mib": peak, "vram_bytes": (peak - base) * bc.MIB if peak is not None and base is not None else None,
               "rows": rows, "error": None if rc == 0 and rows else bc.tail(raw / f"{name}.log", 800)}
        t = tests_of(rows)
        rec["tg_ts"] = bc.row_median_ts(t[self.test_tg]) if self.test_tg in t else None
        rec["pp_ts"] = bc.row_median_ts(t[self.test_pp]) if self.test_pp in t else None
        if kind.startswith("llama"):
            rec["llama_log"] = parse_llama_log(log)
        rec.update(fields)
        self.records.append(rec)
        self.save()
        status = "ok" if rc == 0 else ("OOM" if rec["oom"] else f"rc {rc}")
        print(f"        {status} in {secs:.0f}s: tg {bc.fmt_num(rec['tg_ts'])} pp {bc.fmt_num(rec['pp_ts'])} "
              f"VRAM {bc.fmt_gib(rec['vram_bytes'])} GiB", flush=True)
        return rec

    def common_test_args(self, reps):
        a = self.a
        return ["-p", a.pp, "-n", a.tg, "-ub", a.ub, "-b", a.ub, "-t", a.threads, "-r", reps]

    def llama_ncmoe(self, n):
        cmd = [self.a.llama_bench, "-m", self.a.model, "-ngl", 99, "-ncmoe", n, *self.common_test_args(self.a.llama_reps),
               "-o", "json", "-v"]
        return self.measure(f"llama_ncmoe{n}", cmd, "llama_ncmoe", n_cpu_moe=n)

    def llama_fit(self, case, part):
        """llama.cpp's fit for one test (part "pp" or "tg"): llama-bench fits each test on its own,
        with a context of that test's size, and the tg test's context also shrinks the batch and so
        the compute buffer. The reserve puts back what a real context of case["ctx"] tokens with
        -ub UB would add: the KV cache, and for tg the larger compute buffer (measured in the sweep)."""
        mem = self.settled_memory()
        free = mem[1] if mem else self.meta["gpu_free_mib"]
        reserve = case["kv_delta"] if part == "pp" else case["kv_delta_tg"] + self.meta.get("compute_delta", 0)
        margin = max(1, fit_margin_mib(free, case["budget"], reserve))
        test = ["-p", self.a.pp, "-n", 0] if part == "pp" else ["-p", 0, "-n", self.a.tg]
        cmd = [self.a.llama_bench, "-m", self.a.model, "-fitt", margin, *test, "-ub", self.a.ub, "-b", self.a.ub,
               "-t", self.a.threads, "-r", self.a.llama_reps, "-o", "json", "-v"]
        return self.measure(f"llama_fit_{part}_{case['id']}", cmd, "llama_fit", case=case["id"], fit_part=part,
                            fit_margin_mib=margin, reserve_bytes=reserve)

    def mox_plan(self, extra, name):
        """`mox plan ... --json` into raw/NAME.json; -ub dropped if this mox plan does not take it."""
        base = [self.a.mox, "plan", "-m", self.a.model, *extra]
        for cmd in (base + ["-ub", self.a.ub, "--json"], base + ["--json"]):
            rc, _ = bc.run_logged(cmd, self.out / "raw" / f"{name}.json", self.out / "raw" / f"{name}.log")
            doc = bc.load_json_file(self.out / "raw" / f"{name}.json")
            if rc == 0 and isinstance(doc, dict):
                return doc
        return None

    def mox_auto(self, case):
        # mox bench keeps its rows' KV types (f16, as llama-bench's default) and searches the rest, so
        # `mox plan` gets the same constraint; the row's own plan is the "plan:" line of its log.
        plan = self.mox_plan(["--vram-budget", f"{case['budget_gib']:g}GiB", "-c", case["ctx"], "-ctk", "f16",
                              "-ctv", "f16"], f"plan_{case['id']}")
        cmd = [self.a.mox, "bench", "-m", self.a.model, "-ngl", 99, "--plan", "auto", "--vram-budget",
               f"{case['budget_gib']:g}GiB", "-c", case["ctx"], *self.common_test_args(self.a.mox_reps), "-o", "json"]
        rec = self.measure(f"mox_auto_{case['id']}", cmd, "mox_auto", case=case["id"],
                           plan_summary=describe_plan(plan), plan=plan)
        ran = bench_plan_line((self.out / "raw" / f"mox_auto_{case['id']}.log").read_text(errors="replace"))
        if ran:
            rec["plan_summary"] = ran
            self.save()
        return rec

    def kv_bytes(self, ctx):
        doc = self.mox_plan(["-ngl", 99, "-c", ctx], f"plan_kv_c{ctx}")
        if doc is None:
            return None
        kv = doc.get("kv") if isinstance(doc.get("kv"), dict) else doc
        _, v = bc.find_key(kv, ["gpu_bytes", "kv_gpu_bytes"])
        return int(v) if isinstance(v, (int, float)) else None

    def run(self):
        a = self.a
        mem = bc.gpu_memory_mib(a.gpu)
        cases = [{"budget_gib": float(b), "ctx": int(a.ctx)} for b in a.budgets.split()]
        for e in a.extra.split():
            b, c = e.split(":")
            cases.append({"budget_gib": float(b), "ctx": int(c)})
        test_ctx = max(a.pp, a.tg)  # llama-bench's context in the pp test, which sets the peak
        kv_test, kv_tg = self.kv_bytes(test_ctx), self.kv_bytes(a.tg)
        for c in cases:
            c["id"] = f"{c['budget_gib']:g}g_c{c['ctx']}"
            c["budget"] = int(c["budget_gib"] * bc.GIB)
            kv_c = self.kv_bytes(c["ctx"])
            c["kv_delta_known"] = kv_c is not None and kv_test is not None and kv_tg is not None
            c["kv_delta"] = kv_c - kv_test if c["kv_delta_known"] else 0
            c["kv_delta_tg"] = kv_c - kv_tg if c["kv_delta_known"] else 0
        plan0 = self.mox_plan(["-ngl", 99], "plan_layers")
        _, n_layer = bc.find_key(plan0 or {}, ["n_layer"])
        n_max = a.n_layers or (int(n_layer) if isinstance(n_layer, int) else 40)
        self.meta = {"model": a.model, "mox": a.mox, "llama_bench": a.llama_bench, "pp": a.pp, "tg": a.tg,
                     "ub": a.ub, "threads": a.threads, "llama_reps": a.llama_reps, "mox_reps": a.mox_reps,
                     "test_ctx": test_ctx, "n_max": n_max, "cases": cases, "gpu": a.gpu,
                     "gpu_used_mib": mem[0] if mem else None, "gpu_free_mib": mem[1] if mem else None,
                     "gpu_total_mib": mem[2] if mem else None, "deadline_s": a.deadline_s,
                     "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.save()

        measured = {}  # N -> VRAM bytes (None: the run failed)
        probes = {c["id"]: 0 for c in cases}
        initial = [0, n_max]
        fit_queue = [(c, part) for c in cases for part in ("pp", "tg")] if not a.no_fit else []
        mox_queue = list(cases)
        grid = [int(x) for x in a.grid.split()]
        last_llama = "fit"

        def run_ncmoe(n):
            rec = self.llama_ncmoe(n)
            measured[n] = rec["vram_bytes"] if rec["rc"] == 0 else None
            # llama-bench's pp test (-ub UB) and tg test (a context of TG tokens, so a batch of TG)
            # reserve different compute buffers: the tg fit must leave room for the larger one.
            comp = rec["llama_log"]["cuda_compute_mib"]
            if "compute_delta" not in self.meta and rec["rc"] == 0 and len(comp) >= 2:
                self.meta["compute_delta"] = int((max(comp) - min(comp)) * bc.MIB)

        def next_llama():
            nonlocal last_llama
            if initial:
                return lambda n=initial.pop(0): run_ncmoe(n)
            probe = None
            if self.elapsed() < a.deadline_s:
                for c in cases:
                    if probes[c["id"]] >= a.max_probes:
                        continue
                    n = next_probe(measured, c["budget"], c["kv_delta"], n_max)
                    if n is not None:
                        probe = (c, n)
                        break
            if fit_queue and (probe is None or last_llama == "probe"):
                last_llama = "fit"
                return lambda c=fit_queue.pop(0): self.llama_fit(*c)
            if probe:
                last_llama = "probe"
                probes[probe[0]["id"]] += 1
                return lambda n=probe[1]: run_ncmoe(n)
            return None

        turn = "llama"
        while True:
            job = None
            if turn == "mox" and mox_queue:
                job = lambda c=mox_queue.pop(0): self.mox_auto(c)  # noqa: E731
            if job is None:
                job = next_llama()
            if job is None and mox_queue:
                job = lambda c=mox_queue.pop(0): self.mox_auto(c)  # noqa: E731
            if job is None and self.elapsed() < a.deadline_s:
                rest = [n for n in grid if n not in measured and 0 <= n <= n_max]
                if rest:
                    job = lambda n=rest[0]: run_ncmoe(n)  # noqa: E731
            if job is None:
                break
            job()
            turn = "llama" if turn == "mox" else "mox"
        self.meta["seconds"] = round(self.elapsed(), 1)
        self.meta["unfinished_searches"] = [c["id"] for c in cases
                                            if next_probe(measured, c["budget"], c["kv_delta"], n_max) is not None]
        self.save()
        summarize(self.out)


# ---------------------------------------------------------------------------------------------
# Summary


def _best(llama_rows, key):
    rows = [r for r in llama_rows if r.get(key) is not None]
    return max(rows, key=lambda r: r[key]) if rows else None


def case_summary(case, runs, test_pp, test_tg, search_done=True):
    """The numbers of one budget: mox's auto-plan run, the fitting llama.cpp runs, the best of them.

    search_done False: llama.cpp's --n-cpu-moe search stopped (probe cap or deadline) before its smallest
    fitting N, so a faster fitting llama.cpp may exist and a ratio is only an upper bound: one that
    misses its target still fails, one that meets it is reported as not verified (pass flag None)."""
    kv = case["kv_delta"]
    sweep = [r for r in runs if r["kind"] == "llama_ncmoe" and r["rc"] == 0]
    ok_sweep = [r for r in sweep if fits(r["vram_bytes"], kv, case["budget"])]
    fit = {r.get("fit_part"): r for r in runs if r["kind"] == "llama_fit" and r.get("case") == case["id"]}
    mox = next((r for r in runs if r["kind"] == "mox_auto" and r.get("case") == case["id"]), None)
    fit_ok = {part: r["rc"] == 0 and fits(r["vram_bytes"], r.get("reserve_bytes", kv), case["budget"])
              for part, r in fit.items()}
    pool_tg = ok_sweep + ([fit["tg"]] if fit_ok.get("tg") else [])
    pool_pp = ok_sweep + ([fit["pp"]] if fit_ok.get("pp") else [])
    s = {"case": case, "mox": mox, "fit": fit, "fit_within_budget": fit_ok,
         "best_ncmoe": _best(ok_sweep, "tg_ts"), "best_tg": _best(pool_tg, "tg_ts"), "best_pp": _best(pool_pp, "pp_ts"),
         "checks": {}}
    if mox is None:
        return s
    rows = tests_of(mox.get("rows") or [])
    ch = s["checks"]
    ch["mox_ok"] = mox["rc"] == 0
    ch["mox_oom"] = bool(mox.get("oom"))
    # Against the budget: the poller's peak minus the idle baseline, measured as for llama.cpp.
    # Against the prediction: the number mox's row reports from the driver (what the planner
    # predicts), the poller's where a row has none.
    row_vram = [r.get("vram_bytes") for r in rows.values() if isinstance(r.get("vram_bytes"), int)]
    ch["mox_vram_row"] = max(row_vram) if row_vram else None
    ch["mox_vram"] = mox.get("vram_bytes") if mox.get("vram_bytes") is not None else ch["mox_vram_row"]
    ch["mox_within_budget"] = ch["mox_vram"] is not None and ch["mox_vram"] <= case["budget"]
    _, pv = bc.find_key(list(rows.values()), ["predicted_vram_bytes"])
    if pv is None:
        _, pv = bc.find_key(mox.get("plan") or {}, ["predicted_vram_bytes", "gpu_total_bytes"])
    ch["predicted_vram"] = pv
    measured = ch["mox_vram_row"] if ch["mox_vram_row"] is not None else ch["mox_vram"]
    if pv is not None and measured:
        err = pv - measured
        ch["vram_err"] = err
        ch["vram_pass"] = abs(err) <= max(0.02 * measured, 256 * bc.MIB)
    tg = rows.get(test_tg)
    if tg is not None and isinstance(tg.get("predicted_tps"), (int, float)) and mox.get("tg_ts"):
        ch["predicted_tg"] = tg["predicted_tps"]
        ch["tg_err"] = tg["predicted_tps"] / mox["tg_ts"] - 1
        ch["tg_pred_pass"] = abs(ch["tg_err"]) <= 0.10
    # The machine's CPU time that other work and the hypervisor took during mox's tg repetitions
    # (its rows' host_cpu_other / host_cpu_steal): host expert layers wait for their slowest thread.
    busy = bc.row_cpu_busy(tg)
    if busy is not None:
        ch["tg_host_busy"] = busy
    pp = rows.get(test_pp)
    if pp is not None and isinstance(pp.get("predicted_tps"), (int, float)) and mox.get("pp_ts"):
        ch["predicted_pp"] = pp["predicted_tps"]
        ch["pp_err"] = pp["predicted_tps"] / mox["pp_ts"] - 1
    ch["llama_search_unfinished"] = not search_done

    def verdict(ratio, target):
        return False if ratio < target else (True if search_done else None)

    if s["best_tg"] and mox.get("tg_ts"):
        ch["decode_ratio"] = mox["tg_ts"] / s["best_tg"]["tg_ts"]
        ch["decode_pass"] = verdict(ch["decode_ratio"], 1.5)
    if s["best_pp"] and mox.get("pp_ts"):
        ch["prefill_ratio"] = mox["pp_ts"] / s["best_pp"]["pp_ts"]
        ch["prefill_pass"] = verdict(ch["prefill_ratio"], 3.0)
    return s


def _pass(flag):
    return "-" if flag is None else ("PASS" if flag else "FAIL")


def _ratio_pass(flag, unfinished):
    if flag is None and unfinished:
        return "not verified: llama.cpp's --n-cpu-moe search stopped before its smallest fitting N, so this is an upper bound"
    return _pass(flag)


def _commit(runs, kind):
    for r in runs:
        if r["kind"].startswith(kind):
            for row in r.get("rows") or []:
                if row.get("build_commit"):
                    return str(row["build_commit"])
    return "unknown"


def render(doc):
    meta, runs = doc["meta"], doc["runs"]
    test_pp, test_tg = f"pp{meta['pp']}", f"tg{meta['tg']}"
    L = ["# Hybrid CPU+GPU: mox's automatic plan vs llama.cpp at fixed VRAM budgets\n",
         f"- Model: `{meta['model']}`; tests {test_tg} and {test_pp} with -ub {meta['ub']} -b {meta['ub']}, "
         f"{meta['threads']} threads; repetitions: mox {meta['mox_reps']}, llama.cpp {meta['llama_reps']} "
         "(median t/s).",
         f"- mox {_commit(runs, 'mox')}, llama.cpp {_commit(runs, 'llama')}; started {meta.get('started')}, "
         f"{meta.get('seconds', '?')} s in all; GPU {meta.get('gpu_total_mib') or '?'} MiB, "
         f"{meta.get('gpu_used_mib') if meta.get('gpu_used_mib') is not None else '?'} MiB in use when idle.",
         "- VRAM: the driver's peak during the run minus the idle baseline (nvidia-smi every 200 ms); for "
         "mox the row's own `vram_bytes` where it has one. llama-bench's context is only the test's "
         f"({meta['test_ctx']} tokens), so its VRAM at a larger context adds that context's missing KV cache "
         "(from `mox plan -ngl 99 -c C`, shown as +KV).",
         "- llama.cpp's fit: llama-bench --fit-target fits each test on its own, so tg and pp have their own "
         "placement; the margin leaves the budget minus what the real context adds (KV; for tg, whose "
         "llama-bench context of " + str(meta["tg"]) + " tokens also shrinks the batch, the larger -ub compute buffer too, "
         "measured in the sweep's log: "
         + (f"{meta['compute_delta'] / bc.MIB:.0f} MiB" if meta.get("compute_delta") is not None
            else "**not found, 0 used**") + "). +KV / +KV+compute: that correction.",
         "- llama.cpp best: the fastest measured configuration (swept --n-cpu-moe or its --fit-target fit) "
         "whose VRAM at the context fits the budget, per metric. Targets: decode >= 1.5x, prefill >= 3x, "
         "predicted VRAM within max(2%, 256 MiB), predicted decode within 10%, no OOM.\n"]
    unfinished = set(meta.get("unfinished_searches") or [])
    summaries = [case_summary(c, runs, test_pp, test_tg, c["id"] not in unfinished) for c in meta["cases"]]
    for s in summaries:
        c = s["case"]
        kv = c["kv_delta"]
        L.append(f"## Budget {c['budget_gib']:g} GiB, context {c['ctx']}\n")
        hdr = ["engine / configuration", "VRAM measured (GiB)", f"VRAM at ctx {c['ctx']} (GiB)", "fits",
               f"{test_tg} t/s", f"{test_pp} t/s", f"mox/this {test_tg[:2]}", f"mox/this {test_pp[:2]}"]
        mox = s["mox"]
        mtg, mpp = (mox or {}).get("tg_ts"), (mox or {}).get("pp_ts")
        rows = []
        if mox:
            v = s["checks"].get("mox_vram")
            status = "" if mox["rc"] == 0 else (" **OOM**" if mox.get("oom") else f" **failed rc {mox['rc']}**")
            own = s["checks"].get("mox_vram_row")
            own_text = "" if own is None else f" (row: {bc.fmt_gib(own)})"
            rows.append([f"mox --plan auto ({mox.get('plan_summary', '')}){status}", bc.fmt_gib(v) + own_text,
                         bc.fmt_gib(v),
                         "yes" if s["checks"].get("mox_within_budget") else "**no**", bc.fmt_num(mtg), bc.fmt_num(mpp),
                         "", ""])

        def llama_row(label, r):
            v, corr = r["vram_bytes"], r.get("reserve_bytes", kv)
            at = None if v is None else v + corr
            ok = fits(v, corr, c["budget"])
            status = "" if r["rc"] == 0 else (" **OOM**" if r.get("oom") else f" failed rc {r['rc']}")
            plus = "KV" if corr == kv else "KV+compute"
            return [label + status, bc.fmt_gib(v), f"{bc.fmt_gib(at)} (+{plus} {corr / bc.GIB:.2f})",
                    "yes" if ok else "no", bc.fmt_num(r.get("tg_ts")), bc.fmt_num(r.get("pp_ts")),
                    bc.fmt_ratio(mtg, r.get("tg_ts")), bc.fmt_ratio(mpp, r.get("pp_ts"))]

        if s["best_ncmoe"]:
            r = s["best_ncmoe"]
            rows.append(llama_row(f"llama.cpp -ncmoe {r['n_cpu_moe']} (fastest fitting N of the sweep)", r))
        else:
            rows.append(["llama.cpp --n-cpu-moe: no measured N fits", "-", "-", "-", "-", "-", "-", "-"])
        for r in runs:  # the best N by prefill, when another N
            if r is s["best_pp"] and r is not s["best_ncmoe"] and r["kind"] == "llama_ncmoe":
                rows.append(llama_row(f"llama.cpp -ncmoe {r['n_cpu_moe']} (fastest fitting prefill)", r))
        for part in ("tg", "pp"):
            r = s["fit"].get(part)
            if r:
                desc = describe_llama_log(r.get("llama_log") or {})
                test = test_tg if part == "tg" else test_pp
                rows.append(llama_row(f"llama.cpp --fit-target {r.get('fit_margin_mib')} MiB, {test} test ({desc})", r))
        L.append(bc.md_table(hdr, rows))
        ch = s["checks"]
        lines = []
        unf = ch.get("llama_search_unfinished", False)
        if "decode_ratio" in ch:
            lines.append(f"decode mox / best llama.cpp = **{ch['decode_ratio']:.2f}** "
                         f"(>= 1.5: {_ratio_pass(ch['decode_pass'], unf)})")
        if "prefill_ratio" in ch:
            lines.append(f"prefill = **{ch['prefill_ratio']:.2f}** (>= 3: {_ratio_pass(ch['prefill_pass'], unf)})")
        if "vram_err" in ch:
            lines.append(f"predicted VRAM {bc.fmt_gib(ch['predicted_vram'])} GiB vs measured: {ch['vram_err'] / bc.MIB:+.0f} MiB "
                         f"({_pass(ch['vram_pass'])})")
        elif mox:
            lines.append("predicted VRAM: not reported")
        if "tg_err" in ch:
            busy = f"; other work on the CPU up to {100 * ch['tg_host_busy']:.0f}%" if "tg_host_busy" in ch else ""
            lines.append(f"predicted decode {ch['predicted_tg']:.1f} t/s: {100 * ch['tg_err']:+.1f}% ({_pass(ch['tg_pred_pass'])}{busy})")
        if "pp_err" in ch:
            lines.append(f"predicted prefill {ch['predicted_pp']:.1f} t/s: {100 * ch['pp_err']:+.1f}%")
        if not c.get("kv_delta_known", True):
            lines.append("KV correction unknown (`mox plan` failed): llama.cpp's VRAM is at its test context")
        if lines:
            L.append("- " + "; ".join(lines) + "\n")

    sweep = sorted((r for r in runs if r["kind"] == "llama_ncmoe"), key=lambda r: r["n_cpu_moe"])
    if sweep:
        L.append("## llama.cpp --n-cpu-moe sweep (measured N)\n")
        ctxs = sorted({c["ctx"] for c in meta["cases"]})
        kvs = {c["ctx"]: c["kv_delta"] for c in meta["cases"]}
        hdr = ["-ncmoe", "VRAM measured (GiB)"] + [f"at ctx {x} (GiB)" for x in ctxs] + \
              [f"{test_tg} t/s", f"{test_pp} t/s", "llama.cpp's CUDA buffers (MiB)"]
        rows = []
        for r in sweep:
            v = r["vram_bytes"]
            bufs = (r.get("llama_log") or {}).get("cuda_buffers_mib") or {}
            buf_text = " + ".join(f"{k} {bufs[k]:.0f}" for k in sorted(bufs)) if bufs else "-"
            status = "" if r["rc"] == 0 else (" OOM" if r.get("oom") else f" rc {r['rc']}")
            rows.append([f"{r['n_cpu_moe']}{status}", bc.fmt_gib(v)] +
                        [bc.fmt_gib(None if v is None else v + kvs[x]) for x in ctxs] +
                        [bc.fmt_num(r.get("tg_ts")), bc.fmt_num(r.get("pp_ts")), buf_text])
        L.append(bc.md_table(hdr, rows))

    n_oom = sum(1 for r in runs if r.get("oom") and r["kind"].startswith("mox"))
    n_fail = sum(1 for r in runs if r["rc"] != 0 and r["kind"].startswith("mox"))
    L.append(f"mox runs: {sum(1 for r in runs if r['kind'].startswith('mox'))}, failed {n_fail}, OOM {n_oom} "
             f"(target 0). llama.cpp runs that failed: "
             f"{sum(1 for r in runs if r['rc'] != 0 and r['kind'].startswith('llama'))}.")
    if meta.get("unfinished_searches"):
        L.append(f" Searches stopped before the smallest fitting N was pinned down (probe cap or deadline): "
                 f"{', '.join(meta['unfinished_searches'])}.")
    L.append("\n\n## Runs in order\n")
    L.append(bc.md_table(["#", "run", "seconds", "exit", "OOM", "idle MiB", "peak MiB"],
                         [[i + 1, r["name"], r["seconds"], r["rc"], "yes" if r.get("oom") else "",
                           r.get("baseline_mib") if r.get("baseline_mib") is not None else "-",
                           r.get("peak_mib") if r.get("peak_mib") is not None else "-"] for i, r in enumerate(runs)]))
    errs = [r for r in runs if r.get("error")]
    if errs:
        L.append("\n## Errors (last lines of each failed run's log)\n")
        for r in errs:
            L.append(f"### {r['name']}\n```\n{r['error'].strip()}\n```\n")
    return "\n".join(L) + "\n", summaries


def summarize(out):
    out = Path(out)
    doc = json.loads((out / "runs.json").read_text())
    text, summaries = render(doc)
    (out / "results.md").write_text(text)
    with open(out / "runs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "kind", "case", "n_cpu_moe", "fit_margin_mib", "rc", "oom", "seconds", "vram_bytes",
                    "tg_ts", "pp_ts"])
        for r in doc["runs"]:
            w.writerow([r["name"], r["kind"], r.get("case", ""), r.get("n_cpu_moe", ""), r.get("fit_margin_mib", ""),
                        r["rc"], int(bool(r.get("oom"))), r["seconds"], r.get("vram_bytes"), r.get("tg_ts"),
                        r.get("pp_ts")])
    slim = []
    for s in summaries:
        def pick(r):
            return None if r is None else {k: r.get(k) for k in ("name", "n_cpu_moe", "fit_margin_mib", "reserve_bytes",
                                                                  "vram_bytes", "tg_ts", "pp_ts", "rc", "oom")}
        slim.append({"case": s["case"], "mox": pick(s["mox"]), "best_ncmoe": pick(s["best_ncmoe"]),
                     "fit": {part: pick(r) for part, r in s["fit"].items()}, "best_tg": pick(s["best_tg"]), "best_pp": pick(s["best_pp"]),
                     "checks": s["checks"]})
    (out / "summary.json").write_text(json.dumps(slim, indent=1))
    print(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--mox", required=True)
    r.add_argument("--llama-bench", required=True)
    r.add_argument("--model", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--budgets", default="24 16 8", help="GiB, at --ctx")
    r.add_argument("--ctx", type=int, default=32768)
    r.add_argument("--extra", default="24:262144", help="more cases BUDGET_GIB:CTX, space separated")
    r.add_argument("--pp", type=int, default=4096)
    r.add_argument("--tg", type=int, default=512)
    r.add_argument("--ub", type=int, default=4096)
    r.add_argument("--threads", type=int, default=bc.default_threads())
    r.add_argument("--llama-reps", type=int, default=2)
    r.add_argument("--mox-reps", type=int, default=2)
    r.add_argument("--max-probes", type=int, default=3, help="interpolated --n-cpu-moe probes per case")
    r.add_argument("--grid", default="10 20 30", help="--n-cpu-moe values measured at the end if time remains")
    r.add_argument("--deadline-s", type=float, default=360,
                   help="after this, no more probes or grid points (mox runs and fits still run)")
    r.add_argument("--run-timeout-s", type=float, default=240, help="one run killed after this (exit 124)")
    r.add_argument("--n-layers", type=int, default=0, help="MoE layers (default: from mox plan, else 40)")
    r.add_argument("--no-fit", action="store_true", help="skip llama.cpp's --fit-target runs")
    r.add_argument("--gpu", type=int, default=0)
    s = sub.add_parser("summarize")
    s.add_argument("out")
    c = sub.add_parser("commits", help="print the binaries' commits from OUT/runs.json (their rows' build_commit)")
    c.add_argument("out")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        Runner(a).run()
    elif a.cmd == "commits":
        runs = json.loads((Path(a.out) / "runs.json").read_text())["runs"]
        print(f"mox commit: {_commit(runs, 'mox')}\nllama.cpp commit: {_commit(runs, 'llama')}")
    else:
        summarize(a.out)


if __name__ == "__main__":
    main()

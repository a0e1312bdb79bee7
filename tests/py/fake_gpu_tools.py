"""Stand-ins for nvidia-smi, llama-bench and mox that the GPU benchmark scripts can drive on a machine
without a GPU (test fixtures, not results). Each is a small Python program written into a temp folder;
they share a state file that plays the GPU's memory counter: a fake benchmark raises it while it runs,
the fake nvidia-smi reads it. Their JSON has the real programs' field names (llama-bench 0c1e570's
`-o json`, `mox bench -o json`, `mox plan --json`) with made-up numbers from simple formulas the
tests know:

    llama.cpp VRAM(N) MiB = 2000 + 480 * (40 - N) + 60 * (N % 3)   (+ idle 500 on the counter;
                            1519 less in a tg-only run: its compute buffer is 493 MiB, not 2012)
    llama.cpp tg = 200 - 3 N, pp = 4000 - 50 N;  mox: tg 1.7x, pp 3.2x of llama.cpp at the same N
    KV bytes = 20480 per context token on the GPU;  the fake mox plan moves ceil(needed) layers
"""
import os
import stat
import textwrap
from pathlib import Path

IDLE_MIB = 500
TOTAL_MIB = 143771
KV_PER_TOKEN = 20480


def llama_vram_mib(n):
    return 2000 + 480 * (40 - n) + 60 * (n % 3)


_COMMON = f'''
import json, os, sys, time
STATE = os.environ["FAKE_GPU_STATE"]
IDLE, TOTAL, KV = {IDLE_MIB}, {TOTAL_MIB}, {KV_PER_TOKEN}
def set_used(mib):
    try:
        os.remove(STATE + ".seen")
    except OSError:
        pass
    with open(STATE, "w") as f:
        f.write(str(int(mib)))
def hold(seconds=5.0):
    """Stays at the current level until a polling nvidia-smi has reported it (or seconds pass), so a
    fake run is sampled however loaded the test machine is."""
    t0, want = time.time(), str(get_used())
    while time.time() - t0 < seconds:
        try:
            if open(STATE + ".seen").read() == want:
                return
        except OSError:
            pass
        time.sleep(0.02)
def get_used():
    try:
        return int(open(STATE).read())
    except (OSError, ValueError):
        return IDLE
def arg(flag, default=None):
    a = sys.argv
    for i, x in enumerate(a):
        if x == flag and i + 1 < len(a):
            return a[i + 1]
    return default
def vram(n):
    return 2000 + 480 * (40 - n) + 60 * (n % 3)
'''

NVIDIA_SMI = _COMMON + '''
q = [x.split("=", 1)[1].split(",") for x in sys.argv if x.startswith("--query-gpu=")]
if not q:
    print("Fake NVIDIA-SMI (no GPU)")
    sys.exit(0)
q = q[0]
def line():
    used = get_used()
    vals = {"memory.used": used, "memory.free": TOTAL - used, "memory.total": TOTAL,
            "name": "Fake H200", "driver_version": "0.0"}
    return ", ".join(str(vals.get(k, "[N/A]")) for k in q)
if "-lms" in sys.argv:
    period = int(arg("-lms")) / 1000.0
    while True:
        text = line()
        print(text, flush=True)
        with open(STATE + ".seen", "w") as f:  # the level just reported (see hold())
            f.write(text.split(",")[0].strip())
        time.sleep(period)
print(line())
'''

LLAMA_BENCH = _COMMON + '''
n = int(arg("-ncmoe", "0"))
pp, tg, reps = int(arg("-p", "512")), int(arg("-n", "128")), int(arg("-r", "5"))
# A tg-only run has a context of tg tokens, so a batch of tg tokens: a smaller compute buffer.
compute = 2012 if pp else 493
def used(k):
    return vram(k) - 2012 + compute
fitt = arg("-fitt")
if fitt is not None:
    # As common_fit_params: the smallest N whose projection leaves the margin free.
    free = TOTAL - get_used()
    n = next((k for k in range(41) if used(k) + int(fitt) <= free), 40)
if os.environ.get("FAKE_LLAMA_FAIL_N") == str(n) and fitt is None:
    sys.stderr.write("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 123 MiB on device 0: "
                     "cudaMalloc failed: out of memory\\n")
    sys.exit(1)
set_used(IDLE + used(n))
# llama.cpp's order: the loader's override lines while it creates the tensors, then the summary.
for layer in range(n):
    for t in ("ffn_gate_exps", "ffn_down_exps", "ffn_up_exps"):
        sys.stderr.write(f"tensor blk.{layer}.{t}.weight (120 MiB q4_K) buffer type overridden to CUDA_Host\\n")
sys.stderr.write(f"load_tensors: offloaded 41/41 layers to GPU\\n")
sys.stderr.write(f"load_tensors:        CUDA0 model buffer size = {vram(n) - 2100:.2f} MiB\\n")
sys.stderr.write("llama_kv_cache:        CUDA0 KV buffer size =    80.00 MiB\\n")
if pp:
    sys.stderr.write("sched_reserve:      CUDA0 compute buffer size =  2012.00 MiB\\n")
if tg:
    sys.stderr.write("sched_reserve:      CUDA0 compute buffer size =   493.00 MiB\\n")
hold()
set_used(IDLE)
rows = []
for p, g, ts in ((pp, 0, 4000.0 - 50 * n), (0, tg, 200.0 - 3 * n)):
    if p == 0 and g == 0:
        continue
    samples = [ts * (1 + 0.01 * i) for i in range(reps)]
    rows.append({"build_commit": "0c1e57098", "build_number": 1, "backends": "CUDA", "model_filename": arg("-m"),
                 "n_batch": int(arg("-b", "2048")), "n_ubatch": int(arg("-ub", "512")), "n_gpu_layers": 99,
                 "n_cpu_moe": int(arg("-ncmoe", "0")), "fit_target": int(fitt or 0), "fit_min_ctx": 0,
                 "n_prompt": p, "n_gen": g, "n_depth": 0, "avg_ts": sum(samples) / reps,
                 "samples_ns": [1e9 * (p + g) / s for s in samples], "samples_ts": samples})
print(json.dumps(rows, indent=2))
'''

MOX = _COMMON + '''
def gib(text):
    t = text.lower().replace("gib", "").replace("g", "")
    return float(t) * 1024
def layer_count(spec):
    n = 0
    for part in spec.split(","):
        a, _, b = part.partition("-")
        n += int(b or a) - int(a) + 1
    return n
def plan_n(budget, ncmoe, layers, ctx):
    if layers is not None:
        return layer_count(layers)
    if budget is None:
        return int(ncmoe or 0)
    room = gib(budget) - 300 - ctx * KV / 2**20
    return next((k for k in range(41) if vram(k) - 900 <= room), 40)
def predicted(n, ctx, ub):
    return int((vram(n) - 900 + 300 + (200 if ub >= 4096 else 0)) * 2**20 + ctx * KV)
def values(flag, alt, default):
    v = arg(flag, arg(alt, default) if alt else default)
    return [None] if v is None else [v] if flag == "--moe-cpu-layers" else v.split(",")
cmd = sys.argv[1]
if cmd == "plan":
    if os.environ.get("FAKE_MOX_PLAN_NO_UB") and "-ub" in sys.argv:  # as a mox plan without -ub
        sys.stderr.write("The following argument was not expected: -ub\\n")
        sys.exit(109)
    ctx = int(arg("-c", "4096"))
    n = plan_n(arg("--vram-budget"), arg("--n-cpu-moe", arg("-ncmoe")), arg("--moe-cpu-layers"), ctx)
    layers = [{"layer": l, "kind": "deltanet", "experts": {"gpu": 0 if l < n else 256, "pinned_host": 256 if l < n else 0,
               "mmap_host": 0}} for l in range(40)]
    print(json.dumps({"model": arg("-m"), "n_layer": 40, "n_expert": 256, "layers": layers,
                      "kv": {"n_ctx": ctx, "gpu_bytes": ctx * KV, "host_bytes": 0},
                      "gpu_total_bytes": predicted(n, ctx, int(arg("-ub", "512")))}, indent=2))
    sys.exit(0)
assert cmd == "bench"
pp, tg, reps = int(arg("-p", "512")), int(arg("-n", "128")), int(arg("-r", "5"))
rows = []
for ub in values("-ub", None, "512"):
    for ncmoe in values("--n-cpu-moe", "-ncmoe", "0"):
        for budget in values("--vram-budget", None, None):
            for ctx in values("-c", None, "4096"):
                ctx, ub = int(ctx), int(ub)
                n = plan_n(budget, ncmoe, arg("--moe-cpu-layers"), ctx)
                if budget is not None and os.environ.get("FAKE_MOX_OOM_BUDGET") == budget:
                    sys.stderr.write("error: CUDA error: out of memory (cudaMalloc)\\n")
                    sys.exit(1)
                pred = predicted(n, ctx, ub)
                used_bytes = pred + int(os.environ.get("FAKE_MOX_VRAM_ERR_MIB", "0")) * 2**20
                set_used(IDLE + used_bytes / 2**20)
                hold()
                set_used(IDLE)
                for p, g, ts in ((pp, 0, 3.2 * (4000.0 - 50 * n)), (0, tg, 1.7 * (200.0 - 3 * n))):
                    if p == 0 and g == 0:
                        continue
                    rows.append({"build_commit": "abc1234", "engine": "mox", "n_prompt": p, "n_gen": g, "n_depth": 0,
                                 "n_cpu_moe": int(ncmoe) if budget is None else 0, "n_ubatch": ub,
                                 "type_k": arg("-ctk", "f16"),
                                 "vram_budget": int(gib(budget) * 2**20) if budget else 0,
                                 "plan": "auto" if budget else "manual", "samples_ts": [ts] * reps, "median_ts": ts,
                                 "vram_bytes": used_bytes, "predicted_vram_bytes": pred,
                                 "predicted_tps": ts * float(os.environ.get("FAKE_MOX_TPS_FACTOR", "1.05")),
                                 "host_cpu_other": [0.02] * reps, "host_cpu_steal": [0.01] * reps})
print(json.dumps(rows, indent=2))
'''


def install(folder: Path) -> dict:
    """Writes the three fakes into folder; returns the environment that puts them first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in (("nvidia-smi", NVIDIA_SMI), ("llama-bench", LLAMA_BENCH), ("mox", MOX)):
        p = folder / name
        p.write_text("#!/usr/bin/env python3\n" + textwrap.dedent(body))
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    state = folder / "gpu_state"
    state.write_text(str(IDLE_MIB))
    env = dict(os.environ)
    env["PATH"] = f"{folder}{os.pathsep}{env.get('PATH', '')}"
    env["FAKE_GPU_STATE"] = str(state)
    return env

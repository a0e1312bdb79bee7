#!/usr/bin/env bash
# The hybrid CPU+GPU benchmark on a GPU machine: at each VRAM budget, mox's automatic plan
# (`mox bench --plan auto --vram-budget B -c CTX`) against llama.cpp's best --n-cpu-moe (searched,
# VRAM measured by the driver) and llama.cpp's own fit (llama-bench --fit-target), in the same run,
# alternating engines. tg512 and pp4096 (-ub 4096). The logic is tools/hybrid_bench.py (its
# docstring says how each number is made); llama.cpp is built by hand, this takes its llama-bench.
#
#   bench/cuda/hybrid_h200.sh MOX LLAMA_BENCH MODEL OUT [BUDGETS]
#
# The predictions use this machine's cached hardware profile: run `mox calibrate` first (without
# one, the first mox command measures a quick profile, with fewer repetitions).
# BUDGETS: GiB at context CTX (default "24 16 8"). Environment (defaults): CTX (32768),
# EXTRA ("24:262144": more BUDGET:CTX cases), LLAMA_REPS (2), MOX_REPS (2), THREADS (all CPUs),
# GRID ("10 20 30": sweep points measured at the end while time remains), DEADLINE_S (360: no new
# llama.cpp probes after this), MAX_PROBES (3 per case), RUN_TIMEOUT_S (240: one run is killed
# after this and recorded with exit 124).
# Writes OUT/results.md, summary.json, runs.csv, runs.json (every run's command, rows, VRAM, log
# digest), raw/ (each run's JSON, log and nvidia-smi trace), machine.txt.
# Time on the H200 (20 GB file in the page cache, ~10 s per llama-bench load): ~6-8 sweep runs
# (~25 s) + 8 fit runs (one per test, ~15-22 s) + 4 mox runs: about 6-7 minutes; EXTRA="" saves ~1.
set -euo pipefail
if [ $# -lt 4 ]; then sed -n 2,20p "$0"; exit 2; fi
mox="$1"; llama="$2"; model="$3"; out="$4"; budgets="${5:-24 16 8}"
here="$(cd "$(dirname "$0")" && pwd)"
# A llama-bench that cannot start (a missing CUDA library) would fail every run: say so first.
"$llama" --help >/dev/null 2>&1 || { echo "error: $llama does not run here"; "$llama" --help 2>&1 | head -3; exit 1; }
[ -r "$model" ] || { echo "error: cannot read $model"; exit 1; }
mkdir -p "$out"
{
    echo "date: $(date -u +%FT%TZ)"
    # (A copied tree's git view can be stale: the binaries' commits are build_commit in every row.)
    echo "source tree: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "llama-bench: $("$llama" --version 2>&1 | grep -m1 -i 'version' || echo unknown)"
    echo "model: $model ($(stat -c %s "$model") bytes)"
    echo "budgets: $budgets GiB at context ${CTX:-32768}; extra cases: ${EXTRA-24:262144}"
    echo
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,pcie.link.gen.max,pcie.link.width.max,clocks.max.memory \
        --format=csv 2>&1 || true
    echo
    lscpu 2>/dev/null | grep -E '^(Model name|Socket|Core|Thread|CPU\(s\)|NUMA node\(s\)|L3)' || true
    free -g 2>/dev/null | head -2 || true
    echo
    nvidia-smi 2>&1 | head -20 || true
} > "$out/machine.txt"

python3 "$here/../../tools/hybrid_bench.py" run --mox "$mox" --llama-bench "$llama" --model "$model" --out "$out" \
    --budgets "$budgets" --ctx "${CTX:-32768}" --extra "${EXTRA-24:262144}" \
    --llama-reps "${LLAMA_REPS:-2}" --mox-reps "${MOX_REPS:-2}" --threads "${THREADS:-$(nproc)}" \
    --grid "${GRID-10 20 30}" --deadline-s "${DEADLINE_S:-360}" --max-probes "${MAX_PROBES:-3}" \
    --run-timeout-s "${RUN_TIMEOUT_S:-240}"
# The commits the binaries report (build_commit of their rows), next to the machine.
python3 "$here/../../tools/hybrid_bench.py" commits "$out" >> "$out/machine.txt"

#!/usr/bin/env bash
# mox bench and llama.cpp's llama-bench on the same file, alternating rounds in one run (what
# `mox bench --compare` does in one command; bench/results/2026-11-29-cpu-reference-mox-tiny was
# made with this script). Usage:
#   bench/compare_llama_cpu.sh LLAMA_BENCH MODEL OUT_DIR [ROUNDS] [-- extra args for both, e.g. -p 64 -n 32 -t 2]
# Writes OUT_DIR/{machine.txt,mox_N.json,llama_N.json,commands.txt}. llama-bench runs with --repack 0
# and OMP_WAIT_POLICY=passive (see bench/README.md for why, on the dev machine).
set -euo pipefail
llama_bench="$1"; model="$2"; out="$3"; rounds="${4:-3}"
shift $(( $# >= 4 ? 4 : 3 )); [ "${1:-}" = "--" ] && shift
args=("$@")
mox="$(dirname "$0")/../build/mox"
mkdir -p "$out"
{
    echo "date: $(date -u +%FT%TZ)"
    echo "mox commit: $(git -C "$(dirname "$0")" rev-parse --short HEAD)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
    echo "cores: $(nproc); mem: $(free -g | awk '/Mem:/{print $2}') GiB; load: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "model: $model ($(stat -c %s "$model") bytes)"
} > "$out/machine.txt"
: > "$out/commands.txt"
for r in $(seq 1 "$rounds"); do
    cmd=("$mox" bench -m "$model" -r 3 -o json "${args[@]}")
    echo "${cmd[*]}" >> "$out/commands.txt"; "${cmd[@]}" > "$out/mox_$r.json"
    cmd=("$llama_bench" -m "$model" -r 3 -o json --repack 0 "${args[@]}")
    echo "OMP_WAIT_POLICY=passive ${cmd[*]}" >> "$out/commands.txt"
    OMP_WAIT_POLICY=passive "${cmd[@]}" > "$out/llama_$r.json" 2>/dev/null
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for engine in ("mox", "llama"):
    for r in range(1, rounds + 1):
        for row in json.load(open(f"{out}/{engine}_{r}.json")):
            test = f"pp{row['n_prompt']}" if row["n_gen"] == 0 else f"tg{row['n_gen']}"
            rows.setdefault((test, engine), []).extend(row["samples_ts"])
lines = ["| test | mox t/s median (min..max) | llama.cpp t/s median (min..max) | mox / llama.cpp |", "|---|---|---|---|"]
for test in sorted({t for t, _ in rows}):
    m, l = rows[(test, "mox")], rows[(test, "llama")]
    lines.append(f"| {test} | {statistics.median(m):.1f} ({min(m):.1f}..{max(m):.1f}) | "
                 f"{statistics.median(l):.1f} ({min(l):.1f}..{max(l):.1f}) | {statistics.median(m)/statistics.median(l):.2f} |")
open(f"{out}/summary.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY

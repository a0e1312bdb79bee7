#!/usr/bin/env bash
# The planner accuracy table on a GPU machine: for each configuration, what the planner predicts
# (`mox plan ... --json`, and the predicted_* fields of `mox bench` rows) against what `mox bench`
# measures (the driver's VRAM, tg128 and pp512 t/s). tools/plan_accuracy.py joins them into
# OUT/accuracy.md (+ accuracy.json).
#
#   bench/cuda/plan_accuracy.sh MOX MODEL OUT [grouped|isolated]
#
# grouped (default): each group below is one `mox bench` invocation sweeping its values (one model
#   load; the row's vram_bytes is the driver's number for that configuration). ~3 minutes on the H200.
# isolated: one invocation per configuration, so nvidia-smi's peak is that configuration alone too
#   (a cross-check of the rows' numbers); ~2x longer.
# The predictions use this machine's cached hardware profile: run `mox calibrate` first (without
# one, the first mox command measures a quick profile, with fewer repetitions).
# Environment: REPS (2; the one -r applies to tg128 and pp512), THREADS (all CPUs), RUN_TIMEOUT_S
# (240: a bench invocation killed after this is recorded with exit 124), POLL (1; 0: no nvidia-smi
# beside the runs, so nothing else wakes up on the CPU while host expert layers decode; the table
# then has the rows' own driver numbers only).
set -uo pipefail
if [ $# -lt 3 ]; then sed -n 2,16p "$0"; exit 2; fi
mox="$1"; model="$2"; out="$3"; mode="${4:-grouped}"
reps="${REPS:-2}"; threads="${THREADS:-$(nproc)}"
here="$(cd "$(dirname "$0")" && pwd)"
tools="$here/../../tools"
mkdir -p "$out/plan" "$out/bench"
: > "$out/configs.tsv"
: > "$out/commands.txt"
{
    echo "date: $(date -u +%FT%TZ)"
    echo "mode: $mode, reps $reps, threads $threads"
    echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo none)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); cores: $(nproc)"
    echo "model: $model ($(stat -c %s "$model" 2>/dev/null || echo '?') bytes)"
} > "$out/machine.txt"

gpu_used() { nvidia-smi --id=0 --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1; }

# bench NAME ARGS...: one `mox bench` invocation with nvidia-smi sampling memory.used every 200 ms.
bench() {
    local name="$1"; shift
    local cmd=("$mox" bench -m "$model" -ngl 99 "$@" -p 512 -n 128 -r "$reps" -t "$threads" -o json)
    echo "${cmd[*]}" >> "$out/commands.txt"
    gpu_used > "$out/bench/$name.idle" || true
    local poller=""
    if [ "${POLL:-1}" != 0 ]; then
        nvidia-smi --id=0 --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 \
            > "$out/bench/$name.vram.csv" 2>/dev/null &
        poller=$!
    fi
    local t0=$SECONDS
    timeout "${RUN_TIMEOUT_S:-240}" "${cmd[@]}" > "$out/bench/$name.json" 2> "$out/bench/$name.err"
    echo $? > "$out/bench/$name.rc"
    sleep 0.3
    if [ -n "$poller" ]; then kill "$poller" 2>/dev/null; wait "$poller" 2>/dev/null; fi
    echo "  $name: exit $(cat "$out/bench/$name.rc") in $((SECONDS - t0)) s"
}

# plan ID ARGS...: `mox plan --json` for one configuration (failures are recorded, not fatal). A
# mox plan that does not take -ub is asked again without it (the bench rows' predictions remain).
plan() {
    local id="$1"; shift
    "$mox" plan -m "$model" "$@" --json > "$out/plan/$id.json" 2> "$out/plan/$id.err" && return 0
    local args=() skip=0 a
    for a in "$@"; do
        if [ "$skip" = 1 ]; then skip=0; continue; fi
        if [ "$a" = -ub ]; then skip=1; continue; fi
        args+=("$a")
    done
    if [ ${#args[@]} -lt $# ]; then
        "$mox" plan -m "$model" "${args[@]}" --json > "$out/plan/$id.json" 2>> "$out/plan/$id.err" && return 0
    fi
    echo "  plan $id failed: $(head -c 300 "$out/plan/$id.err")"
}

# group ID AXIS "VALUES" [FLAGS...]: configurations FLAGS + AXIS v for each v of VALUES (space
# separated). One `mox bench` sweeps the values (AXIS v1,v2,...), except in isolated mode and for
# axes whose values are not a llama-bench list (-c; layer sets, which hold commas themselves): those
# run one invocation per value. BENCH_ONLY (a string, split on spaces) adds flags for mox bench
# alone (e.g. --plan auto).
group() {
    local id="$1" axis="$2" values="$3"; shift 3
    local solo=0 i=0 list="" v
    case "$axis" in -c | --ctx-size | --moe-cpu-layers | -ot | --override-tensor) solo=1 ;; esac
    [ "$mode" = isolated ] && solo=1
    for v in $values; do
        local cid="$id.$i" gname="$id" index="$i"
        if [ "$solo" = 1 ]; then gname="$cid"; index=0; fi
        printf '%s\t%s\t%d\t%s\n' "$cid" "$gname" "$index" "$* ${BENCH_ONLY:-} $axis $v" >> "$out/configs.tsv"
        plan "$cid" -ngl 99 "$@" "$axis" "$v"
        # shellcheck disable=SC2086  # BENCH_ONLY is a list of flags
        [ "$solo" = 1 ] && bench "$cid" "$@" ${BENCH_ONLY:-} "$axis" "$v"
        list="${list:+$list,}$v"
        i=$((i + 1))
    done
    # shellcheck disable=SC2086
    [ "$solo" = 1 ] || bench "$id" "$@" ${BENCH_ONLY:-} "$axis" "$list"
}

start=$SECONDS
# 9: the --n-cpu-moe sweep at a 32768 context (f16 KV, -ub 512).
group ncmoe --n-cpu-moe "0 5 10 15 20 25 30 35 40" -c 32768
# 3: explicit layer sets.
group layers --moe-cpu-layers "0-9 0-4,20-24,35-39 1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31,33,35,37,39" -c 32768
# 2: context 4096 and 131072 (32768 is in the sweep).
group ctx -c "4096 131072" --n-cpu-moe 20
# 2: q8_0 KV cache at 32768 and 131072.
group q8 -c "32768 131072" --n-cpu-moe 20 -ctk q8_0 -ctv q8_0
# 2: -ub 4096 (the prefill workspace grows) with few and many layers on the CPU.
group ub4k --n-cpu-moe "10 30" -c 32768 -ub 4096
# 3: the automatic plan at the hybrid benchmark's budgets (24, 16 and 8 GiB).
BENCH_ONLY="--plan auto" group auto --vram-budget "24GiB 16GiB 8GiB" -c 32768 -ub 4096
echo "all runs: $((SECONDS - start)) s"

python3 "$tools/plan_accuracy.py" "$out"

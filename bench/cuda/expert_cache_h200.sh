#!/usr/bin/env bash
# The expert cache against mox's static placement at the same VRAM, on a GPU machine: decode (tgN)
# with the routing of real text replayed on the full-size synthetic model (--routing-trace), for
# several traces, and prefill (pp4096) with the router's own routing.
#
#   bench/cuda/expert_cache_h200.sh MOX MODEL OUT TRACE...
#
# MODEL: `mox synth --preset qwen3.6-35b-a3b --mix q4_k_m`. Each TRACE is replayed in its own mox
# bench run; a case is "NAME:FLAGS", the same VRAM for experts spent either on whole layers
# (static, --n-cpu-moe) or on a cache pool of slots shared by every layer (--cpu-moe --expert-cache).
# Each repetition continues the trace where the previous run stopped (a warm cache meets new tokens).
# Environment (defaults): TG (256), REPS (2), CASES (below), POLICIES (lfu,lru,lru:admit=2),
# PP (1: pp4096 for the first two cases; 0: none), THREADS (all CPUs).
# Writes OUT/<trace>.json and .md per trace, OUT/pp.json and .md, OUT/machine.txt.
set -euo pipefail
if [ $# -lt 4 ]; then sed -n 2,15p "$0"; exit 2; fi
mox="$1"; model="$2"; out="$3"; shift 3
mkdir -p "$out"
tg="${TG:-256}"; reps="${REPS:-2}"; threads="${THREADS:-$(nproc)}"
policies="${POLICIES:-lfu,lru,lru:admit=2}"
# 7 GPU layers of experts are 3.3 GiB and 24 are 11.3 GiB of Q4_K_M Qwen3.6-35B-A3B: the static plans
# at 8 and 16 GiB (docs/hybrid.md); the cached cases spend the same bytes on slots.
cases="${CASES:-8g-static:-ncmoe 33|8g-cache:--cpu-moe --expert-cache 3380MiB|16g-static:-ncmoe 16|16g-cache:--cpu-moe --expert-cache 11570MiB}"
{
    echo "date: $(date -u +%FT%TZ)"
    echo "mox: $("$mox" version 2>&1 | head -1)"
    echo "model: $model ($(stat -c %s "$model") bytes)"
    nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv 2>&1 || true
    lscpu 2>/dev/null | grep -E '^(Model name|Socket|Core|Thread|CPU\(s\))' || true
    free -g 2>/dev/null | head -2 || true
} > "$out/machine.txt"

run_case() {  # name, flags, trace or "", test flags, output stem
    local name="$1" flags="$2" trace="$3" test="$4" stem="$5"
    local extra=()
    [ -n "$trace" ] && extra+=(--routing-trace "$trace")
    case "$flags" in *--expert-cache*) extra+=(--cache-policy "$policies") ;; esac
    # shellcheck disable=SC2086
    "$mox" bench -m "$model" -ngl 99 -t "$threads" -c 32768 $flags $test -r "$reps" "${extra[@]}" -o json \
        > "$out/$stem.$name.json" 2> "$out/$stem.$name.log" || echo "case $name failed: see $stem.$name.log"
}

IFS='|' read -r -a case_list <<< "$cases"
for trace in "$@"; do
    stem="$(basename "$trace" .moxroute)"
    for c in "${case_list[@]}"; do run_case "${c%%:*}" "${c#*:}" "$trace" "-p 0 -n $tg" "$stem"; done
done
if [ "${PP:-1}" = 1 ]; then
    for c in "${case_list[@]:0:2}"; do run_case "${c%%:*}" "${c#*:}" "" "-p 4096 -n 0 -ub 4096" pp; done
fi

#!/usr/bin/env bash
# The all-GPU benchmark on a GPU machine: the full-size synthetic Qwen3.6-35B-A3B Q4_K_M entirely on the
# GPU, mox against llama.cpp's CUDA build on the same file in the same run (`mox bench --compare`, the
# two engines alternating repetition by repetition). llama.cpp is built by hand from source; this
# script only takes the path of its llama-bench.
#
#   bench/cuda/qwen36_h200.sh MOX LLAMA_BENCH MODEL OUT_DIR [REPS] [DEPTH_REPS]
#
# Writes OUT_DIR/{machine.txt, commands.txt, f16.md, f16.json, depth.md, depth.json, q8.md, q8.json}.
# The depth rows prefill 32768 tokens (untimed) before every repetition, hence their own count.
set -euo pipefail
mox="$1"; llama="$2"; model="$3"; out="$4"; reps="${5:-3}"; depth_reps="${6:-$reps}"
# A llama-bench that cannot start (e.g. a missing CUDA library) would fail every row: say so first.
"$llama" --help >/dev/null 2>&1 || { echo "error: $llama does not run here"; "$llama" --help 2>&1 | head -3; exit 1; }
mkdir -p "$out"
corpus="$(dirname "$0")/../corpus/ruth_basic_english.txt"
{
    echo "date: $(date -u +%FT%TZ)"
    # (A copied tree's git view can be stale: the binary's own commit is build_commit in every row.)
    echo "source tree: $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); cores: $(nproc)"
    echo "model: $model ($(stat -c %s "$model") bytes)"
} > "$out/machine.txt"
: > "$out/commands.txt"
run() {  # NAME REPS ARGS...: one mox bench invocation, markdown to the terminal and NAME.md, JSON to NAME.json
    local name="$1" r="$2"; shift 2
    local cmd=("$mox" bench -m "$model" -ngl 99 -r "$r" --corpus "$corpus" --compare "$llama" "$@")
    echo "${cmd[*]} -o md / -o json" >> "$out/commands.txt"
    "${cmd[@]}" -o md -oe json 2> "$out/$name.json" | tee "$out/$name.md"
}
run f16 "$reps" -p 512,2048 -n 128,512
run q8 "$reps" -p 2048 -n 128 -ctk q8_0 -ctv q8_0
run depth "$depth_reps" -p 0 -n 128,512 -d 32768

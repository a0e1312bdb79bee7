# Sourced by a script run on a GPU machine (`. bench/cuda/device_env.sh`) from the repository root,
# with mox's binaries built elsewhere. It unpacks the binaries carried under
# out/devcarry (cuda/NAME.xz -> /tmp/bin/NAME, llama-bench.xz, the gguf wheel for the Python tests),
# points the loader at the carried libraries and the machine's CUDA ones, and sets:
#   R (the repository root), O ($OUT/r: what comes back), C (the --corpus flag), MOX_CACHE_DIR,
#   el (seconds since sourcing), start_synth / wait_synth (the synthetic Qwen3.6-35B-A3B at
#   /tmp/q36.gguf, written in the background with 16 threads).
# Measure nothing that uses the CPU (mox calibrate, the CPU side of hybrid runs) before wait_synth:
# a calibration beside the synth measured CPU expert rates 10x low (bench/results/2026-11-30-mma-prefill-attention-h200).
# And calibrate a minute or more after wait_synth (run the GPU tests or other work first): in the
# first minute after the 20 GB file is written, calibrations read the CPU experts 10-30% low while
# hybrid decode runs at its usual speed (bench/results/2026-11-30-planner-accuracy-h200/calibration-after-synth).
R=$PWD
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
O=$OUT/r
mkdir -p /tmp/bin "$O"
for f in out/devcarry/cuda/*.xz; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .xz)
    xz -dc "$f" > "/tmp/bin/$n" && chmod +x "/tmp/bin/$n"
done
if [ -e out/devcarry/llama-bench.xz ]; then
    xz -dc out/devcarry/llama-bench.xz > /tmp/bin/llama-bench && chmod +x /tmp/bin/llama-bench
fi
for w in out/devcarry/gguf-*.whl; do
    [ -e "$w" ] && pip install --no-deps --target /tmp/site "$w" -q > /dev/null 2>&1 && export PYTHONPATH=/tmp/site
done
_lib_dir() { dirname "$(find /usr/local /usr/lib /opt -name "$1" 2>/dev/null | head -1)"; }
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$(_lib_dir libcublas.so.13):$(_lib_dir libnccl.so.2):${LD_LIBRARY_PATH:-}
export MOX_CACHE_DIR=/tmp/moxcache
C="--corpus $R/bench/corpus/ruth_basic_english.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$O/machine.txt" 2>&1
nproc >> "$O/machine.txt"
start_synth() {
    ( [ -e /tmp/q36.gguf ] || /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 > "$O/synth.log" 2>&1
      sync ) &
    _synth_pid=$!
}
wait_synth() { [ -n "${_synth_pid:-}" ] && wait "$_synth_pid"; _synth_pid=; }

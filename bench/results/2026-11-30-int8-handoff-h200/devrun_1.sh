#!/bin/bash
# session 6, call 1: int8-activation decode kernels: tests, A/B decode vs fp32 activations, llama.cpp, per-kernel times
R=$PWD
mkdir -p /tmp/bin && for n in mox mox_cuda_tests; do xz -dc out/devcarry/cuda/$n.xz > /tmp/bin/$n; chmod +x /tmp/bin/$n; done
xz -dc out/devcarry/llama-bench.xz > /tmp/bin/llama-bench; chmod +x /tmp/bin/llama-bench
LL=$(dirname $(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)):$(dirname $(find /usr/local /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LL:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=/tmp/moxcache
C="--corpus bench/corpus/ruth_basic_english.txt"
( /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 > $OUT/synth.log 2>&1; sync ) &
SP=$!
echo "== cuda tests (matvec, moe)"; timeout 240 /tmp/bin/mox_cuda_tests --gtest_filter='CudaMatvec.*:CudaMoe.*' > $OUT/cuda_tests.log 2>&1; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran|\[bench\]" $OUT/cuda_tests.log | tail -30
grep -B2 -A6 "Failure" $OUT/cuda_tests.log | head -40
wait $SP; tail -1 $OUT/synth.log; sleep 3
echo "== all-GPU tg128: int8 on (with llama.cpp), off, on"
timeout 200 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -r 3 -o md $C --compare /tmp/bin/llama-bench > $OUT/tg_int8_on.md 2> $OUT/tg_int8_on.err; grep -E "^\| q" $OUT/tg_int8_on.md; tail -2 $OUT/tg_int8_on.err
MOX_CUDA_INT8=0 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -r 3 -o md $C 2>&1 | grep -E "^\| q|rror"
/tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -r 3 -o md $C 2>&1 | grep -E "^\| q|rror"
echo "== ncu one decode step (durations)"
MOX_CUDA_PROFILE_STEP=3 timeout 150 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -p "Hello" -n 6 > $OUT/ncu_step.csv 2> $OUT/ncu_step.err; tail -2 $OUT/ncu_step.err; wc -l $OUT/ncu_step.csv
python3 tools/ncu_decode_table.py steps $OUT/ncu_step.csv 2>&1 | head -40

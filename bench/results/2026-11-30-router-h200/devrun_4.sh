#!/bin/bash
# session 7, call 4: the router's loads fixed (compile-time slot count): MoE tests, goldens on the GPU, A/B against
# the previous build (mox_prev = b43864e) in one run, llama.cpp on the same file, one ncu step.
R=$PWD
pip install --no-deps --target /tmp/site out/devcarry/gguf-0.19.0-py3-none-any.whl -q 2>&1 | tail -1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/bin $OUT/r && for n in mox mox_prev mox_cuda_tests; do xz -dc out/devcarry/cuda/$n.xz > /tmp/bin/$n; chmod +x /tmp/bin/$n; done
xz -dc out/devcarry/llama-bench.xz > /tmp/bin/llama-bench; chmod +x /tmp/bin/llama-bench
LL=$(dirname $(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)):$(dirname $(find /usr/local /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LL:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=/tmp/moxcache
C="--corpus bench/corpus/ruth_basic_english.txt"
O=$OUT/r
( ls /tmp/q36.gguf >/dev/null 2>&1 || /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 > $O/synth.log 2>&1; sync ) &
SP=$!
echo "== cuda tests (MoE, router)"; timeout 200 /tmp/bin/mox_cuda_tests --gtest_filter='CudaMoe*:CudaBench.MoeDecodeBandwidth' > $O/cuda_tests.log 2>&1; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran|router|gate\+up|fused, per" $O/cuda_tests.log | tail -12
grep -A6 "Failure" $O/cuda_tests.log | head -24
echo "== goldens on cuda"; MOX_TEST_DEVICE=cuda MOX_BIN=/tmp/bin/mox MOX_TOOL_DIR=/tmp/bin timeout 200 python3 -m pytest -q -p no:cacheprovider tests/py/test_goldens.py > $O/e2e.log 2>&1; tail -2 $O/e2e.log
wait $SP; sleep 2
for i in 1 2; do for b in mox_prev mox; do echo "== tg128 $b"; /tmp/bin/$b bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -r 3 -o md $C 2>&1 | grep -E "^\| q|rror"; done; done
echo "== all-GPU vs llama.cpp"; timeout 200 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 512 -n 128 -r 3 -o md $C --compare /tmp/bin/llama-bench > $O/gpu.md 2> $O/gpu.err; grep -E "^\| q" $O/gpu.md
echo "== one step, single pass"; MOX_CUDA_PROFILE_STEP=3 timeout 100 ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --page raw /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -p "Hello" -n 6 > $O/ncu_step.csv 2> $O/ncu_step.err
python3 tools/ncu_decode_table.py steps $O/ncu_step.csv > $O/ncu_step.md 2>&1; head -16 $O/ncu_step.md
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 7, call 1: every CUDA test and the GPU goldens/hybrid e2e on the tree of session 6's review + the short-context
# decode attention; A/B of the attention; 256-token CPU/GPU greedy agreement; one ncu decode step.
R=$PWD
pip install --no-deps --target /tmp/site out/devcarry/gguf-0.19.0-py3-none-any.whl -q 2>&1 | tail -1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/bin $OUT/r && for n in mox mox_cuda_tests; do xz -dc out/devcarry/cuda/$n.xz > /tmp/bin/$n; chmod +x /tmp/bin/$n; done
xz -dc out/devcarry/llama-bench.xz > /tmp/bin/llama-bench; chmod +x /tmp/bin/llama-bench
LL=$(dirname $(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)):$(dirname $(find /usr/local /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LL:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=/tmp/moxcache
C="--corpus bench/corpus/ruth_basic_english.txt"
O=$OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/machine.txt; nproc >> $O/machine.txt
( ls /tmp/q36.gguf >/dev/null 2>&1 || /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 > $O/synth.log 2>&1; sync ) &
SP=$!
echo "== cuda tests"; timeout 240 /tmp/bin/mox_cuda_tests --gtest_filter='-*Bandwidth*:*Timing*' > $O/cuda_tests.log 2>&1; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran" $O/cuda_tests.log | tail -8
grep -A6 "Failure" $O/cuda_tests.log | head -24
echo "== e2e goldens + hybrid on cuda"; MOX_TEST_DEVICE=cuda MOX_BIN=/tmp/bin/mox MOX_TOOL_DIR=/tmp/bin timeout 200 python3 -m pytest -q -p no:cacheprovider tests/py/test_goldens.py tests/py/test_hybrid.py > $O/e2e.log 2>&1; tail -3 $O/e2e.log; grep -E "FAILED|Error" $O/e2e.log | head -6
wait $SP; sleep 2
echo "== all-GPU tg128 vs llama.cpp (short attention on)"; timeout 150 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 512 -n 128 -r 3 -o md $C --compare /tmp/bin/llama-bench > $O/gpu.md 2> $O/gpu.err; grep -E "^\| q" $O/gpu.md
echo "== all-GPU tg128 MOX_CUDA_ATTN_SHORT=0"; MOX_CUDA_ATTN_SHORT=0 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -r 3 -o md $C 2>&1 | grep -E "^\| q|rror"
echo "== all-GPU tg128 short attention again"; /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -r 3 -o md $C 2>&1 | grep -E "^\| q|rror"
echo "== ncu step"; MOX_CUDA_PROFILE_STEP=3 timeout 100 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -p "Hello" -n 6 > $O/ncu_step.csv 2> $O/ncu_step.err
python3 tools/ncu_decode_table.py steps $O/ncu_step.csv > $O/ncu_step.md 2>&1; head -30 $O/ncu_step.md
echo "== CPU/GPU greedy agreement, 256 tokens"; timeout 200 python3 tools/compare_devices.py --mox /tmp/bin/mox -m /tmp/q36.gguf -n 256 --out $O/compare_devices.md > $O/compare.log 2>&1; tail -12 $O/compare.log
cd $OUT && tar czf r.tgz r && rm -rf r

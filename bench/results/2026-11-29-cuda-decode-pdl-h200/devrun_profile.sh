#!/bin/bash
# session 5, call 2: PDL + L2 prefetch: correctness, A/B decode, per-kernel profile
R=$PWD
pip install --no-deps --target /tmp/site out/devcarry/gguf-0.19.0-py3-none-any.whl -q 2>&1 | tail -1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/bin && for n in mox mox_cuda_tests; do xz -dc out/devcarry/cuda/$n.xz > /tmp/bin/$n; chmod +x /tmp/bin/$n; done
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=$OUT/cache
C="--corpus bench/corpus/ruth_basic_english.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used --format=csv
( /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 > $OUT/synth.log 2>&1; sync ) &
SP=$!
echo "== cuda tests"; timeout 200 /tmp/bin/mox_cuda_tests --gtest_filter=-*Timing* > $OUT/cuda_tests.log 2>&1; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran" $OUT/cuda_tests.log | tail -12
echo "== e2e goldens+hybrid"; MOX_TEST_DEVICE=cuda MOX_BIN=/tmp/bin/mox MOX_TOOL_DIR=/tmp/bin timeout 240 python3 -m pytest -q -p no:cacheprovider tests/py/test_goldens.py tests/py/test_hybrid.py > $OUT/e2e.log 2>&1; tail -4 $OUT/e2e.log; grep -E "FAILED|Error" $OUT/e2e.log | head -8
wait $SP; tail -1 $OUT/synth.log; sleep 5
for p in 0 1 0 1; do echo "== bench MOX_PDL=$p"; MOX_PDL=$p /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 512 -n 128 -r 3 -o md $C 2>&1 | grep -E "^\| q|rror"; done
echo "== ncu decode"; MOX_PDL=1 timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw --launch-count 2600 /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -p "Hello" -n 5 > $OUT/ncu.csv 2> $OUT/ncu.err; tail -2 $OUT/ncu.err; wc -l $OUT/ncu.csv

#!/bin/bash
# session 5, call 3: A/B PDL decode; ncu detailed of one decode step
R=$PWD
pip install --no-deps --target /tmp/site out/devcarry/gguf-0.19.0-py3-none-any.whl -q 2>/dev/null | tail -1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/bin && for n in mox mox_cuda_tests; do xz -dc out/devcarry/cuda/$n.xz > /tmp/bin/$n; chmod +x /tmp/bin/$n; done
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=$OUT/cache; mkdir -p $MOX_CACHE_DIR; cp out/devcarry/hardware-vm.json $MOX_CACHE_DIR/hardware-$(hostname).json
C="--corpus bench/corpus/ruth_basic_english.txt"
( /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 > $OUT/synth.log 2>&1; sync ) &
SP=$!
echo "== cuda tests"; timeout 200 /tmp/bin/mox_cuda_tests > $OUT/cuda_tests.log 2>&1; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran" $OUT/cuda_tests.log | tail -12
echo "== e2e goldens"; MOX_TEST_DEVICE=cuda MOX_BIN=/tmp/bin/mox MOX_TOOL_DIR=/tmp/bin timeout 240 python3 -m pytest -q -p no:cacheprovider tests/py/test_goldens.py > $OUT/e2e.log 2>&1; tail -2 $OUT/e2e.log; grep -E "FAILED|Error" $OUT/e2e.log | head -8
wait $SP; tail -1 $OUT/synth.log; sleep 3
for p in 0 1 0 1; do echo "== bench MOX_PDL=$p"; MOX_PDL=$p /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 512 -n 128 -r 3 -o md $C 2>&1 | grep -E "^\| q|rror|warn"; done
echo "== ncu step"; MOX_CUDA_PROFILE_STEP=3 timeout 240 ncu --profile-from-start off --clock-control none --cache-control none --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --csv --page details /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -p "Hello" -n 5 > $OUT/ncu_detail.csv 2> $OUT/ncu.err; tail -2 $OUT/ncu.err; wc -l $OUT/ncu_detail.csv

#!/bin/bash
# session 8, call 3 (main with the tensor-core prefill attention): every CUDA test, GPU goldens + hybrid e2e,
# issue 5's table (bench/cuda/qwen36_h200.sh: f16 pp512/2048 tg128/512, q8_0 KV, depth 32768 tg128/512),
# then, while time remains, calibrate and issue 6's 24 GiB case at context 32768.
R=$PWD; T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
pip install --no-deps --target /tmp/site out/devcarry/gguf-0.19.0-py3-none-any.whl -q 2>&1 | grep -v WARN | tail -1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/bin $OUT/r && for n in mox mox_cuda_tests; do xz -dc out/devcarry/cuda/$n.xz > /tmp/bin/$n; chmod +x /tmp/bin/$n; done
xz -dc out/devcarry/llama-bench.xz > /tmp/bin/llama-bench; chmod +x /tmp/bin/llama-bench
LL=$(dirname $(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)):$(dirname $(find /usr/local /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LL:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=/tmp/moxcache
O=$OUT/r
( ls /tmp/q36.gguf >/dev/null 2>&1 || /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 > $O/synth.log 2>&1; sync ) &
SP=$!
echo "== cuda tests"; timeout 150 /tmp/bin/mox_cuda_tests --gtest_filter='-*Bandwidth*:*Timing*' > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran|\[bench\] attention" $O/cuda_tests.log | tail -8
grep -B2 -A8 "Failure" $O/cuda_tests.log | head -30
echo "== e2e goldens + hybrid on cuda"; MOX_TEST_DEVICE=cuda MOX_BIN=/tmp/bin/mox MOX_TOOL_DIR=/tmp/bin timeout 100 python3 -m pytest -q -p no:cacheprovider tests/py/test_goldens.py tests/py/test_hybrid.py > $O/e2e.log 2>&1; tail -1 $O/e2e.log; grep -E "FAILED|Error" $O/e2e.log | head -6
wait $SP; echo "t=$(el)"
echo "== issue 5 table"; timeout 330 bench/cuda/qwen36_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $O/table 3 2 > $O/table.log 2>&1; echo "rc $? t=$(el)"; grep -E "^\| q" $O/table/*.md | cut -d'|' -f1,11-15,17-20 | cut -c1-220
echo "== calibrate"; timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; tail -1 $O/calibrate.txt; cp /tmp/moxcache/hardware-*.json $O/ 2>/dev/null
LEFT=$(( 560 - $(el) )); echo "== hybrid 24 GiB ($LEFT s left)"
if [ $LEFT -gt 90 ]; then GRID="" EXTRA="" DEADLINE_S=$(( LEFT / 2 )) MAX_PROBES=2 RUN_TIMEOUT_S=90 timeout $LEFT bench/cuda/hybrid_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $O/hybrid 24 > $O/hybrid.log 2>&1
grep -E "^- decode|^\| (mox|llama)" $O/hybrid/results.md 2>/dev/null | cut -c1-250; tail -2 $O/hybrid.log; fi
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 9, call 4 (aa4d811: the norm epilogue reverted, the new probes): every CUDA test, GPU
# goldens + hybrid e2e, `mox calibrate` after the synth, issue 5's table at depth 0 (f16 pp512/2048
# tg128/512, q8_0 KV) against llama.cpp, then the planner accuracy sweep with this build's profile.
. bench/cuda/device_env.sh
start_synth
echo "== cuda tests"; timeout 200 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"; grep -E "\[probe\]|FAILED|PASSED" $O/cuda_tests.log | tail -6
echo "== e2e goldens + hybrid on cuda"; MOX_TEST_DEVICE=cuda MOX_BIN=/tmp/bin/mox MOX_TOOL_DIR=/tmp/bin timeout 150 python3 -m pytest -q -p no:cacheprovider tests/py/test_goldens.py tests/py/test_hybrid.py > $O/e2e.log 2>&1; tail -1 $O/e2e.log; grep -E "FAILED|Error" $O/e2e.log | head -6
wait_synth; echo "synth done t=$(el)"
echo "== calibrate"; timeout 100 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "rc $? t=$(el)"; grep -iE "deltanet|launch gap|round trip|hand-off" $O/calibrate.txt | head -8; cp /tmp/moxcache/hardware-*.json $O/ 2>/dev/null
echo "== issue 5 table (depth 0)"; timeout $(( 320 - $(el) )) bench/cuda/qwen36_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $O/table 3 2 > $O/table.log 2>&1; echo "rc $? t=$(el)"; grep -E "^\| q" $O/table/f16.md $O/table/q8.md | cut -d'|' -f1,11-15,17-20 | cut -c1-220
echo "== planner accuracy"; REPS=2 RUN_TIMEOUT_S=120 timeout $(( 590 - $(el) )) bench/cuda/plan_accuracy.sh /tmp/bin/mox /tmp/q36.gguf $O/acc grouped > $O/acc.log 2>&1; echo "rc $? t=$(el)"; head -3 $O/acc/accuracy.md | tail -1; grep -E "^\| (ncmoe|layers|ctx|q8|ub4k|auto)" $O/acc/accuracy.md | cut -d'|' -f2,9-16 | head -24
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 12, call 4 (577c1a9, the committed tree after this session's experiments were reverted):
# every CUDA test, then issue 6's planner accuracy sweep (bench/cuda/plan_accuracy.sh, grouped).
. bench/cuda/device_env.sh
start_synth
echo "== cuda tests"; timeout 150 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"
grep -E "FAILED|PASSED|tests ran" $O/cuda_tests.log | tail -12
wait_synth; echo "synth done t=$(el)"
timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "calibrate rc $? t=$(el)"; cp /tmp/moxcache/hardware-*.json $O/
echo "== accuracy"; RUN_TIMEOUT_S=150 timeout $(( 440 - $(el) )) bench/cuda/plan_accuracy.sh /tmp/bin/mox /tmp/q36.gguf $O/acc > $O/acc.log 2>&1; echo "rc $? t=$(el)"
head -40 $O/acc/accuracy.md 2>/dev/null | cut -c1-220
cd $OUT && tar czf r.tgz r && rm -rf r

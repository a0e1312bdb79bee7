#!/bin/bash
# session 15, call 5 (71b0394, warm machine: same model file): calibration, then the planner accuracy sweep.
. bench/cuda/device_env.sh
start_synth; wait_synth; echo "synth done t=$(el)"
timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "calibrate rc $? t=$(el)"
grep -E "DRAM|  Q4_K|  Q6_K" $O/calibrate.txt
cp -r $MOX_CACHE_DIR $O/moxcache
timeout $(( 330 - $(el) )) bench/cuda/plan_accuracy.sh /tmp/bin/mox /tmp/q36.gguf $O/acc > $O/acc.log 2>&1; echo "acc rc $? t=$(el)"
head -5 $O/acc/accuracy.md | tail -3
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 15, call 1: CUDA tests (device argmax), full calibration with the 16x-LLC expert stack,
# device-argmax A/B (decode), lazy vs eager module loading A/B (pp4096 at the 24 GiB plan), accuracy sweep.
. bench/cuda/device_env.sh
start_synth
( timeout 200 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "tests rc $?" >> $O/cuda_tests.log ) &
tp=$!
wait_synth; echo "synth done t=$(el)"
wait $tp; tail -3 $O/cuda_tests.log; grep -E "FAILED|Argmax" $O/cuda_tests.log | head; echo "tests done t=$(el)"
timeout 150 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "calibrate rc $? t=$(el)"
grep -iE "expert|dram|q4_k|q6_k" $O/calibrate.txt | head -20
cp -r $MOX_CACHE_DIR $O/moxcache 2>/dev/null
ROUNDS=3 REPS=3 TESTS="-p 0 -n 128" timeout 170 bench/cuda/ab_env.sh /tmp/bin/mox /tmp/q36.gguf $O/ab_argmax - MOX_CUDA_ARGMAX=0 > $O/ab_argmax.log 2>&1; echo "ab argmax rc $? t=$(el)"
cat $O/ab_argmax/ab.md
ROUNDS=2 REPS=2 TESTS="-p 4096 -n 0 -ub 4096 -b 4096" EXTRA="--plan auto --vram-budget 24GiB -c 32768" timeout 130 bench/cuda/ab_env.sh /tmp/bin/mox /tmp/q36.gguf $O/ab_lazy - CUDA_MODULE_LOADING=EAGER > $O/ab_lazy.log 2>&1; echo "ab lazy rc $? t=$(el)"
cat $O/ab_lazy/ab.md
timeout $(( 585 - $(el) )) bench/cuda/plan_accuracy.sh /tmp/bin/mox /tmp/q36.gguf $O/acc > $O/acc.log 2>&1; echo "acc rc $? t=$(el)"
head -5 $O/acc/accuracy.md; grep -E "^\| " $O/acc/accuracy.md | head -30
cd $OUT && tar czf r.tgz r && rm -rf r

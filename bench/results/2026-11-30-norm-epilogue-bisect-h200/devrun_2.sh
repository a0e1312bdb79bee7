#!/bin/bash
# session 9, call 2: every CUDA test (new: the decode hand-off probe, the MoE and DeltaNet prefill
# probes); `mox calibrate` with them after the synth; tg128 bisect of the decode regression found in
# call 1 (e9d6c99 330 vs 315 t/s): session 7's main, the merge of moe-rows (49821e1), the merges up to
# norm-epilogue (47470dc), and this build, three alternations.
. bench/cuda/device_env.sh
start_synth
echo "== cuda tests"; timeout 240 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"; grep -E "\[probe\]|FAILED|tests ran|PASSED" $O/cuda_tests.log | tail -14
wait_synth; echo "synth done t=$(el)"
echo "== calibrate"; timeout 150 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "rc $? t=$(el)"; grep -iE "deltanet|epilogue|launch gap|round trip|hand-off" $O/calibrate.txt | head -10; grep -E "^    (Q4_K|Q6_K|Q8_0) " $O/calibrate.txt; cp /tmp/moxcache/hardware-*.json $O/ 2>/dev/null
ab() { echo "-- $1 $(/tmp/bin/$1 bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -r 3 -o md $C 2>&1 | grep -E "^\| q|rror" | cut -d'|' -f11-14)"; }
echo "== bisect tg128"
for i in 1 2 3; do ab mox_old; ab mox_49821e1; ab mox_47470dc; ab mox; done
echo "t=$(el)"
# (the accuracy sweep waits for the final call; call 1's measurements are re-predicted from this profile)
cd $OUT && tar czf r.tgz r && rm -rf r

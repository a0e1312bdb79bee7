#!/bin/bash
# session 9, call 1 (build 1a17e85):
# `mox calibrate` after the synth; tg128 A/B of this build against e9d6c99 (session 7's main), four
# alternations (session 8's two were inconclusive); the planner accuracy sweep with the norm-epilogue
# probe in the profile.
. bench/cuda/device_env.sh
start_synth
echo "== probe sanity (mox_cuda_tests not carried: the tree + carry limit)"
wait_synth; echo "synth done t=$(el)"
echo "== calibrate"; timeout 120 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "rc $? t=$(el)"; grep -iE "deltanet|epilogue|launch gap|round trip" $O/calibrate.txt | head -8; cp /tmp/moxcache/hardware-*.json $O/ 2>/dev/null
ab() { echo "-- $1 $(/tmp/bin/$1 bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -r 3 -o md $C 2>&1 | grep -E "^\| q|rror" | cut -d'|' -f11-14)"; }
echo "== A/B tg128: this build vs e9d6c99"
for i in 1 2 3 4; do ab mox_old; ab mox; done
echo "t=$(el)"
echo "== planner accuracy"; REPS=2 RUN_TIMEOUT_S=120 timeout $(( 585 - $(el) )) bench/cuda/plan_accuracy.sh /tmp/bin/mox /tmp/q36.gguf $O/acc grouped > $O/acc.log 2>&1; echo "rc $? t=$(el)"; grep -E "^\| (ncmoe|layers|ctx|q8|ub4k|auto|all)" $O/acc/accuracy.md | cut -d'|' -f2,9-12 | head -24
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 8, call 4: calibrate with the new decode probes (MoE launches, DeltaNet step) and their
# sanity test; A/B of this build against e9d6c99 (session 7's main) for the decode regression seen in
# call 3; the planner accuracy sweep (21 configurations); issue 5's depth-32768 rows vs llama.cpp.
R=$PWD; T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/bin $OUT/r && for n in mox mox_old mox_cuda_tests; do xz -dc out/devcarry/cuda/$n.xz > /tmp/bin/$n; chmod +x /tmp/bin/$n; done
xz -dc out/devcarry/llama-bench.xz > /tmp/bin/llama-bench; chmod +x /tmp/bin/llama-bench
LL=$(dirname $(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)):$(dirname $(find /usr/local /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LL:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=/tmp/moxcache
O=$OUT/r; C="--corpus $R/bench/corpus/ruth_basic_english.txt"
( ls /tmp/q36.gguf >/dev/null 2>&1 || /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 > $O/synth.log 2>&1; sync ) &
SP=$!
echo "== calibrate"; timeout 120 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "rc $? t=$(el)"; grep -iE "deltanet|MoE decode|Q4_K|Q6_K|Q8_0|launch gap|round trip" $O/calibrate.txt | head -12; cp /tmp/moxcache/hardware-*.json $O/ 2>/dev/null
echo "== probe tests"; timeout 90 /tmp/bin/mox_cuda_tests --gtest_filter='CudaProbe*' > $O/probe_tests.log 2>&1; echo "rc $? t=$(el)"; grep -E "\[probe\]|PASSED|FAILED" $O/probe_tests.log | tail -12
wait $SP; echo "t=$(el)"
ab() { echo "-- $1"; /tmp/bin/$1 bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -r 3 -o md $C 2>&1 | grep -E "^\| q|rror" | cut -d'|' -f11-14; }
echo "== A/B tg128: this build vs e9d6c99"
ab mox_old; ab mox; ab mox_old; ab mox
echo "t=$(el)"
echo "== planner accuracy"; REPS=2 RUN_TIMEOUT_S=120 timeout 260 bench/cuda/plan_accuracy.sh /tmp/bin/mox /tmp/q36.gguf $O/acc grouped > $O/acc.log 2>&1; echo "rc $? t=$(el)"; head -4 $O/acc/accuracy.md 2>/dev/null | tail -2; grep -E "^\| (ncmoe|layers|ctx|q8|ub4k|auto)" $O/acc/accuracy.md | cut -d'|' -f2,9-12 | head -24
LEFT=$(( 575 - $(el) )); echo "== depth 32768 ($LEFT s left)"
if [ $LEFT -gt 60 ]; then timeout $LEFT /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128,512 -d 32768 -r 2 $C --compare /tmp/bin/llama-bench -o md -oe json > $O/depth.md 2> $O/depth.json; echo "rc $?"; grep -E "^\| q" $O/depth.md | cut -d'|' -f10-16; fi
cd $OUT && tar czf r.tgz r && rm -rf r

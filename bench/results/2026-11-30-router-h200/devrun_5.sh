#!/bin/bash
# session 7, call 5 (final build bc92d8a): all CUDA tests; issue 5's table (bench/cuda/qwen36_h200.sh: f16 pp512/2048 tg128/512,
# q8_0 KV, depth 32768 tg128/512) vs llama.cpp; calibrate; issue 6's 24 GiB cases (context 32768 and 262144).
R=$PWD; T0=$(date +%s)
mkdir -p /tmp/bin $OUT/r && for n in mox mox_cuda_tests; do xz -dc out/devcarry/cuda/$n.xz > /tmp/bin/$n; chmod +x /tmp/bin/$n; done
xz -dc out/devcarry/llama-bench.xz > /tmp/bin/llama-bench; chmod +x /tmp/bin/llama-bench
LL=$(dirname $(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)):$(dirname $(find /usr/local /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LL:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=/tmp/moxcache
O=$OUT/r
( ls /tmp/q36.gguf >/dev/null 2>&1 || /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 > $O/synth.log 2>&1; sync ) &
SP=$!
echo "== cuda tests"; timeout 100 /tmp/bin/mox_cuda_tests --gtest_filter='-*Bandwidth*:*Timing*' > $O/cuda_tests.log 2>&1; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $O/cuda_tests.log | tail -5
wait $SP; sleep 1
echo "== issue 5 table (t=$(( $(date +%s) - T0 )) s)"; timeout 280 bench/cuda/qwen36_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $O/table 3 2 > $O/table.log 2>&1; grep -E "^\| q" $O/table/*.md | cut -c1-260
echo "== calibrate (t=$(( $(date +%s) - T0 )) s)"; timeout 90 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; tail -3 $O/calibrate.txt
LEFT=$(( 545 - ($(date +%s) - T0) )); echo "== hybrid 24 GiB (t=$(( $(date +%s) - T0 )) s, $LEFT s left)"
[ $LEFT -gt 60 ] && GRID="" EXTRA="24:262144" DEADLINE_S=$(( LEFT / 2 )) MAX_PROBES=2 RUN_TIMEOUT_S=100 timeout $LEFT bench/cuda/hybrid_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $O/hybrid 24 > $O/hybrid.log 2>&1
tail -20 $O/hybrid/results.md 2>/dev/null; tail -3 $O/hybrid.log
cd $OUT && tar czf r.tgz r && rm -rf r

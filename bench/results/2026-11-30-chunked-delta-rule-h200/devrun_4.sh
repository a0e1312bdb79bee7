#!/bin/bash
# session 13, call 4 (mox at the commit with MOX_CUDA_GATE_UP_ROWS): decode A/B of the MoE gate/up
# with one h row per warp against two (greedy ids of both must match: the same sums in the same
# order), then issue 6 at 24/16/8 GiB with this session's chunked delta rule (default gate/up).
. bench/cuda/device_env.sh
start_synth
wait_synth; echo "synth done t=$(el)"
rm -rf /tmp/moxcache; timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "calibrate rc $? t=$(el)"; cp /tmp/moxcache/hardware-*.json $O/
head -c 1500 $R/bench/corpus/ruth_basic_english.txt > /tmp/p.txt
for v in "" "MOX_CUDA_GATE_UP_ROWS=1"; do
  tag=$(echo "x $v" | tr -c 'a-zA-Z0-9' _)
  env $v timeout 60 /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -f /tmp/p.txt -n 64 --temp 0 --ids-out $O/ids$tag.txt > $O/run$tag.log 2>&1; echo "rc $? [$v] t=$(el)"
done
md5sum $O/ids*.txt
echo "== decode A/B"; ROUNDS=3 REPS=3 TESTS="-p 0 -n 256" timeout 120 bench/cuda/ab_env.sh /tmp/bin/mox /tmp/q36.gguf $O/ab - "MOX_CUDA_GATE_UP_ROWS=1" > $O/ab.log 2>&1; echo "rc $? t=$(el)"; cat $O/ab/ab.md
echo "== issue 6, 24 16 8"; EXTRA="" GRID="" MAX_PROBES=2 RUN_TIMEOUT_S=80 DEADLINE_S=$(( 470 - $(el) )) timeout $(( 580 - $(el) )) bench/cuda/hybrid_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $O/hybrid "24 16 8" > $O/hybrid.log 2>&1; echo "rc $? t=$(el)"
cat $O/hybrid/results.md 2>/dev/null | head -30
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 11, call 5 (the build of call 4): issue 5's table against llama.cpp (0c1e570, CUDA sm_90,
# built by hand; depth rows cut by the call's time) and issue 6's 24 GiB case (mox's auto plan against
# llama.cpp's best --n-cpu-moe and its fit, tg512 and pp4096 at -ub 4096, context 32768).
. bench/cuda/device_env.sh
start_synth
ldd /tmp/bin/llama-bench | grep -i "not found"; /tmp/bin/llama-bench --help > /dev/null 2>&1; echo "llama-bench runs: rc $?"
wait_synth; echo "synth done t=$(el)"
timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "calibrate rc $? t=$(el)"; cp /tmp/moxcache/hardware-*.json $O/
echo "== issue 5 table"; timeout $(( 300 - $(el) )) bench/cuda/qwen36_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $O/table 3 1 > $O/table.log 2>&1; echo "rc $? t=$(el)"
grep -hE "^\| q" $O/table/f16.md $O/table/q8.md 2>/dev/null | cut -c1-250
echo "== issue 6, 24 GiB"; EXTRA="" GRID="" MAX_PROBES=2 RUN_TIMEOUT_S=80 DEADLINE_S=$(( 420 - $(el) )) timeout $(( 480 - $(el) )) bench/cuda/hybrid_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $O/hybrid "24" > $O/hybrid.log 2>&1; echo "rc $? t=$(el)"
cat $O/hybrid/results.md 2>/dev/null | head -30
cd $OUT && tar czf r.tgz r && rm -rf r

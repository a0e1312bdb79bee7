#!/bin/bash
# session 9, call 5 (same build as call 4, machine still warm with the synthetic model): issue 6's
# hybrid benchmark at 24, 16 and 8 GiB (context 32768) and 24 GiB at 262144: mox's auto plan against
# llama.cpp's best --n-cpu-moe (searched) and its fit, tg512 and pp4096 (-ub 4096), in the time left.
. bench/cuda/device_env.sh
start_synth; wait_synth
[ -e /tmp/moxcache/hardware-vm.json ] || timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1
GRID="" MAX_PROBES=2 RUN_TIMEOUT_S=90 DEADLINE_S=240 timeout 470 bench/cuda/hybrid_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $O/hybrid "24 16 8" > $O/hybrid.log 2>&1; echo "rc $? t=$(el)"
grep -E "^- decode|^- prefill|^\| (mox|llama)" $O/hybrid/results.md 2>/dev/null | cut -c1-260; tail -3 $O/hybrid.log
cd $OUT && tar czf r.tgz r && rm -rf r

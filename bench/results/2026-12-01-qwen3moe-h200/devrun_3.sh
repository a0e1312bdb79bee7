#!/bin/bash
# Call 3 (the machine of call 2, still warm: /tmp/bin and /tmp/q3.gguf are there): calibrate this
# machine, then Qwen3-30B-A3B in hybrid at a VRAM budget of 8 GiB (context 32768): mox's automatic
# plan against llama.cpp's best --n-cpu-moe and its --fit, the engines alternating
# (bench/cuda/hybrid_h200.sh; tg512 and pp4096 at -ub 4096).
mkdir -p out && rm -rf out/devcarry && ln -s /tmp/dc out/devcarry
. bench/cuda/device_env.sh
timeout 120 /tmp/bin/mox calibrate > $O/calibrate.log 2>&1; echo "calibrate rc $? t=$(el)"; tail -3 $O/calibrate.log
EXTRA="" GRID="" MAX_PROBES=2 DEADLINE_S=240 RUN_TIMEOUT_S=150 timeout 430 bash bench/cuda/hybrid_h200.sh /tmp/bin/mox \
  /tmp/bin/llama-bench /tmp/q3.gguf $O/hybrid "8" > $O/hybrid.log 2>&1
echo "hybrid rc $? t=$(el)"; cat $O/hybrid/results.md 2>/dev/null | head -30; tail -5 $O/hybrid.log
cd $OUT && tar czf r.tgz r && rm -rf r

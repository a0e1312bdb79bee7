#!/bin/bash
# session 14, call 3 (the committed cuBLAS path + four-row permute): issue 6 at 24 GiB (context 32768
# and 262144) against llama.cpp in the same run, then the planner accuracy sweep (21 configurations).
. bench/cuda/device_env.sh
start_synth; wait_synth; echo "synth done t=$(el)"
EXTRA="24:262144" GRID="" MAX_PROBES=2 timeout 330 bench/cuda/hybrid_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $O/hybrid "24" > $O/hybrid.log 2>&1; echo "rc $? t=$(el)"
grep -E "decode mox|^\| mox|^\| llama.cpp -ncmoe|fit-target" $O/hybrid/results.md | head -20
for f in $O/hybrid/raw/llama_*.log; do { head -150 "$f"; echo "[...]"; tail -150 "$f"; } > "$f.cut" && mv "$f.cut" "$f"; done
timeout $(( 570 - $(el) )) bench/cuda/plan_accuracy.sh /tmp/bin/mox /tmp/q36.gguf $O/acc > $O/acc.log 2>&1; echo "rc $? t=$(el)"
head -5 $O/acc/accuracy.md
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 16, call 2 (9d65db2, the build of call 1's accuracy sweep): full calibration, then issue 6's
# hybrid benchmark at 24, 16 and 8 GiB (context 32768) and 24 GiB at 262144 against llama.cpp.
. bench/cuda/device_env.sh
start_synth; wait_synth; echo "synth done t=$(el)"
timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "calibrate rc $? t=$(el)"
grep -E "DRAM|  Q4_K|  Q6_K" $O/calibrate.txt
cp -r $MOX_CACHE_DIR $O/moxcache
EXTRA="24:262144" GRID="" MAX_PROBES=2 timeout $(( 585 - $(el) )) bench/cuda/hybrid_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $O/hybrid "24 16 8" > $O/hybrid.log 2>&1; echo "rc $? t=$(el)"
grep -E "decode mox|^\| mox|^\| [0-9]+ GiB|fit-target" $O/hybrid/results.md | head -30
for f in $O/hybrid/raw/llama_*.log; do { head -150 "$f"; echo "[...]"; tail -150 "$f"; } > "$f.cut" && mv "$f.cut" "$f"; done
cd $OUT && tar czf r.tgz r && rm -rf r

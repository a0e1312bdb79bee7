#!/bin/bash
# Call 3 (the machine of call 2, still warm: /tmp/bin and the model files are there): calibrate
# this machine (a minute after the files were written), then Qwen3-30B-A3B in hybrid: mox's
# automatic plan at VRAM budgets of 8 and 4 GiB (context 32768), tg512 and pp4096 at -ub 4096, with
# the plan's predicted VRAM and speeds against what the driver and the run measured.
mkdir -p out && rm -rf out/devcarry && ln -s /tmp/dc out/devcarry
. bench/cuda/device_env.sh
timeout 150 /tmp/bin/mox calibrate > $O/calibrate.log 2>&1; echo "calibrate rc $? t=$(el)"; tail -3 $O/calibrate.log
for b in 8 4; do
  timeout 200 /tmp/bin/mox bench -m /tmp/q3.gguf -ngl 99 --plan auto --vram-budget ${b}GiB -c 32768 -p 4096 -n 512 -ub 4096 -b 4096 \
    -r 2 $C -o md > $O/q3_hybrid_${b}.md 2> $O/q3_hybrid_${b}.err
  echo "hybrid ${b} GiB rc $? t=$(el)"; grep -E '^\||plan:|VRAM|predict' $O/q3_hybrid_${b}.md | head -12
  grep -E "plan:|VRAM" $O/q3_hybrid_${b}.err | head -4
done
cd $OUT && tar czf r.tgz r && rm -rf r

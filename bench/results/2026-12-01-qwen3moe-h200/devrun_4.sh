#!/bin/bash
# Call 4 (the machine of calls 2-3, still warm; typed as one command line): Qwen3-30B-A3B in hybrid at
# 16 and 12 GiB (context 32768, -ub 4096) and at 4 GiB (context 4096, -ub 512: 4 GiB holds no plan
# at 32768 tokens with -ub 4096, call 3).
mkdir -p out && rm -rf out/devcarry && ln -s /tmp/dc out/devcarry; . bench/cuda/device_env.sh
for cfg in "16 32768 4096" "12 32768 4096" "4 4096 512"; do set -- $cfg
  timeout 150 /tmp/bin/mox bench -m /tmp/q3.gguf -ngl 99 --plan auto --vram-budget ${1}GiB -c $2 -p 4096 -n 512 -ub $3 -b 4096 \
    -r 2 $C -o md > $O/q3_hybrid_${1}.md 2> $O/q3_hybrid_${1}.err
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $O/gpu.txt
lscpu | grep -E "Model name|^CPU\(s\)" >> $O/gpu.txt
cd $OUT && tar czf r.tgz r && rm -rf r

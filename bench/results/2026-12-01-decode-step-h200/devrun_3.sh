#!/bin/bash
# session 17, call 3 (bf6f905): issue 5's rows (bench/cuda/qwen36_h200.sh: f16, q8_0 KV, depth
# 32768), mox against llama.cpp's CUDA build on the same file in the same run, with the greedy
# steps copying back only the device's arg max.
. bench/cuda/device_env.sh
start_synth; wait_synth; echo "synth done t=$(el)"
timeout $(( 585 - $(el) )) bench/cuda/qwen36_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $O/qwen36 3 2 > $O/qwen36.log 2>&1; echo "rc $? t=$(el)"
grep -E "^\| (pp|tg)|tg128|tg512|pp512|pp2048" $O/qwen36/*.md | head -40
cd $OUT && tar czf r.tgz r && rm -rf r

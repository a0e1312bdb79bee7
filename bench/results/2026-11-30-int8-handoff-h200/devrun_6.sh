#!/bin/bash
# session 6, call 6: issue 5's prefill rows (pp2048) and q8_0 KV decode vs llama.cpp, committed kernels (the build of call 3)
R=$PWD
mkdir -p /tmp/bin && xz -dc out/devcarry/cuda/mox.xz > /tmp/bin/mox && xz -dc out/devcarry/llama-bench.xz > /tmp/bin/llama-bench && chmod +x /tmp/bin/*
LL=$(dirname $(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)):$(dirname $(find /usr/local /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LL:$LD_LIBRARY_PATH
C="--corpus bench/corpus/ruth_basic_english.txt"
/tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 2>&1 | tail -1; sync
echo "== f16 KV: pp2048, tg128"; timeout 120 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 2048 -n 128 -r 2 -o md $C --compare /tmp/bin/llama-bench > $OUT/f16.md 2> $OUT/f16.err; grep -E "^\| q" $OUT/f16.md; tail -1 $OUT/f16.err
echo "== q8_0 KV: tg128"; timeout 70 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -r 2 -ctk q8_0 -ctv q8_0 -o md $C --compare /tmp/bin/llama-bench > $OUT/q8.md 2> $OUT/q8.err; grep -E "^\| q" $OUT/q8.md; tail -1 $OUT/q8.err

#!/bin/bash
# session 5, call 5: the committed defaults (PDL and L2 prefetch off, 8-warp matvec blocks), all-GPU and hybrid -ncmoe 40 vs llama.cpp
R=$PWD
mkdir -p /tmp/bin && xz -dc out/devcarry/cuda/mox.xz > /tmp/bin/mox && xz -dc out/devcarry/llama-bench.xz > /tmp/bin/llama-bench && chmod +x /tmp/bin/*
LL=$(dirname $(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)):$(dirname $(find /usr/local /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LL:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=/tmp/moxcache
C="--corpus bench/corpus/ruth_basic_english.txt"
/tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 2>&1 | tail -1; sync; sleep 2
/tmp/bin/mox calibrate > $OUT/calibrate.txt 2>&1; grep -E "DRAM|launch gap" $OUT/calibrate.txt
echo "== all-GPU tg128"; /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -r 3 -o md $C 2>&1 | grep -E "^\| q|rror"
echo "== hybrid -ncmoe 40 vs llama.cpp"; timeout 150 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -ncmoe 40 -p 0 -n 128 -r 3 -o md $C --compare /tmp/bin/llama-bench > $OUT/hybrid40.md 2> $OUT/hybrid40.err; grep -E "^\| q" $OUT/hybrid40.md; tail -1 $OUT/hybrid40.err

#!/bin/bash
# session 6, call 4: calibrate with the new kernels, then issue 6's budget table (mox --plan auto vs llama.cpp's best -ncmoe and fit)
R=$PWD
mkdir -p /tmp/bin && for n in mox; do [ -x /tmp/bin/$n ] || { xz -dc out/devcarry/cuda/$n.xz > /tmp/bin/$n; chmod +x /tmp/bin/$n; }; done
[ -x /tmp/bin/llama-bench ] || { xz -dc out/devcarry/llama-bench.xz > /tmp/bin/llama-bench; chmod +x /tmp/bin/llama-bench; }
LL=$(dirname $(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)):$(dirname $(find /usr/local /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LL:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=/tmp/moxcache
ls /tmp/q36.gguf >/dev/null 2>&1 || { /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 | tail -1; sync; }
mkdir -p $OUT/h
/tmp/bin/mox calibrate > $OUT/h/calibrate.txt 2>&1; grep -E "DRAM|launch gap|matvec" $OUT/h/calibrate.txt | head -8
cp $MOX_CACHE_DIR/*.json $OUT/h/ 2>/dev/null
EXTRA="" GRID="" DEADLINE_S=200 timeout 480 bench/cuda/hybrid_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $OUT/h/run > $OUT/h/hybrid.log 2>&1; tail -5 $OUT/h/hybrid.log
cat $OUT/h/run/results.md 2>/dev/null | head -40
rm -rf $OUT/h/run/raw; cd $OUT && tar czf h.tgz h && rm -rf h

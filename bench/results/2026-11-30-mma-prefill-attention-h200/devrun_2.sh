#!/bin/bash
# session 8, call 2: the tensor-core prefill attention: CudaAttention tests, the attention bench with and
# without MOX_CUDA_ATTN_MMA=0, then pp512/pp2048 A/B on the synthetic model.
R=$PWD; T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/bin $OUT/r && for n in mox mox_cuda_tests; do xz -dc out/devcarry/cuda/$n.xz > /tmp/bin/$n; chmod +x /tmp/bin/$n; done
LL=$(dirname $(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)):$(dirname $(find /usr/local /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LL:$LD_LIBRARY_PATH
O=$OUT/r; C="--corpus $R/bench/corpus/ruth_basic_english.txt"
( ls /tmp/q36.gguf >/dev/null 2>&1 || /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 > $O/synth.log 2>&1; sync ) &
SP=$!
echo "== attention tests"; timeout 120 /tmp/bin/mox_cuda_tests --gtest_filter='CudaAttention*:CudaBasic*' > $O/attn_tests.log 2>&1; echo "rc $? t=$(el)"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|\[bench\]" $O/attn_tests.log | tail -12
grep -B3 -A10 "Failure" $O/attn_tests.log | head -50
echo "== bench MMA off"; MOX_CUDA_ATTN_MMA=0 timeout 60 /tmp/bin/mox_cuda_tests --gtest_filter='CudaAttention.Bench' 2>&1 | grep "\[bench\]"
wait $SP; echo "t=$(el)"
ab() { echo "-- $1"; shift; env "$@" timeout 100 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 512,2048 -n 0 -r 3 -o md $C 2>&1 | grep -E "^\| q|rror"; }
ab mma-on X=1
ab ATTN_MMA=0 MOX_CUDA_ATTN_MMA=0
ab mma-on X=1
cd $OUT && tar czf r.tgz r && rm -rf r

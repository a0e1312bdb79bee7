#!/bin/bash
# session 10, call 2: the CUDA tests (the attention probe's fix, the short-attention warps now auto by
# default, the router split removed, the gate/up kernel in 64 + 64-row halves), the decode-attention
# probe with and without the short-context kernel (where the tensor-core kernel overtakes it), the MoE
# prefill probe and kernel timing in both gate/up layouts, then prefill A/B of the two layouts.
. bench/cuda/device_env.sh
start_synth
echo "== cuda tests"; timeout 200 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"; grep -E "\[probe\]|\[bench\]|FAILED|PASSED" $O/cuda_tests.log | tail -40
echo "== attention probe, short kernel off"; MOX_CUDA_ATTN_SHORT=0 timeout 60 /tmp/bin/mox_cuda_tests --gtest_filter='CudaProbe.AttentionDecode' > $O/attn_short0.log 2>&1; grep -E "\[probe\]|FAILED|PASSED" $O/attn_short0.log
echo "== MoE prefill, pair layout"; MOX_CUDA_MOE_GATE_UP=pair timeout 90 /tmp/bin/mox_cuda_tests --gtest_filter='CudaProbe.MoePrefill*:CudaBench.MoeBatch*' > $O/moe_pair.log 2>&1; grep -E "\[probe\]|\[bench\]|FAILED|PASSED" $O/moe_pair.log
wait_synth; echo "synth done t=$(el)"
echo "== prefill A/B"; ROUNDS=3 REPS=3 TESTS="-p 512,2048 -n 0" timeout 240 bench/cuda/ab_env.sh /tmp/bin/mox /tmp/q36.gguf $O/ab - MOX_CUDA_MOE_GATE_UP=pair > $O/ab.log 2>&1; echo "rc $? t=$(el)"; cat $O/ab/ab.md
echo "== ub 4096 pp4096"; timeout 80 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 $C -p 4096 -n 0 --ubatch-size 4096 -r 3 -o md > $O/pp4096.md 2>&1; echo "rc $? t=$(el)"; grep pp4096 $O/pp4096.md | cut -c1-200
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 10, call 4 (raw staging only where two blocks per SM still fit: not Q6_K at token tile 64;
# the other tiles' SASS equal to the build before raw staging): the CUDA tests, issue 5's depth-0
# table against llama.cpp (f16 and q8_0 KV; call 3 has the depth rows, whose decode kernels are
# unchanged since), pp2048 at -ub 2048 for both engines, pp4096 at -ub 4096, `mox calibrate`.
. bench/cuda/device_env.sh
start_synth
echo "== cuda tests"; timeout 150 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"; grep -E "\[bench\] (moe_batch|matmul)|\[probe\] (decode attention|MoE prefill)|FAILED|PASSED" $O/cuda_tests.log | tail -34
if grep -qE "FAILED.*(CudaMatmul|CudaMoeBatch)|Aborted" $O/cuda_tests.log; then grep -B5 -A20 "Failure" $O/cuda_tests.log | head -60; cd $OUT && tar czf r.tgz r && rm -rf r; exit 0; fi
wait_synth; echo "synth done t=$(el)"
echo "== calibrate"; timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "rc $? t=$(el)"; grep -iE "attention|MoE prefill" $O/calibrate.txt | head -6; cp /tmp/moxcache/hardware-*.json $O/ 2>/dev/null
echo "== pp4096 ub 4096"; timeout 60 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 $C -p 4096 -n 0 --ubatch-size 4096 -r 3 -o md > $O/pp4096.md 2>&1; echo "rc $? t=$(el)"; grep pp4096 $O/pp4096.md | cut -c1-200
echo "== pp2048 at ub 2048, both"; timeout 120 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 $C -p 2048 -n 0 --ubatch-size 2048 -r 3 --compare /tmp/bin/llama-bench -o md > $O/pp2048_ub2048.md 2>&1; echo "rc $? t=$(el)"; grep -E "pp2048" $O/pp2048_ub2048.md | cut -c1-220
echo "== issue 5 table"; timeout $(( 470 - $(el) )) bench/cuda/qwen36_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $O/table 3 2 > $O/table.log 2>&1; echo "rc $? t=$(el)"; grep -hE "^\| q" $O/table/f16.md $O/table/q8.md 2>/dev/null | cut -d'|' -f1,11-15,17-20 | cut -c1-220
cd $OUT && tar czf r.tgz r && rm -rf r

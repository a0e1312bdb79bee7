#!/bin/bash
# session 13, call 2: the chunked delta rule's products on raw mma.sync m16n8k8 (shared-memory
# operands by index: LDS instead of the wmma API's generic loads; tf32 split by truncation instead
# of software rounding; X, Y, O kept in registers). DeltaNet tests + timing, ncu of the two chunk
# kernels at 4096 tokens, every CUDA test, the transformers goldens on the GPU, then prefill A/B
# against 577c1a9 (mox_base) on the synthetic Qwen3.6-35B-A3B.
. bench/cuda/device_env.sh
start_synth
echo "== delta tests"; timeout 120 /tmp/bin/mox_cuda_tests --gtest_filter='CudaDeltaNet.*:GpuMemoryModel.*' > $O/delta_tests.log 2>&1; echo "rc $? t=$(el)"
grep -E "FAILED|PASSED|chunked|\[bench\] prefill" $O/delta_tests.log
echo "== ncu chunk kernels (4096 tokens)"
timeout 150 ncu --set full -k regex:"delta_net_chunk" --launch-skip 64 -c 2 /tmp/bin/mox_cuda_tests --gtest_filter='CudaDeltaNet.Timing' > $O/ncu_chunk.txt 2>&1; echo "rc $? t=$(el)"
grep -E "delta_net_chunk|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Stall|Bank|Warp Cycles Per Issued|Executed Ipc A" $O/ncu_chunk.txt | head -40
echo "== all cuda tests"; timeout 200 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"
grep -E "FAILED|PASSED|tests ran" $O/cuda_tests.log | tail -12
echo "== goldens on the GPU"; MOX_TEST_DEVICE=cuda MOX_BIN=/tmp/bin/mox MOX_TOOL_DIR=/tmp/bin timeout 200 python3 -m pytest -q -p no:cacheprovider tests/py/test_goldens.py > $O/goldens_gpu.log 2>&1; echo "rc $? t=$(el)"; tail -5 $O/goldens_gpu.log
wait_synth; echo "synth done t=$(el)"
head -c 3000 $R/bench/corpus/ruth_basic_english.txt > /tmp/p.txt
for v in mox_base mox; do
  timeout 60 /tmp/bin/$v run -m /tmp/q36.gguf -ngl 99 -f /tmp/p.txt -n 64 --temp 0 --ids-out $O/ids_$v.txt > $O/run_$v.log 2>&1; echo "rc $? [$v] t=$(el)"
done
md5sum $O/ids_*.txt
echo "== prefill A/B"
for round in 1 2 3; do
  for v in mox_base mox; do
    timeout 90 /tmp/bin/$v bench -m /tmp/q36.gguf -ngl 99 -r 3 $C -p 512,2048 -n 0 -o json > $O/ab_${v}_r${round}_ub512.json 2>> $O/ab.err
    timeout 90 /tmp/bin/$v bench -m /tmp/q36.gguf -ngl 99 -r 3 $C -p 4096 -n 0 -ub 4096 -b 4096 -o json > $O/ab_${v}_r${round}_ub4096.json 2>> $O/ab.err
    echo "round $round $v t=$(el)"
  done
  [ $(el) -gt 480 ] && break
done
python3 bench/results/2026-11-30-chunked-delta-rule-h200/ab_table.py $O
cd $OUT && tar czf r.tgz r && rm -rf r

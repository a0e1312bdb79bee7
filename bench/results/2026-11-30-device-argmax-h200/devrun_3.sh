#!/bin/bash
# session 15, call 3: a 128-token MoE tile (not committed: slower): CUDA tests (MoE, basic), kernel
# timing, pp4096 A/B against the 64-token tile.
. bench/cuda/device_env.sh
start_synth
( timeout 150 /tmp/bin/mox_cuda_tests --gtest_filter='CudaMoeBatch.*:CudaBasic.*:CudaBench.MoeBatch*' > $O/cuda_tests.log 2>&1; echo "tests rc $?" >> $O/cuda_tests.log
  MOX_CUDA_MOE_TILE=64 timeout 60 /tmp/bin/mox_cuda_tests --gtest_filter='CudaBench.MoeBatch*' > $O/bench_tile64.log 2>&1 ) &
tp=$!
wait_synth; echo "synth done t=$(el)"
wait $tp; tail -3 $O/cuda_tests.log; grep -E "FAILED|ms|TFLOP" $O/cuda_tests.log | head -20; grep -E "ms|TFLOP" $O/bench_tile64.log | head; echo "tests done t=$(el)"
timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "calibrate rc $? t=$(el)"
grep -E "MoE|Q4_K|Q6_K" $O/calibrate.txt | tail -4
ROUNDS=2 REPS=2 TESTS="-p 4096 -n 0 -ub 4096 -b 4096" EXTRA="--plan auto --vram-budget 24GiB -c 32768" timeout 200 bench/cuda/ab_env.sh /tmp/bin/mox /tmp/q36.gguf $O/ab_tile - MOX_CUDA_MOE_TILE=64 > $O/ab_tile.log 2>&1; echo "ab tile rc $? t=$(el)"
cat $O/ab_tile/ab.md
cd $OUT && tar czf r.tgz r && rm -rf r

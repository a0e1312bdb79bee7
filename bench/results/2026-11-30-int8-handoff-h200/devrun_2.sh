#!/bin/bash
# session 6, call 2: fixed matvec test; ncu details of the slow decode kernels (int8 build)
R=$PWD
mkdir -p /tmp/bin && for n in mox mox_cuda_tests; do xz -dc out/devcarry/cuda/$n.xz > /tmp/bin/$n; chmod +x /tmp/bin/$n; done
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=/tmp/moxcache
ls -la /tmp/q36.gguf 2>/dev/null || ( /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 > $OUT/synth.log 2>&1; sync )
echo "== cuda tests (matvec, moe)"; timeout 200 /tmp/bin/mox_cuda_tests --gtest_filter='CudaMatvec.*:CudaMoe.*:-*Bandwidth*' > $OUT/cuda_tests.log 2>&1; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran" $OUT/cuda_tests.log | tail -8
grep -A6 "Failure" $OUT/cuda_tests.log | head -30
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
for k in attention_kernel gate_up_kernel down_kernel add_rms_norm_kernel delta_net_seq_kernel; do
  echo "== ncu $k"
  MOX_CUDA_PROFILE_STEP=3 timeout 100 ncu --profile-from-start off --clock-control none --cache-control none $S --kernel-name regex:$k --launch-count 1 --csv --page details /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -p "Hello" -n 5 > $OUT/ncu_$k.csv 2> $OUT/ncu_$k.err; tail -1 $OUT/ncu_$k.err
done
MOX_CUDA_PROFILE_STEP=3 timeout 100 ncu --profile-from-start off --clock-control none --cache-control none $S --kernel-name regex:matvec_kernel --launch-skip 3 --launch-count 1 --csv --page details /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -p "Hello" -n 5 > $OUT/ncu_router.csv 2> $OUT/ncu_router.err; tail -1 $OUT/ncu_router.err
for f in $OUT/ncu_*.csv; do python3 tools/ncu_decode_table.py details $f 2>&1 | tail -2; done

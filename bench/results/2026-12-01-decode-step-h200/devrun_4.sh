#!/bin/bash
# session 17, call 4: the GPU model tests (forward_argmax; the decode graph's branches bit for bit
# against in-line launches); an alternating A/B of the branches (MOX_CUDA_BRANCH=0: z/beta/alpha and
# the attention's other-type projections after the first run instead of beside it); one decode step's
# kernels under ncu with their DRAM bytes at this build.
. bench/cuda/device_env.sh
start_synth
timeout 150 /tmp/bin/mox_cuda_tests --gtest_filter='CudaModel.*:CudaMoe.*:CudaConvProjection*:CudaMatvec.*' > $O/cuda_tests.log 2>&1; echo "tests rc $? t=$(el)"; grep -E "PASSED|FAILED|SKIPPED" $O/cuda_tests.log | head
wait_synth; echo "synth done t=$(el)"
for rep in 1 2; do
  for cfg in inline branch; do
    envs="MOX_CUDA_BRANCH=1"; [ $cfg = inline ] && envs="MOX_CUDA_BRANCH=0"
    env $envs timeout 120 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128,512 -r 5 $C -o md > $O/ab_${cfg}_$rep.md 2> $O/ab_${cfg}_$rep.err
    echo "$cfg $rep rc $? t=$(el)"; grep -E '^\| .*tg' $O/ab_${cfg}_$rep.md | awk -F'|' '{print $11, $12, $13, $14}'
  done
done
echo "== ncu step"
MOX_CUDA_PROFILE_STEP=3 timeout 120 ncu --profile-from-start off --clock-control none --cache-control none --print-units base --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -p "Hello" -n 6 > $O/ncu_step.csv 2> $O/ncu_step.err; echo "rc $? t=$(el)"
python3 tools/ncu_decode_table.py steps $O/ncu_step.csv > $O/ncu_step.md 2>&1; head -30 $O/ncu_step.md
cd $OUT && tar czf r.tgz r && rm -rf r

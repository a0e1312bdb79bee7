#!/bin/bash
# session 17, call 2: the new GPU model test (forward_argmax against forward's logits) and the MoE
# tests; ten kernels of one decode step under ncu with the scheduler, compute and memory sections
# (where a decode step's time goes, issue 5); the greedy A/B once more with this build.
. bench/cuda/device_env.sh
start_synth
timeout 120 /tmp/bin/mox_cuda_tests --gtest_filter='CudaModel.*:CudaMoe.*:CudaMatvec.*' > $O/cuda_tests.log 2>&1; echo "tests rc $? t=$(el)"; grep -E "PASSED|FAILED|SKIPPED" $O/cuda_tests.log | head
wait_synth; echo "synth done t=$(el)"
MOX_CUDA_PROFILE_STEP=3 timeout 240 ncu --profile-from-start off --clock-control none --cache-control none -k regex:"gate_up|down_kernel|conv_projection|delta_net_seq|add_rms_norm|matvec_kernel" --launch-count 16 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --csv --page details /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -p "Hello" -n 6 > $O/ncu_details.csv 2> $O/ncu_details.err; echo "ncu rc $? t=$(el)"
python3 tools/ncu_decode_table.py details $O/ncu_details.csv > $O/ncu_details.md 2>&1; cat $O/ncu_details.md
for rep in 1 2; do
  for cfg in logits amax; do
    envs=""; [ $cfg = logits ] && envs="MOX_CUDA_ARGMAX_ONLY=0"
    env $envs timeout 120 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128,512 -r 5 $C -o md > $O/ab_${cfg}_$rep.md 2> $O/ab_${cfg}_$rep.err
    echo "$cfg $rep rc $? t=$(el)"; grep -E '^\| .*tg' $O/ab_${cfg}_$rep.md | awk -F'|' '{print $11, $12, $13, $14}'
  done
done
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 11, call 2: two decode fusions, each switchable. The DeltaNet conv in the qkv projection's
# store (cuda::conv_projection, MOX_CUDA_CONV_FUSE) and the MoE input norm in the router's launch
# (cuda::add_rms_norm_matvec, MOX_CUDA_NORM_FUSE): 70 launches fewer per step. Every CUDA test; greedy
# ids with and without them (all-GPU and 10 host layers: designed bit for bit); the alternating A/B;
# one decode step's kernels under ncu (real clocks).
. bench/cuda/device_env.sh
start_synth
echo "== cuda tests"; timeout 200 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"
grep -E "FAILED|PASSED|tests ran" $O/cuda_tests.log | tail -12
wait_synth; echo "synth done t=$(el)"
timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "calibrate rc $? t=$(el)"
head -c 1500 $R/bench/corpus/ruth_basic_english.txt > /tmp/p.txt
for where in "-ngl 99" "-ngl 99 --n-cpu-moe 10 --plan manual"; do
  for v in "" "MOX_CUDA_CONV_FUSE=0 MOX_CUDA_NORM_FUSE=0"; do
    tag=$(echo "$where $v" | tr -c 'a-zA-Z0-9' _)
    env $v timeout 90 /tmp/bin/mox run -m /tmp/q36.gguf $where -f /tmp/p.txt -n 48 --temp 0 --ids-out $O/ids_$tag.txt > $O/run_$tag.log 2>&1; echo "rc $? $where [$v] t=$(el)"
  done
done
md5sum $O/ids_*.txt
echo "== A/B"; ROUNDS=3 REPS=3 timeout $(( 500 - $(el) )) bench/cuda/ab_env.sh /tmp/bin/mox /tmp/q36.gguf $O/ab - MOX_CUDA_CONV_FUSE=0 MOX_CUDA_NORM_FUSE=0 "MOX_CUDA_CONV_FUSE=0 MOX_CUDA_NORM_FUSE=0" > $O/ab.log 2>&1; echo "rc $? t=$(el)"; cat $O/ab/ab.md
echo "== ncu step"; MOX_CUDA_PROFILE_STEP=3 timeout $(( 580 - $(el) )) ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -p "Hello" -n 6 > $O/ncu_step.csv 2> $O/ncu_step.err; echo "rc $? t=$(el)"
python3 tools/ncu_decode_table.py steps $O/ncu_step.csv > $O/ncu_step.md 2>&1; head -30 $O/ncu_step.md
cd $OUT && tar czf r.tgz r && rm -rf r

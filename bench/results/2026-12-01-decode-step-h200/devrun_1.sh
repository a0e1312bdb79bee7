#!/bin/bash
# session 17, call 1: the CUDA tests; an alternating A/B of this session's decode changes (tg128, 5
# repetitions per invocation, two rounds): old = session 16's binary (cca7103's kernels), base = this
# build with both switches off (the router's warp reductions alone), l2 = the L2 look-ahead of later
# row sweeps, amax = the greedy step copying back only the arg max, both = the new defaults; then one
# decode step's kernels under ncu with their DRAM bytes (--cache-control none: L2 as the graph leaves it).
. bench/cuda/device_env.sh
start_synth
timeout 170 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "tests rc $? t=$(el)"; tail -4 $O/cuda_tests.log
wait_synth; echo "synth done t=$(el)"
for rep in 1 2; do
  for cfg in old base l2 amax both; do
    bin=/tmp/bin/mox; envs=""
    case $cfg in
      old) bin=/tmp/bin/mox_old;;
      base) envs="MOX_CUDA_L2_AHEAD=0 MOX_CUDA_ARGMAX_ONLY=0";;
      l2) envs="MOX_CUDA_ARGMAX_ONLY=0";;
      amax) envs="MOX_CUDA_L2_AHEAD=0";;
    esac
    env $envs timeout 120 $bin bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -r 5 $C -o md > $O/ab_${cfg}_$rep.md 2> $O/ab_${cfg}_$rep.err
    echo "$cfg $rep rc $? t=$(el): $(grep -E '^\| .*tg128' $O/ab_${cfg}_$rep.md | tail -1)"
  done
done
echo "== ncu step"
MOX_CUDA_PROFILE_STEP=3 timeout $(( 560 - $(el) )) ncu --profile-from-start off --clock-control none --cache-control none --print-units base --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -p "Hello" -n 6 > $O/ncu_step.csv 2> $O/ncu_step.err; echo "rc $? t=$(el)"
python3 tools/ncu_decode_table.py steps $O/ncu_step.csv > $O/ncu_step.md 2>&1; head -32 $O/ncu_step.md
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 14, call 2: the activation permute with several rows per block (mox) against call 1's build
# (mox_base, cuBLAS path only): every CUDA test, greedy ids of both builds (the permute only moves
# work between blocks, so the ids must be identical), prefill A/B at pp512 and pp4096 (-ub 4096).
. bench/cuda/device_env.sh
start_synth
echo "== all cuda tests"; timeout 300 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"
grep -E "FAILED|PASSED|tests ran" $O/cuda_tests.log | tail -12
grep -E "\[bench\] (matmul|MOX|moe)" $O/cuda_tests.log | head -40
wait_synth; echo "synth done t=$(el)"
head -c 6000 $R/bench/corpus/ruth_basic_english.txt > /tmp/p.txt
for v in mox_base mox; do
  timeout 60 /tmp/bin/$v run -m /tmp/q36.gguf -ngl 99 -f /tmp/p.txt -n 32 --temp 0 --ids-out $O/ids_$v.txt > $O/run_$v.log 2>&1; echo "rc $? [$v] t=$(el)"
done
md5sum $O/ids_*.txt
ROUNDS=3 REPS=3 TESTS="-p 512,4096 -n 0 -ub 4096 -b 4096" bench/cuda/ab_env.sh /tmp/bin/mox /tmp/q36.gguf $O/ab_permute - MOX=/tmp/bin/mox_base > $O/ab_permute.log 2>&1; echo "rc $? t=$(el)"
cat $O/ab_permute/ab.md
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 14, call 1: large-batch dense projections through cuBLAS (weights decoded to fp16 once per
# call). Every CUDA test (the new cuBLAS ones, the tiles with the path off) and the matmul timings of
# both paths; then on the synthetic Qwen3.6-35B-A3B: greedy ids both ways, the prefill A/B
# (MOX_CUDA_CUBLAS=0 against the default), and decode at -ub 512 against the 24 GiB plan's shape.
. bench/cuda/device_env.sh
start_synth
echo "== all cuda tests"; timeout 240 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"
grep -E "FAILED|PASSED|tests ran" $O/cuda_tests.log | tail -12
grep -E "\[bench\] (matmul|MOX)" $O/cuda_tests.log
wait_synth; echo "synth done t=$(el)"
head -c 6000 $R/bench/corpus/ruth_basic_english.txt > /tmp/p.txt
for v in 1 0; do
  MOX_CUDA_CUBLAS=$v timeout 60 /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -f /tmp/p.txt -n 32 --temp 0 --ids-out $O/ids_cublas$v.txt > $O/run_cublas$v.log 2>&1; echo "rc $? [cublas $v] t=$(el)"
done
md5sum $O/ids_*.txt; tail -3 $O/run_cublas1.log
echo "== prefill A/B"
ROUNDS=3 REPS=3 TESTS="-p 512,2048 -n 0" bench/cuda/ab_env.sh /tmp/bin/mox /tmp/q36.gguf $O/ab_ub512 - MOX_CUDA_CUBLAS=0 > $O/ab_ub512.log 2>&1; echo "rc $? t=$(el)"
cat $O/ab_ub512/ab.md
ROUNDS=3 REPS=3 TESTS="-p 4096 -n 0 -ub 4096 -b 4096" bench/cuda/ab_env.sh /tmp/bin/mox /tmp/q36.gguf $O/ab_ub4096 - MOX_CUDA_CUBLAS=0 > $O/ab_ub4096.log 2>&1; echo "rc $? t=$(el)"
cat $O/ab_ub4096/ab.md
echo "== decode: -ub 512 vs the 24 GiB plan's shape"
for round in 1 2; do
  timeout 90 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -r 3 $C -p 0 -n 512 -o json > $O/tg_plain_r$round.json 2>> $O/tg.err
  timeout 90 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -r 3 $C -p 0 -n 512 -ub 4096 -b 4096 -c 32768 -o json > $O/tg_ub4096_r$round.json 2>> $O/tg.err
  timeout 90 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 --plan auto --vram-budget 24GiB -c 32768 -ub 4096 -b 4096 -r 3 $C -p 0 -n 512 -o json > $O/tg_auto24_r$round.json 2>> $O/tg.err
  echo "round $round t=$(el)"
done
for f in $O/tg_*.json; do python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-1], [round(x,1) for r in d for x in r['samples_ts']])" $f; done
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 16, call 1 (9d65db2): CUDA tests (the arg max's asynchronous copy), calibration, what else
# runs on the CPU during a hybrid decode (top), nvidia-smi polling beside a hybrid decode on/off and
# -t 16/15/14 (alternating), then the accuracy sweep without the poller.
. bench/cuda/device_env.sh
start_synth
( timeout 200 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "tests rc $?" >> $O/cuda_tests.log ) &
tp=$!
wait_synth; echo "synth done t=$(el)"
wait $tp; tail -3 $O/cuda_tests.log; grep -E "FAILED" $O/cuda_tests.log | head; echo "tests done t=$(el)"
timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "calibrate rc $? t=$(el)"
grep -E "DRAM|  Q4_K|  Q6_K" $O/calibrate.txt
cp -r $MOX_CACHE_DIR $O/moxcache
hb() {  # NAME FLAGS...: one hybrid decode bench, --n-cpu-moe 20, tg128 x 4
  local name=$1; shift
  timeout 60 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 --n-cpu-moe 20 -p 0 -n 128 -r 4 -c 4096 $C "$@" -o json > $O/ab/$name.json 2> $O/ab/$name.err
  python3 -c "
import json;d=json.load(open('$O/ab/$name.json'))
for r in d: print('$name', r['test'], 't', r['n_threads'], round(r['median_ts'],1), [round(x,1) for x in r['samples_ts']], 'pred', round(r.get('predicted_tps') or 0,1), 'other', r.get('host_cpu_other'), 'steal', r.get('host_cpu_steal'))"
}
mkdir -p $O/ab
( sleep 12; top -b -H -n 1 -w 250 | head -45 > $O/top_during_hybrid.txt; cat /proc/loadavg >> $O/top_during_hybrid.txt ) &
hb top_probe
for round in 1 2; do
  hb poll0_r$round
  nvidia-smi --id=0 --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > /dev/null 2>&1 & np=$!
  hb poll1_r$round
  kill $np; wait $np 2>/dev/null
  hb t15_r$round -t 15
  hb t14_r$round -t 14
done
echo "ab done t=$(el)"
POLL=0 REPS=3 timeout $(( 590 - $(el) )) bench/cuda/plan_accuracy.sh /tmp/bin/mox /tmp/q36.gguf $O/acc > $O/acc.log 2>&1; echo "acc rc $? t=$(el)"
head -5 $O/acc/accuracy.md | tail -3
cd $OUT && tar czf r.tgz r && rm -rf r

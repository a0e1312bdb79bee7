#!/bin/bash
# session 15, call 2: marginal matvec rate; CPU expert probe with and without huge pages (an
# experiment switch MOX_CALIBRATE_THP=0, removed after this call: no effect); the real host-layer CPU
# time (MOX_PROFILE=1) and predictions across --n-cpu-moe.
. bench/cuda/device_env.sh
start_synth
cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag > $O/thp.txt 2>&1; cat $O/thp.txt
wait_synth; echo "synth done t=$(el)"
timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "calibrate rc $? t=$(el)"
MOX_CACHE_DIR=/tmp/moxcache_nothp MOX_CALIBRATE_THP=0 timeout 60 /tmp/bin/mox calibrate > $O/calibrate_nothp.txt 2>&1; echo "calibrate nothp rc $? t=$(el)"
grep -E "DRAM|Q4_K|Q6_K|launch gap" $O/calibrate.txt $O/calibrate_nothp.txt
cp -r $MOX_CACHE_DIR $O/moxcache; cp -r /tmp/moxcache_nothp $O/
for n in 0 10 20 30 40; do
  MOX_PROFILE=1 timeout 90 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 --n-cpu-moe $n -p 0 -n 128 -r 3 -c 4096 $C -o json > $O/bench_ncmoe$n.json 2> $O/bench_ncmoe$n.err; echo "ncmoe $n rc $? t=$(el)"
  python3 -c "
import json,sys;d=json.load(open('$O/bench_ncmoe$n.json'))
for r in d: print('$n', r['test'], round(r['median_ts'],1), [round(x,1) for x in r['samples_ts']], 'pred', round(r.get('predicted_tps') or 0,1))"
  grep -iE "host|hand" $O/bench_ncmoe$n.err | tail -3
done
cd $OUT && tar czf r.tgz r && rm -rf r

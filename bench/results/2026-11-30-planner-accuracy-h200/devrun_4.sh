#!/bin/bash
# session 16, call 4: the calibration's CPU expert probe, 40 calls (9d65db2, mox_base) against at
# least 0.25 s per type (50f52b3, mox), alternating three times with a hybrid decode of session 16's
# 8 GiB plan (33 host layers) between them, so each profile's prediction can be set against what the
# plan measured next to it (offline, bench/cuda/repredict_accuracy.sh's way); then -ctk/-ctv auto on
# the GPU (mox run at 24 GiB and 262144 tokens: the planner's KV choice).
. bench/cuda/device_env.sh
start_synth; wait_synth; echo "synth done t=$(el)"
L="0-22,25,28,31-32,34-39"
for r in 1 2 3; do
  for b in mox mox_base; do
    MOX_CACHE_DIR=$O/prof_${b}_r$r timeout 60 /tmp/bin/$b calibrate > $O/cal_${b}_r$r.txt 2>&1
    echo "cal $b r$r rc $? t=$(el): $(grep -E '^    Q4_K  ' $O/cal_${b}_r$r.txt | head -1 | tr -s ' ')"
  done
  MOX_CACHE_DIR=$O/prof_mox_r$r timeout 90 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 --moe-cpu-layers $L -c 32768 -ub 4096 -p 0 -n 128,512 -r 3 $C -o json > $O/bench8g_r$r.json 2> $O/bench8g_r$r.err
  python3 -c "
import json;d=json.load(open('$O/bench8g_r$r.json'))
for r in d: print('r$r', r['test'], round(r['median_ts'],1), [round(x,1) for x in r['samples_ts']], 'pred', round(r.get('predicted_tps') or 0,1), 'other', r.get('host_cpu_other'), 'steal', r.get('host_cpu_steal'))"
done
echo "rounds done t=$(el)"
MOX_CACHE_DIR=$O/prof_mox_r3 timeout 120 /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 --vram-budget 24GiB -c 262144 -ctk auto -ctv auto -p "The history of the printing press" -n 64 --temp 0 > $O/run_kv_auto.txt 2> $O/run_kv_auto.err
echo "kv auto rc $? t=$(el)"; grep -E "plan:|generated|error" $O/run_kv_auto.err; head -c 300 $O/run_kv_auto.txt; echo
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 10, call 1 (e5dc653): every CUDA test (the new short-attention, router-split and probe
# cases), the A/B of the two prepared decode switches, the ub 512 / 4096 gap on a 512-token prompt
# (mox bench, then every kernel's duration under ncu), one gate_up2_kernel launch under ncu's full
# set with per-instruction stall samples, and `mox calibrate` with the new probes.
. bench/cuda/device_env.sh
start_synth
echo "== cuda tests"; timeout 200 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"; grep -E "\[probe\]|FAILED|PASSED" $O/cuda_tests.log | tail -12
wait_synth; echo "synth done t=$(el)"
echo "== A/B"; ROUNDS=3 REPS=3 timeout 240 bench/cuda/ab_env.sh /tmp/bin/mox /tmp/q36.gguf $O/ab - MOX_CUDA_ATTN_SHORT_WARPS=auto MOX_CUDA_SHORT_SPLIT=2 "MOX_CUDA_ATTN_SHORT_WARPS=auto MOX_CUDA_SHORT_SPLIT=2" > $O/ab.log 2>&1; echo "rc $? t=$(el)"; cat $O/ab/ab.md
echo "== ub gap"; timeout 60 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 $C -p 512 -n 0 --ubatch-size 512,4096 -r 5 > $O/ub.md 2>&1; echo "rc $? t=$(el)"; grep -E "pp512" $O/ub.md | cut -c1-200
head -c 2700 $R/bench/corpus/ruth_basic_english.txt > /tmp/p512.txt
for ub in 512 4096; do
  timeout 45 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 --ubatch-size $ub -f /tmp/p512.txt -n 1 > $O/pp_ub$ub.csv 2> $O/pp_ub$ub.err
  python3 tools/ncu_decode_table.py steps $O/pp_ub$ub.csv > $O/pp_ub$ub.md 2>&1; echo "-- ub $ub t=$(el)"; head -16 $O/pp_ub$ub.md
done
echo "== ncu gate_up2"; timeout 90 ncu --clock-control none -k regex:gate_up2 -s 4 -c 1 --set full --import-source no -o $O/gu2 /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -f /tmp/p512.txt -n 1 > $O/gu2.log 2>&1; echo "rc $? t=$(el)"
ncu -i $O/gu2.ncu-rep --page details > $O/gu2_details.txt 2>&1; grep -E "Duration|Throughput|Registers|Occupancy|Stall|Warp Cycles|Issued|Block Limit|Shared Memory" $O/gu2_details.txt | head -40
ncu -i $O/gu2.ncu-rep --page source --print-source sass --csv > $O/gu2_sass.csv 2>&1; wc -l $O/gu2_sass.csv
echo "== calibrate"; timeout 100 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "rc $? t=$(el)"; grep -iE "attention|moe|prefill" $O/calibrate.txt | head -12; cp /tmp/moxcache/hardware-*.json $O/ 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r

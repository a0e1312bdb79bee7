#!/bin/bash
# session 13, call 1: the chunked delta rule in two kernels (a parallel preparation of every chunk's
# T = (I + L)^-1 and masked Q K^T, then the state walk with three products per chunk) against the
# committed one-kernel walk (577c1a9 = mox_base): the DeltaNet tests, every CUDA test, kernel
# timings of both builds, greedy ids of both, then prefill A/B on the synthetic Qwen3.6-35B-A3B.
. bench/cuda/device_env.sh
start_synth
echo "== delta tests"; timeout 120 /tmp/bin/mox_cuda_tests --gtest_filter='CudaDeltaNet.*:GpuMemoryModel.*' > $O/delta_tests.log 2>&1; echo "rc $? t=$(el)"
grep -E "FAILED|PASSED|\[delta_net\]|\[bench\]" $O/delta_tests.log
echo "== base delta timing"; timeout 60 /tmp/bin/mox_cuda_tests_base --gtest_filter='CudaDeltaNet.Timing' > $O/delta_timing_base.log 2>&1; echo "rc $? t=$(el)"
grep -E "\[bench\]" $O/delta_timing_base.log
echo "== all cuda tests"; timeout 200 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"
grep -E "FAILED|PASSED|tests ran" $O/cuda_tests.log | tail -12
wait_synth; echo "synth done t=$(el)"
head -c 3000 $R/bench/corpus/ruth_basic_english.txt > /tmp/p.txt
for v in mox_base mox; do
  timeout 60 /tmp/bin/$v run -m /tmp/q36.gguf -ngl 99 -f /tmp/p.txt -n 64 --temp 0 --ids-out $O/ids_$v.txt > $O/run_$v.log 2>&1; echo "rc $? [$v] t=$(el)"
done
md5sum $O/ids_*.txt
echo "== prefill A/B"
for round in 1 2 3; do
  for v in mox_base mox; do
    timeout 90 /tmp/bin/$v bench -m /tmp/q36.gguf -ngl 99 -r 3 $C -p 512,2048 -n 0 -o json > $O/ab_${v}_r${round}_ub512.json 2>> $O/ab.err
    timeout 90 /tmp/bin/$v bench -m /tmp/q36.gguf -ngl 99 -r 3 $C -p 4096 -n 0 -ub 4096 -b 4096 -o json > $O/ab_${v}_r${round}_ub4096.json 2>> $O/ab.err
    echo "round $round $v t=$(el)"
  done
  [ $(el) -gt 480 ] && break
done
python3 - $O <<'PY'
import json, glob, statistics, sys, collections
o = sys.argv[1]; s = collections.defaultdict(list)
for f in sorted(glob.glob(o + "/ab_*.json")):
    v = f.split("/ab_")[1].split("_r")[0]
    try: rows = json.load(open(f))
    except Exception as e: print("bad", f, e); continue
    for r in rows:
        s[(v, f"pp{r['n_prompt']}")] += r.get("samples_ts") or [r["avg_ts"]]
for (v, t), xs in sorted(s.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"| {t} | {v} | {statistics.median(xs):.1f} | {min(xs):.1f}..{max(xs):.1f} | {len(xs)} |")
PY
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 12, call 3 (call 2's binary): the weights of each matvec's first rows prefetched at its start
# without PDL (greedy ids, then an A/B with the input-norm fusion on and off), then issue 5's table
# against llama.cpp (0c1e570) with the depth-32768 rows.
. bench/cuda/device_env.sh
start_synth
ldd /tmp/bin/llama-bench | grep -i "not found"; /tmp/bin/llama-bench --help > /dev/null 2>&1; echo "llama-bench runs: rc $?"
wait_synth; echo "synth done t=$(el)"
timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "calibrate rc $? t=$(el)"; cp /tmp/moxcache/hardware-*.json $O/
head -c 1500 $R/bench/corpus/ruth_basic_english.txt > /tmp/p.txt
for v in "MOX_CUDA_EARLY_PREFETCH=l1" "MOX_CUDA_EARLY_PREFETCH=l2"; do
  tag=$(echo "x $v" | tr -c 'a-zA-Z0-9' _)
  env $v timeout 60 /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -f /tmp/p.txt -n 64 --temp 0 --ids-out $O/ids$tag.txt > $O/run$tag.log 2>&1; echo "rc $? [$v] t=$(el)"
done
md5sum $O/ids*.txt
echo "== A/B"; ROUNDS=3 REPS=3 TESTS="-p 0 -n 256" timeout 200 bench/cuda/ab_env.sh /tmp/bin/mox /tmp/q36.gguf $O/ab - "MOX_CUDA_INPUT_NORM_FUSE=0" "MOX_CUDA_EARLY_PREFETCH=l1" "MOX_CUDA_EARLY_PREFETCH=l1 MOX_CUDA_INPUT_NORM_FUSE=0" "MOX_CUDA_EARLY_PREFETCH=l2" > $O/ab.log 2>&1; echo "rc $? t=$(el)"; cat $O/ab/ab.md | head -8
echo "== issue 5 table"; timeout $(( 585 - $(el) )) bench/cuda/qwen36_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $O/table 3 2 > $O/table.log 2>&1; echo "rc $? t=$(el)"
grep -hE "^\| (pp|tg)" $O/table/f16.md $O/table/depth.md $O/table/q8.md 2>/dev/null | cut -c1-250
cd $OUT && tar czf r.tgz r && rm -rf r

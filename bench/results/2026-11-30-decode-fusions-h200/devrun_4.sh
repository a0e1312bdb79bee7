#!/bin/bash
# session 11, call 4 (2daa3c3 + 19b7c3c): every CUDA test (conv_projection now prefetching its taps
# and state instead of holding them: 61 registers, 4 blocks per SM; the attention workspace bound and
# check), call 2's failing `mox run -ngl 99` (952-token prompt, -ub 4096) with and without the decode
# fusions (greedy ids must match), the A/B of the fusions together.
. bench/cuda/device_env.sh
start_synth
echo "== cuda tests"; timeout 200 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"
grep -E "FAILED|PASSED|tests ran|\[bench\] (conv|delta)" $O/cuda_tests.log | tail -12
wait_synth; echo "synth done t=$(el)"
timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "calibrate rc $? t=$(el)"; cp /tmp/moxcache/hardware-*.json $O/
head -c 1500 $R/bench/corpus/ruth_basic_english.txt > /tmp/p.txt
for v in "" "MOX_CUDA_CONV_FUSE=0 MOX_CUDA_NORM_FUSE=0"; do
  tag=$(echo "x $v" | tr -c 'a-zA-Z0-9' _)
  env $v timeout 90 /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -f /tmp/p.txt -n 64 --temp 0 --ids-out $O/ids$tag.txt > $O/run$tag.log 2>&1; echo "rc $? [$v] t=$(el) $(grep -o 'prompt.*' $O/run$tag.log)"
done
md5sum $O/ids*.txt
echo "== A/B"; ROUNDS=3 REPS=3 timeout $(( 520 - $(el) )) bench/cuda/ab_env.sh /tmp/bin/mox /tmp/q36.gguf $O/ab - "MOX_CUDA_CONV_FUSE=0 MOX_CUDA_NORM_FUSE=0" > $O/ab.log 2>&1; echo "rc $? t=$(el)"; cat $O/ab/ab.md
cd $OUT && tar czf r.tgz r && rm -rf r

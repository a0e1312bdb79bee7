#!/bin/bash
# session 12, call 2 (working tree after 577c1a9): every CUDA test (new: the DeltaNet qkv projection
# norming its own input, CudaConvProjection.NormedInput*), the decode kernels' tests again under
# MOX_PDL=1, greedy ids with and without the new fusion and PDL (must match), then the A/B: the input
# norm fused (default) or not, and programmatic dependent launch with and without the weights of each
# matvec's first rows prefetched before its wait (L2 / L1).
. bench/cuda/device_env.sh
start_synth
echo "== cuda tests"; timeout 200 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"
grep -E "FAILED|PASSED|tests ran" $O/cuda_tests.log | tail -12
echo "== cuda tests, MOX_PDL=1"; MOX_PDL=1 timeout 100 /tmp/bin/mox_cuda_tests --gtest_filter='CudaConvProjection*:CudaMatvec*:CudaMoe*:CudaBasic*:CudaDeltaNet*:CudaAttention*' > $O/cuda_tests_pdl.log 2>&1; echo "rc $? t=$(el)"
grep -E "FAILED|PASSED|tests ran" $O/cuda_tests_pdl.log | tail -12
wait_synth; echo "synth done t=$(el)"
timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "calibrate rc $? t=$(el)"; cp /tmp/moxcache/hardware-*.json $O/
head -c 1500 $R/bench/corpus/ruth_basic_english.txt > /tmp/p.txt
for v in "" "MOX_CUDA_INPUT_NORM_FUSE=0" "MOX_PDL=1 MOX_CUDA_EARLY_PREFETCH=l2"; do
  tag=$(echo "x $v" | tr -c 'a-zA-Z0-9' _)
  env $v timeout 60 /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -f /tmp/p.txt -n 64 --temp 0 --ids-out $O/ids$tag.txt > $O/run$tag.log 2>&1; echo "rc $? [$v] t=$(el)"
done
for v in "" "MOX_CUDA_INPUT_NORM_FUSE=0"; do
  tag=$(echo "h $v" | tr -c 'a-zA-Z0-9' _)
  env $v timeout 60 /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 --n-cpu-moe 10 --plan manual -f /tmp/p.txt -n 32 --temp 0 --ids-out $O/ids$tag.txt > $O/run$tag.log 2>&1; echo "rc $? [hybrid $v] t=$(el)"
done
md5sum $O/ids*.txt
echo "== A/B"; ROUNDS=3 REPS=3 TESTS="-p 0 -n 256" timeout $(( 575 - $(el) )) bench/cuda/ab_env.sh /tmp/bin/mox /tmp/q36.gguf $O/ab - "MOX_CUDA_INPUT_NORM_FUSE=0" "MOX_PDL=1" "MOX_PDL=1 MOX_CUDA_EARLY_PREFETCH=l2" "MOX_PDL=1 MOX_CUDA_EARLY_PREFETCH=l1" > $O/ab.log 2>&1; echo "rc $? t=$(el)"; cat $O/ab/ab.md; tail -3 $O/ab.log
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 11, call 3: call 2's `mox run -ngl 99` (a 952-token prompt in one 4096-token micro-batch)
# failed with "unspecified launch failure", with and without the new fusions. Reproduce on a 4-layer
# model of the same widths, with this session's build and with 3df4507's (mox_old), by micro-batch
# size and MOX_CUDA_MM_RAW; CUDA_LAUNCH_BLOCKING and compute-sanitizer name the kernel.
. bench/cuda/device_env.sh
/tmp/bin/mox synth --preset qwen3.6-35b-a3b --layers 4 -o /tmp/q4l.gguf -t 16 > $O/synth.log 2>&1; echo "synth rc $? t=$(el)"
head -c 1500 $R/bench/corpus/ruth_basic_english.txt > /tmp/p.txt
head -c 600 $R/bench/corpus/ruth_basic_english.txt > /tmp/p600.txt
run() { local bin=$1; shift; timeout 60 /tmp/bin/$bin run -m /tmp/q4l.gguf -ngl 99 --plan manual -n 4 --temp 0 "$@" > /tmp/log.txt 2>&1; local rc=$?; echo "rc $rc $bin $* $(grep -o 'prompt [0-9]* tokens' /tmp/log.txt) $(grep -o 'error.*' /tmp/log.txt | cut -c1-160)"; }
for bin in mox mox_old; do
  for ub in 4096 1024 512; do run $bin -f /tmp/p.txt --ubatch-size $ub; done
  run $bin -f /tmp/p600.txt --ubatch-size 4096
done
MOX_CUDA_MM_RAW=0 run mox -f /tmp/p.txt --ubatch-size 4096
MOX_CUDA_DELTANET=sequential run mox -f /tmp/p.txt --ubatch-size 4096
MOX_CUDA_ATTN_MMA=0 run mox -f /tmp/p.txt --ubatch-size 4096
CUDA_LAUNCH_BLOCKING=1 run mox -f /tmp/p.txt --ubatch-size 4096
echo "== sanitizer t=$(el)"; timeout 240 compute-sanitizer --tool memcheck --print-limit 5 /tmp/bin/mox run -m /tmp/q4l.gguf -ngl 99 --plan manual -n 2 --temp 0 -f /tmp/p.txt --ubatch-size 4096 > $O/memcheck.txt 2>&1; echo "rc $? t=$(el)"; grep -v "^Now there" $O/memcheck.txt | head -40
cd $OUT && tar czf r.tgz r && rm -rf r

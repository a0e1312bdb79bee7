#!/bin/bash
# session 11, call 1 (3df4507, session 10's last build): every CUDA test (session 10's new ones never
# ran on a GPU: the direct-load twins, the short-attention bound, the grid barrier probe), `mox
# calibrate`, the raw-staged tiles against their direct-load twins per type (odd 16-byte slots), and
# an A/B of the short-context attention's bound (1024 / 512 / 256 keys) at tg512.
. bench/cuda/device_env.sh
start_synth
echo "== cuda tests"; timeout 200 /tmp/bin/mox_cuda_tests > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"
grep -E "\[probe\]|\[bench\] (moe_batch|matmul)|FAILED|PASSED|tests ran" $O/cuda_tests.log | tail -40
wait_synth; echo "synth done t=$(el)"
echo "== calibrate"; timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "rc $? t=$(el)"; cp /tmp/moxcache/hardware-*.json $O/ 2>/dev/null
echo "== raw vs direct tiles"; ROUNDS=2 timeout 150 bench/cuda/raw_tiles_ab.sh /tmp/bin/mox $O/raw > $O/raw.log 2>&1; echo "rc $? t=$(el)"; cat $O/raw/raw_tiles.md
echo "== A/B short bound"; ROUNDS=3 REPS=3 TESTS="-p 0 -n 512" timeout $(( 540 - $(el) )) bench/cuda/ab_env.sh /tmp/bin/mox /tmp/q36.gguf $O/ab - MOX_CUDA_ATTN_SHORT_MAX=512 MOX_CUDA_ATTN_SHORT_MAX=256 > $O/ab.log 2>&1; echo "rc $? t=$(el)"; cat $O/ab/ab.md
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# session 12, call 1 (577c1a9): issue 6 at 24/16/8 GiB with the planner's KV fix (bdbeb7d), and the
# per-kernel time of a 4096-token prefill micro-batch (ncu, 4-layer model of the full widths) and
# the stall reasons of the two slowest decode kernels (ncu --set full).
. bench/cuda/device_env.sh
start_synth
/tmp/bin/llama-bench --help > /dev/null 2>&1; echo "llama-bench runs: rc $?"
/tmp/bin/mox synth --preset qwen3.6-35b-a3b --layers 4 -o /tmp/q4.gguf -t 4 > $O/synth4.log 2>&1; echo "synth4 rc $? t=$(el)"
echo "== ncu prefill (4 layers, -ub 4096)"
# a quick profile of its own so that ncu never meets the implicit calibration (its spinning kernel cannot be replayed)
MOX_CACHE_DIR=/tmp/qcache timeout 60 /tmp/bin/mox calibrate --quick > $O/calibrate_quick.txt 2>&1; echo "calibrate quick rc $? t=$(el)"
MOX_CACHE_DIR=/tmp/qcache timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw /tmp/bin/mox bench -m /tmp/q4.gguf -ngl 99 --plan manual -p 4096 -n 0 -r 1 --ubatch-size 4096 > $O/ncu_pp4096.csv 2> $O/ncu_pp4096.err; echo "rc $? t=$(el)"
echo "== ncu full: decode gate/up and delta rule"
MOX_CACHE_DIR=/tmp/qcache MOX_CUDA_PROFILE_STEP=3 timeout 120 ncu --profile-from-start off --set full -k regex:"gate_up_kernel|delta_net_seq_kernel|conv_projection_kernel" -c 3 /tmp/bin/mox run -m /tmp/q4.gguf -ngl 99 -p "Hello" -n 6 > $O/ncu_full_decode.txt 2>&1; echo "rc $? t=$(el)"
wait_synth; echo "synth done t=$(el)"
rm -rf /tmp/moxcache; timeout 60 /tmp/bin/mox calibrate > $O/calibrate.txt 2>&1; echo "calibrate rc $? t=$(el)"; cp /tmp/moxcache/hardware-*.json $O/
echo "== issue 6, 24 16 8"; EXTRA="" GRID="" MAX_PROBES=2 RUN_TIMEOUT_S=80 DEADLINE_S=$(( 470 - $(el) )) timeout $(( 575 - $(el) )) bench/cuda/hybrid_h200.sh /tmp/bin/mox /tmp/bin/llama-bench /tmp/q36.gguf $O/hybrid "24 16 8" > $O/hybrid.log 2>&1; echo "rc $? t=$(el)"
cat $O/hybrid/results.md 2>/dev/null | head -30
cd $OUT && tar czf r.tgz r && rm -rf r

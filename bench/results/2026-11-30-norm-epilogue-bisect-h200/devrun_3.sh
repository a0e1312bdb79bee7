#!/bin/bash
# session 9, call 3 (warm machine, the synthetic model still in /tmp): the regression lies between
# 49821e1 (moe-rows merged: 330-335 t/s like e9d6c99) and 47470dc (+ attn-mma + norm-epilogue:
# 306-318). Here: the attn-mma merge alone (b9158f4) against 47470dc and e9d6c99, and this build with
# its switches (MOX_CUDA_NORM_EPILOGUE=0, MOX_CUDA_ATTN_MMA=0), two alternations.
. bench/cuda/device_env.sh
start_synth; wait_synth
ab() { echo "-- $* $(env "$@" bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -r 3 -o md $C 2>&1 | grep -E "^\| q|rror" | cut -d'|' -f11-14)"; }
for i in 1 2; do
  ab /tmp/bin/mox_old; ab /tmp/bin/mox_b9158f4; ab /tmp/bin/mox_47470dc
  ab /tmp/bin/mox; ab MOX_CUDA_NORM_EPILOGUE=0 /tmp/bin/mox; ab MOX_CUDA_ATTN_MMA=0 /tmp/bin/mox
  ab MOX_CUDA_NORM_EPILOGUE=0 MOX_CUDA_ATTN_MMA=0 /tmp/bin/mox
done
echo "t=$(el)"
cd $OUT && tar czf r.tgz r && rm -rf r

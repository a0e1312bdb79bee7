#!/usr/bin/env bash
# The planner accuracy table of probes-accuracy/ with the predictions recomputed from calibrate-idle/'s profile.
#
# probes-accuracy/ ran `mox calibrate` while the synthetic model was being written by 16 threads, so its CPU
# expert rates and host round trip were measured on a busy host (Q6_K 11 GB/s instead of 108, round
# trip 236 us instead of 53): every `mox bench` row's predicted_tps came from that profile. calibrate-idle/
# calibrated again on the same machine (still warm, nothing else running). The recomputation is
# bench/cuda/repredict_accuracy.sh.
#
#   bench/results/2026-11-30-mma-prefill-attention-h200/repredict.sh MOX PLAN_TOOL OUT
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../../cuda/repredict_accuracy.sh" "$1" "$2" "$here/probes-accuracy/acc_busy_profile" "$here/calibrate-idle/hardware-vm.json" "$3"

#!/bin/bash
# session 7, call 3: where the MoE gate/up decode kernel's 15.6 us go: the isolated MoE timing, and ncu (caches
# flushed before each pass: weights from DRAM as in decode) with warp-stall metrics for the slow decode kernels.
R=$PWD
mkdir -p /tmp/bin $OUT/r && for n in mox mox_cuda_tests; do xz -dc out/devcarry/cuda/$n.xz > /tmp/bin/$n; chmod +x /tmp/bin/$n; done
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=/tmp/moxcache
O=$OUT/r
( ls /tmp/q36.gguf >/dev/null 2>&1 || /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 > $O/synth.log 2>&1; sync ) &
SP=$!
echo "== MoE decode timing"; /tmp/bin/mox_cuda_tests --gtest_filter='CudaBench.MoeDecodeBandwidth:CudaBench.MatvecBandwidth' 2>&1 | grep "\[bench\]"
wait $SP
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
prof() {  # name regex skip
  MOX_CUDA_PROFILE_STEP=3 timeout 120 ncu --profile-from-start off --clock-control none $S --kernel-name regex:$2 --launch-skip $3 --launch-count 1 --csv --page raw /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -p "Hello" -n 5 > $O/ncu_$1.csv 2> $O/ncu_$1.err; tail -1 $O/ncu_$1.err
}
prof gate_up gate_up_kernel 3
prof down down_kernel 3
prof inproj 'matvec_kernel' 0
prof outproj 'matvec_kernel' 2
prof delta delta_net_seq 3
prof router matvec_short 3
prof norm add_rms_norm 5
echo "== one step, single pass, caches flushed per kernel"; MOX_CUDA_PROFILE_STEP=3 timeout 100 ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --page raw /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -p "Hello" -n 6 > $O/ncu_step_flushed.csv 2> $O/ncu_step.err
python3 tools/ncu_decode_table.py steps $O/ncu_step_flushed.csv > $O/ncu_step_flushed.md 2>&1; head -24 $O/ncu_step_flushed.md
cd $OUT && tar czf r.tgz r && rm -rf r

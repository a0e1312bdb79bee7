#!/bin/bash
# session 5, call 4 (final): correctness after the merge, CPU MoE bench, prefetch A/B, hybrid vs llama.cpp, kernel stalls
R=$PWD
pip install --no-deps --target /tmp/site out/devcarry/gguf-0.19.0-py3-none-any.whl -q 2>/dev/null | tail -1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/bin && for n in mox mox_cuda_tests mox_moe_bench; do xz -dc out/devcarry/cuda/$n.xz > /tmp/bin/$n; chmod +x /tmp/bin/$n; done
xz -dc out/devcarry/llama-bench.xz > /tmp/bin/llama-bench; chmod +x /tmp/bin/llama-bench
LL=$(dirname $(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)):$(dirname $(find /usr/local /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LL:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=/tmp/moxcache
C="--corpus bench/corpus/ruth_basic_english.txt"
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader; nproc
( /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 > $OUT/synth.log 2>&1; sync ) &
SP=$!
echo "== cuda tests (changed kernels)"; timeout 120 /tmp/bin/mox_cuda_tests --gtest_filter='CudaMoe.Router*:CudaMoe.FusedRoutingMatchesCpu:CudaBasic.*:CudaMatvec.EveryTypeMatchesReference:CudaMatvec.ModelSizedRowsMatchReference' > $OUT/cuda_tests.log 2>&1; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/cuda_tests.log | tail -8
echo "== e2e goldens + hybrid"; MOX_TEST_DEVICE=cuda MOX_BIN=/tmp/bin/mox MOX_TOOL_DIR=/tmp/bin timeout 200 python3 -m pytest -q -p no:cacheprovider tests/py/test_goldens.py tests/py/test_hybrid.py > $OUT/e2e.log 2>&1; tail -2 $OUT/e2e.log; grep -E "^FAILED" $OUT/e2e.log | head -8
wait $SP; tail -1 $OUT/synth.log; rm -rf /tmp/moxcache
echo "== calibrate"; /tmp/bin/mox calibrate > $OUT/calibrate.txt 2>&1; grep -E "DRAM|launch gap|round trip" $OUT/calibrate.txt | head -5; cp /tmp/moxcache/*.json $OUT/profile.json
echo "== moe bench gap 80"; timeout 60 /tmp/bin/mox_moe_bench -t 16 --gap-us 80 > $OUT/moe_bench_80.txt 2>&1; tail -12 $OUT/moe_bench_80.txt
for p in 0 1; do echo "== all-GPU tg128 MOX_L2_PREFETCH=$p"; MOX_L2_PREFETCH=$p /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -r 3 -o md $C 2>&1 | grep -E "^\| q|rror"; done
echo "== hybrid vs llama.cpp"; timeout 240 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -ncmoe 20,40 -p 0 -n 128 -r 2 -o md $C --compare /tmp/bin/llama-bench > $OUT/hybrid.md 2> $OUT/hybrid.err; grep -E "^\|" $OUT/hybrid.md | head -12; tail -2 $OUT/hybrid.err
echo "== ncu stalls step 3"; MOX_CUDA_PROFILE_STEP=3 timeout 75 ncu --profile-from-start off --clock-control none --cache-control none --kernel-name regex:"gate_up_kernel|down_kernel|matvec_kernel|add_rms_norm|delta_net_seq|attention_kernel" --launch-count 14 --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --csv --page details /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -p "Hello" -n 5 > $OUT/ncu_detail.csv 2> $OUT/ncu.err; tail -1 $OUT/ncu.err; wc -l $OUT/ncu_detail.csv

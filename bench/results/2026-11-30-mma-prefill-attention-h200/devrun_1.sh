#!/bin/bash
# session 8, call 1: the four branches of session 7 merged (moe-rows, attn-mma, norm-epilogue, kv-fuse):
# every CUDA test (CudaMoe* also with MOX_CUDA_DOWN_ROWS=2), GPU goldens + hybrid e2e, A/B of each switch
# at depth 0 (tg128) and of the tensor-core attention at depth 32768, one ncu decode step.
R=$PWD; T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
pip install --no-deps --target /tmp/site out/devcarry/gguf-0.19.0-py3-none-any.whl -q 2>&1 | tail -1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/bin $OUT/r && for n in mox mox_cuda_tests; do xz -dc out/devcarry/cuda/$n.xz > /tmp/bin/$n; chmod +x /tmp/bin/$n; done
LL=$(dirname $(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)):$(dirname $(find /usr/local /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$R/out/devcarry/lib:$LL:$LD_LIBRARY_PATH
export MOX_CACHE_DIR=/tmp/moxcache
C="--corpus $R/bench/corpus/ruth_basic_english.txt"
O=$OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/machine.txt; nproc >> $O/machine.txt
( ls /tmp/q36.gguf >/dev/null 2>&1 || /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 16 > $O/synth.log 2>&1; sync ) &
SP=$!
echo "== cuda tests"; timeout 170 /tmp/bin/mox_cuda_tests --gtest_filter='-*Bandwidth*:*Timing*' > $O/cuda_tests.log 2>&1; echo "rc $? t=$(el)"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran" $O/cuda_tests.log | tail -8
grep -B2 -A8 "Failure" $O/cuda_tests.log | head -40
echo "== CudaMoe* DOWN_ROWS=2"; MOX_CUDA_DOWN_ROWS=2 timeout 60 /tmp/bin/mox_cuda_tests --gtest_filter='CudaMoe*' > $O/cuda_tests_rows2.log 2>&1; echo "rc $? t=$(el)"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $O/cuda_tests_rows2.log | tail -4
echo "== e2e goldens + hybrid on cuda"; MOX_TEST_DEVICE=cuda MOX_BIN=/tmp/bin/mox MOX_TOOL_DIR=/tmp/bin timeout 150 python3 -m pytest -q -p no:cacheprovider tests/py/test_goldens.py tests/py/test_hybrid.py > $O/e2e.log 2>&1; tail -3 $O/e2e.log; grep -E "FAILED|Error" $O/e2e.log | head -6
wait $SP; sleep 1; echo "t=$(el)"
ab() { echo "-- $1"; shift; env "$@" /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -r 3 -o md $C 2>&1 | grep -E "^\| q|rror"; }
echo "== A/B depth 0 tg128"
ab all-on X=1
ab DOWN_ROWS=2 MOX_CUDA_DOWN_ROWS=2
ab NORM_EPILOGUE=0 MOX_CUDA_NORM_EPILOGUE=0
ab KV_FUSE=0 MOX_CUDA_KV_FUSE=0
ab all-off MOX_CUDA_DOWN_ROWS=2 MOX_CUDA_NORM_EPILOGUE=0 MOX_CUDA_KV_FUSE=0
ab all-on X=1
echo "t=$(el)"
abd() { echo "-- $1"; shift; env "$@" timeout 100 /tmp/bin/mox bench -m /tmp/q36.gguf -ngl 99 -p 0 -n 128 -d 32768 -r 2 -o md $C 2>&1 | grep -E "^\| q|rror"; }
echo "== A/B depth 32768 tg128"
abd attn-mma X=1
abd ATTN_MMA=0 MOX_CUDA_ATTN_MMA=0
[ $(el) -lt 470 ] && abd attn-mma X=1
echo "t=$(el)"
if [ $(el) -lt 520 ]; then
echo "== ncu step"; MOX_CUDA_PROFILE_STEP=3 timeout 60 ncu --profile-from-start off --clock-control none --cache-control all --metrics gpu__time_duration.sum --csv --page raw /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -p "Hello" -n 6 > $O/ncu_step.csv 2> $O/ncu_step.err
python3 tools/ncu_decode_table.py steps $O/ncu_step.csv > $O/ncu_step.md 2>&1; head -40 $O/ncu_step.md
fi
if [ $(el) -lt 540 ]; then
echo "== prefill kernels (one ~2k-token prompt)"; head -c 9000 $R/bench/corpus/ruth_basic_english.txt > /tmp/p2k.txt
if which nsys >/dev/null 2>&1; then timeout 50 nsys profile -o /tmp/pf --force-overwrite true /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -f /tmp/p2k.txt -n 1 > $O/pf.log 2>&1; nsys stats -r cuda_gpu_kern_sum -f csv /tmp/pf.nsys-rep > $O/prefill_kern.csv 2>&1; head -25 $O/prefill_kern.csv | cut -c1-200
else timeout 50 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw /tmp/bin/mox run -m /tmp/q36.gguf -ngl 99 -f /tmp/p2k.txt -n 1 > $O/prefill_ncu.csv 2> $O/prefill_ncu.err; python3 tools/ncu_decode_table.py steps $O/prefill_ncu.csv > $O/prefill_ncu.md 2>&1; head -30 $O/prefill_ncu.md; fi
fi
cd $OUT && tar czf r.tgz r && rm -rf r

#!/bin/bash
# Call 5 (a fresh machine; mox and mox_cuda_tests at the Mixtral commit, their libraries and the gguf
# wheel came as ~5 MB parts before, as in devrun_2.sh):
#  1. transformers makes the Mixtral goldens, and the qwen3moe ones again into a scratch folder
#     from the script now built on golden_common.py (must equal the committed files byte for byte)
#  2. the q/k preparation kernel's tests (NORM rotary, no q/k norms) and the goldens of both
#     architectures on the GPU, hybrid placements included
#  3. the full-size synthetic Mixtral-8x7B Q4_K_M: full GPU pp512/tg128 and the 16 GiB hybrid plan
cp out/c*/p.* /tmp/parts/ 2>/dev/null
mkdir -p /tmp/dc/cuda && cat /tmp/parts/p.* | tar x -C /tmp/dc || exit 1
mv /tmp/dc/*.xz /tmp/dc/cuda/ 2>/dev/null
mkdir -p out && rm -rf out/devcarry && ln -s /tmp/dc out/devcarry
. bench/cuda/device_env.sh
echo "binaries t=$(el): $(ls /tmp/bin | tr '\n' ' ')"
( /tmp/bin/mox synth --preset mixtral-8x7b -o /tmp/mx.gguf -t 8 > $O/synth_mx.log 2>&1 ) &
p1=$!
python3 tools/goldens/make_mixtral_goldens.py --out tests/data/goldens/mixtral > $O/goldens_mixtral.log 2>&1
echo "mixtral goldens rc $? t=$(el)"; tail -2 $O/goldens_mixtral.log | cut -c1-300
python3 tools/goldens/make_qwen3moe_goldens.py --out /tmp/q3g > $O/goldens_qwen3moe.log 2>&1
echo "qwen3moe goldens again rc $?: $(cd /tmp/q3g && for f in $(find . -type f | sort); do cmp -s $f $R/tests/data/goldens/qwen3moe/$f && echo "same:$f" || echo "DIFF:$f"; done | tr '\n' ' ')"
tar czf $O/mixtral_goldens.tgz -C tests/data/goldens mixtral
timeout 60 /tmp/bin/mox_cuda_tests --gtest_filter='CudaBasic.*' > $O/cuda_basic.log 2>&1; echo "cuda basic rc $?"; tail -3 $O/cuda_basic.log
MOX_TEST_DEVICE=cuda MOX_BIN=/tmp/bin/mox MOX_TOOL_DIR=/tmp/bin PYTHONUNBUFFERED=1 timeout 150 python3 -m pytest -q -s -rs \
  -p no:cacheprovider tests/py/test_goldens_mixtral.py tests/py/test_goldens_qwen3moe.py > $O/e2e.log 2>&1
echo "e2e rc $? t=$(el)"; grep -E "measured|passed|failed|FAILED" $O/e2e.log | tr '\n' ' ' | cut -c1-1500; echo
wait $p1; sync; echo "synth t=$(el)"; tail -1 $O/synth_mx.log
timeout 100 /tmp/bin/mox bench -m /tmp/mx.gguf -ngl 99 -p 512 -n 128 -r 3 $C -o md > $O/mx_gpu.md 2> $O/mx_gpu.err
echo "mx gpu rc $? t=$(el)"; grep -E 'pp512|tg128' $O/mx_gpu.md | cut -d'|' -f2,11-17
timeout 120 /tmp/bin/mox bench -m /tmp/mx.gguf -ngl 99 --plan auto --vram-budget 16GiB -c 32768 -p 4096 -n 512 -ub 4096 \
  -r 2 $C -o md > $O/mx_hybrid_16.md 2> $O/mx_hybrid_16.err
echo "mx hybrid rc $? t=$(el)"; grep -E 'pp4096|tg512' $O/mx_hybrid_16.md | cut -d'|' -f13-20; grep "^plan:" $O/mx_hybrid_16.err | cut -c1-250
cd $OUT && tar czf r.tgz r && rm -rf r

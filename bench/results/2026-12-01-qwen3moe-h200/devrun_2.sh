#!/bin/bash
# Call 2 (a fresh machine; the binaries came as ~5 MB parts in the calls before, see devrun_1.sh):
# mox at this commit (mox), mox before the restructure (mox_old, 6ae47cd), llama.cpp's llama-bench
# (llama-cpp-python 0.3.36's vendored copy, CUDA sm_90 + AVX-512, built by hand on the dev box).
#  1. the full-size synthetic Qwen3-30B-A3B and Qwen3.6-35B-A3B Q4_K_M files (background, 8 threads each)
#  2. the goldens of both architectures and mox-tiny on the GPU (new binary), mox-tiny's logits test
#     with the old binary too (is its GPU error older than the restructure?)
#  3. Qwen3.6-35B-A3B before/after the restructure, full GPU: pp512 + tg128, the binaries alternating
#  4. Qwen3-30B-A3B full GPU against llama.cpp in the same run (mox bench --compare): pp512, tg128
cat /tmp/parts/p.* | tar x -C /tmp/dc 2>/dev/null || { mkdir -p /tmp/dc && cat /tmp/parts/p.* | tar x -C /tmp/dc; }
mkdir -p out && rm -rf out/devcarry && ln -s /tmp/dc out/devcarry
. bench/cuda/device_env.sh
xz -dc /tmp/dc/mox_old.xz > /tmp/bin/mox_old && chmod +x /tmp/bin/mox_old
echo "binaries t=$(el): $(ls /tmp/bin)"
( /tmp/bin/mox synth --preset qwen3-30b-a3b -o /tmp/q3.gguf -t 8 > $O/synth_q3.log 2>&1 ) &
p1=$!
( /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 8 > $O/synth_q36.log 2>&1 ) &
p2=$!
MOX_TEST_DEVICE=cuda MOX_BIN=/tmp/bin/mox MOX_TOOL_DIR=/tmp/bin PYTHONUNBUFFERED=1 timeout 200 python3 -m pytest -q -s \
  -p no:cacheprovider tests/py/test_goldens.py tests/py/test_goldens_qwen3moe.py tests/py/test_mox_tiny.py > $O/e2e_new.log 2>&1
echo "e2e new rc $? t=$(el)"; tail -8 $O/e2e_new.log
MOX_TEST_DEVICE=cuda MOX_BIN=/tmp/bin/mox_old PYTHONUNBUFFERED=1 timeout 60 python3 -m pytest -q -s -p no:cacheprovider \
  tests/py/test_mox_tiny.py -k logits_match > $O/e2e_old_tiny.log 2>&1
echo "old mox-tiny logits rc $?: $(grep -h 'measured rel err' $O/e2e_old_tiny.log)"
wait $p1 $p2; sync; echo "synth done t=$(el)"; tail -1 $O/synth_q3.log $O/synth_q36.log
for round in 1 2; do
  for b in mox mox_old; do
    timeout 150 /tmp/bin/$b bench -m /tmp/q36.gguf -ngl 99 -p 512 -n 128 -r 3 $C -o md > $O/q36_${b}_$round.md 2> $O/q36_${b}_$round.err
    echo "q36 $b $round rc $? t=$(el)"; grep -E '^\| .*(pp512|tg128)' $O/q36_${b}_$round.md
  done
done
timeout 240 /tmp/bin/mox bench -m /tmp/q3.gguf -ngl 99 -p 512 -n 128 -r 3 $C --compare /tmp/bin/llama-bench -o md \
  -oe json > $O/q3_gpu.md 2> $O/q3_gpu.json
echo "q3 gpu rc $? t=$(el)"; cat $O/q3_gpu.md | grep -E '^\|' | head -12
cd $OUT && tar czf r.tgz r && rm -rf r

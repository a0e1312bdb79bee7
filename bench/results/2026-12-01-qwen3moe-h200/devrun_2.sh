#!/bin/bash
# Call 2 (a fresh machine; mox at this commit, mox before the restructure (mox_old, 6ae47cd), their
# Debian libraries and the gguf wheel came as ~5 MB parts in the calls before: `mkdir -p /tmp/parts
# && cp out/cN/p.N /tmp/parts/`, since the tracked tree leaves ~10 MB per call for carried files):
#  1. the full-size synthetic Qwen3-30B-A3B and Qwen3.6-35B-A3B Q4_K_M files (background, 8 threads each)
#  2. the end-to-end GPU tests of both architectures (goldens, hybrid placements, mox-tiny), and
#     mox-tiny's logits test with the old binary (is its GPU error older than the restructure?)
#  3. Qwen3.6-35B-A3B before/after the restructure, full GPU: pp512 + tg128, the binaries alternating
#  4. Qwen3-30B-A3B full GPU: pp512, tg128
cp out/c4/p.4 /tmp/parts/
mkdir -p /tmp/dc/cuda && cat /tmp/parts/p.[0-4] | tar x -C /tmp/dc || exit 1
mv /tmp/dc/mox.xz /tmp/dc/cuda/ 2>/dev/null
mkdir -p out && rm -rf out/devcarry && ln -s /tmp/dc out/devcarry
. bench/cuda/device_env.sh
xz -dc /tmp/dc/mox_old.xz > /tmp/bin/mox_old && chmod +x /tmp/bin/mox_old
echo "binaries t=$(el): $(ls /tmp/bin | tr '\n' ' ')"
( /tmp/bin/mox synth --preset qwen3-30b-a3b -o /tmp/q3.gguf -t 8 > $O/synth_q3.log 2>&1 ) &
p1=$!
( /tmp/bin/mox synth --preset qwen3.6-35b-a3b -o /tmp/q36.gguf -t 8 > $O/synth_q36.log 2>&1 ) &
p2=$!
MOX_TEST_DEVICE=cuda MOX_BIN=/tmp/bin/mox MOX_TOOL_DIR=/tmp/bin PYTHONUNBUFFERED=1 timeout 240 python3 -m pytest -q -s -rs \
  -p no:cacheprovider tests/py/test_goldens.py tests/py/test_goldens_qwen3moe.py tests/py/test_mox_tiny.py \
  tests/py/test_hybrid.py > $O/e2e_new.log 2>&1
echo "e2e new rc $? t=$(el)"; grep -E "passed|failed|FAILED|SKIPPED|unexpected" $O/e2e_new.log | tail -12
MOX_TEST_DEVICE=cuda MOX_BIN=/tmp/bin/mox_old PYTHONUNBUFFERED=1 timeout 60 python3 -m pytest -q -s -p no:cacheprovider \
  tests/py/test_mox_tiny.py -k logits_match > $O/e2e_old_tiny.log 2>&1
echo "old mox-tiny logits rc $?: $(grep -h 'measured rel err' $O/e2e_old_tiny.log)"
wait $p1 $p2; sync; echo "synth done t=$(el)"; tail -qn1 $O/synth_q3.log $O/synth_q36.log
for round in 1 2; do
  for b in mox mox_old; do
    timeout 150 /tmp/bin/$b bench -m /tmp/q36.gguf -ngl 99 -p 512 -n 128 -r 3 $C -o md > $O/q36_${b}_$round.md 2> $O/q36_${b}_$round.err
    echo "q36 $b $round rc $? t=$(el)"; grep -E '^\| .*(pp512|tg128)' $O/q36_${b}_$round.md
  done
done
timeout 150 /tmp/bin/mox bench -m /tmp/q3.gguf -ngl 99 -p 512,2048 -n 128,512 -r 3 $C -o md > $O/q3_gpu.md 2> $O/q3_gpu.err
echo "q3 gpu rc $? t=$(el)"; grep -E '^\|' $O/q3_gpu.md | head -8
cd $OUT && tar czf r.tgz r && rm -rf r

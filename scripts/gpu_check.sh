#!/usr/bin/env bash
# The GPU half of the test suite, for a machine with a CUDA device: the CUDA op tests
# (every kernel against the CPU reference) and the end-to-end tests (transformers goldens, mox-tiny's
# greedy text, logits and perplexity) with the model on the GPU. CI has no GPU; this is run by hand on
# the GPU machine and its output goes in the closing note.
#
#   scripts/gpu_check.sh BIN_DIR [OUT_DIR]
# BIN_DIR holds a -DMOX_CUDA=ON build's `mox` and `mox_cuda_tests` (and the tools/ helpers the Python
# tests use, if any); OUT_DIR (default .) receives gtest XML and the pytest log.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "$1")
out=$(realpath "${2:-.}")
status=0
# A GPU check on a machine without a GPU would pass with every CUDA test skipped: refuse instead.
if ! "$bin/mox" devices 2>/dev/null | grep -qE "^cuda:[0-9]+: "; then
    echo "== no CUDA device seen by $bin/mox devices: the GPU checks cannot run here"
    exit 1
fi

echo "== CUDA op tests"
"$bin/mox_cuda_tests" --gtest_output="xml:$out/cuda_tests.xml" >"$out/cuda_tests.log" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|GB/s|TFLOP|us" "$out/cuda_tests.log" | tail -60

echo "== end-to-end tests on the GPU (MOX_TEST_DEVICE=cuda)"
MOX_TEST_DEVICE=cuda MOX_BIN="$bin/mox" MOX_TOOL_DIR="$bin" PYTHONUNBUFFERED=1 \
    python3 -m pytest -q -s -p no:cacheprovider tests/py/test_goldens.py tests/py/test_goldens_qwen3moe.py \
    tests/py/test_goldens_mixtral.py tests/py/test_goldens_phimoe.py tests/py/test_goldens_qwen35.py \
    tests/py/test_mox_tiny.py tests/py/test_hybrid.py >"$out/e2e_gpu.log" 2>&1 ||
    status=1
tail -25 "$out/e2e_gpu.log"

[ $status -eq 0 ] && echo "== GPU checks passed" || echo "== GPU checks FAILED"
exit $status

#!/usr/bin/env bash
# The GPU half of the test suite (issue 5), for a machine with a CUDA device: the CUDA op tests
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

echo "== CUDA op tests"
"$bin/mox_cuda_tests" --gtest_output="xml:$out/cuda_tests.xml" 2>&1 | tee "$out/cuda_tests.log" | grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|tests ran" || true
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "== end-to-end tests on the GPU (MOX_TEST_DEVICE=cuda)"
MOX_TEST_DEVICE=cuda MOX_BIN="$bin/mox" MOX_TOOL_DIR="$bin" PYTHONUNBUFFERED=1 \
    python3 -m pytest -q -p no:cacheprovider tests/py/test_goldens.py tests/py/test_mox_tiny.py 2>&1 | tee "$out/e2e_gpu.log" | tail -25
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

[ $status -eq 0 ] && echo "== GPU checks passed" || echo "== GPU checks FAILED"
exit $status

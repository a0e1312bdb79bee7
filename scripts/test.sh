#!/usr/bin/env bash
# The whole test suite, as CI runs it: dependencies, an ASan+UBSan build with all tests (unit,
# Python interop against the `gguf` package, layering), the GGUF fuzzer for a bounded time, and a
# CUDA compile check when nvcc is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)

echo "== format"
scripts/check_format.sh

echo "== build (ASan+UBSan)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOX_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$jobs"

echo "== tests"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" | tee build-asan/ctest.log
echo "== skips (the Python suite checks its own against tests/py/expected_skips.txt)"
python3 scripts/check_skips.py build-asan/ctest.log tests/expected_gtest_skips.txt

echo "== kernel and op tests at the lower ISA tiers (ctest ran the CPU's best tier)"
for isa in avx2 scalar; do
    MOX_ISA=$isa ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
        build-asan/tests/mox_tests --gtest_brief=1 \
        --gtest_filter='*DotKernel*:*FastOp*:*Attention*:*Delta*:*Moe*:Qwen35MoeBatch.*'
done

echo "== fuzz (GGUF reader ${MOX_FUZZ_SECONDS:-60}s, then mox serve's request parser for half that)"
scripts/fuzz.sh "${MOX_FUZZ_SECONDS:-60}"

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "== CUDA build check (sm_90): the kernels, mox with the GPU forward, the CUDA tests (they skip without a GPU)"
    export PATH="$PATH:/usr/local/cuda/bin"
    cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOX_CUDA=ON -DMOX_CUDA_ARCHS=90 >/dev/null
    cmake --build build-cuda -j "$jobs" --target mox mox_cuda_tests
    build-cuda/tests/mox_cuda_tests --gtest_brief=1
fi
echo "== all tests passed"

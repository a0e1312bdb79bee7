#!/bin/bash
# Call 1. The tracked tree leaves ~10 MB for carried files, so the binaries built on the dev box
# (mox and mox_cuda_tests for sm_90, their Debian libraries, the gguf wheel) and llama.cpp's source
# (llama-cpp-python 0.3.36's vendored copy) came as six ~5 MB parts in the calls before this one
# (`mkdir -p /tmp/parts && cp out/cN/part.N /tmp/parts/`; /tmp lives while the machine stays warm).
# Here: reassemble them; llama-bench starts building in the background (CUDA sm_90, for the next
# calls); transformers makes the qwen3moe goldens again (head_dim 64); the full-size synthetic
# Qwen3-30B-A3B Q4_K_M is written in the background; the CUDA tests and the GPU end-to-end checks.
cp out/c5/part.5 /tmp/parts/ 2>/dev/null
mkdir -p /tmp/dc && cat /tmp/parts/part.[0-5] | tar x -C /tmp/dc || exit 1
mkdir -p out && rm -rf out/devcarry && ln -s /tmp/dc out/devcarry
. bench/cuda/device_env.sh
echo "assembled t=$(el): $(ls /tmp/bin)"
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/lcpp && tar xJf /tmp/dc/llama.cpp.tar.xz -C /tmp/lcpp
setsid bash -c 'cd /tmp/lcpp/llama.cpp && cmake -S . -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF \
  -DCMAKE_BUILD_TYPE=Release > /tmp/lb.log 2>&1 && cmake --build b -j 10 --target llama-bench >> /tmp/lb.log 2>&1
  echo "LB rc $?" >> /tmp/lb.log' < /dev/null > /dev/null 2>&1 &
python3 tools/goldens/make_qwen3moe_goldens.py --out tests/data/goldens/qwen3moe > $O/goldens.log 2>&1
echo "goldens rc $? t=$(el)"; tail -1 $O/goldens.log
tar czf $O/qwen3moe_goldens.tgz -C tests/data/goldens qwen3moe
setsid bash -c 'LD_LIBRARY_PATH='"$LD_LIBRARY_PATH"' /tmp/bin/mox synth --preset qwen3-30b-a3b -o /tmp/q3.gguf -t 4 > /tmp/synth_q3.log 2>&1; sync; echo done >> /tmp/synth_q3.log' < /dev/null > /dev/null 2>&1 &
timeout 400 bash scripts/gpu_check.sh /tmp/bin $O > $O/gpu_check.log 2>&1; echo "gpu_check rc $? t=$(el)"
grep -E "PASSED|FAILED|passed|failed|rror" $O/gpu_check.log | tail -14
grep -E "measured|PASS|FAIL" $O/e2e_gpu.log > $O/e2e_measured.txt
tail -2 /tmp/lb.log; tail -2 /tmp/synth_q3.log
cd $OUT && tar czf r.tgz r && rm -rf r

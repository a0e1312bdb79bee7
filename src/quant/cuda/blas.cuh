// The one cuBLAS product mox uses: large-batch dense projections whose weights were first decoded to
// fp16 (quant/cuda/matmul.cu). Handles are made once per device and kept for the process. Only .cu
// files include this header.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mox::cuda::blas {

// y[t * n_out + r] = sum_i w[r * k + i] * x[t * k + i] (fp16 operands, fp32 accumulation and
// output) for t < n_tokens, r < n_out, on `stream`. workspace: cuBLAS's scratch for this call (so it
// never allocates device memory of its own), 256-byte aligned.
void gemm_f16(const __half* w, const __half* x, int64_t n_out, int64_t n_tokens, int64_t k, float* y,
              void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Makes the current device's handle now (cuBLAS allocates some device memory when it does).
void init();

}  // namespace mox::cuda::blas

// Checking CUDA calls (STYLE.md #10: every CUDA call is checked). Only .cu files include this header.
// A failing call throws mox::Error naming the call, the source location and CUDA's own description,
// e.g. "CUDA error: cudaMalloc(&p, bytes) at src/ops/cuda/memory.cu:31: out of memory (2)".
#pragma once

#include "core/error.h"

#include <cuda_runtime.h>

namespace mox::cuda {

[[noreturn]] inline void cuda_fail(cudaError_t err, const char* call, const char* file, int line) {
    fail("CUDA error: {} at {}:{}: {} ({})", call, file, line, cudaGetErrorString(err),
         static_cast<int>(err));
}

}  // namespace mox::cuda

#define MOX_CUDA_CHECK(expr)                                                                                \
    do {                                                                                                    \
        const cudaError_t mox_cuda_err_ = (expr);                                                           \
        if (mox_cuda_err_ != cudaSuccess) ::mox::cuda::cuda_fail(mox_cuda_err_, #expr, __FILE__, __LINE__); \
    } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the launch statement.
#define MOX_CUDA_CHECK_LAUNCH(kernel_name)                                                       \
    do {                                                                                         \
        const cudaError_t mox_cuda_err_ = cudaGetLastError();                                    \
        if (mox_cuda_err_ != cudaSuccess)                                                        \
            ::mox::cuda::cuda_fail(mox_cuda_err_, "launch of " kernel_name, __FILE__, __LINE__); \
    } while (0)

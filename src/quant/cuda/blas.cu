#include "quant/cuda/blas.cuh"
#include "quant/cuda/check.cuh"

#include <cublas_v2.h>

#include <climits>
#include <mutex>
#include <vector>

namespace mox::cuda::blas {

namespace {

void check(cublasStatus_t st, const char* call) {
    if (st != CUBLAS_STATUS_SUCCESS) fail("cuBLAS error: {}: {}", call, cublasGetStatusString(st));
}

// One handle per device, made on first use. A handle's stream and workspace are set per call, so
// calls on one handle are serialised by the mutex (host-side only: the products run asynchronously).
struct Handles {
    std::mutex mu;
    std::vector<cublasHandle_t> by_device;
};

Handles& handles() {
    // Never destroyed: a cublasDestroy among the static destructors could run after the CUDA runtime
    // has shut down.
    static Handles* h = new Handles;
    return *h;
}

cublasHandle_t handle_locked(Handles& h) {
    int dev = 0;
    MOX_CUDA_CHECK(cudaGetDevice(&dev));
    if (h.by_device.size() <= static_cast<size_t>(dev))
        h.by_device.resize(static_cast<size_t>(dev) + 1, nullptr);
    cublasHandle_t& handle = h.by_device[static_cast<size_t>(dev)];
    if (handle == nullptr) check(cublasCreate(&handle), "cublasCreate");
    return handle;
}

}  // namespace

void init() {
    Handles& h = handles();
    const std::lock_guard<std::mutex> lock(h.mu);
    (void)handle_locked(h);
}

void gemm_f16(const __half* w, const __half* x, int64_t n_out, int64_t n_tokens, int64_t k, float* y,
              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    MOX_CHECK(n_out > 0 && n_tokens > 0 && k > 0 && n_out <= INT_MAX && n_tokens <= INT_MAX && k <= INT_MAX,
              "cuBLAS product {} x {} x {}", n_out, n_tokens, k);
    Handles& h = handles();
    const std::lock_guard<std::mutex> lock(h.mu);
    const cublasHandle_t handle = handle_locked(h);
    // Setting the stream resets the workspace to cuBLAS's own pool: the stream first.
    check(cublasSetStream(handle, stream), "cublasSetStream");
    check(cublasSetWorkspace(handle, workspace, workspace_bytes), "cublasSetWorkspace");
    // Column-major view: W is k x n_out (lda k), X is k x n_tokens (ldb k), Y is n_out x n_tokens
    // (ldc n_out); Y = W^T X. fp32 compute: the fp16 products are exact in fp32 and sum there.
    const float one = 1.0f, zero = 0.0f;
    const int m = static_cast<int>(n_out), n = static_cast<int>(n_tokens), kk = static_cast<int>(k);
    check(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, kk, &one, w, CUDA_R_16F, kk, x, CUDA_R_16F, kk,
                       &zero, y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
}

}  // namespace mox::cuda::blas

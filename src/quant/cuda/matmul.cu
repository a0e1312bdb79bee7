// Dense batched matrix product on the tensor cores (quant/cuda_matmul.h): one block per tile of
// (64 tokens x 128 output rows), weights dequantized into shared memory as fp16 on the fly
// (quant/cuda/matmul.cuh). Grid x runs over row tiles fastest, so blocks resident together share
// one token tile (the activations stay in L2) while the weights stream.
#include "quant/cuda/matmul.cuh"
#include "quant/cuda_matmul.h"

namespace mox::cuda {

namespace {

using mm::kBR;
using mm::kBT;
using mm::kMmThreads;

// y [n_tokens, n_out] = x [n_tokens, n_in] W^T; block (bx, by) computes rows 128 bx.., tokens 64 by..
template <class T>
__global__ void __launch_bounds__(kMmThreads)
    matmul_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                  const float* __restrict__ x, int64_t n_tokens, float* __restrict__ y) {
    __shared__ __align__(128) unsigned char smem[mm::Layout<1>::kBytes];
    __shared__ const float* a_rows[kBT];
    __shared__ float* y_rows[kBT];
    __shared__ float tbl[16];
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kBR, t0 = static_cast<int64_t>(blockIdx.y) * kBT;
    const int a_valid = static_cast<int>(min(static_cast<int64_t>(kBT), n_tokens - t0));
    const int tid = threadIdx.x;
    if (tid < kBT) {
        const bool ok = tid < a_valid;
        a_rows[tid] = ok ? x + (t0 + tid) * n_in : nullptr;
        y_rows[tid] = ok ? y + (t0 + tid) * n_out : nullptr;
    }
    stage_table<T>(tbl);
    __syncthreads();
    const int64_t r = r0 + (tid >> 1);
    const uint8_t* wrow[1] = {r < n_out ? w + static_cast<size_t>(r) * row_bytes : nullptr};
    mm::AccFrag acc[1][2][2];
    mm::mma_tile<T, 1>(wrow, n_in, a_rows, a_valid, smem, tbl, acc);
    mm::store_tile(acc[0], smem, y_rows, a_valid, r0, n_out - r0);
}

}  // namespace

bool matmul_supported(quant::TypeId type) {
    return dispatch_type(type, [](auto) {});
}

size_t matmul_workspace_bytes(quant::TypeId, int64_t, int64_t, int64_t) {
    return 0;  // weights are dequantized tile by tile in shared memory
}

void matmul(quant::TypeId type, const void* w, size_t row_bytes, int64_t n_in, int64_t n_out, const float* x,
            int64_t n_tokens, float* y, void*, StreamHandle stream) {
    MOX_CHECK(n_in > 0 && n_out > 0 && n_tokens >= 0, "matmul shape {}x{}, {} tokens", n_out, n_in, n_tokens);
    const auto& tr = quant::traits(type);
    if (tr.is_quantized && n_in % tr.block_elems != 0)
        fail("CUDA matmul: {} rows need a multiple of {} elements, got {}", tr.name, tr.block_elems, n_in);
    MOX_CHECK(row_bytes == quant::row_bytes(type, n_in), "row_bytes {} for {} x {}", row_bytes, n_in,
              tr.name);
    if (n_tokens == 0) return;
    const int64_t row_tiles = (n_out + kBR - 1) / kBR, token_tiles = (n_tokens + kBT - 1) / kBT;
    if (row_tiles > INT32_MAX || token_tiles > 65535)
        fail("CUDA matmul: {} rows x {} tokens is past the grid limits", n_out, n_tokens);
    const bool ok = dispatch_type(type, [&](auto tag) {
        using T = decltype(tag);
        matmul_kernel<T>
            <<<dim3(static_cast<unsigned>(row_tiles), static_cast<unsigned>(token_tiles)), kMmThreads, 0,
               stream>>>(static_cast<const uint8_t*>(w), row_bytes, n_in, n_out, x, n_tokens, y);
        MOX_CUDA_CHECK_LAUNCH("matmul_kernel");
    });
    if (!ok) fail("CUDA matmul: no kernel for weight type {}", tr.name);
}

}  // namespace mox::cuda

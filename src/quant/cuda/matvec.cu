#include "quant/cuda/launch.cuh"
#include "quant/cuda/matvec.cuh"
#include "quant/cuda_matvec.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace mox::cuda {

const LaunchLimits& launch_limits() {
    // One device per process for now: the limits of the device current at first use.
    static const LaunchLimits limits = [] {
        LaunchLimits l;
        int dev = 0;
        MOX_CUDA_CHECK(cudaGetDevice(&dev));
        MOX_CUDA_CHECK(cudaDeviceGetAttribute(&l.sm_count, cudaDevAttrMultiProcessorCount, dev));
        MOX_CUDA_CHECK(
            cudaDeviceGetAttribute(&l.max_smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        return l;
    }();
    return limits;
}

bool overlapped_launches() {
    static const bool enabled = [] {
        int dev = 0, major = 0;
        MOX_CUDA_CHECK(cudaGetDevice(&dev));
        MOX_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        // Off unless MOX_PDL=1: measured slower on the H200 (launch.cuh).
        const char* env = std::getenv("MOX_PDL");
        return major >= 9 && env != nullptr && std::strcmp(env, "1") == 0;
    }();
    return enabled;
}

void prepare_smem(const void* kernel, size_t bytes, const char* what) {
    // 1 KiB stays free for the kernels' static shared memory (value tables).
    if (bytes + 1024 > static_cast<size_t>(launch_limits().max_smem_optin))
        fail("CUDA {}: activations need {} bytes of shared memory, the device allows {} per block", what,
             bytes, launch_limits().max_smem_optin);
    if (bytes > 48 * 1024)
        MOX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)));
}

int grid_blocks(const void* kernel, size_t smem_bytes, int64_t work_blocks) {
    // The occupancy query runs on the host at every launch of a decode step (3 per MoE layer): keep
    // its answers, a handful of (kernel, shared-memory size) pairs per process.
    struct Entry {
        const void* kernel;
        size_t smem;
        int per_sm;
    };
    static std::mutex mutex;
    static std::vector<Entry> cache;
    int per_sm = -1;
    {
        std::lock_guard<std::mutex> lock(mutex);
        for (const Entry& e : cache)
            if (e.kernel == kernel && e.smem == smem_bytes) per_sm = e.per_sm;
    }
    if (per_sm < 0) {
        MOX_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem_bytes));
        std::lock_guard<std::mutex> lock(mutex);
        cache.push_back({kernel, smem_bytes, per_sm});
    }
    const int64_t resident = static_cast<int64_t>(std::max(per_sm, 1)) * launch_limits().sm_count;
    return static_cast<int>(std::max<int64_t>(1, std::min(work_blocks, resident)));
}

namespace {

// Each block stages the NC activation columns once, then its warps take kRows rows at a time,
// striding over the matrix. y: [NC][n_out] with column stride y_stride.
template <class T, int NC>
__global__ void __launch_bounds__(kThreads)
    matvec_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                  const float* __restrict__ x, int64_t x_stride, float* __restrict__ y, int64_t y_stride) {
    extern __shared__ float4 smem[];
    __shared__ float tbl[16];
    float* xs = reinterpret_cast<float*>(smem);
    const int64_t n_segs = n_segments<T>(n_in);
    const int64_t xs_stride = n_units(n_segs) * 256;
    stage_table<T>(tbl);
    dependency_wait();  // launch.cuh: x comes from an earlier kernel
    allow_next_launch();
    stage_x_rows<T>(xs, x, x_stride, NC, n_in, n_segs);
    __syncthreads();

    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t warps_total = static_cast<int64_t>(gridDim.x) * (kThreads / kWarp);
    for (int64_t r0 = (static_cast<int64_t>(blockIdx.x) * (kThreads / kWarp) + warp) * kRows; r0 < n_out;
         r0 += warps_total * kRows) {
        const uint8_t* rows[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) rows[r] = w + static_cast<size_t>(min(r0 + r, n_out - 1)) * row_bytes;
        float acc[kRows][NC] = {};
        warp_dot<T, kRows, NC>(rows, xs, xs_stride, n_in, n_segs, tbl, acc);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                const float v = warp_sum(acc[r][c]);
                if (lane == 0 && r0 + r < n_out) y[c * y_stride + r0 + r] = v;
            }
        }
    }
}

template <class T, int NC>
void launch(const void* w, size_t row_bytes, int64_t n_in, int64_t n_out, const float* x, float* y,
            StreamHandle stream) {
    const auto kernel = matvec_kernel<T, NC>;
    const size_t smem = static_cast<size_t>(NC * n_units(n_segments<T>(n_in)) * 256) * sizeof(float);
    prepare_smem(reinterpret_cast<const void*>(kernel), smem, "matvec");
    // 8-warp blocks even for short matrices: one-warp blocks for the 257-row router (129 blocks on
    // as many SMs instead of 17) measured slower on the H200, 12.0 us against 9.8 (ncu), as a block
    // of few threads stages its activations in more round trips (stage_x_rows).
    const int64_t rows_per_block = (kThreads / kWarp) * kRows;
    const int blocks = grid_blocks(reinterpret_cast<const void*>(kernel), smem,
                                   (n_out + rows_per_block - 1) / rows_per_block);
    launch_overlapped(kernel, blocks, kThreads, smem, stream, static_cast<const uint8_t*>(w), row_bytes, n_in, n_out,
                      x, n_in, y, n_out);
    MOX_CUDA_CHECK_LAUNCH("matvec_kernel");
}

}  // namespace

bool matvec_supported(quant::TypeId type) {
    return dispatch_type(type, [](auto) {});
}

void matvec(quant::TypeId type, const void* w, size_t row_bytes, int64_t n_in, int64_t n_out, const float* x,
            int n_cols, float* y, StreamHandle stream) {
    MOX_CHECK(n_cols >= 1 && n_cols <= kMaxMatvecCols, "matvec with {} columns", n_cols);
    MOX_CHECK(n_in > 0 && n_out > 0, "matvec shape {}x{}", n_out, n_in);
    const auto& tr = quant::traits(type);
    if (tr.is_quantized && n_in % tr.block_elems != 0)
        fail("CUDA matvec: {} rows need a multiple of {} elements, got {}", tr.name, tr.block_elems, n_in);
    MOX_CHECK(row_bytes == quant::row_bytes(type, n_in), "row_bytes {} for {} x {}", row_bytes, n_in,
              tr.name);
    // Columns go in chunks of 8, 4, 2, 1: few instantiations, each chunk reads W once.
    int c0 = 0;
    while (c0 < n_cols) {
        const int left = n_cols - c0;
        const int nc = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        const float* xc = x + c0 * n_in;
        float* yc = y + c0 * n_out;
        const bool ok = dispatch_type(type, [&](auto tag) {
            using T = decltype(tag);
            switch (nc) {
                case 8:
                    launch<T, 8>(w, row_bytes, n_in, n_out, xc, yc, stream);
                    break;
                case 4:
                    launch<T, 4>(w, row_bytes, n_in, n_out, xc, yc, stream);
                    break;
                case 2:
                    launch<T, 2>(w, row_bytes, n_in, n_out, xc, yc, stream);
                    break;
                default:
                    launch<T, 1>(w, row_bytes, n_in, n_out, xc, yc, stream);
                    break;
            }
        });
        if (!ok) fail("CUDA matvec: no kernel for weight type {}", tr.name);
        c0 += nc;
    }
}

}  // namespace mox::cuda

#include "quant/cuda/matvec.cuh"
#include "quant/cuda_matvec.h"

#include <algorithm>
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
// striding over the matrix. y: [NC][n_out] with column stride y_stride. I8: x staged as 8-bit
// segments (matvec.cuh), one column only.
template <class T, int NC, bool I8>
__global__ void __launch_bounds__(kThreads)
    matvec_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                  const float* __restrict__ x, int64_t x_stride, float* __restrict__ y, int64_t y_stride) {
    static_assert(!I8 || NC == 1, "int8 activations are the one-column path");
    extern __shared__ float4 smem[];
    __shared__ float tbl[16];
    float* xs = reinterpret_cast<float*>(smem);
    const int64_t n_segs = n_segments<T>(n_in);
    const int64_t xs_stride = n_units(n_segs) * 256;
    stage_table<T>(tbl);
    if constexpr (I8)
        stage_x_i8<T>(reinterpret_cast<uint8_t*>(smem), x, x_stride, 1, n_in, n_segs);
    else
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
        if constexpr (I8)
            warp_dot_i8<T, kRows>(rows, reinterpret_cast<const uint8_t*>(smem), n_segs, acc);
        else
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

template <class T, int NC, bool I8>
void launch_kernel(const void* w, size_t row_bytes, int64_t n_in, int64_t n_out, const float* x, float* y,
                   StreamHandle stream) {
    const auto kernel = matvec_kernel<T, NC, I8>;
    const int64_t n_segs = n_segments<T>(n_in);
    size_t smem = static_cast<size_t>(NC * n_units(n_segs) * 256) * sizeof(float);
    if constexpr (I8) smem = static_cast<size_t>(i8_row_bytes<T>(n_segs));
    prepare_smem(reinterpret_cast<const void*>(kernel), smem, "matvec");
    // 8-warp blocks even for short matrices: a block of few threads stages its activations in more
    // round trips (stage_x_rows); short float matrices take matvec_short_kernel below instead.
    const int64_t rows_per_block = (kThreads / kWarp) * kRows;
    const int blocks = grid_blocks(reinterpret_cast<const void*>(kernel), smem,
                                   (n_out + rows_per_block - 1) / rows_per_block);
    kernel<<<blocks, kThreads, smem, stream>>>(static_cast<const uint8_t*>(w), row_bytes, n_in, n_out, x,
                                               n_in, y, n_out);
    MOX_CUDA_CHECK_LAUNCH("matvec_kernel");
}

// Short float matrices at one column (the F32 router, 2048 -> 257): one warp per block and row
// pair, x read straight from global memory (L2) with the weights instead of staged. The 8-warp
// blocks above put the router's 2.1 MB on 17 SMs (9.2 us, ncu: each SM's loads in flight were
// the limit); one-warp blocks that staged x were slower still (12.0 us), as 32 threads stage 2048
// floats in several dependent round trips. Here a lane's x and weight loads leave together.
// (Two or four warps per row pair splitting its segments were no faster:
// bench/results/2026-11-30-raw-staged-tiles-h200.)
template <class T>
__global__ void __launch_bounds__(kWarp)
    matvec_short_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                        const float* __restrict__ x, float* __restrict__ y) {
    static_assert(seg::kIsFloat<T>, "x is read in element order: float weights only");
    const int lane = static_cast<int>(threadIdx.x);
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRows;
    const uint8_t* rows[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) rows[r] = w + static_cast<size_t>(min(r0 + r, n_out - 1)) * row_bytes;
    float acc[kRows] = {};
    short_rows_dot<T, false>(rows, x, n_in, lane, acc);  // n_in: whole segments (the launcher checks)
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const float v = warp_sum(acc[r]);
        if (lane == 0 && r0 + r < n_out) y[r0 + r] = v;
    }
}

// Whether a one-column product takes matvec_short_kernel: float weights, whole 32-element
// segments, 16-byte aligned x, and too few rows to give every SM an 8-warp block.
template <class T>
bool use_short_kernel(int64_t n_in, int64_t n_out, const float* x) {
    if constexpr (!seg::kIsFloat<T>) {
        return false;
    } else {
        const int64_t rows_per_block = (kThreads / kWarp) * kRows;
        return n_in % 32 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
               (n_out + rows_per_block - 1) / rows_per_block < launch_limits().sm_count;
    }
}

template <class T, int NC>
void launch(const void* w, size_t row_bytes, int64_t n_in, int64_t n_out, const float* x, float* y,
            StreamHandle stream) {
    // One column of a type with an integer kernel: 8-bit activations (+19% decode on the H200 against
    // fp32 ones, tg128 285 vs 239 t/s: bench/results/2026-11-30-int8-handoff-h200).
    if constexpr (NC == 1 && kHasI8<T>) {
        launch_kernel<T, 1, true>(w, row_bytes, n_in, n_out, x, y, stream);
    } else {
        if constexpr (NC == 1 && seg::kIsFloat<T>) {
            if (use_short_kernel<T>(n_in, n_out, x)) {
                const auto blocks = static_cast<unsigned>((n_out + kRows - 1) / kRows);
                const auto* wb = static_cast<const uint8_t*>(w);
                matvec_short_kernel<T><<<blocks, kWarp, 0, stream>>>(wb, row_bytes, n_in, n_out, x, y);
                MOX_CUDA_CHECK_LAUNCH("matvec_short_kernel");
                return;
            }
        }
        launch_kernel<T, NC, false>(w, row_bytes, n_in, n_out, x, y, stream);
    }
}

}  // namespace

bool int8_activations(quant::TypeId type) {
    bool has = false;
    dispatch_type(type, [&](auto tag) { has = kHasI8<decltype(tag)>; });
    return has;
}

std::vector<int64_t> activation_segments(quant::TypeId type, int64_t n_in) {
    std::vector<int64_t> elems;
    dispatch_type(type, [&](auto tag) {
        using T = decltype(tag);
        const int64_t n_segs = n_segments<T>(n_in);
        elems.resize(static_cast<size_t>(n_segs * 32));
        for (int64_t g = 0; g < n_segs; ++g)
            for (int j = 0; j < 32; ++j) {
                const int64_t e = segment_elem<T>(g, j);
                elems[static_cast<size_t>(g * 32 + j)] = e < n_in ? e : -1;
            }
    });
    return elems;
}

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
        int nc = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        const float* xc = x + c0 * n_in;
        float* yc = y + c0 * n_out;
        const bool ok = dispatch_type(type, [&](auto tag) {
            using T = decltype(tag);
            // Wide inputs (a dense 17408 -> 5120 down projection) stage fewer fp32 columns per
            // launch: 8 columns of them would not fit in a block's shared memory.
            const auto staged = [&](int cols) {
                return static_cast<size_t>(cols * n_units(n_segments<T>(n_in)) * 256) * sizeof(float) + 1024;
            };
            while (nc > 1 && staged(nc) > static_cast<size_t>(launch_limits().max_smem_optin)) nc /= 2;
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

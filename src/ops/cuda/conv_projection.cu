// A Gated DeltaNet's input projection at decode with the causal conv + SiLU in the product's store
// (ops/cuda_delta_net.h, conv_projection).
//
// Why: a decode step is ~400 short kernels and each costs its launch, its ramp over the SMs and a
// dependent chain of loads; the conv alone was one of them per DeltaNet layer (4.3 us in ncu, 30 a
// step). The conv of channel c needs only row c of the product and channel c's own state and taps,
// so the lane that holds row c's sum finishes it: no other block reads or writes that channel,
// which lets the state shift in place. The taps and state lines of a warp's rows are prefetched into
// L1 with its weights (before the dot products) and read after them, so the chain gains no DRAM
// round trip.
//
// The product is matvec_kernel<T, 1, true>'s (quant/cuda/matvec.cu): the same staging, warp
// layout, dot order and warp sums, so the rows match a plain matvec bit for bit and the conv
// matches conv_silu_kernel's summation order (the test checks both exactly). ncu of the first version,
// which held the taps and state in registers across the dot products: 99 registers (matvec_kernel:
// 64), 2 blocks per SM instead of 4, 12.9 us against 10.5 + 4.3 for the two launches
// (bench/results/2026-11-30-decode-fusions-h200).
#include "ops/cuda_delta_net.h"
#include "quant/cuda/matvec.cuh"
#include "quant/cuda_matvec.h"

namespace mox::cuda {

namespace {

inline constexpr int kMaxTaps = 8;  // conv_silu's limit

struct ConvProjArgs {
    const uint8_t* w;
    size_t row_bytes;
    int64_t n_in, n_out;
    const float* x;
    float* y;  // rows >= channels
    float* state;
    const float* taps;
    float* conv_out;  // rows < channels
    int64_t channels;
    int kernel;
};

__device__ __forceinline__ float silu(float v) {
    return v / (1.0f + expf(-v));
}

template <class T>
__global__ void __launch_bounds__(kThreads) conv_projection_kernel(const ConvProjArgs a) {
    extern __shared__ float4 smem[];
    const int64_t n_segs = n_segments<T>(a.n_in);
    stage_x_i8<T>(reinterpret_cast<uint8_t*>(smem), a.x, 0, 1, a.n_in, n_segs);
    __syncthreads();

    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t warps_total = static_cast<int64_t>(gridDim.x) * (kThreads / kWarp);
    for (int64_t r0 = (static_cast<int64_t>(blockIdx.x) * (kThreads / kWarp) + warp) * kRows; r0 < a.n_out;
         r0 += warps_total * kRows) {
        // Lane r < kRows finishes row r0 + r. A conv row's taps and state lines are pulled into L1
        // with the weights (a hint: no registers held across the dot products, which keeps the
        // kernel at matvec_kernel's 4 blocks per SM) and read from there after them.
        const int64_t row = r0 + lane;
        const bool conv_row = lane < kRows && row < a.channels;
        if (conv_row) {
            asm volatile("prefetch.global.L1 [%0];" ::"l"(a.taps + row * a.kernel));
            for (int j = 0; j < a.kernel - 1; ++j)
                asm volatile("prefetch.global.L1 [%0];" ::"l"(a.state + j * a.channels + row));
        }

        const uint8_t* rows[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r)
            rows[r] = a.w + static_cast<size_t>(min(r0 + r, a.n_out - 1)) * a.row_bytes;
        float acc[kRows][1] = {};
        warp_dot_i8<T, kRows>(rows, reinterpret_cast<const uint8_t*>(smem), n_segs, acc);
        float mine = 0.0f;  // lane r: the sum of row r0 + r
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const float v = warp_sum(acc[r][0]);
            if (lane == r) mine = v;
        }
        if (lane >= kRows || row >= a.n_out) continue;
        if (!conv_row) {
            a.y[row] = mine;
            continue;
        }
        float tap[kMaxTaps], win[kMaxTaps - 1];
#pragma unroll
        for (int j = 0; j < kMaxTaps; ++j) tap[j] = j < a.kernel ? a.taps[row * a.kernel + j] : 0.0f;
#pragma unroll
        for (int j = 0; j < kMaxTaps - 1; ++j)
            win[j] = j < a.kernel - 1 ? a.state[j * a.channels + row] : 0.0f;
        // conv_silu_kernel's order: the newest tap first, then the window oldest first.
        float tap_last = 0.0f;
#pragma unroll
        for (int j = 0; j < kMaxTaps; ++j)
            if (j == a.kernel - 1) tap_last = tap[j];
        float sum = tap_last * mine;
#pragma unroll
        for (int j = 0; j < kMaxTaps - 1; ++j)
            if (j < a.kernel - 1) sum += tap[j] * win[j];
        a.conv_out[row] = silu(sum);
        // The state shifts by one: row j takes row j + 1, the newest row takes this token's input.
#pragma unroll
        for (int j = 0; j < kMaxTaps - 1; ++j) {
            if (j + 1 < a.kernel - 1)
                a.state[j * a.channels + row] = win[j + 1];
            else if (j == a.kernel - 2)
                a.state[j * a.channels + row] = mine;
        }
    }
}

}  // namespace

bool conv_projection_supported(quant::TypeId type) {
    bool ok = false;
    dispatch_type(type, [&](auto tag) { ok = kHasI8<decltype(tag)>; });
    return ok;
}

void conv_projection(quant::TypeId type, const void* w, size_t row_bytes, int64_t n_in, int64_t n_out,
                     const float* x, float* y, float* state, const float* taps, int64_t kernel,
                     int64_t channels, float* conv_out, StreamHandle stream) {
    if (!conv_projection_supported(type))
        fail("conv_projection: no fused kernel for {} weights (use matvec and conv_silu)",
             quant::type_name(type));
    if (kernel < 1 || kernel > kMaxTaps) fail("conv_projection: kernel {} not in [1, {}]", kernel, kMaxTaps);
    if (n_in <= 0 || channels <= 0 || channels > n_out)
        fail("conv_projection: {} conv channels of a {} x {} product", channels, n_out, n_in);
    MOX_CHECK(row_bytes == quant::row_bytes(type, n_in), "row_bytes {} for {} x {}", row_bytes, n_in,
              quant::type_name(type));
    dispatch_type(type, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (kHasI8<T>) {
            const auto kernel_fn = conv_projection_kernel<T>;
            const size_t smem = static_cast<size_t>(i8_row_bytes<T>(n_segments<T>(n_in)));
            prepare_smem(reinterpret_cast<const void*>(kernel_fn), smem, "conv_projection");
            const int64_t rows_per_block = (kThreads / kWarp) * kRows;
            const int blocks = grid_blocks(reinterpret_cast<const void*>(kernel_fn), smem,
                                           (n_out + rows_per_block - 1) / rows_per_block);
            const ConvProjArgs args{
                static_cast<const uint8_t*>(w), row_bytes, n_in, n_out, x, y, state, taps, conv_out, channels,
                static_cast<int>(kernel)};
            kernel_fn<<<blocks, kThreads, smem, stream>>>(args);
            MOX_CUDA_CHECK_LAUNCH("conv_projection_kernel");
        }
    });
}

}  // namespace mox::cuda

// Dense batched matrix product on the tensor cores (quant/cuda_matmul.h), weights dequantized into
// shared memory as fp16 on the fly (quant/cuda/matmul.cuh). Grid x runs over row tiles fastest, so
// blocks resident together share one token tile (the activations stay in L2) while the weights stream.
//
// Version 2 (default): x is first permuted to fp16 rows in the weight type's segment order (workspace),
// then one block per (128 rows, 64 or 128 tokens, range of the inner dimension) runs the two-stage pipeline
// of mma_tile2. When the (rows x tokens) tiles alone fill fewer than kTargetBlocks blocks (e.g. 2048 ->
// 512 at 512 tokens: 32 tiles for 132 SMs) the inner dimension is split over grid z: each split
// writes its own partial [n_tokens, n_out] slice of the workspace and reduce_kernel adds the slices
// in split order (deterministic, no atomics).
// Precise mode (precise = true): both operands as hi + lo fp16 parts (matmul.cuh), three MMAs per
// product and a token tile of 32; about 1e-5 relative instead of 1e-3, at 2-3x the time.
// Version 1 (tuning().matmul_v1, MOX_MATMUL_V1=1; not precise): the original single-stage kernel, a
// fallback.
// Large batches (cuda_matmul.h, kCublasMinTokens): the weight decoded to fp16 rows in the same
// segment order as the permuted activations (dequant_half_kernel), then one cuBLAS product.
#include "core/tuning.h"
#include "quant/cuda/blas.cuh"
#include "quant/cuda/matmul.cuh"
#include "quant/cuda_matmul.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <type_traits>

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

constexpr int kBT2 = 64;                   // token tile of version 2
constexpr int kBT2Big = 128;               // ... when 128-token tiles alone fill kTargetBlocks blocks
constexpr int kBT2Precise = 32;            // token tile of precise mode (twice the accumulators)
constexpr int64_t kTargetBlocks = 264;     // two blocks on each of the H200's 132 SMs
constexpr int64_t kMinChunksPerSplit = 4;  // a split covers >= 4 chunks (256 inner elements)

// How one call is cut up; a pure function of the type's segment count and the sizes, so that
// matmul_workspace_bytes and matmul agree.
struct Plan {
    int bt;                    // token tile
    int64_t stride;            // halves per permuted activation row (xh_stride)
    int64_t n_chunks;          // chunks of kSegsPerChunk segments per row
    int64_t splits;            // grid z
    int64_t chunks_per_split;  // the last split may have fewer
    size_t xh_bytes;           // permuted activations (hi and lo parts in precise mode), 256-aligned
    size_t part_bytes;         // partial sums when splitting is possible at all (0 if never)
};

// Splitting multiplies the output bytes written, so it is capped at cap_rows (token rows x splits)
// per output column; the cap depends on n_out only, so the workspace for n_tokens also covers every
// smaller batch (the model sizes its workspace once for its largest batch).
Plan make_plan(int64_t n_segs, int64_t n_out, int64_t n_tokens, bool precise) {
    Plan p{};
    const int64_t parts = precise ? 2 : 1;
    p.n_chunks = (n_segs + mm::kSegsPerChunk - 1) / mm::kSegsPerChunk;
    p.stride = p.n_chunks * mm::kSegsPerChunk * seg::kSegElems;
    p.xh_bytes = (static_cast<size_t>(n_tokens * p.stride * parts) * 2 + 255) / 256 * 256;
    const int64_t row_tiles = (n_out + kBR - 1) / kBR;
    // Bigger token tiles decode each weight for more tokens, as long as the grid stays full.
    p.bt = precise ? kBT2Precise
                   : (row_tiles * ((n_tokens + kBT2Big - 1) / kBT2Big) >= kTargetBlocks ? kBT2Big : kBT2);
    const int64_t token_tiles = (n_tokens + p.bt - 1) / p.bt;
    const bool can_split = p.n_chunks >= 2 * kMinChunksPerSplit && row_tiles < kTargetBlocks;
    const int64_t cap_rows = kBT2 * ((2 * kTargetBlocks + row_tiles - 1) / row_tiles);
    p.part_bytes = can_split ? static_cast<size_t>(cap_rows * n_out) * 4 : 0;
    p.splits = 1;
    const int64_t blocks = row_tiles * token_tiles;
    if (can_split && blocks < kTargetBlocks && n_tokens > 0) {
        const int64_t want = (kTargetBlocks + blocks - 1) / blocks;
        p.splits =
            std::max<int64_t>(1, std::min({want, p.n_chunks / kMinChunksPerSplit, cap_rows / n_tokens}));
    }
    p.chunks_per_split = (p.n_chunks + p.splits - 1) / p.splits;
    p.splits = (p.n_chunks + p.chunks_per_split - 1) / p.chunks_per_split;  // no empty split
    return p;
}

template <class T>
Plan plan_for(int64_t n_in, int64_t n_out, int64_t n_tokens, bool precise) {
    return make_plan(n_segments<T>(n_in), n_out, n_tokens, precise);
}

// Block (bx, by, bz): rows 128 bx.., tokens BT by.., chunks [bz cps, (bz + 1) cps) of the inner
// dimension. out: y when gridDim.z == 1, else the partial slice part + bz * n_tokens * n_out.
// xh: [n_tokens, P ? 2 : 1, stride] halves (permute_half<T, P>).
template <class T, int BT, bool P, bool R>
__global__ void __launch_bounds__(kMmThreads)
    matmul2_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                   const __half* __restrict__ xh, int64_t stride, int64_t n_tokens, int64_t chunks_per_split,
                   float* __restrict__ y, float* __restrict__ part) {
    extern __shared__ __align__(128) unsigned char smem2[];
    __shared__ const __half* a_rows[BT];
    __shared__ float* y_rows[BT];
    __shared__ const uint8_t* w_rows[kBR];
    __shared__ float tbl[16];
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kBR, t0 = static_cast<int64_t>(blockIdx.y) * BT;
    const int a_valid = static_cast<int>(min(static_cast<int64_t>(BT), n_tokens - t0));
    float* out = gridDim.z == 1 ? y : part + static_cast<int64_t>(blockIdx.z) * n_tokens * n_out;
    const int tid = threadIdx.x;
    const int64_t row_halves = (P ? 2 : 1) * stride;
    if (tid < BT) {
        const bool ok = tid < a_valid;
        a_rows[tid] = ok ? xh + (t0 + tid) * row_halves : nullptr;
        y_rows[tid] = ok ? out + (t0 + tid) * n_out : nullptr;
    }
    const auto tile_row = [&](int i) -> const uint8_t* {
        const int64_t r = r0 + i;
        return r < n_out ? w + static_cast<size_t>(r) * row_bytes : nullptr;
    };
    if constexpr (R)
        if (tid < kBR) w_rows[tid] = tile_row(tid);
    stage_table<T>(tbl);
    __syncthreads();
    const uint8_t* my_row = tile_row(tid >> 1);
    const int64_t g_begin = static_cast<int64_t>(blockIdx.z) * chunks_per_split * mm::kSegsPerChunk;
    const int64_t g_end = min(g_begin + chunks_per_split * mm::kSegsPerChunk, stride / seg::kSegElems);
    mm::AccFrag acc[1][2][mm::Shape<BT>::kFB];
    mm::mma_tile1<T, BT, P, R>(my_row, w_rows, row_bytes, n_in, a_rows, stride, a_valid, g_begin, g_end,
                               smem2, tbl, acc);
    mm::store_tile2<BT>(acc[0], smem2, y_rows, a_valid, r0, n_out - r0);
}

// y[i] = sum_z part[z][i] for z = 0, 1, .. in order; n = n_tokens * n_out.
__global__ void __launch_bounds__(256)
    reduce_kernel(const float* __restrict__ part, int64_t n, int64_t splits, float* __restrict__ y) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * 256) {
        float s = part[i];
        for (int64_t z = 1; z < splits; ++z) s += part[z * n + i];
        y[i] = s;
    }
}

// wh[r, 32 g + j] = fp16(value j of segment g of row r) in decode order (segments.cuh), the order
// permute_half_kernel gives the activations; zeros from the row's last segment to the stride.
// One thread per (row, segment slot).
template <class T>
__global__ void __launch_bounds__(256)
    dequant_half_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                        int64_t stride, __half* __restrict__ wh) {
    __shared__ float tbl[16];
    stage_table<T>(tbl);
    __syncthreads();
    const int64_t slots = stride / seg::kSegElems;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
    if (i >= n_out * slots) return;
    const int64_t r = i / slots, g = i - r * slots;
    __half* dst = wh + r * stride + g * seg::kSegElems;
    if (g < n_segments<T>(n_in)) {
        seg::Seg sg;
        T::load(w + static_cast<size_t>(r) * row_bytes, g, n_in, sg, tbl);
        mm::store_seg_half<T>(sg, dst);
    } else {
        uint4* d4 = reinterpret_cast<uint4*>(dst);
#pragma unroll
        for (int v = 0; v < 4; ++v) d4[v] = make_uint4(0, 0, 0, 0);
    }
}

size_t round256(size_t v) {
    return (v + 255) / 256 * 256;
}

// The cuBLAS path's workspace: permuted activations, the decoded weight, cuBLAS's scratch, each
// 256-byte aligned; total 0 when the path does not apply to these sizes.
struct CublasLayout {
    int64_t stride = 0;  // halves per row of both operands (mm::xh_stride)
    size_t wh = 0;       // offset of the decoded weight
    size_t blas = 0;     // offset of cuBLAS's scratch
    size_t total = 0;
};

template <class T>
CublasLayout cublas_layout(int64_t n_in, int64_t n_out, int64_t n_tokens) {
    CublasLayout l;
    l.stride = mm::xh_stride<T>(n_in);
    if (n_tokens < kCublasMinTokens || n_out * l.stride > kCublasMaxWeightElems) return l;
    l.wh = round256(static_cast<size_t>(n_tokens * l.stride) * 2);
    l.blas = l.wh + round256(static_cast<size_t>(n_out * l.stride) * 2);
    l.total = l.blas + kCublasWorkspaceBytes;
    return l;
}

// Read at every call, so tests can run both paths in one process (ScopedTuning). Never below
// kCublasMinTokens: the memory model reserves the path's workspace from there on.
int64_t cublas_min_tokens() {
    return std::max(kCublasMinTokens, tuning().cublas_min_tokens);
}

std::atomic<bool> g_direct_tiles{false};  // set_direct_tiles

}  // namespace

void set_direct_tiles(bool direct) {
    g_direct_tiles.store(direct);
}

namespace mm {

bool raw_tiles_fit(const void* raw_kernel, int smem_bytes) {
    const LaunchLimits& l = launch_limits();
    cudaFuncAttributes fa{};
    MOX_CUDA_CHECK(cudaFuncGetAttributes(&fa, raw_kernel));
    if (smem_bytes + static_cast<int>(fa.sharedSizeBytes) > l.max_smem_optin) return false;
    MOX_CUDA_CHECK(cudaFuncSetAttribute(raw_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    int blocks = 0;
    MOX_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, raw_kernel, kMmThreads, smem_bytes));
    return blocks >= 2;
}

bool raw_tiles_enabled() {
    return !g_direct_tiles.load(std::memory_order_relaxed);
}

}  // namespace mm

void matmul_init() {
    blas::init();
}

bool matmul_supported(quant::TypeId type) {
    return dispatch_type(type, [](auto) {});
}

size_t matmul_workspace_bytes(quant::TypeId type, int64_t n_in, int64_t n_out, int64_t n_tokens) {
    // Weights are dequantized tile by tile in shared memory; the workspace holds the permuted fp16
    // activations and the split-K partial sums.
    size_t bytes = 0;
    dispatch_type(type, [&](auto tag) {
        // The precise plan's permuted activations are twice as large; its partial sums are the same.
        using T = decltype(tag);
        const Plan p = plan_for<T>(n_in, n_out, n_tokens, true);
        bytes = std::max(p.xh_bytes + p.part_bytes, cublas_layout<T>(n_in, n_out, n_tokens).total);
    });
    return bytes;
}

void matmul(quant::TypeId type, const void* w, size_t row_bytes, int64_t n_in, int64_t n_out, const float* x,
            int64_t n_tokens, float* y, void* workspace, StreamHandle stream, bool precise) {
    MOX_CHECK(n_in > 0 && n_out > 0 && n_tokens >= 0, "matmul shape {}x{}, {} tokens", n_out, n_in, n_tokens);
    const auto& tr = quant::traits(type);
    if (tr.is_quantized && n_in % tr.block_elems != 0)
        fail("CUDA matmul: {} rows need a multiple of {} elements, got {}", tr.name, tr.block_elems, n_in);
    MOX_CHECK(row_bytes == quant::row_bytes(type, n_in), "row_bytes {} for {} x {}", row_bytes, n_in,
              tr.name);
    if (n_tokens == 0) return;
    const int64_t row_tiles = (n_out + kBR - 1) / kBR, token_tiles = (n_tokens + kBT - 1) / kBT;
    if (row_tiles > INT32_MAX || (n_tokens + kBT2Precise - 1) / kBT2Precise > 65535)
        fail("CUDA matmul: {} rows x {} tokens is past the grid limits", n_out, n_tokens);
    if (tuning().matmul_v1 && !precise) {
        const bool ok = dispatch_type(type, [&](auto tag) {
            using T = decltype(tag);
            matmul_kernel<T>
                <<<dim3(static_cast<unsigned>(row_tiles), static_cast<unsigned>(token_tiles)), kMmThreads, 0,
                   stream>>>(static_cast<const uint8_t*>(w), row_bytes, n_in, n_out, x, n_tokens, y);
            MOX_CUDA_CHECK_LAUNCH("matmul_kernel");
        });
        if (!ok) fail("CUDA matmul: no kernel for weight type {}", tr.name);
        return;
    }
    MOX_CHECK(workspace != nullptr, "CUDA matmul without workspace");
    const bool ok = dispatch_type(type, [&](auto tag) {
        using T = decltype(tag);
        const CublasLayout cl = cublas_layout<T>(n_in, n_out, n_tokens);
        if (!precise && cl.total > 0 && n_tokens >= cublas_min_tokens()) {
            const int64_t stride = cl.stride;
            auto* base = static_cast<unsigned char*>(workspace);
            auto* xh = reinterpret_cast<__half*>(base);
            auto* wh = reinterpret_cast<__half*>(base + cl.wh);
            void* blas_ws = base + cl.blas;
            mm::permute_half<T, false>(x, n_in, n_tokens, xh, stream);
            const int64_t threads = n_out * (stride / seg::kSegElems);
            dequant_half_kernel<T><<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(
                static_cast<const uint8_t*>(w), row_bytes, n_in, n_out, stride, wh);
            MOX_CUDA_CHECK_LAUNCH("dequant_half_kernel");
            blas::gemm_f16(wh, xh, n_out, n_tokens, stride, y, blas_ws, kCublasWorkspaceBytes, stream);
            return;
        }
        const Plan p = plan_for<T>(n_in, n_out, n_tokens, precise);
        auto* xh = static_cast<__half*>(workspace);
        auto* part = reinterpret_cast<float*>(static_cast<unsigned char*>(workspace) + p.xh_bytes);
        const auto launch = [&](auto bt_tag, auto p_tag) {
            constexpr int BT = decltype(bt_tag)::value;
            constexpr bool P = decltype(p_tag)::value;
            mm::permute_half<T, P>(x, n_in, n_tokens, xh, stream);
            const auto run = [&](auto r_tag) {
                constexpr bool R = decltype(r_tag)::value;
                constexpr int kSmem = mm::kTileSmemBytes<T, BT, P, R>;
                MOX_CUDA_CHECK(cudaFuncSetAttribute(matmul2_kernel<T, BT, P, R>,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
                const int64_t tiles2 = (n_tokens + BT - 1) / BT;
                matmul2_kernel<T, BT, P, R>
                    <<<dim3(static_cast<unsigned>(row_tiles), static_cast<unsigned>(tiles2),
                            static_cast<unsigned>(p.splits)),
                       kMmThreads, kSmem, stream>>>(static_cast<const uint8_t*>(w), row_bytes, n_in, n_out,
                                                    xh, p.stride, n_tokens, p.chunks_per_split, y, part);
                MOX_CUDA_CHECK_LAUNCH("matmul2_kernel");
            };
            if constexpr (mm::kRawEligible<T, BT, P>) {
                if (mm::use_raw_tiles<matmul2_kernel<T, BT, P, true>, T, BT, P>())
                    return run(std::true_type{});
            }
            run(std::false_type{});
        };
        if (precise)
            launch(std::integral_constant<int, kBT2Precise>{}, std::true_type{});
        else if (p.bt == kBT2Big)
            launch(std::integral_constant<int, kBT2Big>{}, std::false_type{});
        else
            launch(std::integral_constant<int, kBT2>{}, std::false_type{});
        if (p.splits > 1) {
            const int64_t n = n_tokens * n_out;
            const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
            reduce_kernel<<<blocks, 256, 0, stream>>>(part, n, p.splits, y);
            MOX_CUDA_CHECK_LAUNCH("matmul reduce_kernel");
        }
    });
    if (!ok) fail("CUDA matmul: no kernel for weight type {}", tr.name);
}

}  // namespace mox::cuda

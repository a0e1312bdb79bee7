// Routed experts for a batch of tokens (prefill) on the tensor cores (ops/cuda_moe.h, moe_batch).
//
// Four launches, no host sync:
//   1. group_kernel (one block): counting sort of the n_tokens * k (token, slot) pairs by expert:
//      per-expert counts and offsets, the pair indices in expert order, and a list of work tiles
//      (expert, first pair of the expert's 64-pair token tile) so that later grids have no idle
//      (expert, tile) blocks beyond an upper bound known on the host.
//   2. gate_up_kernel: grid (n_ff / 128 row tiles, tiles): gate and up of one expert on the same
//      gathered activation tile (quant/cuda/matmul.cuh), silu(gate) * up fused in the epilogue,
//      into h [n_pairs, n_ff] at the pair's sorted position.
//   3. down_kernel: grid (n_embd / 128, tiles): down of the expert over h's contiguous rows, each
//      result row written to y [n_pairs, n_embd] at the pair's own index t * k + i.
//   4. combine_kernel: out[t] = sum_i weights[t, i] * y[t * k + i] in slot order (no atomics).
// Version 2 (default; tuning().matmul_v1 selects the version-1 kernels above for both products): x is
// first permuted to fp16 in the gate type's segment order (xh), and h, after gate_up, to fp16 in the
// down type's order (hh), so both products run the two-stage cp.async pipeline of mma_tile2 (raw-
// staged weights where the device fits them, quant/cuda/matmul.cuh: mma_tile1); the
// token tile is 32 when the experts average <= 24 pairs (512-token prefill: ~16), else 64; a
// gate_up2 block takes 64 rows of gate and the same 64 of up (see there), grid (n_ff / 64, tiles).
// Precise mode (precise = true): tile 32 and both operands of both products as hi + lo fp16 parts
// (quant/cuda/matmul.cuh): about 1e-5 relative instead of 1e-3, at 2-3x the time.
// Each pair's value depends only on its own row's data (the MMA of one output element does not
// depend on its position in the tile), so the result is the same whatever order the sort leaves
// the pairs of one expert in.
#include "core/tuning.h"
#include "ops/cuda_moe.h"
#include "quant/cuda/matmul.cuh"

#include <algorithm>
#include <type_traits>

namespace mox::cuda {

namespace {

using mm::kBR;
using mm::kBT;
using mm::kMmThreads;

inline constexpr int kGroupThreads = 1024;
inline constexpr int kMaxGroupExperts = 4096;  // three int arrays of n_expert in 48 KiB of shared memory

size_t align_up(size_t n) {
    return (n + 255) / 256 * 256;
}

// Workspace layout (each part 256-byte aligned).
struct Parts {
    size_t counts, offsets, n_tiles, tiles, sorted, h, y, xh, hh, total;
};

int64_t max_tiles(int64_t n_pairs, int64_t n_expert, int64_t bt) {
    // sum_e ceil(c_e / bt) <= (n_pairs + nonempty * (bt - 1)) / bt, nonempty <= min(n_expert, n_pairs).
    return (n_pairs + std::min(n_expert, n_pairs) * (bt - 1)) / bt;
}

constexpr int kSmallBT = 32;  // the smallest token tile: the tile list is sized for it

// Layout for n_pairs = n_tokens * k; xh_stride / hh_stride: halves per permuted row of x (gate
// type's order) and of h (down type's order), from mm::xh_stride.
Parts layout(int64_t n_expert, int64_t n_embd, int64_t n_ff, int64_t n_tokens, int64_t n_pairs,
             int64_t xh_stride, int64_t hh_stride) {
    Parts p{};
    size_t at = 0;
    const auto take = [&](size_t bytes) {
        const size_t here = at;
        at += align_up(bytes);
        return here;
    };
    p.counts = take(static_cast<size_t>(n_expert) * 4);
    p.offsets = take(static_cast<size_t>(n_expert) * 4);
    p.n_tiles = take(4);
    p.tiles = take(static_cast<size_t>(max_tiles(n_pairs, n_expert, kSmallBT)) * sizeof(int2));
    p.sorted = take(static_cast<size_t>(n_pairs) * 4);
    p.h = take(static_cast<size_t>(n_pairs * n_ff) * 4);
    p.y = take(static_cast<size_t>(n_pairs * n_embd) * 4);
    p.xh = take(static_cast<size_t>(n_tokens * xh_stride) * 2 * 2);  // hi and lo parts in precise mode
    p.hh = take(static_cast<size_t>(n_pairs * hh_stride) * 2 * 2);
    p.total = at;
    return p;
}

// One block (bt: the token tile of the products): counts per expert (shared-memory integer atomics: exact), a
// serial scan by thread 0 (n_expert steps, a few microseconds at 256 experts), the tile list, then the
// scatter.
__global__ void __launch_bounds__(kGroupThreads)
    group_kernel(const int32_t* __restrict__ ids, int n_pairs, int n_expert, int32_t* __restrict__ counts,
                 int32_t* __restrict__ offsets, int32_t* __restrict__ n_tiles, int2* __restrict__ tiles,
                 int32_t* __restrict__ sorted, int bt) {
    extern __shared__ int gsm[];
    int* cnt = gsm;                  // [n_expert] pairs per expert
    int* cur = gsm + n_expert;       // [n_expert] scatter cursor, starts at the expert's offset
    int* toff = gsm + 2 * n_expert;  // [n_expert] first tile of the expert
    const int tid = threadIdx.x;
    for (int e = tid; e < n_expert; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int p = tid; p < n_pairs; p += blockDim.x) {
        const int e = ids[p];
        if (e < 0 || e >= n_expert) __trap();  // a routing bug: surfaces as a launch error on the host
        atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (tid == 0) {
        int off = 0, t = 0;
        for (int e = 0; e < n_expert; ++e) {
            cur[e] = off;
            toff[e] = t;
            off += cnt[e];
            t += (cnt[e] + bt - 1) / bt;
        }
        *n_tiles = t;
    }
    __syncthreads();
    for (int e = tid; e < n_expert; e += blockDim.x) {
        counts[e] = cnt[e];
        offsets[e] = cur[e];
        const int nt = (cnt[e] + bt - 1) / bt;
        for (int j = 0; j < nt; ++j) tiles[toff[e] + j] = make_int2(e, j * bt);
    }
    __syncthreads();  // cur[] is read above before the scatter below advances it
    for (int p = tid; p < n_pairs; p += blockDim.x) {
        const int pos = atomicAdd(&cur[ids[p]], 1);
        sorted[pos] = p;
    }
}

// The tile this block works on; false (the whole block returns) past the tiles that exist.
struct TileInfo {
    int e, base, t0, a_valid;
};
template <int BT = kBT>
__device__ __forceinline__ bool load_tile(const int32_t* counts, const int32_t* offsets,
                                          const int32_t* n_tiles, const int2* tiles, TileInfo& ti) {
    if (static_cast<int>(blockIdx.y) >= *n_tiles) return false;
    const int2 t = tiles[blockIdx.y];
    ti.e = t.x;
    ti.t0 = t.y;
    ti.base = offsets[t.x];
    ti.a_valid = min(BT, counts[t.x] - t.y);
    return true;
}

template <class T>
__global__ void __launch_bounds__(kMmThreads)
    gate_up_kernel(const uint8_t* __restrict__ gate, const uint8_t* __restrict__ up, size_t row_bytes,
                   int64_t n_embd, int64_t n_ff, int k, const int32_t* __restrict__ counts,
                   const int32_t* __restrict__ offsets, const int32_t* __restrict__ n_tiles,
                   const int2* __restrict__ tiles, const int32_t* __restrict__ sorted,
                   const float* __restrict__ x, float* __restrict__ h) {
    __shared__ __align__(128) unsigned char smem[mm::Layout<2>::kBytes];
    __shared__ const float* a_rows[kBT];
    __shared__ float* y_rows[kBT];
    __shared__ float tbl[16];
    TileInfo ti;
    if (!load_tile(counts, offsets, n_tiles, tiles, ti)) return;  // uniform over the block
    const int tid = threadIdx.x;
    if (tid < kBT) {
        const bool ok = tid < ti.a_valid;
        const int64_t pos = ti.base + ti.t0 + tid;  // sorted position of the pair
        a_rows[tid] = ok ? x + static_cast<int64_t>(sorted[pos] / k) * n_embd : nullptr;
        y_rows[tid] = ok ? h + pos * n_ff : nullptr;
    }
    stage_table<T>(tbl);
    __syncthreads();
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kBR, r = r0 + (tid >> 1);
    const size_t off = static_cast<size_t>(ti.e * n_ff + r) * row_bytes;
    const uint8_t* wrow[2] = {r < n_ff ? gate + off : nullptr, r < n_ff ? up + off : nullptr};
    mm::AccFrag acc[2][2][2];
    mm::mma_tile<T, 2>(wrow, n_embd, a_rows, ti.a_valid, smem, tbl, acc);
    // Both accumulator sets have the same fragment type, so element i of each is the same (token, row).
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int b = 0; b < 2; ++b)
#pragma unroll
            for (int i = 0; i < acc[0][a][b].num_elements; ++i) {
                const float g = acc[0][a][b].x[i], u = acc[1][a][b].x[i];
                acc[0][a][b].x[i] = g / (1.0f + expf(-g)) * u;
            }
    mm::store_tile(acc[0], smem, y_rows, ti.a_valid, r0, n_ff - r0);
}

template <class T>
__global__ void __launch_bounds__(kMmThreads)
    down_kernel(const uint8_t* __restrict__ down, size_t row_bytes, int64_t n_ff, int64_t n_embd,
                const int32_t* __restrict__ counts, const int32_t* __restrict__ offsets,
                const int32_t* __restrict__ n_tiles, const int2* __restrict__ tiles,
                const int32_t* __restrict__ sorted, const float* __restrict__ h, float* __restrict__ y) {
    __shared__ __align__(128) unsigned char smem[mm::Layout<1>::kBytes];
    __shared__ const float* a_rows[kBT];
    __shared__ float* y_rows[kBT];
    __shared__ float tbl[16];
    TileInfo ti;
    if (!load_tile(counts, offsets, n_tiles, tiles, ti)) return;  // uniform over the block
    const int tid = threadIdx.x;
    if (tid < kBT) {
        const bool ok = tid < ti.a_valid;
        const int64_t pos = ti.base + ti.t0 + tid;
        a_rows[tid] = ok ? h + pos * n_ff : nullptr;
        y_rows[tid] = ok ? y + static_cast<int64_t>(sorted[pos]) * n_embd : nullptr;
    }
    stage_table<T>(tbl);
    __syncthreads();
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kBR, r = r0 + (tid >> 1);
    const uint8_t* wrow[1] = {r < n_embd ? down + static_cast<size_t>(ti.e * n_embd + r) * row_bytes
                                         : nullptr};
    mm::AccFrag acc[1][2][2];
    mm::mma_tile<T, 1>(wrow, n_ff, a_rows, ti.a_valid, smem, tbl, acc);
    mm::store_tile(acc[0], smem, y_rows, ti.a_valid, r0, n_embd - r0);
}

// Version 2 of gate_up_kernel: the tile's activations are rows of xh (x permuted to fp16, stride
// xs halves), the pipeline is mma_tile1 with a token tile of BT. The block's 128 tile rows are 64
// rows of gate then the same 64 rows of up, one weight segment per thread and step as in the dense
// product, so silu(gate) * up pairs tile rows r and 64 + r through the staged accumulators. Against
// a pair layout (128 rows of both matrices, two segments per thread: 141 registers at token tile 64,
// one block per SM): one layer's batched MoE at 4096 tokens 2.58 vs 3.05 ms (80.0 vs 67.7 TFLOP/s,
// `CudaBench.MoeBatchTflops` on the H200), the same at 512 tokens (0.89 / 0.88;
// bench/results/2026-11-30-raw-staged-tiles-h200/gate-up-halves).
template <class T, int BT, bool P, bool R>
__global__ void __launch_bounds__(kMmThreads)
    gate_up2_kernel(const uint8_t* __restrict__ gate, const uint8_t* __restrict__ up, size_t row_bytes,
                    int64_t n_embd, int64_t n_ff, int k, const int32_t* __restrict__ counts,
                    const int32_t* __restrict__ offsets, const int32_t* __restrict__ n_tiles,
                    const int2* __restrict__ tiles, const int32_t* __restrict__ sorted,
                    const __half* __restrict__ xh, int64_t xs, float* __restrict__ h) {
    constexpr int kHalf = kBR / 2;
    extern __shared__ __align__(128) unsigned char smem2[];
    __shared__ const __half* a_rows[BT];
    __shared__ float* y_rows[BT];
    __shared__ const uint8_t* w_rows[kBR];
    __shared__ float tbl[16];
    TileInfo ti;
    if (!load_tile<BT>(counts, offsets, n_tiles, tiles, ti)) return;  // uniform over the block
    const int tid = threadIdx.x;
    if (tid < BT) {
        const bool ok = tid < ti.a_valid;
        const int64_t pos = ti.base + ti.t0 + tid;  // sorted position of the pair
        a_rows[tid] = ok ? xh + static_cast<int64_t>(sorted[pos] / k) * (P ? 2 : 1) * xs : nullptr;
        y_rows[tid] = ok ? h + pos * n_ff : nullptr;
    }
    // Tile row i: gate row r0 + i for i < 64, then up row r0 + i - 64.
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kHalf;
    const auto tile_row = [&](int i) -> const uint8_t* {
        const int64_t r = r0 + i % kHalf;
        return r < n_ff ? (i < kHalf ? gate : up) + static_cast<size_t>(ti.e * n_ff + r) * row_bytes
                        : nullptr;
    };
    if constexpr (R)
        if (tid < kBR) w_rows[tid] = tile_row(tid);
    stage_table<T>(tbl);
    __syncthreads();
    mm::AccFrag acc[1][2][mm::Shape<BT>::kFB];
    mm::mma_tile1<T, BT, P, R>(tile_row(tid >> 1), w_rows, row_bytes, n_embd, a_rows, xs, ti.a_valid, 0,
                               xs / seg::kSegElems, smem2, tbl, acc);
    const float* c = mm::stage_acc2<BT>(acc[0], smem2);
    const int n_rows = static_cast<int>(n_ff - r0 < kHalf ? n_ff - r0 : kHalf);
    for (int idx = tid; idx < BT * kHalf; idx += kMmThreads) {
        const int i = idx / kHalf, j = idx % kHalf;
        if (i < ti.a_valid && j < n_rows) {
            const float g = c[i * mm::kLdC + j], u = c[i * mm::kLdC + kHalf + j];
            y_rows[i][r0 + j] = g / (1.0f + expf(-g)) * u;
        }
    }
}

// Version 2 of down_kernel: the activations are hh's rows (h permuted to fp16, stride hs halves).
template <class T, int BT, bool P, bool R>
__global__ void __launch_bounds__(kMmThreads)
    down2_kernel(const uint8_t* __restrict__ down, size_t row_bytes, int64_t n_ff, int64_t n_embd,
                 const int32_t* __restrict__ counts, const int32_t* __restrict__ offsets,
                 const int32_t* __restrict__ n_tiles, const int2* __restrict__ tiles,
                 const int32_t* __restrict__ sorted, const __half* __restrict__ hh, int64_t hs,
                 float* __restrict__ y) {
    extern __shared__ __align__(128) unsigned char smem2[];
    __shared__ const __half* a_rows[BT];
    __shared__ float* y_rows[BT];
    __shared__ const uint8_t* w_rows[kBR];
    __shared__ float tbl[16];
    TileInfo ti;
    if (!load_tile<BT>(counts, offsets, n_tiles, tiles, ti)) return;  // uniform over the block
    const int tid = threadIdx.x;
    if (tid < BT) {
        const bool ok = tid < ti.a_valid;
        const int64_t pos = ti.base + ti.t0 + tid;
        a_rows[tid] = ok ? hh + pos * (P ? 2 : 1) * hs : nullptr;
        y_rows[tid] = ok ? y + static_cast<int64_t>(sorted[pos]) * n_embd : nullptr;
    }
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kBR;
    const auto tile_row = [&](int i) -> const uint8_t* {
        return r0 + i < n_embd ? down + static_cast<size_t>(ti.e * n_embd + r0 + i) * row_bytes : nullptr;
    };
    if constexpr (R)
        if (tid < kBR) w_rows[tid] = tile_row(tid);
    stage_table<T>(tbl);
    __syncthreads();
    mm::AccFrag acc[1][2][mm::Shape<BT>::kFB];
    mm::mma_tile1<T, BT, P, R>(tile_row(tid >> 1), w_rows, row_bytes, n_ff, a_rows, hs, ti.a_valid, 0,
                               hs / seg::kSegElems, smem2, tbl, acc);
    mm::store_tile2<BT>(acc[0], smem2, y_rows, ti.a_valid, r0, n_embd - r0);
}

// Blocks along n_ff of the gate/up product: 64 rows of each matrix per block.
unsigned gate_up_row_blocks(int64_t n_ff) {
    return static_cast<unsigned>((n_ff + kBR / 2 - 1) / (kBR / 2));
}

template <class T, int BT, bool P>
void launch_gate_up2(dim3 grid, cudaStream_t stream, const ops::Weight& gate, const ops::Weight& up,
                     int64_t n_embd, int64_t n_ff, int k, const int32_t* counts, const int32_t* offsets,
                     const int32_t* n_tiles, const int2* tiles, const int32_t* sorted, const float* x,
                     int64_t n_tokens, __half* xh, int64_t xs, float* h) {
    mm::permute_half<T, P>(x, n_embd, n_tokens, xh, stream);
    const auto run = [&](auto r_tag) {
        constexpr bool R = decltype(r_tag)::value;
        constexpr int kSmem = mm::kTileSmemBytes<T, BT, P, R>;
        MOX_CUDA_CHECK(cudaFuncSetAttribute(gate_up2_kernel<T, BT, P, R>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
        gate_up2_kernel<T, BT, P, R><<<grid, kMmThreads, kSmem, stream>>>(gate.data, up.data, gate.row_bytes,
                                                                          n_embd, n_ff, k, counts, offsets,
                                                                          n_tiles, tiles, sorted, xh, xs, h);
        MOX_CUDA_CHECK_LAUNCH("moe gate_up2_kernel");
    };
    if constexpr (mm::kRawEligible<T, BT, P>) {
        if (mm::use_raw_tiles<gate_up2_kernel<T, BT, P, true>, T, BT, P>()) return run(std::true_type{});
    }
    run(std::false_type{});
}

template <class T, int BT, bool P>
void launch_down2(dim3 grid, cudaStream_t stream, const ops::Weight& down, int64_t n_ff, int64_t n_embd,
                  const int32_t* counts, const int32_t* offsets, const int32_t* n_tiles, const int2* tiles,
                  const int32_t* sorted, const float* h, int64_t n_pairs, __half* hh, int64_t hs, float* y) {
    mm::permute_half<T, P>(h, n_ff, n_pairs, hh, stream);
    const auto run = [&](auto r_tag) {
        constexpr bool R = decltype(r_tag)::value;
        constexpr int kSmem = mm::kTileSmemBytes<T, BT, P, R>;
        MOX_CUDA_CHECK(cudaFuncSetAttribute(down2_kernel<T, BT, P, R>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
        down2_kernel<T, BT, P, R><<<grid, kMmThreads, kSmem, stream>>>(
            down.data, down.row_bytes, n_ff, n_embd, counts, offsets, n_tiles, tiles, sorted, hh, hs, y);
        MOX_CUDA_CHECK_LAUNCH("moe down2_kernel");
    };
    if constexpr (mm::kRawEligible<T, BT, P>) {
        if (mm::use_raw_tiles<down2_kernel<T, BT, P, true>, T, BT, P>()) return run(std::true_type{});
    }
    run(std::false_type{});
}

// halves per permuted row of an n_in-element row of `type` (0 when the type has no kernel).
int64_t permuted_stride(quant::TypeId type, int64_t n_in) {
    int64_t s = 0;
    dispatch_type(type, [&](auto tag) { s = mm::xh_stride<decltype(tag)>(n_in); });
    return s;
}

// One block per token: out[t, c] = sum_i weights[t, i] * y[t * k + i, c], slots in order.
__global__ void __launch_bounds__(256)
    combine_kernel(const float* __restrict__ y, const float* __restrict__ weights, int k, int64_t n_embd,
                   float* __restrict__ out) {
    const int64_t t = blockIdx.x;
    for (int64_t c = threadIdx.x; c < n_embd; c += blockDim.x) {
        float s = 0.0f;
        for (int i = 0; i < k; ++i) s = fmaf(weights[t * k + i], y[(t * k + i) * n_embd + c], s);
        out[t * n_embd + c] = s;
    }
}

void check_stack(const ops::Weight& w, const char* name) {
    MOX_CHECK(w.valid(), "MoE {} weight is empty", name);
    if (!dispatch_type(w.type, [](auto) {}))
        fail("CUDA MoE batch: no kernel for {} weights of type {}", name, quant::type_name(w.type));
    MOX_CHECK(w.row_bytes == quant::row_bytes(w.type, w.n_in), "MoE {} row_bytes {}", name, w.row_bytes);
}

}  // namespace

size_t moe_batch_workspace_bytes(const ops::Weight& gate, const ops::Weight& down, int64_t n_tokens,
                                 int64_t k) {
    return layout(gate.n_expert, down.n_out, gate.n_out, n_tokens, n_tokens * k,
                  permuted_stride(gate.type, gate.n_in), permuted_stride(down.type, down.n_in))
        .total;
}

void moe_batch(const ops::Weight& gate, const ops::Weight& up, const ops::Weight& down, const int32_t* ids,
               const float* weights, int64_t n_tokens, int64_t k, const float* x, float* out, void* workspace,
               StreamHandle stream, bool precise) {
    check_stack(gate, "gate");
    check_stack(up, "up");
    check_stack(down, "down");
    if (gate.type != up.type || gate.n_in != up.n_in || gate.n_out != up.n_out ||
        gate.n_expert != up.n_expert)
        fail("CUDA MoE batch: gate ({}, {}x{}) and up ({}, {}x{}) stacks differ", quant::type_name(gate.type),
             gate.n_out, gate.n_in, quant::type_name(up.type), up.n_out, up.n_in);
    if (down.n_in != gate.n_out || down.n_out != gate.n_in || down.n_expert != gate.n_expert)
        fail("CUDA MoE batch: down {}x{} ({} experts) does not match gate {}x{} ({} experts)", down.n_out,
             down.n_in, down.n_expert, gate.n_out, gate.n_in, gate.n_expert);
    const int64_t n_expert = gate.n_expert, n_embd = gate.n_in, n_ff = gate.n_out;
    MOX_CHECK(n_tokens >= 0 && k >= 1 && k <= n_expert, "MoE batch: {} tokens, k {} of {} experts", n_tokens,
              k, n_expert);
    if (n_expert > kMaxGroupExperts)
        fail("CUDA MoE batch: {} experts (at most {})", n_expert, kMaxGroupExperts);
    if (n_tokens == 0) return;
    const int64_t n_pairs = n_tokens * k;
    const bool v1 = tuning().matmul_v1 && !precise;
    // Token tile: 32 when the experts average <= 24 pairs (the 64-token tile would be mostly padding)
    // and always in precise mode (twice the accumulators).
    const int bt = v1 ? kBT : (precise || n_pairs <= 24 * n_expert ? 32 : 64);
    const int64_t tiles_max = max_tiles(n_pairs, n_expert, bt);
    if (n_pairs > INT32_MAX / 2 || tiles_max > 65535)
        fail("CUDA MoE batch: {} tokens x top {} is past the grid limits", n_tokens, k);
    MOX_CHECK(workspace != nullptr, "MoE batch without workspace");

    const int64_t xs = permuted_stride(gate.type, n_embd), hs = permuted_stride(down.type, n_ff);
    const Parts p = layout(n_expert, n_embd, n_ff, n_tokens, n_pairs, xs, hs);
    auto* ws = static_cast<unsigned char*>(workspace);
    auto* counts = reinterpret_cast<int32_t*>(ws + p.counts);
    auto* offsets = reinterpret_cast<int32_t*>(ws + p.offsets);
    auto* n_tiles = reinterpret_cast<int32_t*>(ws + p.n_tiles);
    auto* tiles = reinterpret_cast<int2*>(ws + p.tiles);
    auto* sorted = reinterpret_cast<int32_t*>(ws + p.sorted);
    auto* h = reinterpret_cast<float*>(ws + p.h);
    auto* y = reinterpret_cast<float*>(ws + p.y);
    auto* xh = reinterpret_cast<__half*>(ws + p.xh);
    auto* hh = reinterpret_cast<__half*>(ws + p.hh);

    group_kernel<<<1, kGroupThreads, static_cast<size_t>(3 * n_expert) * sizeof(int), stream>>>(
        ids, static_cast<int>(n_pairs), static_cast<int>(n_expert), counts, offsets, n_tiles, tiles, sorted,
        bt);
    MOX_CUDA_CHECK_LAUNCH("group_kernel");

    if (!v1) {
        const auto n_tiles_grid = static_cast<unsigned>(tiles_max);
        const int ki = static_cast<int>(k);
        dispatch_type(gate.type, [&](auto tag) {
            using T = decltype(tag);
            const dim3 grid(gate_up_row_blocks(n_ff), n_tiles_grid);
            if (precise)
                launch_gate_up2<T, 32, true>(grid, stream, gate, up, n_embd, n_ff, ki, counts, offsets,
                                             n_tiles, tiles, sorted, x, n_tokens, xh, xs, h);
            else if (bt == 32)
                launch_gate_up2<T, 32, false>(grid, stream, gate, up, n_embd, n_ff, ki, counts, offsets,
                                              n_tiles, tiles, sorted, x, n_tokens, xh, xs, h);
            else
                launch_gate_up2<T, 64, false>(grid, stream, gate, up, n_embd, n_ff, ki, counts, offsets,
                                              n_tiles, tiles, sorted, x, n_tokens, xh, xs, h);
        });
        dispatch_type(down.type, [&](auto tag) {
            using T = decltype(tag);
            const dim3 grid(static_cast<unsigned>((n_embd + kBR - 1) / kBR), n_tiles_grid);
            if (precise)
                launch_down2<T, 32, true>(grid, stream, down, n_ff, n_embd, counts, offsets, n_tiles, tiles,
                                          sorted, h, n_pairs, hh, hs, y);
            else if (bt == 32)
                launch_down2<T, 32, false>(grid, stream, down, n_ff, n_embd, counts, offsets, n_tiles, tiles,
                                           sorted, h, n_pairs, hh, hs, y);
            else
                launch_down2<T, 64, false>(grid, stream, down, n_ff, n_embd, counts, offsets, n_tiles, tiles,
                                           sorted, h, n_pairs, hh, hs, y);
        });
        combine_kernel<<<static_cast<unsigned>(n_tokens), 256, 0, stream>>>(y, weights, static_cast<int>(k),
                                                                            n_embd, out);
        MOX_CUDA_CHECK_LAUNCH("moe combine_kernel");
        return;
    }

    dispatch_type(gate.type, [&](auto tag) {
        using T = decltype(tag);
        const dim3 grid(static_cast<unsigned>((n_ff + kBR - 1) / kBR), static_cast<unsigned>(tiles_max));
        gate_up_kernel<T><<<grid, kMmThreads, 0, stream>>>(gate.data, up.data, gate.row_bytes, n_embd, n_ff,
                                                           static_cast<int>(k), counts, offsets, n_tiles,
                                                           tiles, sorted, x, h);
        MOX_CUDA_CHECK_LAUNCH("moe gate_up_kernel");
    });
    dispatch_type(down.type, [&](auto tag) {
        using T = decltype(tag);
        const dim3 grid(static_cast<unsigned>((n_embd + kBR - 1) / kBR), static_cast<unsigned>(tiles_max));
        down_kernel<T><<<grid, kMmThreads, 0, stream>>>(down.data, down.row_bytes, n_ff, n_embd, counts,
                                                        offsets, n_tiles, tiles, sorted, h, y);
        MOX_CUDA_CHECK_LAUNCH("moe down_kernel");
    });
    combine_kernel<<<static_cast<unsigned>(n_tokens), 256, 0, stream>>>(y, weights, static_cast<int>(k),
                                                                        n_embd, out);
    MOX_CUDA_CHECK_LAUNCH("moe combine_kernel");
}

}  // namespace mox::cuda

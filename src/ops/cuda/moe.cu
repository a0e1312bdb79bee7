#include "ops/cuda_moe.h"
#include "quant/cuda/matmul.cuh"
#include "quant/cuda/matvec.cuh"
#include "quant/cuda_matvec.h"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <vector>

namespace mox::cuda {

namespace {

inline constexpr int kMaxK = 32;
inline constexpr int kRouterPerLane = 32;  // one warp per token: n_expert <= 1024

// (p, id) pairs: the better one has the larger p, ties go to the lower id.
__device__ __forceinline__ bool better(float pa, int ia, float pb, int ib) {
    return pa > pb || (pa == pb && ia < ib);
}

// One warp routes one token's logits l[0..n_expert) (no block-wide barriers: k rounds of a shuffle
// argmax); lane 0 writes ids_out[0..k) and w_out[0..k) (global or shared memory) and reads its own
// weights back to renormalise them. Lane l holds experts l, l + 32, l + 64, ... in its PER register
// slots (route_row picks PER = 8 up to 256 experts): loops of a compile-time length, so every
// logit load leaves before the first is used. With a runtime slot count ptxas put a branch between
// the loads and each max after its own load: 8 dependent L2 round trips (~3 us) in every gate/up block.
template <int PER>
__device__ void route_row_slots(const float* __restrict__ l, int n_expert, int k, bool renormalize,
                                int32_t* ids_out, float* w_out) {
    const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
    float p[PER];
#pragma unroll
    for (int s = 0; s < PER; ++s) {
        const int e = lane + s * kWarp;
        p[s] = e < n_expert ? l[e] : -FLT_MAX;
    }
    float mx = -FLT_MAX;
#pragma unroll
    for (int s = 0; s < PER; ++s) mx = fmaxf(mx, p[s]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
    float sum = 0.0f;
#pragma unroll
    for (int s = 0; s < PER; ++s) {
        p[s] = lane + s * kWarp < n_expert ? expf(p[s] - mx) : 0.0f;
        sum += p[s];
    }
    sum = warp_sum(sum);
    const float inv = 1.0f / sum;
    uint32_t taken = 0;  // bit s: expert lane + 32 s is chosen (or does not exist)
#pragma unroll
    for (int s = 0; s < PER; ++s) {
        p[s] *= inv;
        if (lane + s * kWarp >= n_expert) taken |= 1u << s;
    }
    for (int round = 0; round < k; ++round) {
        float bp = -1.0f;
        int bi = INT_MAX;
#pragma unroll
        for (int s = 0; s < PER; ++s) {
            if (!((taken >> s) & 1u) && better(p[s], lane + s * kWarp, bp, bi))
                bp = p[s], bi = lane + s * kWarp;
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float op = __shfl_xor_sync(0xFFFFFFFFu, bp, o);
            const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
            if (better(op, oi, bp, bi)) bp = op, bi = oi;
        }
        if ((bi & (kWarp - 1)) == lane) taken |= 1u << (bi / kWarp);
        if (lane == 0) {
            w_out[round] = bp;
            ids_out[round] = bi;
        }
    }
    if (lane == 0) {
        float total = 0.0f;
        for (int i = 0; i < k; ++i) total += w_out[i];
        const float norm = renormalize ? 1.0f / fmaxf(total, 6.1035e-5f) : 1.0f;
        for (int i = 0; i < k; ++i) w_out[i] *= norm;
    }
}

__device__ void route_row(const float* __restrict__ l, int n_expert, int k, bool renormalize,
                          int32_t* ids_out, float* w_out) {
    if (n_expert <= 8 * kWarp)
        route_row_slots<8>(l, n_expert, k, renormalize, ids_out, w_out);
    else
        route_row_slots<kRouterPerLane>(l, n_expert, k, renormalize, ids_out, w_out);
}

// One warp per token.
__global__ void __launch_bounds__(kWarp)
    router_kernel(const float* __restrict__ logits, int64_t logits_stride, int n_expert, int k,
                  bool renormalize, int32_t* __restrict__ ids, float* __restrict__ weights) {
    const int64_t t = blockIdx.x;
    route_row(logits + t * logits_stride, n_expert, k, renormalize, ids + t * k, weights + t * k);
}

// ---- routed (+ shared) expert FFN at batch 1.
//
// Why the previous kernels took 13 + 17 us for 9.4 + 6.9 MB (floor ~5 us at 3.3 TB/s): the cost
// was latency, not bytes. A 2048-wide Q4_K row is 1152 B; one lane decoded 1-2 segments of it,
// each loop trip waiting a full DRAM round trip (~0.6-1 us) before the next load; the down kernel
// walked its k experts one after another (8 dependent trips per row); x and h were staged with one
// L2 trip per 256 floats (the down block: 18 trips) before any weight load left the SM.
// Little's law: 3.3 TB/s x ~0.8 us needs ~2.6 MB in flight, ~20 KB per SM (132 SMs). Now:
// * gate/up: a warp owns one (expert, row pair) task, 4 rows (gate, up of rows r, r + 1) sharing
//   each staged-x read; per pass every lane issues 4 rows x kDotSlots (2) segment loads before any
//   math (64 segments / 32 lanes: the whole 2048-wide row pair in one trip). Tasks: 9 slots x 256
//   pairs = 2304 warps = 288 blocks of 8 warps (~2.2 per SM, all resident): 17 warps x 8 loads x
//   32 lanes x 18 B = ~80 KB in flight per SM, i.e. all of the SM's 10.4 MB / 132 share at once.
//   Chain: ids + x staging (one L2 trip, ~0.6 us) -> weights (~1 us + 3.2 us of transfer at peak)
//   -> 20 shuffles -> store: expected ~5 us for k = 8 + shared (was 13 us for k = 8).
// * down: a warp owns an output row pair and spreads all (k + 1) experts x 16 segments (n_ff 512)
//   = 144 segment slots of it over its lanes, kDownSlots (5) per lane (160 >= 144: one pass), all
//   loads issued up front: 2 rows x 5 = 10 loads per lane; 1024 warps = 128 blocks, one per SM,
//   8 warps x 10 x 32 x 26 B (Q6_K) = 66 KB in flight per SM = its whole share of 7.8 MB. Each
//   partial is weighted by its expert's w before one shuffle tree: the same order on every run.
//   h staging: 9 x 512 floats per block in 2 batched trips. Expected ~4 us (was 17 us).
// Both: x / h stay staged in shared memory (conflict-free reads, one read feeds 4 or 2 rows).
// * moe_route_gate_up: warp 0 of every gate/up block routes the token itself (1 KB of L2-resident
//   logits, 8 shuffle-argmax rounds: ~1-1.5 us, while the other warps stage x), which removes the
//   router launch (~1.5-2 us of a lone warp) and one kernel boundary (~1 us) from the chain.
// Layer estimate (k = 8 + shared, Qwen3.6 sizes): gate/up ~5 us + down ~4 us + ~1 us between them
// = ~10 us with the router fused, ~12 us with the router as its own launch.
inline constexpr int kWarps = kThreads / kWarp;
inline constexpr int kGateUpSlots = 2;  // segments per lane and pass (2048-wide rows: one pass)
inline constexpr int kDownSlots = 5;    // (8 + 1) experts x 16 segments <= 5 x 32: one pass

__device__ __forceinline__ float silu_mul(float g, float u) {
    return g / (1.0f + expf(-g)) * u;
}

// Slots [0, k) are the routed experts ids[0..k); slot k, when sh_gate is set, is the shared
// expert (same type, row_bytes and n_ff as the routed stack).
struct GateUpArgs {
    const uint8_t* gate;
    const uint8_t* up;
    size_t row_bytes;
    int64_t n_in, n_ff, n_expert;
    const int32_t* ids;
    int k;
    const uint8_t* sh_gate;
    const uint8_t* sh_up;
    const float* x;  // [n_in]
    float* h;        // [slots, n_ff]
    // Routing fused (logits set): every block routes logits[0..n_expert) itself; block 0 also
    // writes the ids and weights out for moe_down. ids is unused then.
    const float* logits = nullptr;
    bool renormalize = true;
    int32_t* ids_out = nullptr;
    float* weights_out = nullptr;
    size_t expert_stride = 0;  // bytes from expert e's gate (and up) slice to e + 1's
};

// I8: x staged as 8-bit segments (quant/cuda/matvec.cuh).
template <class T, bool I8>
__global__ void __launch_bounds__(kThreads) gate_up_kernel(const GateUpArgs a) {
    extern __shared__ float4 smem[];
    __shared__ float tbl[16];
    __shared__ const uint8_t* gbase[kMaxK + 1];
    __shared__ const uint8_t* ubase[kMaxK + 1];
    __shared__ int32_t route_ids[kMaxK];
    __shared__ float route_w[kMaxK];
    float* xs = reinterpret_cast<float*>(smem);
    const int tid = static_cast<int>(threadIdx.x);
    const int slots = a.k + (a.sh_gate != nullptr ? 1 : 0);
    int e = 0;
    if (a.logits != nullptr) {
        // Warp 0 routes (~1 us of shuffles) before staging its share of x; the other warps stage.
        if (tid < kWarp) {
            route_row(a.logits, static_cast<int>(a.n_expert), a.k, a.renormalize, route_ids, route_w);
            __syncwarp();  // lane 0's shared-memory writes, visible to the warp
            if (tid < a.k) {
                e = route_ids[tid];
                if (blockIdx.x == 0) {
                    a.ids_out[tid] = e;
                    a.weights_out[tid] = route_w[tid];
                }
            }
        }
    } else if (tid < a.k) {
        e = a.ids[tid];  // leaves before the x loads of stage_x: both arrive in one round trip
    }
    const int64_t n_segs = n_segments<T>(a.n_in);
    stage_table<T>(tbl);
    if constexpr (I8)
        stage_x_i8<T>(reinterpret_cast<uint8_t*>(smem), a.x, 0, 1, a.n_in, n_segs);
    else
        stage_x<T>(xs, a.x, a.n_in, n_segs);
    if (tid < slots) {
        if (tid < a.k) {
            if (e < 0 || e >= a.n_expert) __trap();  // a routing bug: a launch error on the host
            const size_t off = static_cast<size_t>(e) * a.expert_stride;
            gbase[tid] = a.gate + off;
            ubase[tid] = a.up + off;
        } else {
            gbase[tid] = a.sh_gate;
            ubase[tid] = a.sh_up;
        }
    }
    __syncthreads();

    const int warp = tid / kWarp, lane = tid % kWarp;
    const int64_t pairs = (a.n_ff + 1) / 2;
    const int64_t tasks = slots * pairs;
    for (int64_t task = static_cast<int64_t>(blockIdx.x) * kWarps + warp; task < tasks;
         task += static_cast<int64_t>(gridDim.x) * kWarps) {
        const int i = static_cast<int>(task / pairs);
        const int64_t r0 = (task - i * pairs) * 2, r1 = min(r0 + 1, a.n_ff - 1);  // r1 == r0 past the end
        const size_t o0 = static_cast<size_t>(r0) * a.row_bytes, o1 = static_cast<size_t>(r1) * a.row_bytes;
        // gate r0, up r0, gate r1, up r1
        const uint8_t* rows[4] = {gbase[i] + o0, ubase[i] + o0, gbase[i] + o1, ubase[i] + o1};
        float acc[4][1] = {};
        static_assert(kGateUpSlots == kDotSlots, "warp_dot's pass width is the gate/up design's");
        if constexpr (I8)
            warp_dot_i8<T, 4>(rows, reinterpret_cast<const uint8_t*>(smem), n_segs, acc);
        else
            warp_dot<T, 4, 1>(rows, xs, 0, a.n_in, n_segs, tbl, acc);
        float v[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) v[r] = warp_sum(acc[r][0]);
        if (lane < 2 && r0 + lane < a.n_ff)
            a.h[i * a.n_ff + r0 + lane] = lane == 0 ? silu_mul(v[0], v[1]) : silu_mul(v[2], v[3]);
    }
}

// Slots [0, k) are the routed experts, weighted by weights[i]; slot k, when sh_down is set, is
// the shared expert (same type and n_ff) weighted by sigmoid(*sh_gate_logit). accumulate: out +=
// instead of out = (the second launch of a shared expert of another type).
struct DownArgs {
    const uint8_t* down;
    size_t row_bytes;
    int64_t n_ff, n_embd, n_expert;
    const int32_t* ids;
    const float* weights;
    int k;
    const uint8_t* sh_down;
    const float* sh_gate_logit;
    const float* h;  // [slots, n_ff]
    float* out;      // [n_embd]
    bool accumulate;
    size_t expert_stride = 0;  // bytes from expert e's down slice to e + 1's
};

// R output rows per warp (1 or 2): two rows share each staged-h read; one row halves a warp's
// instructions (~2,400 per warp at two rows, with 8 warps per SM: ncu showed the kernel issue-bound
// at 12% of warps active) and doubles the warps in flight.
template <class T, bool I8, int R>
__global__ void __launch_bounds__(kThreads) down_kernel(const DownArgs a) {
    extern __shared__ float4 smem[];
    __shared__ float tbl[16];
    __shared__ const uint8_t* base_s[kMaxK + 1];
    __shared__ float w_s[kMaxK + 1];
    float* xs = reinterpret_cast<float*>(smem);
    const int tid = static_cast<int>(threadIdx.x);
    const bool has_shared = a.sh_down != nullptr;
    const int slots = a.k + (has_shared ? 1 : 0);
    // Ids, weights and the gate logit leave before the h loads: one round trip for all.
    int e = 0;
    float w = 0.0f;
    if (tid < a.k) {
        e = a.ids[tid];
        w = a.weights[tid];
    } else if (tid == a.k && has_shared) {
        w = *a.sh_gate_logit;
    }
    const int64_t n_segs = n_segments<T>(a.n_ff);
    const int64_t xs_stride = n_units(n_segs) * 256;
    const int64_t xi_stride = i8_row_bytes<T>(n_segs);  // bytes per staged row, I8
    stage_table<T>(tbl);
    if constexpr (I8)
        stage_x_i8<T>(reinterpret_cast<uint8_t*>(smem), a.h, a.n_ff, slots, a.n_ff, n_segs);
    else
        stage_x_rows<T>(xs, a.h, a.n_ff, slots, a.n_ff, n_segs);
    if (tid < slots) {
        if (tid < a.k) {
            if (e < 0 || e >= a.n_expert) __trap();
            base_s[tid] = a.down + static_cast<size_t>(e) * a.expert_stride;
            w_s[tid] = w;
        } else {
            base_s[tid] = a.sh_down;
            w_s[tid] = 1.0f / (1.0f + expf(-w));
        }
    }
    __syncthreads();

    const int warp = tid / kWarp, lane = tid % kWarp;
    const int64_t tasks = (a.n_embd + R - 1) / R;
    // (expert slot, segment) work items of one output row; 32-bit: a 64-bit division is ~70
    // instructions, and each slot divides by n_segs.
    const int segs = static_cast<int>(n_segs), total = slots * segs;
    for (int64_t task = static_cast<int64_t>(blockIdx.x) * kWarps + warp; task < tasks;
         task += static_cast<int64_t>(gridDim.x) * kWarps) {
        const int64_t r0 = task * R;
        size_t o[R];  // byte offsets of the rows (a row past the end re-reads the last one)
#pragma unroll
        for (int r = 0; r < R; ++r) o[r] = static_cast<size_t>(min(r0 + r, a.n_embd - 1)) * a.row_bytes;
        float acc[R] = {};
#pragma unroll 1
        for (int t0 = lane; t0 < total; t0 += kWarp * kDownSlots) {
#pragma unroll
            for (int u = 0; u < kDownSlots; ++u) {  // every line of the pass in flight first
                const int tc = min(t0 + u * kWarp, total - 1);
                const int i = tc / segs;
#pragma unroll
                for (int r = 0; r < R; ++r) prefetch_segment<T>(base_s[i] + o[r], tc - i * segs);
            }
#pragma unroll
            for (int u = 0; u < kDownSlots; ++u) {
                // Unconditional loads (a slot past the end re-reads the last item), result dropped.
                const int t = t0 + u * kWarp;
                const bool valid = t < total;
                const int tc = valid ? t : total - 1;
                const int i = tc / segs;
                const int g = tc - i * segs;
                const uint8_t* base = base_s[i];
                float d[R];
                if constexpr (I8) {
                    XSegI xr;
                    load_xi<T>(reinterpret_cast<const uint8_t*>(smem) + i * xi_stride, n_units(n_segs), g,
                               xr);
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        seg::SegI sg;
                        T::load_i8(base + o[r], g, sg);
                        d[r] = seg_dot_i8<T>(sg, xr);
                    }
                } else {
                    float xr[32];
                    load_x(xs + i * xs_stride, g, xr);
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        seg::Seg sg;
                        T::load(base + o[r], g, a.n_ff, sg, tbl);
                        d[r] = seg_dot<T>(sg, xr);
                    }
                }
#pragma unroll
                for (int r = 0; r < R; ++r) acc[r] += valid ? w_s[i] * d[r] : 0.0f;
            }
        }
        float v[R];
#pragma unroll
        for (int r = 0; r < R; ++r) v[r] = warp_sum(acc[r]);
        if (lane < R && r0 + lane < a.n_embd) {
            float vl = v[0];
#pragma unroll
            for (int r = 1; r < R; ++r)
                if (lane == r) vl = v[r];
            float* out = a.out + r0 + lane;
            *out = a.accumulate ? *out + vl : vl;
        }
    }
}

template <class T, bool I8>
void launch_gate_up_kernel(const GateUpArgs& a, int slots, StreamHandle stream) {
    const auto kernel = gate_up_kernel<T, I8>;
    const int64_t n_segs = n_segments<T>(a.n_in);
    const size_t smem = I8 ? static_cast<size_t>(i8_row_bytes<T>(n_segs))
                           : static_cast<size_t>(n_units(n_segs) * 256) * sizeof(float);
    prepare_smem(reinterpret_cast<const void*>(kernel), smem, "MoE gate/up");
    const int64_t tasks = slots * ((a.n_ff + 1) / 2);
    const int blocks =
        grid_blocks(reinterpret_cast<const void*>(kernel), smem, (tasks + kWarps - 1) / kWarps);
    kernel<<<blocks, kThreads, smem, stream>>>(a);
    MOX_CUDA_CHECK_LAUNCH("gate_up_kernel");
}

template <class T, bool I8, int R>
void launch_down_kernel(const DownArgs& a, int slots, StreamHandle stream) {
    const auto kernel = down_kernel<T, I8, R>;
    const int64_t n_segs = n_segments<T>(a.n_ff);
    const size_t smem = I8 ? static_cast<size_t>(slots * i8_row_bytes<T>(n_segs))
                           : static_cast<size_t>(slots * n_units(n_segs) * 256) * sizeof(float);
    prepare_smem(reinterpret_cast<const void*>(kernel), smem, "MoE down");
    const int64_t tasks = (a.n_embd + R - 1) / R;
    const int blocks =
        grid_blocks(reinterpret_cast<const void*>(kernel), smem, (tasks + kWarps - 1) / kWarps);
    kernel<<<blocks, kThreads, smem, stream>>>(a);
    MOX_CUDA_CHECK_LAUNCH("down_kernel");
}

// The int8-activation kernels where the type has them (matvec.cuh).
template <class T>
void launch_gate_up(const GateUpArgs& a, int slots, StreamHandle stream) {
    if constexpr (kHasI8<T>)
        launch_gate_up_kernel<T, true>(a, slots, stream);
    else
        launch_gate_up_kernel<T, false>(a, slots, stream);
}

// The int8 down kernel takes one output row per warp: +3% decode on the H200 against two (tg128 317 /
// 319 vs 309 t/s, bench/results/2026-11-30-mma-prefill-attention-h200). fp32 decode keeps two.
template <class T>
void launch_down(const DownArgs& a, int slots, StreamHandle stream) {
    if constexpr (kHasI8<T>)
        launch_down_kernel<T, true, 1>(a, slots, stream);
    else
        launch_down_kernel<T, false, 2>(a, slots, stream);
}

// ---- wide experts (Mixtral 4096 -> 14336 -> 4096, Phi-3.5-MoE 4096 -> 6400 -> 4096).
//
// Why the kernels above lose there: they were tuned at 2048 -> 512, where a layer is latency-bound.
// At Mixtral's shapes a layer reads ~200 MB and the limit is the rate at which SMs turn bytes into
// dot products. The kernels above load each lane's segments straight from global memory, plus up to
// 6 L1 prefetches per segment; built the same way, the dense matvec reaches 2.3-2.6 TB/s on the H200
// at best (Q4_K 2048 -> 131072: 2.34 TB/s, Q6_K 2.61, bench/results/2026-12-01-qwen3moe-h200), half
// of HBM. The down kernel also stages every slot's whole activation row in every block (Mixtral:
// 28,672 values, 7 dependent L2 round trips and 47 KB of shared memory per block, before any weight
// load leaves), and walks each 28,672-wide output row in 6 dependent passes.
//
// Here each warp streams its weights through a private ring of `depth` stages in shared memory:
// cp.async copies of whole 16-byte pieces (a warp instruction moves 512 contiguous bytes, no L1
// allocation, no registers held while in flight), issued depth - 1 stages ahead of the decode, which
// reads the bytes back with segments.cuh's shared-memory loaders. A "piece" is the 32 segments (one
// per lane) of one row at one column chunk (Q4_K: 4 super-blocks, 576 bytes; Q6_K: 840; Q8_0: 1088),
// copied as the 16-byte aligned span around it, so it keeps its global alignment mod 16 and the
// loaders' aligned loads stay valid. The ring runs across the warp's tasks, so the next task's first
// stages are in flight while this one finishes; warps synchronise only with themselves (cp.async
// groups + __syncwarp), never with the block after the prologue.
// * gate/up: a task is (slot, row pair) as above, a stage one chunk of its 4 rows (gate r0, up r0,
//   gate r1, up r1: each staged x read feeds 4 rows). Mixtral, Q4_K: 8-warp blocks, depth 3,
//   62 KB of shared memory, 3 blocks (24 warps) per SM: 24 x 2 stages x 2.3 KB = 110 KB in flight
//   per SM (HBM at 4.8 TB/s x ~1.5 us loaded latency needs ~55 KB).
// * down: a task is an output row pair; its stages walk (slot, chunk) pairs, two per stage, the two
//   rows sharing each staged h read. One 16-warp block per SM stages h once (Mixtral, int8: 45.5 KB
//   for Q4_K, 31.5 KB for Q6_K) after its first weight stages are issued, so that staging overlaps
//   their flight. Mixtral: 2048 tasks on 128 blocks, depth 4 (Q4_K) or 3 (Q6_K), 194 KB: 107-110 KB
//   in flight per SM. No split of the input dimension across blocks, so no partial sums in global
//   memory; the price is that every block quantizes all of h (~1-3 us, 5-15% of the kernel).
// Each output element is one warp's sum in a fixed order (lane l adds segment l of every chunk in
// chunk order, then the shuffle tree), whatever the grid: the same bits on every run and device.
// The depth is picked per kernel and shape from what fits (plan_wide); rows need only be whole
// blocks: any alignment, a last chunk of fewer segments (its idle lanes add nothing).
inline constexpr int kWideSegs = kWarp;                 // segments per piece: one per lane
inline constexpr int64_t kWideMinSegs = 4 * kWideSegs;  // by_shape: rows of 4+ chunks (4096 values)
inline constexpr int kWideDepthMax = 4;                 // ring stages per warp
inline constexpr int kWidePieces = 4;                   // pieces per stage, both kernels
inline constexpr int kDownWideWarps = 16;
inline constexpr int kDownWideThreads = kDownWideWarps * kWarp;

// Quantized types but the grid i-quants, whose decode is codebook lookups rather than row bytes
// (their raw-staged prefill tiles lost to direct loads: quant/cuda/matmul.cuh, kGridIQuant).
template <class T>
inline constexpr bool kWideEligible = !seg::kIsFloat<T> && !mm::kGridIQuant<T>;

template <class T>
inline constexpr int kPieceBytes = (kWideSegs / T::kSegs) * block_bytes<T>();
// The aligned span around a piece that starts anywhere in a 16-byte word.
template <class T>
inline constexpr int kSlotBytes = 16 * ((kPieceBytes<T> + 30) / 16);

__device__ __forceinline__ void cp_async_wait_newest(int n) {  // all but the n newest groups, n <= 2
    if (n <= 0)
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    else if (n == 1)
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    else
        asm volatile("cp.async.wait_group 2;\n" ::: "memory");
}

// cp.async of 16 bytes to a shared-memory address held as 32 bits (no generic-to-shared
// conversion per copy).
__device__ __forceinline__ void cp_async16_to(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

__device__ __forceinline__ uint32_t mis16(const void* p) {
    return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p)) & 15u;
}

// The warp copies `bytes` bytes from src (any alignment) into the slot at shared address `slot`:
// the 16-byte words around them, lane l taking words l, l + 32, ...; they land at slot + (src & 15).
// Reads at most 15 bytes either side of the piece: inside the weight's allocation (upload_weight
// pads it by 16 bytes).
template <class T>
__device__ __forceinline__ void copy_piece(uint32_t slot, const uint8_t* src, int bytes, int lane) {
    const uint64_t a = reinterpret_cast<uint64_t>(src);
    const uint32_t mis = static_cast<uint32_t>(a) & 15u;
    const int words = static_cast<int>((mis + static_cast<uint32_t>(bytes) + 15u) >> 4);
    const auto* from =
        reinterpret_cast<const uint8_t*>((a & ~uint64_t{15}) + 16u * static_cast<uint32_t>(lane));
    const uint32_t to = slot + 16u * static_cast<uint32_t>(lane);
    constexpr int kIters = (kSlotBytes<T> / 16 + kWarp - 1) / kWarp;
#pragma unroll
    for (int it = 0; it < kIters; ++it)
        if (lane + it * kWarp < words) cp_async16_to(to + 512u * it, from + 512 * it);
}

// T::load_i8 from a row in shared memory: the same decode, from the loaders' Smem forms (load_i8
// itself reads through __ldg). Every type with load_i8 must be listed.
template <class T>
__device__ __forceinline__ void load_i8_smem(const uint8_t* row, int g, seg::SegI& s) {
    using seg::Smem;
    if constexpr (std::is_same_v<T, seg::Q4_0>) {
        const uint8_t* b = row + g * T::kBlockBytes;
        seg::set_d(s, seg::f16_at(b));
        T::template qwords<Smem>(b, s.q);
#pragma unroll
        for (int k = 0; k < 8; ++k) s.q[k] = seg::sub_bytes(s.q[k], 0x08080808u);
    } else if constexpr (std::is_same_v<T, seg::Q8_0>) {
        const uint8_t* b = row + g * T::kBlockBytes;
        seg::set_d(s, seg::f16_at(b));
        seg::load_words<Smem>(b + 2, s.q);
    } else if constexpr (std::is_same_v<T, seg::Q4_K> || std::is_same_v<T, seg::Q5_K>) {
        const uint8_t* b = row + (g >> 3) * T::kBlockBytes;
        T::template qwords<Smem>(b, g & 7, s.q);
        seg::k4_scales_words(seg::ld128_a16<Smem>(b), g & 7, s);
    } else {
        static_assert(std::is_same_v<T, seg::Q6_K>, "load_i8_smem: a type with load_i8 is missing here");
        T::template qwords<Smem>(row + (g >> 3) * T::kBlockBytes, g & 7, s.q, s);
#pragma unroll
        for (int k = 0; k < 8; ++k) s.q[k] = seg::sub_bytes(s.q[k], 0x20202020u);
    }
}

// Bytes of staged activations per row (int8 or fp32 layout, matvec.cuh).
template <class T, bool I8>
__host__ __device__ inline int64_t staged_row_bytes(int64_t n_segs) {
    return I8 ? i8_row_bytes<T>(n_segs) : n_units(n_segs) * 256 * static_cast<int64_t>(sizeof(float));
}

// One staged int8 activation segment with what Q4_K's and Q6_K's dots below need of it once per
// segment, whatever the rows it meets: the sums of its 16-value halves (Q4_K's mins), or -32 times
// the sums of its 8-value groups (Q6_K's offset of 32, folded into the dp4a accumulator).
struct XSegW {
    XSegI x;
    int s[4];
};

// Q4_K and Q6_K (Q4_K_M's expert types) against int8 activations with integer sub-block scales:
// sum_g sc_g * idot_g in int32 (|sum| < 2^26) and one conversion per segment, instead of an fp32
// scale (d * sc) and a conversion per sub-block; Q4_K's high nibbles stay in place (x16) as
// unsigned bytes (dp4a.u32.s32), Q6_K's offset of 32 rides in the dp4a accumulator (XSegW). In
// this kernel's SASS that is ~10% fewer instructions per stage than load_i8_smem + seg_dot_i8, the
// wide kernels' limit being instruction issue. The same real number as seg_dot_i8's, rounded
// differently (tests: the same bounds).
// Bytes of a (unsigned, 0..255) times bytes of b (signed), summed onto c.
__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

__device__ __forceinline__ float q4k_dot(const uint8_t* b, int sb, const XSegW& x) {
    const int c = sb >> 1;
    const uint4 hd = *reinterpret_cast<const uint4*>(b);  // d, dmin, 12 bytes of 6-bit scales and mins
    const uint4 v = *reinterpret_cast<const uint4*>(b + 16 + 32 * c + 16 * (sb & 1));
    const int sh = 16 * (c & 1);
    const uint32_t w0 = hd.y >> sh, w1 = hd.z >> sh, w2 = hd.w >> sh;
    const bool low = c < 2;  // sub-blocks 2c, 2c + 1 in the low or high two bytes of each field
    const uint32_t sc = low ? (w0 & 0x3F3Fu) : ((w2 & 0x0F0Fu) | ((w0 & 0xC0C0u) >> 2));
    const uint32_t mn = low ? (w1 & 0x3F3Fu) : (((w2 >> 4) & 0x0F0Fu) | ((w1 & 0xC0C0u) >> 2));
    const uint32_t q[4] = {v.x, v.y, v.z, v.w};
    int lo = 0, hi = 0;  // low nibbles: sub-block 2c (values 0..15), high: 2c + 1 (16..31), times 16
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        lo = dp4a_us(q[k] & 0x0F0F0F0Fu, x.x.q[k], lo);
        hi = dp4a_us(q[k] & 0xF0F0F0F0u, x.x.q[4 + k], hi);
    }
    // |16 lo sc| and |hi sc| < 16 x 15 x 127 x 16 x 63 = 30.7M each: int32, and one rounding in the
    // conversion below (the weight part is exact); 1/16 is exact.
    const int isum = static_cast<int>(sc & 0xFFu) * 16 * lo + static_cast<int>(sc >> 8) * hi;
    const int msum = static_cast<int>(mn & 0xFFu) * x.s[0] + static_cast<int>(mn >> 8) * x.s[1];
    const float d = seg::f16_bits(hd.x & 0xFFFFu), dmin = seg::f16_bits(hd.x >> 16);
    return x.x.dx * (d * 0.0625f * static_cast<float>(isum) - dmin * static_cast<float>(msum));
}

__device__ __forceinline__ float q6k_dot(const uint8_t* b, int sb, const XSegW& x) {
    const int h = sb >> 2, lq = sb & 3;
    const uint8_t* ql = b + 64 * h + 8 * lq;
    const uint8_t* qh = b + 128 + 32 * h + 8 * lq;
    const uint32_t a0 = seg::ld32_a2(ql), a1 = seg::ld32_a2(ql + 4);
    const uint32_t b0 = seg::ld32_a2(ql + 32), b1 = seg::ld32_a2(ql + 36);
    const uint32_t c0 = seg::ld32_a2(qh), c1 = seg::ld32_a2(qh + 4);
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * h + (lq >> 1));
    int isum = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // group k: low 4 bits from ql (k & 1: the upper 32 bytes; k >= 2: high
                                   // nibbles), top 2 bits from bits 2k, 2k + 1 of qh's bytes
        const uint32_t s0 = (k & 1) ? b0 : a0, s1 = (k & 1) ? b1 : a1;
        const uint32_t n0 = k < 2 ? s0 : s0 >> 4, n1 = k < 2 ? s1 : s1 >> 4;
        const uint32_t h0 = 4 >= 2 * k ? c0 << (4 - 2 * k) : c0 >> (2 * k - 4);
        const uint32_t h1 = 4 >= 2 * k ? c1 << (4 - 2 * k) : c1 >> (2 * k - 4);
        const uint32_t v0 = (n0 & 0x0F0F0F0Fu) | (h0 & 0x30303030u),
                       v1 = (n1 & 0x0F0F0F0Fu) | (h1 & 0x30303030u);
        int i = __dp4a(static_cast<int>(v0), static_cast<int>(x.x.q[2 * k]), x.s[k]);  // values 0..63
        i = __dp4a(static_cast<int>(v1), static_cast<int>(x.x.q[2 * k + 1]), i);       // minus 32: x.s
        isum += static_cast<int>(sc[2 * k]) * i;
    }
    return x.x.dx * seg::f16_at(b + 208) * static_cast<float>(isum);
}

template <class T>
inline constexpr bool kIntScaleDot = std::is_same_v<T, seg::Q4_K> || std::is_same_v<T, seg::Q6_K>;

// dot(segment `lane` of the piece at p (shared memory), staged activation segment x): int8
// (Q4_K, Q6_K: the integer-scale dots above), or fp32.
template <class T, bool I8>
struct WideDot {
    using X = std::conditional_t<I8, std::conditional_t<kIntScaleDot<T>, XSegW, XSegI>, float[32]>;
    __device__ __forceinline__ static void load_x_seg(const unsigned char* xs_row, int64_t units, int64_t g,
                                                      X& x) {
        if constexpr (I8 && kIntScaleDot<T>) {
            load_xi<T>(xs_row, units, g, x.x);
            if constexpr (std::is_same_v<T, seg::Q4_K>) {
                x.s[0] = x.x.qsum[0] + x.x.qsum[1];
                x.s[1] = x.x.qsum[2] + x.x.qsum[3];
            } else {
#pragma unroll
                for (int k = 0; k < 4; ++k)
                    x.s[k] = -32 * __dp4a(static_cast<int>(x.x.q[2 * k]), 0x01010101,
                                          __dp4a(static_cast<int>(x.x.q[2 * k + 1]), 0x01010101, 0));
            }
        } else if constexpr (I8) {
            load_xi<T>(xs_row, units, g, x);
        } else {
            load_x(reinterpret_cast<const float*>(xs_row), g, x);
        }
    }
    __device__ __forceinline__ static float dot(const uint8_t* p, int lane, const X& x, const float* tbl) {
        if constexpr (I8 && std::is_same_v<T, seg::Q4_K>) {
            return q4k_dot(p + (lane >> 3) * T::kBlockBytes, lane & 7, x);
        } else if constexpr (I8 && std::is_same_v<T, seg::Q6_K>) {
            return q6k_dot(p + (lane >> 3) * T::kBlockBytes, lane & 7, x);
        } else if constexpr (I8) {
            seg::SegI s;
            load_i8_smem<T>(p, lane, s);
            return seg_dot_i8<T>(s, x);
        } else {
            seg::Seg s;
            T::template load<seg::Smem>(p, lane, 0, s, tbl);  // n_in: only float types read it
            return seg_dot<T>(s, x);
        }
    }
};

// Tasks [begin, end) of this block: an equal share of all tasks, in one contiguous range.
__device__ __forceinline__ void block_tasks(int tasks, int& begin, int& end) {
    begin = static_cast<int>(static_cast<int64_t>(blockIdx.x) * tasks / gridDim.x);
    end = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * tasks / gridDim.x);
}

// 3 blocks of 8 warps per SM (<= 80 registers: the int8 decode needs no more); the fp32 decode
// holds 72 registers of values alone and spilled at 80, so 2 blocks there.
template <class T, bool I8>
__global__ void __launch_bounds__(kThreads, I8 ? 3 : 2) gate_up_wide_kernel(const GateUpArgs a, int depth) {
    constexpr int kSlot = kSlotBytes<T>, kPiece = kPieceBytes<T>, kStage = kWidePieces * kSlot;
    using D = WideDot<T, I8>;
    extern __shared__ float4 smem[];
    __shared__ float tbl[16];
    __shared__ const uint8_t* gbase[kMaxK + 1];
    __shared__ const uint8_t* ubase[kMaxK + 1];
    __shared__ int32_t route_ids[kMaxK];
    __shared__ float route_w[kMaxK];
    const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
    const int slots = a.k + (a.sh_gate != nullptr ? 1 : 0);
    if (a.logits != nullptr) {
        if (tid < kWarp) {
            route_row(a.logits, static_cast<int>(a.n_expert), a.k, a.renormalize, route_ids, route_w);
            __syncwarp();
            if (tid < a.k && blockIdx.x == 0) {
                a.ids_out[tid] = route_ids[tid];
                a.weights_out[tid] = route_w[tid];
            }
        }
        __syncthreads();
    }
    if (tid < slots) {
        if (tid < a.k) {
            const int e = a.logits != nullptr ? route_ids[tid] : a.ids[tid];
            if (e < 0 || e >= a.n_expert) __trap();
            const size_t off = static_cast<size_t>(e) * a.expert_stride;
            gbase[tid] = a.gate + off;
            ubase[tid] = a.up + off;
        } else {
            gbase[tid] = a.sh_gate;
            ubase[tid] = a.sh_up;
        }
    }
    stage_table<T>(tbl);
    __syncthreads();

    const int64_t n_segs = n_segments<T>(a.n_in);
    const int nc = static_cast<int>((n_segs + kWideSegs - 1) / kWideSegs);  // chunks per row
    const int last_bytes = static_cast<int>(a.row_bytes) - (nc - 1) * kPiece;
    const int n_ff = static_cast<int>(a.n_ff), pairs = (n_ff + 1) / 2;
    int t_begin, t_end;
    block_tasks(slots * pairs, t_begin, t_end);
    const int my_tasks = t_begin + warp < t_end ? (t_end - t_begin - warp + kWarps - 1) / kWarps : 0;
    const int n_stages = my_tasks * nc;
    const int64_t xs_bytes = (staged_row_bytes<T, I8>(n_segs) + 15) & ~int64_t{15};
    unsigned char* const xs = reinterpret_cast<unsigned char*>(smem);
    unsigned char* const ring = xs + xs_bytes + static_cast<size_t>(warp) * depth * kStage;
    const uint32_t ring_s = static_cast<uint32_t>(__cvta_generic_to_shared(ring));

    // The 4 rows of task t: gate r0, up r0, gate r1, up r1 (r1 = r0 past the end).
    const auto task_rows = [&](int t, const uint8_t*(&rows)[kWidePieces]) {
        const int i = t / pairs;
        const int r0 = (t - i * pairs) * 2, r1 = min(r0 + 1, n_ff - 1);
        const size_t o0 = static_cast<size_t>(r0) * a.row_bytes, o1 = static_cast<size_t>(r1) * a.row_bytes;
        rows[0] = gbase[i] + o0;
        rows[1] = ubase[i] + o0;
        rows[2] = gbase[i] + o1;
        rows[3] = ubase[i] + o1;
    };
    // Issue cursor: task, chunk, ring slot of the next stage to copy; its rows at that chunk.
    int it = t_begin + warp, ic = 0, is = 0;
    const uint8_t* irows[kWidePieces];
    if (n_stages > 0) task_rows(it, irows);
    const auto issue = [&] {
        const uint32_t slot = ring_s + static_cast<uint32_t>(is * kStage);
        const int bytes = ic == nc - 1 ? last_bytes : kPiece;
#pragma unroll
        for (int p = 0; p < kWidePieces; ++p) copy_piece<T>(slot + p * kSlot, irows[p], bytes, lane);
        is = is + 1 == depth ? 0 : is + 1;
        if (++ic == nc) {
            ic = 0;
            it += kWarps;
            if (it < t_end) task_rows(it, irows);
        } else {
#pragma unroll
            for (int p = 0; p < kWidePieces; ++p) irows[p] += kPiece;
        }
    };
    for (int s = 0; s < depth - 1; ++s) {
        if (s < n_stages) issue();
        mm::cp_async_commit();
    }
    if constexpr (I8)
        stage_x_i8<T>(xs, a.x, 0, 1, a.n_in, n_segs);
    else
        stage_x<T>(reinterpret_cast<float*>(xs), a.x, a.n_in, n_segs);
    __syncthreads();

    const int64_t units = n_units(n_segs);
    const int n_segs32 = static_cast<int>(n_segs);
    int dt = t_begin + warp, dc = 0, ds = 0;  // decode cursor
    uint32_t dmis[kWidePieces] = {};          // the rows' offsets in their 16-byte words at chunk dc
    const auto decode_task = [&] {
        const uint8_t* rows[kWidePieces];
        task_rows(dt, rows);
#pragma unroll
        for (int p = 0; p < kWidePieces; ++p) dmis[p] = mis16(rows[p]);
    };
    if (n_stages > 0) decode_task();
    float acc[kWidePieces] = {};
#pragma unroll 1
    for (int q = 0; q < n_stages; ++q) {
        cp_async_wait_newest(depth - 2);  // this lane's copies of stage q have landed ...
        __syncwarp();                     // ... and every lane's; stage q - 1's slot is read
        if (q + depth - 1 < n_stages) issue();
        mm::cp_async_commit();
        const int g = dc * kWideSegs + lane;
        if (g < n_segs32) {
            typename D::X xr;
            D::load_x_seg(xs, units, g, xr);
            const unsigned char* slot = ring + ds * kStage;
#pragma unroll
            for (int p = 0; p < kWidePieces; ++p) acc[p] += D::dot(slot + p * kSlot + dmis[p], lane, xr, tbl);
        }
        ds = ds + 1 == depth ? 0 : ds + 1;
        if (++dc == nc) {
            float v[kWidePieces];
#pragma unroll
            for (int p = 0; p < kWidePieces; ++p) v[p] = warp_sum(acc[p]), acc[p] = 0.0f;
            const int i = dt / pairs, r0 = (dt - i * pairs) * 2;
            if (lane < 2 && r0 + lane < n_ff)
                a.h[static_cast<int64_t>(i) * n_ff + r0 + lane] =
                    lane == 0 ? silu_mul(v[0], v[1]) : silu_mul(v[2], v[3]);
            dc = 0;
            dt += kWarps;
            if (dt < t_end) decode_task();
        } else {
#pragma unroll
            for (int p = 0; p < kWidePieces; ++p) dmis[p] = (dmis[p] + kPiece) & 15u;
        }
    }
    mm::cp_async_wait_all();
}

// Stage pieces: (pair u, row r) at 2u + r; pair u = (slot, chunk) number 2s + u of the task's
// slots x chunks walk, both rows of the output row pair.
template <class T, bool I8>
__global__ void __launch_bounds__(kDownWideThreads, 1) down_wide_kernel(const DownArgs a, int depth) {
    constexpr int kSlot = kSlotBytes<T>, kPiece = kPieceBytes<T>, kStage = kWidePieces * kSlot;
    constexpr int kW = kDownWideWarps;
    using D = WideDot<T, I8>;
    extern __shared__ float4 smem[];
    __shared__ float tbl[16];
    __shared__ const uint8_t* base_s[kMaxK + 1];
    __shared__ float w_s[kMaxK + 1];
    const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
    const bool has_shared = a.sh_down != nullptr;
    const int slots = a.k + (has_shared ? 1 : 0);
    if (tid < a.k) {
        const int e = a.ids[tid];
        if (e < 0 || e >= a.n_expert) __trap();
        base_s[tid] = a.down + static_cast<size_t>(e) * a.expert_stride;
        w_s[tid] = a.weights[tid];
    } else if (tid == a.k && has_shared) {
        base_s[tid] = a.sh_down;
        w_s[tid] = 1.0f / (1.0f + expf(-*a.sh_gate_logit));
    }
    stage_table<T>(tbl);
    __syncthreads();

    const int64_t n_segs = n_segments<T>(a.n_ff);
    const int nc = static_cast<int>((n_segs + kWideSegs - 1) / kWideSegs);
    const int last_bytes = static_cast<int>(a.row_bytes) - (nc - 1) * kPiece;
    const int n_embd = static_cast<int>(a.n_embd);
    int t_begin, t_end;
    block_tasks((n_embd + 1) / 2, t_begin, t_end);
    const int my_tasks = t_begin + warp < t_end ? (t_end - t_begin - warp + kW - 1) / kW : 0;
    const int stages_per_task = (slots * nc + 1) / 2;
    const int n_stages = my_tasks * stages_per_task;
    const int64_t xs_stride = staged_row_bytes<T, I8>(n_segs);
    const int64_t xs_bytes = (slots * xs_stride + 15) & ~int64_t{15};
    unsigned char* const xs = reinterpret_cast<unsigned char*>(smem);
    unsigned char* const ring = xs + xs_bytes + static_cast<size_t>(warp) * depth * kStage;
    const uint32_t ring_s = static_cast<uint32_t>(__cvta_generic_to_shared(ring));
    // Byte offsets of the task's two rows in each expert's matrix (the second = the first past the end).
    const auto row_offsets = [&](int t, size_t& o0, size_t& o1) {
        o0 = static_cast<size_t>(2 * t) * a.row_bytes;
        o1 = static_cast<size_t>(min(2 * t + 1, n_embd - 1)) * a.row_bytes;
    };

    // Issue cursor: task (output rows 2t, 2t + 1), the stage's first (slot, chunk), ring slot.
    int it = t_begin + warp, ii = 0, ic = 0, is = 0;
    size_t io0 = 0, io1 = 0;
    if (n_stages > 0) row_offsets(it, io0, io1);
    const auto issue = [&] {
        const uint32_t slot = ring_s + static_cast<uint32_t>(is * kStage);
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            if (ii < slots) {  // the task's last stage may hold one pair
                const uint8_t* b = base_s[ii] + ic * kPiece;
                const int bytes = ic == nc - 1 ? last_bytes : kPiece;
                copy_piece<T>(slot + (2 * u) * kSlot, b + io0, bytes, lane);
                copy_piece<T>(slot + (2 * u + 1) * kSlot, b + io1, bytes, lane);
                if (++ic == nc) ic = 0, ++ii;
            }
        }
        is = is + 1 == depth ? 0 : is + 1;
        if (ii == slots) {
            ii = 0, ic = 0, it += kW;
            if (it < t_end) row_offsets(it, io0, io1);
        }
    };
    for (int s = 0; s < depth - 1; ++s) {
        if (s < n_stages) issue();
        mm::cp_async_commit();
    }
    if constexpr (I8)
        stage_x_i8<T>(xs, a.h, a.n_ff, slots, a.n_ff, n_segs);
    else
        stage_x_rows<T>(reinterpret_cast<float*>(xs), a.h, a.n_ff, slots, a.n_ff, n_segs);
    __syncthreads();

    const int64_t units = n_units(n_segs);
    const int n_segs32 = static_cast<int>(n_segs);
    int dt = t_begin + warp, di = 0, dc = 0, ds = 0;  // decode cursor
    uint32_t dm0 = 0, dm1 = 0;                        // low 32 bits of the rows' offsets
    if (n_stages > 0) {
        size_t o0, o1;
        row_offsets(dt, o0, o1);
        dm0 = static_cast<uint32_t>(o0), dm1 = static_cast<uint32_t>(o1);
    }
    float acc[2] = {};
#pragma unroll 1
    for (int q = 0; q < n_stages; ++q) {
        cp_async_wait_newest(depth - 2);
        __syncwarp();
        if (q + depth - 1 < n_stages) issue();
        mm::cp_async_commit();
        const unsigned char* slot = ring + ds * kStage;
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            if (di < slots) {
                const int g = dc * kWideSegs + lane;
                if (g < n_segs32) {
                    typename D::X xr;
                    D::load_x_seg(xs + di * xs_stride, units, g, xr);
                    const uint32_t m = mis16(base_s[di]) + static_cast<uint32_t>(dc * kPiece);
                    const float w = w_s[di];
                    const float d0 = D::dot(slot + (2 * u) * kSlot + ((m + dm0) & 15u), lane, xr, tbl);
                    const float d1 = D::dot(slot + (2 * u + 1) * kSlot + ((m + dm1) & 15u), lane, xr, tbl);
                    acc[0] += w * d0;
                    acc[1] += w * d1;
                }
                if (++dc == nc) dc = 0, ++di;
            }
        }
        ds = ds + 1 == depth ? 0 : ds + 1;
        if (di == slots) {
            const float v0 = warp_sum(acc[0]), v1 = warp_sum(acc[1]);
            acc[0] = acc[1] = 0.0f;
            const int o = 2 * dt + lane;
            if (lane < 2 && o < n_embd) {
                const float vl = lane == 0 ? v0 : v1;
                a.out[o] = a.accumulate ? a.out[o] + vl : vl;
            }
            di = 0, dc = 0, dt += kW;
            if (dt < t_end) {
                size_t o0, o1;
                row_offsets(dt, o0, o1);
                dm0 = static_cast<uint32_t>(o0), dm1 = static_cast<uint32_t>(o1);
            }
        }
    }
    mm::cp_async_wait_all();
}

// How a wide kernel runs at one shape's staged activations: ring depth (0: nothing fits) and the
// dynamic shared memory that gives, and how many of its blocks an SM holds then.
struct WidePlan {
    int depth = 0;
    size_t smem = 0;
    int per_sm = 0;
};

// The ring depth for a kernel of `warps` warps whose blocks stage xs_bytes of activations: the most
// bytes in flight per SM up to kWideFlightTarget, then the most warps per SM (to issue the decode),
// then the most bytes. Occupancy (registers and shared memory) from the driver, cached per kernel
// and size: the launchers run on the host at every decode step outside a CUDA graph.
inline constexpr int64_t kWideFlightTarget = 96 * 1024;

WidePlan plan_wide(const void* kernel, int warps, int64_t xs_bytes, int slot_bytes, int piece_bytes) {
    struct Entry {
        const void* kernel;
        int64_t xs_bytes;
        WidePlan plan;
    };
    static std::mutex mutex;
    static std::vector<Entry> cache;
    {
        std::lock_guard<std::mutex> lock(mutex);
        for (const Entry& e : cache)
            if (e.kernel == kernel && e.xs_bytes == xs_bytes) return e.plan;
    }
    const LaunchLimits& lim = launch_limits();
    WidePlan best;
    std::tuple<int64_t, int64_t, int64_t> best_key{-1, -1, -1};
    for (int depth = kWideDepthMax; depth >= 2; --depth) {
        const int64_t smem =
            ((xs_bytes + 15) & ~int64_t{15}) + static_cast<int64_t>(warps) * depth * kWidePieces * slot_bytes;
        if (smem + 1024 > lim.max_smem_optin) continue;
        prepare_smem(kernel, static_cast<size_t>(smem), "MoE wide decode");
        int per_sm = 0;
        MOX_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * kWarp,
                                                                     static_cast<size_t>(smem)));
        if (per_sm < 1) continue;
        const int64_t bytes = static_cast<int64_t>(per_sm) * warps * (depth - 1) * kWidePieces * piece_bytes;
        const std::tuple<int64_t, int64_t, int64_t> key{std::min(bytes, kWideFlightTarget),
                                                        static_cast<int64_t>(per_sm) * warps, bytes};
        if (key > best_key) {
            best_key = key;
            best = WidePlan{.depth = depth, .smem = static_cast<size_t>(smem), .per_sm = per_sm};
        }
    }
    std::lock_guard<std::mutex> lock(mutex);
    cache.push_back({kernel, xs_bytes, best});
    return best;
}

// Blocks for `tasks` tasks of one warp each, at most what the device holds at once (the blocks
// take equal contiguous shares of the tasks, block_tasks).
int wide_blocks(const WidePlan& p, int warps, int64_t tasks) {
    const int64_t resident = static_cast<int64_t>(p.per_sm) * launch_limits().sm_count;
    return static_cast<int>(std::clamp<int64_t>((tasks + warps - 1) / warps, 1, resident));
}

// Launches the wide gate/up kernel; false when no ring depth fits in shared memory.
template <class T, bool I8>
bool launch_gate_up_wide(const GateUpArgs& a, int slots, StreamHandle stream) {
    const auto kernel = gate_up_wide_kernel<T, I8>;
    const WidePlan p =
        plan_wide(reinterpret_cast<const void*>(kernel), kWarps,
                  staged_row_bytes<T, I8>(n_segments<T>(a.n_in)), kSlotBytes<T>, kPieceBytes<T>);
    if (p.depth == 0) return false;
    prepare_smem(reinterpret_cast<const void*>(kernel), p.smem, "MoE gate/up (wide)");
    const int blocks = wide_blocks(p, kWarps, slots * ((a.n_ff + 1) / 2));
    kernel<<<blocks, kThreads, p.smem, stream>>>(a, p.depth);
    MOX_CUDA_CHECK_LAUNCH("gate_up_wide_kernel");
    return true;
}

template <class T, bool I8>
bool launch_down_wide(const DownArgs& a, int slots, StreamHandle stream) {
    const auto kernel = down_wide_kernel<T, I8>;
    const WidePlan p =
        plan_wide(reinterpret_cast<const void*>(kernel), kDownWideWarps,
                  slots * staged_row_bytes<T, I8>(n_segments<T>(a.n_ff)), kSlotBytes<T>, kPieceBytes<T>);
    if (p.depth == 0) return false;
    prepare_smem(reinterpret_cast<const void*>(kernel), p.smem, "MoE down (wide)");
    const int blocks = wide_blocks(p, kDownWideWarps, (a.n_embd + 1) / 2);
    kernel<<<blocks, kDownWideThreads, p.smem, stream>>>(a, p.depth);
    MOX_CUDA_CHECK_LAUNCH("down_wide_kernel");
    return true;
}

// The launch `path` asks for at rows of n_in values of T (moe_gate_up: n_embd, moe_down: n_ff):
// the wide kernel (true, launched by fn) or the narrow one (false). by_shape takes the narrow
// kernel where the wide one's shared memory does not fit; a forced wide path fails there.
template <class T, class Fn>
bool run_wide(MoeDecodePath path, int64_t n_in, quant::TypeId type, const char* what, Fn&& fn) {
    if (path == MoeDecodePath::narrow) return false;
    if constexpr (kWideEligible<T>) {
        if (path == MoeDecodePath::by_shape && n_segments<T>(n_in) < kWideMinSegs) return false;
        if (fn()) return true;
        if (path == MoeDecodePath::wide)
            fail("CUDA MoE {}: the wide kernel's shared memory does not fit ({} inputs of {})", what, n_in,
                 quant::type_name(type));
        return false;
    } else {
        if (path == MoeDecodePath::wide)
            fail("CUDA MoE {}: no wide decode kernel for {} weights", what, quant::type_name(type));
        return false;
    }
}

template <class T>
void launch_gate_up_path(const GateUpArgs& a, int slots, MoeDecodePath path, quant::TypeId type,
                         StreamHandle stream) {
    const bool wide = run_wide<T>(path, a.n_in, type, "gate/up", [&] {
        if constexpr (kWideEligible<T>)
            return launch_gate_up_wide<T, kHasI8<T>>(a, slots, stream);
        else
            return false;
    });
    if (!wide) launch_gate_up<T>(a, slots, stream);
}

template <class T>
void launch_down_path(const DownArgs& a, int slots, MoeDecodePath path, quant::TypeId type,
                      StreamHandle stream) {
    const bool wide = run_wide<T>(path, a.n_ff, type, "down", [&] {
        if constexpr (kWideEligible<T>)
            return launch_down_wide<T, kHasI8<T>>(a, slots, stream);
        else
            return false;
    });
    if (!wide) launch_down<T>(a, slots, stream);
}

void check_stack(const ops::Weight& w, const char* name) {
    MOX_CHECK(w.valid(), "MoE {} weight is empty", name);
    if (!matvec_supported(w.type))
        fail("CUDA MoE: no kernel for {} weights of type {}", name, quant::type_name(w.type));
    MOX_CHECK(w.row_bytes == quant::row_bytes(w.type, w.n_in), "MoE {} row_bytes {}", name, w.row_bytes);
}

}  // namespace

namespace {

// One sparsemixer step (ops::route_sparsemixer) for one token's logits s: the arg max among the
// experts other than `taken` and its weight, the softmax probability among the experts within the
// relative margin. One thread: the routers it serves have a few dozen experts.
__device__ int sparsemixer_pick(const float* s, int n_expert, int taken, float margin, float& weight) {
    int e = -1;
    for (int j = 0; j < n_expert; ++j)
        if (j != taken && (e < 0 || s[j] > s[e])) e = j;
    const float m = s[e];
    double sum = 0;
    for (int j = 0; j < n_expert; ++j) {
        if (j == taken) continue;
        const float factor = fmaxf(fabsf(s[j]), m);
        if ((m - s[j]) / factor > margin) continue;
        sum += exp(static_cast<double>(s[j]) - m);
    }
    weight = static_cast<float>(1.0 / sum);
    return e;
}

__global__ void sparsemixer_kernel(const float* __restrict__ logits, int64_t stride, int64_t n_tokens,
                                   int n_expert, float margin, int32_t* __restrict__ ids,
                                   float* __restrict__ weights) {
    const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= n_tokens) return;
    const float* s = logits + t * stride;
    float w1 = 0.0f, w2 = 0.0f;
    const int e1 = sparsemixer_pick(s, n_expert, -1, margin, w1);
    const int e2 = sparsemixer_pick(s, n_expert, e1, margin, w2);
    ids[2 * t] = e1;
    ids[2 * t + 1] = e2;
    weights[2 * t] = w1;
    weights[2 * t + 1] = w2;
}

}  // namespace

void route_sparsemixer(const float* logits, int64_t n_tokens, int64_t n_expert, float jitter, int32_t* ids,
                       float* weights, StreamHandle stream, int64_t logits_stride) {
    if (n_expert < 2 || n_expert > 1024)
        fail("CUDA sparsemixer router: {} experts (supported: 2..1024)", n_expert);
    if (logits_stride == 0) logits_stride = n_expert;
    MOX_CHECK(logits_stride >= n_expert, "router logits stride {} < {} experts", logits_stride, n_expert);
    if (n_tokens == 0) return;
    const int threads = 64;
    sparsemixer_kernel<<<static_cast<unsigned>((n_tokens + threads - 1) / threads), threads, 0, stream>>>(
        logits, logits_stride, n_tokens, static_cast<int>(n_expert), 2.0f * jitter, ids, weights);
    MOX_CUDA_CHECK_LAUNCH("sparsemixer_kernel");
}

void route_softmax_topk(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k, bool renormalize,
                        int32_t* ids, float* weights, StreamHandle stream, int64_t logits_stride) {
    if (n_expert < 1 || n_expert > kWarp * kRouterPerLane || k < 1 || k > kMaxK || k > n_expert)
        fail("CUDA router: {} experts, top {} (supported: up to {} experts, k <= {})", n_expert, k,
             kWarp * kRouterPerLane, kMaxK);
    if (logits_stride == 0) logits_stride = n_expert;
    MOX_CHECK(logits_stride >= n_expert, "router logits stride {} < {} experts", logits_stride, n_expert);
    if (n_tokens == 0) return;
    router_kernel<<<static_cast<unsigned>(n_tokens), kWarp, 0, stream>>>(
        logits, logits_stride, static_cast<int>(n_expert), static_cast<int>(k), renormalize, ids, weights);
    MOX_CUDA_CHECK_LAUNCH("router_kernel");
}

namespace {

// The shared expert's weights against the routed stacks: same n_embd, gate/up alike; returns
// whether they can ride in the routed launch (same type and n_ff).
bool check_shared_gate_up(const MoeDecodeShared& sh, const ops::Weight& gate) {
    MOX_CHECK(sh.gate != nullptr && sh.up != nullptr, "MoeDecodeShared without gate/up weights");
    check_stack(*sh.gate, "shared gate");
    check_stack(*sh.up, "shared up");
    if (sh.gate->type != sh.up->type || sh.gate->n_in != sh.up->n_in || sh.gate->n_out != sh.up->n_out)
        fail("CUDA MoE: shared gate ({}, {}x{}) and up ({}, {}x{}) differ", quant::type_name(sh.gate->type),
             sh.gate->n_out, sh.gate->n_in, quant::type_name(sh.up->type), sh.up->n_out, sh.up->n_in);
    if (sh.gate->n_in != gate.n_in)
        fail("CUDA MoE: shared expert input {} != routed {}", sh.gate->n_in, gate.n_in);
    return sh.gate->type == gate.type && sh.gate->n_out == gate.n_out;
}

bool check_shared_down(const MoeDecodeShared& sh, const ops::Weight& down) {
    MOX_CHECK(sh.down != nullptr && sh.gate_logit != nullptr,
              "MoeDecodeShared without down weights or gate logit");
    check_stack(*sh.down, "shared down");
    if (sh.down->n_out != down.n_out)
        fail("CUDA MoE: shared expert output {} != routed {}", sh.down->n_out, down.n_out);
    if (sh.gate != nullptr && sh.down->n_in != sh.gate->n_out)
        fail("CUDA MoE: shared down input {} != shared n_ff {}", sh.down->n_in, sh.gate->n_out);
    return sh.down->type == down.type && sh.down->n_in == down.n_in;
}

}  // namespace

namespace {

// moe_gate_up and moe_route_gate_up: `route` (logits set) fuses the routing into the launch.
void gate_up_impl(const ops::Weight& gate, const ops::Weight& up, const int32_t* ids, int64_t k,
                  const float* x, float* h, StreamHandle stream, const MoeDecodeShared* shared,
                  const GateUpArgs& route, MoeDecodePath path) {
    check_stack(gate, "gate");
    check_stack(up, "up");
    if (gate.type != up.type || gate.n_in != up.n_in || gate.n_out != up.n_out ||
        gate.n_expert != up.n_expert || gate.expert_stride() != up.expert_stride())
        fail("CUDA MoE: gate ({}, {}x{}) and up ({}, {}x{}) stacks differ", quant::type_name(gate.type),
             gate.n_out, gate.n_in, quant::type_name(up.type), up.n_out, up.n_in);
    MOX_CHECK(k >= 1 && k <= kMaxK, "MoE k {}", k);
    const bool fused = shared != nullptr && check_shared_gate_up(*shared, gate);
    GateUpArgs a = route;
    a.gate = gate.data;
    a.up = up.data;
    a.row_bytes = gate.row_bytes;
    a.n_in = gate.n_in;
    a.n_ff = gate.n_out;
    a.n_expert = gate.n_expert;
    a.expert_stride = gate.expert_stride();
    a.ids = ids;
    a.k = static_cast<int>(k);
    a.sh_gate = fused ? shared->gate->data : nullptr;
    a.sh_up = fused ? shared->up->data : nullptr;
    a.x = x;
    a.h = h;
    dispatch_type(gate.type, [&](auto tag) {
        launch_gate_up_path<decltype(tag)>(a, static_cast<int>(k) + (fused ? 1 : 0), path, gate.type, stream);
    });
    if (shared != nullptr && !fused) {
        // Another type or n_ff: the shared expert alone, as slot 0 of a second launch.
        const ops::Weight& sg = *shared->gate;
        const GateUpArgs b{.gate = nullptr,
                           .up = nullptr,
                           .row_bytes = sg.row_bytes,
                           .n_in = sg.n_in,
                           .n_ff = sg.n_out,
                           .n_expert = 1,
                           .ids = nullptr,
                           .k = 0,
                           .sh_gate = sg.data,
                           .sh_up = shared->up->data,
                           .x = x,
                           .h = h + k * gate.n_out};
        dispatch_type(sg.type,
                      [&](auto tag) { launch_gate_up_path<decltype(tag)>(b, 1, path, sg.type, stream); });
    }
}

}  // namespace

void moe_gate_up(const ops::Weight& gate, const ops::Weight& up, const int32_t* ids, int64_t k,
                 const float* x, float* h, StreamHandle stream, const MoeDecodeShared* shared,
                 MoeDecodePath path) {
    gate_up_impl(gate, up, ids, k, x, h, stream, shared, GateUpArgs{}, path);
}

void moe_route_gate_up(const float* logits, bool renormalize, int32_t* ids, float* weights,
                       const ops::Weight& gate, const ops::Weight& up, int64_t k, const float* x, float* h,
                       StreamHandle stream, const MoeDecodeShared* shared, MoeDecodePath path) {
    if (gate.n_expert < 1 || gate.n_expert > kWarp * kRouterPerLane || k < 1 || k > kMaxK ||
        k > gate.n_expert)
        fail("CUDA router: {} experts, top {} (supported: up to {} experts, k <= {})", gate.n_expert, k,
             kWarp * kRouterPerLane, kMaxK);
    GateUpArgs route{};
    route.logits = logits;
    route.renormalize = renormalize;
    route.ids_out = ids;
    route.weights_out = weights;
    gate_up_impl(gate, up, nullptr, k, x, h, stream, shared, route, path);
}

void moe_down(const ops::Weight& down, const int32_t* ids, const float* weights, int64_t k, const float* h,
              float* out, StreamHandle stream, const MoeDecodeShared* shared, MoeDecodePath path) {
    check_stack(down, "down");
    MOX_CHECK(k >= 1 && k <= kMaxK, "MoE k {}", k);
    const bool fused = shared != nullptr && check_shared_down(*shared, down);
    const DownArgs a{.down = down.data,
                     .row_bytes = down.row_bytes,
                     .n_ff = down.n_in,
                     .n_embd = down.n_out,
                     .n_expert = down.n_expert,
                     .ids = ids,
                     .weights = weights,
                     .k = static_cast<int>(k),
                     .sh_down = fused ? shared->down->data : nullptr,
                     .sh_gate_logit = fused ? shared->gate_logit : nullptr,
                     .h = h,
                     .out = out,
                     .accumulate = false,
                     .expert_stride = down.expert_stride()};
    dispatch_type(down.type, [&](auto tag) {
        launch_down_path<decltype(tag)>(a, static_cast<int>(k) + (fused ? 1 : 0), path, down.type, stream);
    });
    if (shared != nullptr && !fused) {
        // Added onto the routed sum by a second launch (stream order): still one fixed order.
        const ops::Weight& sd = *shared->down;
        const DownArgs b{.down = nullptr,
                         .row_bytes = sd.row_bytes,
                         .n_ff = sd.n_in,
                         .n_embd = sd.n_out,
                         .n_expert = 1,
                         .ids = nullptr,
                         .weights = nullptr,
                         .k = 0,
                         .sh_down = sd.data,
                         .sh_gate_logit = shared->gate_logit,
                         .h = h + k * down.n_in,
                         .out = out,
                         .accumulate = true};
        dispatch_type(sd.type,
                      [&](auto tag) { launch_down_path<decltype(tag)>(b, 1, path, sd.type, stream); });
    }
}

}  // namespace mox::cuda

#include "ops/cuda_moe.h"
#include "quant/cuda/matvec.cuh"
#include "quant/cuda_matvec.h"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdlib>
#include <cstring>

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
            if (!((taken >> s) & 1u) && better(p[s], lane + s * kWarp, bp, bi)) bp = p[s], bi = lane + s * kWarp;
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

__device__ void route_row(const float* __restrict__ l, int n_expert, int k, bool renormalize, int32_t* ids_out,
                          float* w_out) {
    if (n_expert <= 8 * kWarp) route_row_slots<8>(l, n_expert, k, renormalize, ids_out, w_out);
    else route_row_slots<kRouterPerLane>(l, n_expert, k, renormalize, ids_out, w_out);
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
            const size_t off = static_cast<size_t>(e) * static_cast<size_t>(a.n_ff) * a.row_bytes;
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
            base_s[tid] = a.down + static_cast<size_t>(e) * static_cast<size_t>(a.n_embd) * a.row_bytes;
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
    if (n_expert < 2 || n_expert > 1024) fail("CUDA sparsemixer router: {} experts (supported: 2..1024)", n_expert);
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
                  const GateUpArgs& route) {
    check_stack(gate, "gate");
    check_stack(up, "up");
    if (gate.type != up.type || gate.n_in != up.n_in || gate.n_out != up.n_out ||
        gate.n_expert != up.n_expert)
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
    a.ids = ids;
    a.k = static_cast<int>(k);
    a.sh_gate = fused ? shared->gate->data : nullptr;
    a.sh_up = fused ? shared->up->data : nullptr;
    a.x = x;
    a.h = h;
    dispatch_type(gate.type, [&](auto tag) {
        launch_gate_up<decltype(tag)>(a, static_cast<int>(k) + (fused ? 1 : 0), stream);
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
        dispatch_type(sg.type, [&](auto tag) { launch_gate_up<decltype(tag)>(b, 1, stream); });
    }
}

}  // namespace

void moe_gate_up(const ops::Weight& gate, const ops::Weight& up, const int32_t* ids, int64_t k,
                 const float* x, float* h, StreamHandle stream, const MoeDecodeShared* shared) {
    gate_up_impl(gate, up, ids, k, x, h, stream, shared, GateUpArgs{});
}

void moe_route_gate_up(const float* logits, bool renormalize, int32_t* ids, float* weights,
                       const ops::Weight& gate, const ops::Weight& up, int64_t k, const float* x, float* h,
                       StreamHandle stream, const MoeDecodeShared* shared) {
    if (gate.n_expert < 1 || gate.n_expert > kWarp * kRouterPerLane || k < 1 || k > kMaxK ||
        k > gate.n_expert)
        fail("CUDA router: {} experts, top {} (supported: up to {} experts, k <= {})", gate.n_expert, k,
             kWarp * kRouterPerLane, kMaxK);
    GateUpArgs route{};
    route.logits = logits;
    route.renormalize = renormalize;
    route.ids_out = ids;
    route.weights_out = weights;
    gate_up_impl(gate, up, nullptr, k, x, h, stream, shared, route);
}

void moe_down(const ops::Weight& down, const int32_t* ids, const float* weights, int64_t k, const float* h,
              float* out, StreamHandle stream, const MoeDecodeShared* shared) {
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
                     .accumulate = false};
    dispatch_type(down.type, [&](auto tag) {
        launch_down<decltype(tag)>(a, static_cast<int>(k) + (fused ? 1 : 0), stream);
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
        dispatch_type(sd.type, [&](auto tag) { launch_down<decltype(tag)>(b, 1, stream); });
    }
}

}  // namespace mox::cuda

#include "ops/cuda_moe.h"
#include "quant/cuda/matvec.cuh"
#include "quant/cuda_matvec.h"

#include <algorithm>
#include <cfloat>
#include <climits>

namespace mox::cuda {

namespace {

inline constexpr int kMaxK = 32;
inline constexpr int kRouterPerLane = 32;  // one warp per token: n_expert <= 1024

// (p, id) pairs: the better one has the larger p, ties go to the lower id.
__device__ __forceinline__ bool better(float pa, int ia, float pb, int ib) {
    return pa > pb || (pa == pb && ia < ib);
}

// One warp per token (no block-wide barriers: k rounds of a shuffle argmax). Lane l holds experts
// l, l + 32, l + 64, ... in registers.
__global__ void __launch_bounds__(kWarp)
    router_kernel(const float* __restrict__ logits, int n_expert, int k, bool renormalize,
                  int32_t* __restrict__ ids, float* __restrict__ weights) {
    __shared__ float chosen_p[kMaxK];
    const int lane = threadIdx.x;
    const float* l = logits + static_cast<int64_t>(blockIdx.x) * n_expert;
    float p[kRouterPerLane];
    float mx = -FLT_MAX;
#pragma unroll
    for (int s = 0; s < kRouterPerLane; ++s) {
        const int e = lane + s * kWarp;
        p[s] = e < n_expert ? l[e] : -FLT_MAX;
        mx = fmaxf(mx, p[s]);
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
    float sum = 0.0f;
#pragma unroll
    for (int s = 0; s < kRouterPerLane; ++s) {
        p[s] = lane + s * kWarp < n_expert ? expf(p[s] - mx) : 0.0f;
        sum += p[s];
    }
    sum = warp_sum(sum);
    const float inv = 1.0f / sum;
    uint32_t taken = 0;  // bit s: expert lane + 32 s is chosen (or does not exist)
#pragma unroll
    for (int s = 0; s < kRouterPerLane; ++s) {
        p[s] *= inv;
        if (lane + s * kWarp >= n_expert) taken |= 1u << s;
    }
    for (int round = 0; round < k; ++round) {
        float bp = -1.0f;
        int bi = INT_MAX;
#pragma unroll
        for (int s = 0; s < kRouterPerLane; ++s)
            if (!((taken >> s) & 1u) && better(p[s], lane + s * kWarp, bp, bi))
                bp = p[s], bi = lane + s * kWarp;
        for (int o = 16; o > 0; o >>= 1) {
            const float op = __shfl_xor_sync(0xFFFFFFFFu, bp, o);
            const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
            if (better(op, oi, bp, bi)) bp = op, bi = oi;
        }
        if ((bi & (kWarp - 1)) == lane) taken |= 1u << (bi / kWarp);
        if (lane == 0) {
            chosen_p[round] = bp;
            ids[static_cast<int64_t>(blockIdx.x) * k + round] = bi;
        }
    }
    if (lane == 0) {
        float total = 0.0f;
        for (int i = 0; i < k; ++i) total += chosen_p[i];
        const float norm = renormalize ? 1.0f / fmaxf(total, 6.1035e-5f) : 1.0f;
        for (int i = 0; i < k; ++i) weights[static_cast<int64_t>(blockIdx.x) * k + i] = chosen_p[i] * norm;
    }
}

__device__ __forceinline__ int checked_expert(const int32_t* ids, int i, int64_t n_expert) {
    const int e = ids[i];
    if (e < 0 || e >= n_expert) __trap();  // a routing bug: surfaces as a launch error on the host
    return e;
}

// grid (blocks_x, k): block column i computes rows of expert ids[i]; each warp one row r at a time,
// gate and up rows sharing the staged x.
template <class T>
__global__ void __launch_bounds__(kThreads)
    gate_up_kernel(const uint8_t* __restrict__ gate, const uint8_t* __restrict__ up, size_t row_bytes,
                   int64_t n_embd, int64_t n_ff, int64_t n_expert, const int32_t* __restrict__ ids,
                   const float* __restrict__ x, float* __restrict__ h) {
    extern __shared__ float4 smem[];
    __shared__ float tbl[16];
    float* xs = reinterpret_cast<float*>(smem);
    const int64_t n_segs = n_segments<T>(n_embd);
    stage_table<T>(tbl);
    stage_x<T>(xs, x, n_embd, n_segs);
    __syncthreads();
    const int i = blockIdx.y;
    const int64_t e = checked_expert(ids, i, n_expert);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t warps_total = static_cast<int64_t>(gridDim.x) * (kThreads / kWarp);
    for (int64_t r = static_cast<int64_t>(blockIdx.x) * (kThreads / kWarp) + warp; r < n_ff;
         r += warps_total) {
        const size_t off = static_cast<size_t>(e * n_ff + r) * row_bytes;
        const uint8_t* rows[2] = {gate + off, up + off};
        float acc[2][1] = {};
        warp_dot<T, 2, 1>(rows, xs, 0, n_embd, n_segs, tbl, acc);
        const float g = warp_sum(acc[0][0]), u = warp_sum(acc[1][0]);
        if (lane == 0) h[i * n_ff + r] = g / (1.0f + expf(-g)) * u;
    }
}

// Each group of L lanes owns kRows output rows and loops over the k experts, so the weighted sum over
// experts happens in registers: out[r] = sum_i w_i * dot(down_e[r], h_i). Down rows are short
// (n_ff = 512: 16 segments), so L = 16 keeps every lane busy there.
template <class T, int L>
__global__ void __launch_bounds__(kThreads)
    down_kernel(const uint8_t* __restrict__ down, size_t row_bytes, int64_t n_ff, int64_t n_embd,
                int64_t n_expert, const int32_t* __restrict__ ids, const float* __restrict__ weights, int k,
                const float* __restrict__ h, float* __restrict__ out) {
    extern __shared__ float4 smem[];
    __shared__ float tbl[16];
    __shared__ int e_s[kMaxK];
    __shared__ float w_s[kMaxK];
    float* xs = reinterpret_cast<float*>(smem);
    const int64_t n_segs = n_segments<T>(n_ff);
    const int64_t xs_stride = n_units(n_segs) * 256;
    stage_table<T>(tbl);
    for (int i = 0; i < k; ++i) stage_x<T>(xs + i * xs_stride, h + i * n_ff, n_ff, n_segs);
    if (static_cast<int>(threadIdx.x) < k) {
        e_s[threadIdx.x] = checked_expert(ids, threadIdx.x, n_expert);
        w_s[threadIdx.x] = weights[threadIdx.x];
    }
    __syncthreads();
    constexpr int kGroups = kWarp / L;          // row groups per warp
    constexpr int kWarpRows = kGroups * kRows;  // rows per warp and step
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t warps_total = static_cast<int64_t>(gridDim.x) * (kThreads / kWarp);
    // The loop runs per warp (not per group) so that every lane reaches the shuffles in warp_sum.
    for (int64_t rw = (static_cast<int64_t>(blockIdx.x) * (kThreads / kWarp) + warp) * kWarpRows; rw < n_embd;
         rw += warps_total * kWarpRows) {
        const int64_t r0 = rw + (lane / L) * kRows;
        float tot[kRows] = {};
        for (int i = 0; i < k; ++i) {
            const uint8_t* base = down + static_cast<size_t>(e_s[i] * n_embd) * row_bytes;
            const uint8_t* rows[kRows];
#pragma unroll
            for (int r = 0; r < kRows; ++r)
                rows[r] = base + static_cast<size_t>(min(r0 + r, n_embd - 1)) * row_bytes;
            float acc[kRows][1] = {};
            warp_dot<T, kRows, 1, L>(rows, xs + i * xs_stride, 0, n_ff, n_segs, tbl, acc);
#pragma unroll
            for (int r = 0; r < kRows; ++r) tot[r] = fmaf(w_s[i], acc[r][0], tot[r]);
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const float v = warp_sum<L>(tot[r]);
            if (lane % L == 0 && r0 + r < n_embd) out[r0 + r] = v;
        }
    }
}

template <class T, int L>
void launch_down(const ops::Weight& down, const int32_t* ids, const float* weights, int64_t k, const float* h,
                 float* out, StreamHandle stream) {
    const auto kernel = down_kernel<T, L>;
    const size_t smem = static_cast<size_t>(k * n_units(n_segments<T>(down.n_in)) * 256) * sizeof(float);
    prepare_smem(reinterpret_cast<const void*>(kernel), smem, "MoE down");
    const int64_t rows_per_block = (kThreads / L) * kRows;
    const int blocks = grid_blocks(reinterpret_cast<const void*>(kernel), smem,
                                   (down.n_out + rows_per_block - 1) / rows_per_block);
    kernel<<<blocks, kThreads, smem, stream>>>(down.data, down.row_bytes, down.n_in, down.n_out,
                                               down.n_expert, ids, weights, static_cast<int>(k), h, out);
    MOX_CUDA_CHECK_LAUNCH("down_kernel");
}

void check_stack(const ops::Weight& w, const char* name) {
    MOX_CHECK(w.valid(), "MoE {} weight is empty", name);
    if (!matvec_supported(w.type))
        fail("CUDA MoE: no kernel for {} weights of type {}", name, quant::type_name(w.type));
    MOX_CHECK(w.row_bytes == quant::row_bytes(w.type, w.n_in), "MoE {} row_bytes {}", name, w.row_bytes);
}

}  // namespace

void route_softmax_topk(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k, bool renormalize,
                        int32_t* ids, float* weights, StreamHandle stream) {
    if (n_expert < 1 || n_expert > kWarp * kRouterPerLane || k < 1 || k > kMaxK || k > n_expert)
        fail("CUDA router: {} experts, top {} (supported: up to {} experts, k <= {})", n_expert, k,
             kWarp * kRouterPerLane, kMaxK);
    if (n_tokens == 0) return;
    router_kernel<<<static_cast<unsigned>(n_tokens), kWarp, 0, stream>>>(
        logits, static_cast<int>(n_expert), static_cast<int>(k), renormalize, ids, weights);
    MOX_CUDA_CHECK_LAUNCH("router_kernel");
}

void moe_gate_up(const ops::Weight& gate, const ops::Weight& up, const int32_t* ids, int64_t k,
                 const float* x, float* h, StreamHandle stream) {
    check_stack(gate, "gate");
    check_stack(up, "up");
    if (gate.type != up.type || gate.n_in != up.n_in || gate.n_out != up.n_out ||
        gate.n_expert != up.n_expert)
        fail("CUDA MoE: gate ({}, {}x{}) and up ({}, {}x{}) stacks differ", quant::type_name(gate.type),
             gate.n_out, gate.n_in, quant::type_name(up.type), up.n_out, up.n_in);
    MOX_CHECK(k >= 1 && k <= kMaxK, "MoE k {}", k);
    dispatch_type(gate.type, [&](auto tag) {
        using T = decltype(tag);
        const auto kernel = gate_up_kernel<T>;
        const size_t smem = static_cast<size_t>(n_units(n_segments<T>(gate.n_in)) * 256) * sizeof(float);
        prepare_smem(reinterpret_cast<const void*>(kernel), smem, "MoE gate/up");
        const int64_t per_expert = (gate.n_out + kThreads / kWarp - 1) / (kThreads / kWarp);
        const int total = grid_blocks(reinterpret_cast<const void*>(kernel), smem, per_expert * k);
        const unsigned bx = static_cast<unsigned>(std::max<int64_t>(1, (total + k - 1) / k));
        kernel<<<dim3(bx, static_cast<unsigned>(k)), kThreads, smem, stream>>>(
            gate.data, up.data, gate.row_bytes, gate.n_in, gate.n_out, gate.n_expert, ids, x, h);
        MOX_CUDA_CHECK_LAUNCH("gate_up_kernel");
    });
}

void moe_down(const ops::Weight& down, const int32_t* ids, const float* weights, int64_t k, const float* h,
              float* out, StreamHandle stream) {
    check_stack(down, "down");
    MOX_CHECK(k >= 1 && k <= kMaxK, "MoE k {}", k);
    dispatch_type(down.type, [&](auto tag) {
        using T = decltype(tag);
        if (n_segments<T>(down.n_in) <= 16)
            launch_down<T, 16>(down, ids, weights, k, h, out, stream);
        else
            launch_down<T, 32>(down, ids, weights, k, h, out, stream);
    });
}

}  // namespace mox::cuda

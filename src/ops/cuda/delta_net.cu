// Gated DeltaNet kernels (ops/cuda_delta_net.h): the causal conv + SiLU, and the gated delta rule
// with its gated RMSNorm, token-sequential over the block of tokens of one call.
//
// delta_net design: one thread block per value head, so the whole head's state S_h [dv][dk] lives
// in registers for all tokens of the call (read once, written once) and the gated RMSNorm, which
// needs the whole dv row of o, is a block reduction. Each warp owns CPW consecutive v columns; a
// column j of S (dk contiguous floats) is spread over the 32 lanes, lane l holding elements
// l, l + 32, ... (R = ceil(dk / 32) of them), so u = S^T k and o = S^T q are warp sums. Columns
// are independent in the recurrence; only the norm couples them. Each warp L2-normalises q and k
// itself (a warp sum over dk, cheaper than a block barrier), and the next token's inputs are
// loaded before the current token is computed so global latency overlaps the reductions.
#include "core/error.h"
#include "ops/cuda_delta_net.h"
#include "quant/cuda/check.cuh"
#include "quant/cuda/matvec.cuh"

#include <cmath>

namespace mox::cuda {

namespace {

inline constexpr int kMaxConvKernel = 8;
inline constexpr int kConvThreads = 256;
inline constexpr int kMaxWarps = 16;  // 512 threads: up to 128 registers per thread
inline constexpr int kMaxHeadDim = 128;

__device__ __forceinline__ float silu_f(float x) {
    return x / (1.0f + expf(-x));
}

// One thread per channel, walking its channel through the tokens with the kernel-1 previous inputs
// in registers (window[0] oldest). Taps are predicated on `kernel` so indices stay compile-time.
__global__ void __launch_bounds__(kConvThreads)
    conv_silu_kernel(float* __restrict__ state, const float* __restrict__ weight, const float* __restrict__ x,
                     int64_t x_stride, int64_t n_tokens, int64_t channels, int kernel,
                     float* __restrict__ out) {
    const int64_t c = static_cast<int64_t>(blockIdx.x) * kConvThreads + threadIdx.x;
    if (c >= channels) return;
    float window[kMaxConvKernel - 1];
    float w[kMaxConvKernel];
#pragma unroll
    for (int j = 0; j < kMaxConvKernel - 1; ++j) window[j] = j < kernel - 1 ? state[j * channels + c] : 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxConvKernel; ++j) w[j] = j < kernel ? weight[c * kernel + j] : 0.0f;
    float w_last = 0.0f;  // the tap on the current input: w[kernel - 1]
#pragma unroll
    for (int j = 0; j < kMaxConvKernel; ++j)
        if (j == kernel - 1) w_last = w[j];
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float xc = x[t * x_stride + c];
        float sum = w_last * xc;
#pragma unroll
        for (int j = 0; j < kMaxConvKernel - 1; ++j)
            if (j < kernel - 1) sum += w[j] * window[j];
        out[t * channels + c] = silu_f(sum);
        // Shift: window[j] <- window[j + 1], the newest slot (kernel - 2) <- xc.
#pragma unroll
        for (int j = 0; j < kMaxConvKernel - 1; ++j) {
            if (j + 1 < kernel - 1)
                window[j] = window[j + 1];
            else if (j == kernel - 2)
                window[j] = xc;
        }
    }
#pragma unroll
    for (int j = 0; j < kMaxConvKernel - 1; ++j)
        if (j < kernel - 1) state[j * channels + c] = window[j];
}

struct DnArgs {
    float* S;              // [Hv][dv][dk]
    const float* conv;     // [n_tokens][C], C = 2 Hk dk + Hv dv
    const float* b;        // [n_tokens][Hv]
    const float* alpha;    // [n_tokens][Hv]
    const float* z;        // [n_tokens][Hv dv]
    const float* a;        // [Hv]
    const float* dt_bias;  // [Hv]
    const float* norm;     // [dv]
    float* out;            // [n_tokens][Hv dv]
    int n_k_heads, n_v_heads, dk, dv;
    float eps, q_scale;
    int64_t n_tokens;
};

// One token's inputs as one lane of one warp sees them.
template <int R, int CPW>
struct TokenIn {
    float q[R], k[R];  // elements lane + 32 r of the q and k heads (0 past dk)
    float v, z;        // lane c < CPW: of the warp's column j0 + c (v is shuffled to all lanes)
    float b, alpha;
};

template <int R, int CPW>
__device__ __forceinline__ void load_token(const DnArgs& p, int64_t t, int h, int j0, int lane,
                                           TokenIn<R, CPW>& in) {
    const int64_t C = 2 * static_cast<int64_t>(p.n_k_heads) * p.dk + static_cast<int64_t>(p.n_v_heads) * p.dv;
    const int kh = h % p.n_k_heads;
    const float* row = p.conv + t * C;
    const float* q = row + static_cast<int64_t>(kh) * p.dk;
    const float* k = row + static_cast<int64_t>(p.n_k_heads + kh) * p.dk;
    const float* v = row + 2 * static_cast<int64_t>(p.n_k_heads) * p.dk + static_cast<int64_t>(h) * p.dv;
    const float* z = p.z + t * p.n_v_heads * static_cast<int64_t>(p.dv) + static_cast<int64_t>(h) * p.dv;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int i = lane + r * kWarp;
        in.q[r] = i < p.dk ? q[i] : 0.0f;
        in.k[r] = i < p.dk ? k[i] : 0.0f;
    }
    const int j = j0 + lane;
    const bool mine = lane < CPW && j < p.dv;
    in.v = mine ? v[j] : 0.0f;
    in.z = mine ? z[j] : 0.0f;
    in.b = p.b[t * p.n_v_heads + h];
    in.alpha = p.alpha[t * p.n_v_heads + h];
}

// grid: Hv blocks; block: kWarp * ceil(dv / CPW) threads (at most kMaxWarps warps); dk <= 32 R.
template <int R, int CPW>
__global__ void __launch_bounds__(kWarp* kMaxWarps) delta_net_kernel(DnArgs p) {
    __shared__ float red[2][kMaxWarps];  // per-warp sums of o^2, double-buffered by token parity
    const int h = blockIdx.x;
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
    const int j0 = warp * CPW;
    float* S = p.S + static_cast<int64_t>(h) * p.dv * p.dk;

    float s[CPW][R];  // S[j0 + c][lane + 32 r]
#pragma unroll
    for (int c = 0; c < CPW; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int j = j0 + c, i = lane + r * kWarp;
            s[c][r] = j < p.dv && i < p.dk ? S[static_cast<int64_t>(j) * p.dk + i] : 0.0f;
        }
    // Lane c < CPW writes column j0 + c of the output: it keeps that column's gated-norm weight.
    const float nw = lane < CPW && j0 + lane < p.dv ? p.norm[j0 + lane] : 0.0f;
    const float a_h = p.a[h], dt_h = p.dt_bias[h];

    TokenIn<R, CPW> cur, next{};
    load_token<R, CPW>(p, 0, h, j0, lane, cur);
    for (int64_t t = 0; t < p.n_tokens; ++t) {
        if (t + 1 < p.n_tokens) load_token<R, CPW>(p, t + 1, h, j0, lane, next);

        // L2 norms of q and k (clamped at eps, as ops::l2_norm), q also scaled by 1/sqrt(dk). The
        // scales multiply the warp sums below instead of q and k first, so these two reductions
        // overlap the first column reductions instead of preceding them.
        float qq = 0.0f, kk = 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            qq += cur.q[r] * cur.q[r];
            kk += cur.k[r] * cur.k[r];
        }
        const float beta = 1.0f / (1.0f + expf(-cur.b));
        const float sp_in = cur.alpha + dt_h;
        const float decay = expf(a_h * (sp_in > 20.0f ? sp_in : log1pf(expf(sp_in))));

        // Per column: decay, u = S^T k, delta-rule update, o = S^T q (after the update).
        float u[CPW];
#pragma unroll
        for (int c = 0; c < CPW; ++c) {
            float acc = 0.0f;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                s[c][r] *= decay;
                acc += s[c][r] * cur.k[r];
            }
            u[c] = acc;
        }
        qq = warp_sum(qq);
        kk = warp_sum(kk);
#pragma unroll
        for (int c = 0; c < CPW; ++c) u[c] = warp_sum(u[c]);
        const float qs = p.q_scale / fmaxf(sqrtf(qq), p.eps), ks = 1.0f / fmaxf(sqrtf(kk), p.eps);
        float k[R];
#pragma unroll
        for (int r = 0; r < R; ++r) k[r] = cur.k[r] * ks;
        float o[CPW];
#pragma unroll
        for (int c = 0; c < CPW; ++c) {
            const float delta = beta * (__shfl_sync(0xFFFFFFFFu, cur.v, c) - u[c] * ks);
            float acc = 0.0f;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                s[c][r] += k[r] * delta;
                acc += s[c][r] * cur.q[r];
            }
            o[c] = acc;
        }
        float oo = 0.0f;
#pragma unroll
        for (int c = 0; c < CPW; ++c) {
            o[c] = warp_sum(o[c]) * qs;  // columns past dv have S = 0, so o = 0 there
            oo += o[c] * o[c];
        }

        // Gated RMSNorm over the head's dv outputs. One barrier per token: a warp can only rewrite
        // red[t & 1] at token t + 2, after every warp has passed token t + 1's barrier, i.e. after
        // every warp finished reading token t's sums.
        const int buf = static_cast<int>(t & 1);
        if (lane == 0) red[buf][warp] = oo;
        __syncthreads();
        float total = 0.0f;
        for (int w = 0; w < n_warps; ++w) total += red[buf][w];
        const float scale = rsqrtf(total / static_cast<float>(p.dv) + p.eps);
        float* out = p.out + t * p.n_v_heads * static_cast<int64_t>(p.dv) + static_cast<int64_t>(h) * p.dv;
        float oc = 0.0f;  // o of column j0 + lane
#pragma unroll
        for (int c = 0; c < CPW; ++c)
            if (lane == c) oc = o[c];
        if (lane < CPW && j0 + lane < p.dv) out[j0 + lane] = oc * scale * nw * silu_f(cur.z);
        cur = next;
    }

#pragma unroll
    for (int c = 0; c < CPW; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int j = j0 + c, i = lane + r * kWarp;
            if (j < p.dv && i < p.dk) S[static_cast<int64_t>(j) * p.dk + i] = s[c][r];
        }
}

template <int R, int CPW>
void launch_delta_net(const DnArgs& p, StreamHandle stream) {
    const int warps = (p.dv + CPW - 1) / CPW;
    delta_net_kernel<R, CPW><<<p.n_v_heads, warps * kWarp, 0, stream>>>(p);
    MOX_CUDA_CHECK_LAUNCH("delta_net_kernel");
}

template <int R>
void launch_delta_net_r(const DnArgs& p, StreamHandle stream) {
    // Columns per warp: the fewest that keep the block within kMaxWarps warps (dv 128: 8 columns
    // in 16 warps, the state slice 8 x 4 floats per lane).
    if (p.dv <= kMaxWarps) return launch_delta_net<R, 1>(p, stream);
    if (p.dv <= kMaxWarps * 2) return launch_delta_net<R, 2>(p, stream);
    if (p.dv <= kMaxWarps * 4) return launch_delta_net<R, 4>(p, stream);
    launch_delta_net<R, 8>(p, stream);
}

}  // namespace

void conv_silu(float* state, const float* weight, const float* x, int64_t x_stride, int64_t n_tokens,
               int64_t channels, int64_t kernel, float* out, StreamHandle stream) {
    if (kernel < 1 || kernel > kMaxConvKernel)
        fail("conv_silu: kernel {} not in [1, {}]", kernel, kMaxConvKernel);
    if (n_tokens > 1 && x_stride < channels) fail("conv_silu: x_stride {} < channels {}", x_stride, channels);
    if (n_tokens <= 0 || channels <= 0) return;
    const auto blocks = static_cast<unsigned>((channels + kConvThreads - 1) / kConvThreads);
    conv_silu_kernel<<<blocks, kConvThreads, 0, stream>>>(state, weight, x, x_stride, n_tokens, channels,
                                                          static_cast<int>(kernel), out);
    MOX_CUDA_CHECK_LAUNCH("conv_silu_kernel");
}

void delta_net(float* S, const float* conv, const float* b, const float* alpha, const float* z,
               const DeltaNetWeights& w, const DeltaNetShape& shape, int64_t n_tokens, float* out,
               StreamHandle stream) {
    const int64_t Hk = shape.n_k_heads, Hv = shape.n_v_heads, dk = shape.dk, dv = shape.dv;
    if (Hk <= 0 || Hv <= 0 || Hv % Hk != 0)
        fail("delta_net: value heads {} not a positive multiple of key heads {}", Hv, Hk);
    // The state slice of a head lives in registers: dk and dv up to 128 (every Qwen3-Next/3.5 size).
    if (dk <= 0 || dk > kMaxHeadDim || dv <= 0 || dv > kMaxHeadDim)
        fail("delta_net: head dims dk {} / dv {} not in [1, {}]", dk, dv, kMaxHeadDim);
    if (Hv > 65535) fail("delta_net: {} value heads", Hv);
    if (n_tokens <= 0) return;
    const DnArgs p{.S = S,
                   .conv = conv,
                   .b = b,
                   .alpha = alpha,
                   .z = z,
                   .a = w.a,
                   .dt_bias = w.dt_bias,
                   .norm = w.norm,
                   .out = out,
                   .n_k_heads = static_cast<int>(Hk),
                   .n_v_heads = static_cast<int>(Hv),
                   .dk = static_cast<int>(dk),
                   .dv = static_cast<int>(dv),
                   .eps = shape.eps,
                   .q_scale = 1.0f / std::sqrt(static_cast<float>(dk)),
                   .n_tokens = n_tokens};
    if (dk <= kWarp) return launch_delta_net_r<1>(p, stream);
    if (dk <= 2 * kWarp) return launch_delta_net_r<2>(p, stream);
    launch_delta_net_r<4>(p, stream);
}

}  // namespace mox::cuda

// Gated DeltaNet kernels (ops/cuda_delta_net.h): the causal conv + SiLU, and the gated delta rule
// with its gated RMSNorm, token-sequential or chunked.
//
// conv_silu: one thread per (channel, run of kConvTokens tokens), so a prefill spreads over
// channels x tokens; the thread of the first run alone reads and rewrites the conv state.
//
// Sequential delta rule: a cluster of ceil(dv / 16) thread blocks per value head, each block owning
// 16 v columns (8 warps x 2 columns), so decode streams the 4 MiB of state with 256 blocks instead
// of 32. The state slice lives in registers for all tokens of the call (read once, written once).
// A column j of S (dk contiguous floats) is spread over the 32 lanes, lane l holding elements
// l, l + 32, ... (R = ceil(dk / 32) of them), so u = S^T k and o = S^T q are warp sums; every warp
// L2-normalises q and k itself (warp sums over dk). The gated RMSNorm needs all dv outputs of the
// head: per token each warp puts its sum of o^2 in shared memory, one cluster barrier, and every
// block sums the cluster's partials through distributed shared memory in the same order.
//
// Chunked delta rule (spec §3a, ops::delta_rule_chunked), chunks of 64 tokens, in two kernels. What
// does not depend on the state is prepared for all chunks at once, one block per (chunk, value head):
// A = K K^T, B = Q K^T (tensor cores), gamma, L = beta A e^(dgamma) (s < t), T = (I + L)^-1 (the WY
// factor, by forward substitution on the identity), B masked and decayed; a record per (chunk, head)
// in the workspace. Then one block per (value head, 32 v columns) walks the chunks in order with the
// state slice St [dk][32] in shared memory: X = K St, Y = Q St, R = beta (V - e^gamma X), V' = T R,
// O = e^gamma Y + B V', St <- e^gamma_last St + (e^(gamma_last - gamma) K)^T V', all products on
// tensor cores, so the walk's dependent chain per chunk is three short products instead of
// products, decays and a 64-row solve. The products use split tf32 (x = hi + lo, hi*hi + hi*lo +
// lo*hi), which keeps about 21 mantissa bits. A small third kernel applies the gated RMSNorm.
#include "core/error.h"
#include "ops/cuda_delta_net.h"
#include "quant/cuda/check.cuh"
#include "quant/cuda/matvec.cuh"

#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace mox::cuda {

namespace {

namespace cg = cooperative_groups;

inline constexpr int kMaxConvKernel = 8;
inline constexpr int kConvThreads = 128;
inline constexpr int kConvTokens = 8;  // tokens per conv thread
static_assert(kConvTokens >= kMaxConvKernel - 1, "only the first token run may reach into the conv state");
inline constexpr int kMaxHeadDim = 128;

__device__ __forceinline__ float silu_f(float x) {
    return x / (1.0f + expf(-x));
}

// grid (ceil(channels / kConvThreads), ceil(n_tokens / kConvTokens)). Thread (c, run) computes
// tokens [run * kConvTokens, +kConvTokens) of channel c; its window starts with the kernel-1 inputs
// before the run (from x, or from the state for run 0). Only run 0 reads the state, and it writes
// the new state (the last kernel-1 inputs of [state, x]) after all its reads of it, so no thread
// races with it (x and out are never the state). Taps are predicated on `kernel` so register indices stay
// compile-time.
__global__ void __launch_bounds__(kConvThreads)
    conv_silu_kernel(float* __restrict__ state, const float* __restrict__ weight, const float* __restrict__ x,
                     int64_t x_stride, int64_t n_tokens, int64_t channels, int kernel,
                     float* __restrict__ out) {
    const int64_t c = static_cast<int64_t>(blockIdx.x) * kConvThreads + threadIdx.x;
    if (c >= channels) return;  // no barriers below
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kConvTokens;
    const int64_t t1 = t0 + kConvTokens < n_tokens ? t0 + kConvTokens : n_tokens;
    // Input at position pos (< 0: before x[0], i.e. state row pos + kernel - 1).
    auto input = [&](int64_t pos) {
        return pos < 0 ? state[(pos + kernel - 1) * channels + c] : x[pos * x_stride + c];
    };
    float w[kMaxConvKernel];
#pragma unroll
    for (int j = 0; j < kMaxConvKernel; ++j) w[j] = j < kernel ? weight[c * kernel + j] : 0.0f;
    float window[kMaxConvKernel - 1];  // window[j]: input at position t - (kernel - 1) + j
#pragma unroll
    for (int j = 0; j < kMaxConvKernel - 1; ++j)
        window[j] = j < kernel - 1 ? input(t0 - (kernel - 1) + j) : 0.0f;
    float w_last = 0.0f;  // the tap on the current input: w[kernel - 1]
#pragma unroll
    for (int j = 0; j < kMaxConvKernel; ++j)
        if (j == kernel - 1) w_last = w[j];
    // The new state (run 0 only): all of it is read (and the window above) before any is written.
    if (blockIdx.y == 0) {
        float new_state[kMaxConvKernel - 1];
#pragma unroll
        for (int j = 0; j < kMaxConvKernel - 1; ++j)
            new_state[j] = j < kernel - 1 ? input(n_tokens - (kernel - 1) + j) : 0.0f;
#pragma unroll
        for (int j = 0; j < kMaxConvKernel - 1; ++j)
            if (j < kernel - 1) state[j * channels + c] = new_state[j];
    }
    for (int64_t t = t0; t < t1; ++t) {
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

__device__ __forceinline__ float gate_beta(float b) {
    return 1.0f / (1.0f + expf(-b));
}

// g = a * softplus(alpha + dt_bias) (<= 0), softplus the identity above 20 (spec §3a).
__device__ __forceinline__ float gate_log_decay(float a_h, float alpha, float dt_h) {
    const float sp_in = alpha + dt_h;
    return a_h * (sp_in > 20.0f ? sp_in : log1pf(expf(sp_in)));
}

// ---------------------------------------------------------------------------------------------
// Sequential form.

inline constexpr int kSeqWarps = 8;
inline constexpr int kSeqCpw = 2;                      // v columns per warp
inline constexpr int kSeqSlice = kSeqWarps * kSeqCpw;  // v columns per block
inline constexpr int kMaxCluster = 8;                  // portable cluster size limit
static_assert(kSeqSlice * kMaxCluster >= kMaxHeadDim, "a cluster must cover dv");

// One token's inputs as one lane of one warp sees them.
template <int R>
struct TokenIn {
    float q[R], k[R];  // elements lane + 32 r of the q and k heads (0 past dk)
    float v, z;        // lane c < kSeqCpw: of the warp's column j0 + c (v is shuffled to all lanes)
    float b, alpha;
};

template <int R>
__device__ __forceinline__ void load_token(const DnArgs& p, int64_t t, int h, int j0, int lane,
                                           TokenIn<R>& in) {
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
    const bool mine = lane < kSeqCpw && j < p.dv;
    in.v = mine ? v[j] : 0.0f;
    in.z = mine ? z[j] : 0.0f;
    in.b = p.b[t * p.n_v_heads + h];
    in.alpha = p.alpha[t * p.n_v_heads + h];
}

// grid (Hv, n_split), cluster (1, n_split, 1), block kWarp * kSeqWarps threads; block y owns v
// columns [y * kSeqSlice, +kSeqSlice) (columns past dv hold S = 0, v = 0, so o = 0 there);
// dk <= 32 R. Every thread runs every token and reaches every cluster barrier.
template <int R>
__global__ void __launch_bounds__(kWarp* kSeqWarps) delta_net_seq_kernel(DnArgs p) {
    __shared__ float red[2][kSeqWarps];  // per-warp sums of o^2, double-buffered by token parity
    cg::cluster_group cluster = cg::this_cluster();
    const unsigned n_ranks = cluster.num_blocks();
    const int h = blockIdx.x;
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int j0 = static_cast<int>(blockIdx.y) * kSeqSlice + warp * kSeqCpw;
    float* S = p.S + static_cast<int64_t>(h) * p.dv * p.dk;

    float s[kSeqCpw][R];  // S[j0 + c][lane + 32 r]
#pragma unroll
    for (int c = 0; c < kSeqCpw; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int j = j0 + c, i = lane + r * kWarp;
            s[c][r] = j < p.dv && i < p.dk ? S[static_cast<int64_t>(j) * p.dk + i] : 0.0f;
        }
    // Lane c < kSeqCpw writes column j0 + c of the output: it keeps that column's norm weight.
    const float nw = lane < kSeqCpw && j0 + lane < p.dv ? p.norm[j0 + lane] : 0.0f;
    const float a_h = p.a[h], dt_h = p.dt_bias[h];

    TokenIn<R> cur, next{};
    load_token<R>(p, 0, h, j0, lane, cur);
    for (int64_t t = 0; t < p.n_tokens; ++t) {
        if (t + 1 < p.n_tokens) load_token<R>(p, t + 1, h, j0, lane, next);

        // L2 norms of q and k (clamped at eps, as ops::l2_norm), q also scaled by 1/sqrt(dk). The
        // scales multiply the warp sums below instead of q and k first, so these two reductions
        // overlap the column reductions instead of preceding them.
        float qq = 0.0f, kk = 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            qq += cur.q[r] * cur.q[r];
            kk += cur.k[r] * cur.k[r];
        }
        const float beta = gate_beta(cur.b);
        const float decay = expf(gate_log_decay(a_h, cur.alpha, dt_h));

        // Per column: decay, u = S^T k, delta-rule update, o = S^T q (after the update).
        float u[kSeqCpw];
#pragma unroll
        for (int c = 0; c < kSeqCpw; ++c) {
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
        for (int c = 0; c < kSeqCpw; ++c) u[c] = warp_sum(u[c]);
        const float qs = p.q_scale / fmaxf(sqrtf(qq), p.eps), ks = 1.0f / fmaxf(sqrtf(kk), p.eps);
        float k[R];
#pragma unroll
        for (int r = 0; r < R; ++r) k[r] = cur.k[r] * ks;
        float o[kSeqCpw];
#pragma unroll
        for (int c = 0; c < kSeqCpw; ++c) {
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
        for (int c = 0; c < kSeqCpw; ++c) {
            o[c] = warp_sum(o[c]) * qs;
            oo += o[c] * o[c];
        }

        // Gated RMSNorm over the head's dv outputs, spread over the cluster's blocks. One cluster
        // barrier per token: a warp can only rewrite red[t & 1] at token t + 2, after every thread
        // of the cluster has passed token t + 1's barrier, i.e. finished reading token t's sums.
        const int buf = static_cast<int>(t & 1);
        if (lane == 0) red[buf][warp] = oo;
        cluster.sync();
        float total = 0.0f;  // same order in every block: same scale
        for (unsigned rank = 0; rank < n_ranks; ++rank) {
            const float* peer = cluster.map_shared_rank(&red[buf][0], rank);
#pragma unroll
            for (int w = 0; w < kSeqWarps; ++w) total += peer[w];
        }
        const float scale = rsqrtf(total / static_cast<float>(p.dv) + p.eps);
        float* out = p.out + t * p.n_v_heads * static_cast<int64_t>(p.dv) + static_cast<int64_t>(h) * p.dv;
        float oc = 0.0f;  // o of column j0 + lane
#pragma unroll
        for (int c = 0; c < kSeqCpw; ++c)
            if (lane == c) oc = o[c];
        if (lane < kSeqCpw && j0 + lane < p.dv) out[j0 + lane] = oc * scale * nw * silu_f(cur.z);
        cur = next;
    }

#pragma unroll
    for (int c = 0; c < kSeqCpw; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int j = j0 + c, i = lane + r * kWarp;
            if (j < p.dv && i < p.dk) S[static_cast<int64_t>(j) * p.dk + i] = s[c][r];
        }
    // Peers may still be reading this block's red[] for the last token: stay until they are done.
    cluster.sync();
}

template <int R>
void launch_delta_net_seq(const DnArgs& p, StreamHandle stream) {
    // Blocks per head: enough to cover dv, rounded up to a power of two (cluster sizes 1, 2, 4, 8;
    // blocks wholly past dv just take part in the barriers).
    int n_split = 1;
    while (n_split * kSeqSlice < p.dv) n_split *= 2;  // <= kMaxCluster as dv <= 128
    cudaLaunchAttribute cluster;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 1;
    cluster.val.clusterDim.y = static_cast<unsigned>(n_split);
    cluster.val.clusterDim.z = 1;
    const dim3 grid(static_cast<unsigned>(p.n_v_heads), static_cast<unsigned>(n_split), 1);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(kWarp * kSeqWarps);
    cfg.stream = stream;
    cfg.attrs = &cluster;
    cfg.numAttrs = 1;
    MOX_CUDA_CHECK(cudaLaunchKernelEx(&cfg, delta_net_seq_kernel<R>, p));
}

// ---------------------------------------------------------------------------------------------
// Chunked form.

inline constexpr int kChunk = 64;      // tokens per chunk (spec: 64)
inline constexpr int kChunkCols = 32;  // v columns per block of the state walk
inline constexpr int kChunkWarps = 8;
// `automatic` runs the chunked form from this many tokens: one chunk costs about as much as ~10
// sequential tokens (a cluster barrier and a dependent chain of warp sums per token).
inline constexpr int64_t kChunkMinTokens = 16;
inline constexpr int kChunkThreads = kChunkWarps * kWarp;
static_assert(kChunkCols == kWarp, "V rows are loaded one lane per column");
static_assert(kChunkWarps * 4 == kChunkCols, "the solve gives each warp 4 columns");
static_assert(kChunk == 64, "the solve keeps 8 rows per lane (64 = 8 lanes x 8)");
static_assert(kChunkWarps == (kChunk / 16) * (kChunkCols / 16), "the walk gives each warp one 16x16 tile");

// What the preparation leaves for one (chunk, value head), in floats: T = (I + L)^-1 [64][64], the
// masked and decayed Q K^T [64][64], then beta, e^gamma and e^(gamma_last - gamma) per row.
inline constexpr int kPrepT = 0;
inline constexpr int kPrepB = kPrepT + kChunk * kChunk;
inline constexpr int kPrepBeta = kPrepB + kChunk * kChunk;
inline constexpr int kPrepEg = kPrepBeta + kChunk;
inline constexpr int kPrepEd = kPrepEg + kChunk;
inline constexpr int kPrepFloats = kPrepEd + kChunk;
static_assert(kPrepFloats % 4 == 0, "float4 loads of every (chunk, head) record");

// Shared-memory layouts, in floats. Row strides: arrays read as A operands (rows of 16 x 8 tiles)
// are widths + 4, those read as B operands (rows k of 8 x 16 tiles) widths + 8, so the lanes of
// mma_steps' loads fall on distinct banks; every array and tile origin is a multiple of 8 floats.
template <int DK>
struct PrepSmem {
    static constexpr int ldk = DK + 4;      // Ks, Qs: [kChunk][ldk]
    static constexpr int ldc = kChunk + 4;  // As, Bs, and T staged over Qs: [kChunk][ldc]
    static constexpr int k_off = 0;
    static constexpr int q_off = k_off + kChunk * ldk;
    static constexpr int a_off = q_off + kChunk * ldk;
    static constexpr int b_off = a_off + kChunk * ldc;
    static constexpr int g_off = b_off + kChunk * ldc;  // g, then gamma (cumulative within the chunk)
    static constexpr int beta_off = g_off + kChunk;
    static constexpr int floats = beta_off + kChunk;
    static constexpr size_t bytes = static_cast<size_t>(floats) * sizeof(float);
    static_assert(q_off % 8 == 0 && a_off % 8 == 0 && b_off % 8 == 0 && g_off % 8 == 0,
                  "32-byte aligned arrays");
    static_assert(ldk >= ldc, "T fits over Qs");
    static_assert(2 * bytes + 2048 <= 228 * 1024, "two blocks per SM");
};

template <int DK>
struct WalkSmem {
    static constexpr int ldk = DK + 4;          // Ks, Qs: [kChunk][ldk]
    static constexpr int ldv = kChunkCols + 8;  // Ss [DK][ldv]; Vs, Xs, Ds [kChunk][ldv]
    static constexpr int ldc = kChunk + 4;      // Ts, Bs: [kChunk][ldc]
    static constexpr int k_off = 0;
    static constexpr int q_off = k_off + kChunk * ldk;
    static constexpr int s_off = q_off + kChunk * ldk;
    static constexpr int v_off = s_off + DK * ldv;
    static constexpr int x_off = v_off + kChunk * ldv;
    static constexpr int d_off = x_off + kChunk * ldv;
    static constexpr int t_off = d_off + kChunk * ldv;
    static constexpr int b_off = t_off + kChunk * ldc;
    static constexpr int beta_off = b_off + kChunk * ldc;
    static constexpr int eg_off = beta_off + kChunk;
    static constexpr int ed_off = eg_off + kChunk;
    static constexpr int floats = ed_off + kChunk;
    static constexpr size_t bytes = static_cast<size_t>(floats) * sizeof(float);
    static_assert(q_off % 8 == 0 && s_off % 8 == 0 && v_off % 8 == 0 && x_off % 8 == 0 && d_off % 8 == 0 &&
                      t_off % 8 == 0 && b_off % 8 == 0 && beta_off % 8 == 0 && eg_off % 8 == 0 &&
                      ed_off % 8 == 0,
                  "32-byte aligned arrays");
    static_assert(ldk % 32 == 4 && ldc % 32 == 4 && ldv % 32 == 8, "bank-spread strides");
    static_assert(bytes <= 227 * 1024, "Hopper's shared memory per block");
};

// Split-tf32 products on the tensor cores: mma.sync m16n8k8 with operands read from shared memory
// (the wmma API's fragment loads compiled to generic 64-bit loads, and its tf32 rounding, like
// cvt.rna.tf32 on sm_90, to a four-instruction software sequence per element).
// Lane l, g = l / 4, c = l % 4 holds A (16 x 8): a0 (g, c), a1 (g + 8, c), a2 (g, c + 4),
// a3 (g + 8, c + 4); B (8 x 8): b0 (c, g), b1 (c + 4, g); C (16 x 8): (g, 2c), (g, 2c + 1),
// (g + 8, 2c), (g + 8, 2c + 1).
//
// x = hi + lo exactly, hi truncated to tf32's 10 mantissa bits; the tensor cores read only the top
// 19 bits of an operand, so lo loses its low bits there: hi*hi + hi*lo + lo*hi keeps ~21 bits of x.
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
    hi = __float_as_uint(x) & 0xFFFFE000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A 16 x 16 fp32 tile as a warp holds it: two m16n8 accumulators; element e of half h of lane
// (g, c) is row g + 8 (e / 2), column 8 h + 2 c + e % 2 (tile_row / tile_col).
struct Tile {
    float c[2][4];

    __device__ __forceinline__ void fill(float v) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 4; ++e) c[h][e] = v;
    }
    __device__ __forceinline__ void add(const Tile& o) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 4; ++e) c[h][e] += o.c[h][e];
    }
    __device__ __forceinline__ void scale(float s) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 4; ++e) c[h][e] *= s;
    }
};

__device__ __forceinline__ int tile_row(int lane, int e) {
    return lane / 4 + 8 * (e / 2);
}
__device__ __forceinline__ int tile_col(int lane, int h, int e) {
    return 8 * h + 2 * (lane % 4) + e % 2;
}

template <int NA, int NB>
__device__ __forceinline__ void zero_tiles(Tile (&t)[NA][NB]) {
#pragma unroll
    for (int ia = 0; ia < NA; ++ia)
#pragma unroll
        for (int ib = 0; ib < NB; ++ib) t[ia][ib].fill(0.0f);
}

// Row-major 16 x 16 tile at sm + off (ld LD) to / from registers (pairs of columns: 8-byte accesses).
template <int LD>
__device__ __forceinline__ void store_tile(float* sm, int off, const Tile& t, int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 4; e += 2)
            *reinterpret_cast<float2*>(sm + off + tile_row(lane, e) * LD + tile_col(lane, h, e)) =
                make_float2(t.c[h][e], t.c[h][e + 1]);
}
template <int LD>
__device__ __forceinline__ void load_tile(const float* sm, int off, Tile& t, int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
            const float2 v =
                *reinterpret_cast<const float2*>(sm + off + tile_row(lane, e) * LD + tile_col(lane, h, e));
            t.c[h][e] = v.x;
            t.c[h][e + 1] = v.y;
        }
}

// acc[ia][ib] += A_ia B_ib over `steps` k-steps of 8, in split tf32. Element (m, k) of A_ia is
// sm[a[ia] + m AM + k AK], element (k, n) of B_ib is sm[b[ib] + k BK + n BN] (m, n < 16). The cross
// products go to their own accumulators (independent chains of dependent mma), and each fragment
// loaded serves NA x NB tiles. Row strides AM or BN = 4 (mod 32) and BK = 8 (mod 32) keep the
// lanes' loads on distinct banks.
template <int AM, int AK, int BK, int BN, int NA, int NB>
__device__ __forceinline__ void mma_steps(Tile (&acc)[NA][NB], const float* sm, const int (&a)[NA],
                                          const int (&b)[NB], int steps, int lane) {
    const int g = lane / 4, c = lane % 4;
    Tile corr[NA][NB];
    zero_tiles(corr);
#pragma unroll 2
    for (int kk = 0; kk < steps; ++kk) {
        const int k0 = 8 * kk;
        uint32_t a_hi[NA][4], a_lo[NA][4], b_hi[NB][2][2], b_lo[NB][2][2];
#pragma unroll
        for (int ia = 0; ia < NA; ++ia)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                split_tf32(sm[a[ia] + (g + 8 * (e % 2)) * AM + (k0 + c + 4 * (e / 2)) * AK], a_hi[ia][e],
                           a_lo[ia][e]);
            }
#pragma unroll
        for (int ib = 0; ib < NB; ++ib)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    split_tf32(sm[b[ib] + (k0 + c + 4 * r) * BK + (8 * h + g) * BN], b_hi[ib][h][r],
                               b_lo[ib][h][r]);
                }
#pragma unroll
        for (int ia = 0; ia < NA; ++ia)
#pragma unroll
            for (int ib = 0; ib < NB; ++ib)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    mma_tf32(corr[ia][ib].c[h], a_lo[ia], b_hi[ib][h]);
                    mma_tf32(corr[ia][ib].c[h], a_hi[ia], b_lo[ib][h]);
                    mma_tf32(acc[ia][ib].c[h], a_hi[ia], b_hi[ib][h]);
                }
    }
#pragma unroll
    for (int ia = 0; ia < NA; ++ia)
#pragma unroll
        for (int ib = 0; ib < NB; ++ib) acc[ia][ib].add(corr[ia][ib]);
}

// Rows [0, kChunk) of the chunk at token c0 (n of them real; rows t >= n are zeros): q and k
// L2-normalised into Qs / Ks (WalkSmem's ldk, the same as PrepSmem's), q also times q_scale and,
// when q_mul is given, q_mul[t]; with Vs given, row t's v columns [j0, j0 + 32) into Vs (WalkSmem's
// ldv). Warp w takes rows
// w, w + 8, ...; all its loads are issued before any is used.
template <int DK>
__device__ __forceinline__ void load_chunk_rows(const DnArgs& p, int h, int64_t c0, int n, const float* q_mul,
                                                float* Qs, float* Ks, float* Vs, int j0, int warp, int lane) {
    constexpr int R = DK / kWarp, kRows = kChunk / kChunkWarps, ldk = WalkSmem<DK>::ldk,
                  ldv = WalkSmem<DK>::ldv;
    static_assert(PrepSmem<DK>::ldk == ldk, "one row stride for the q and k rows of both kernels");
    const int kh = h % p.n_k_heads;
    const int64_t row_len =
        2 * static_cast<int64_t>(p.n_k_heads) * DK + static_cast<int64_t>(p.n_v_heads) * p.dv;
    float qv[kRows][R], kv[kRows][R], vv[kRows], mul[kRows];
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
        const int t = warp + m * kChunkWarps;
        if (t < n) {
            const float* row = p.conv + (c0 + t) * row_len;
            const float* q = row + static_cast<int64_t>(kh) * DK;
            const float* k = row + static_cast<int64_t>(p.n_k_heads + kh) * DK;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                qv[m][r] = q[lane + r * kWarp];
                kv[m][r] = k[lane + r * kWarp];
            }
            vv[m] = Vs != nullptr ? row[2 * static_cast<int64_t>(p.n_k_heads) * DK +
                                        static_cast<int64_t>(h) * p.dv + j0 + lane]
                                  : 0.0f;
            mul[m] = q_mul != nullptr ? q_mul[t] : 1.0f;
        } else {
#pragma unroll
            for (int r = 0; r < R; ++r) qv[m][r] = kv[m][r] = 0.0f;
            vv[m] = mul[m] = 0.0f;
        }
    }
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
        const int t = warp + m * kChunkWarps;
        float qq = 0.0f, kk = 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            qq += qv[m][r] * qv[m][r];
            kk += kv[m][r] * kv[m][r];
        }
        qq = warp_sum(qq);
        kk = warp_sum(kk);
        const float qs = p.q_scale / fmaxf(sqrtf(qq), p.eps) * mul[m], ks = 1.0f / fmaxf(sqrtf(kk), p.eps);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            Qs[t * ldk + lane + r * kWarp] = qv[m][r] * qs;
            Ks[t * ldk + lane + r * kWarp] = kv[m][r] * ks;
        }
        if (Vs != nullptr) Vs[t * ldv + lane] = vv[m];
    }
}

// (I + L) X = rhs(row, col) for kChunkCols columns by forward substitution, L strictly lower
// [kChunk][ldl], X into Xs [kChunk][ldx]. Warp w owns columns 4w..4w+3, 8 lanes per column:
// lane = 8 * (column - 4w) + part, and part p keeps X[p + 8m] in xp[m]. Rows go in blocks of 8: the
// terms from earlier blocks are independent per row (each lane sums its s = p + 8m, then a
// transposing butterfly leaves lane p with the full sum of row 8 blk + p: 7 shuffles for 8 rows);
// inside the block, row r is final once rows < r are subtracted, and is broadcast from lane r to
// the lanes of the later rows.
template <class Rhs>
__device__ __forceinline__ void solve_unit_lower(const float* Ls, int ldl, Rhs rhs, float* Xs, int ldx,
                                                 int warp, int lane) {
    const int col = warp * 4 + lane / 8, part = lane % 8, group = lane & ~7;
    float xp[kChunk / 8];
#pragma unroll
    for (int blk = 0; blk < kChunk / 8; ++blk) {
        const int row = 8 * blk + part;
        float x = 0.0f;
        if (blk > 0) {
            float sums[8];  // this lane's terms of rows 8 blk + r
#pragma unroll
            for (int r = 0; r < 8; ++r) {
                float acc = 0.0f;
#pragma unroll
                for (int m = 0; m < blk; ++m) acc += Ls[(8 * blk + r) * ldl + part + 8 * m] * xp[m];
                sums[r] = acc;
            }
            // Butterfly: at offset o, keep the half of the rows whose bit o matches this lane's
            // part, send the other half to the partner lane (part ^ o).
#pragma unroll
            for (int half = 4; half >= 1; half /= 2) {
                const bool upper = (part & half) != 0;
#pragma unroll
                for (int i = 0; i < half; ++i) {
                    const float send = upper ? sums[i] : sums[i + half];
                    const float keep = upper ? sums[i + half] : sums[i];
                    sums[i] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, half);
                }
            }
            x = sums[0];  // all terms s < 8 blk of row 8 blk + part
        }
        float val = rhs(row, col) - x;
#pragma unroll
        for (int r = 0; r < 8; ++r) {
            const float vr = __shfl_sync(0xFFFFFFFFu, val, group | r);  // row 8 blk + r, final
            if (part > r) val -= Ls[row * ldl + 8 * blk + r] * vr;
        }
        xp[blk] = val;
        Xs[row * ldx + col] = val;
    }
}

// Preparation, grid (n_chunks, Hv), kChunkThreads threads, PrepSmem<DK>::bytes of dynamic shared
// memory: what the chunked form needs that does not depend on the state, for every chunk at once.
// gamma = the cumulative g within the chunk; A = K K^T, B = Q K^T (lower tiles, tensor cores, split
// tf32); L = beta A e^(dgamma) (s < t); T = (I + L)^-1 by forward substitution on the identity (the
// WY factor: the walk's V' = T R is then a product instead of a dependent solve); the masked,
// decayed B. Written to ws at record (chunk * Hv + h) (kPrep* offsets).
template <int DK>
__global__ void __launch_bounds__(kChunkThreads, 2)
    delta_net_chunk_prep_kernel(DnArgs p, float* __restrict__ ws) {
    using L = PrepSmem<DK>;
    constexpr int ldk = L::ldk, ldc = L::ldc;
    extern __shared__ __align__(128) float sm[];
    float* Ks = sm + L::k_off;
    float* Qs = sm + L::q_off;
    float* As = sm + L::a_off;  // K K^T (lower tiles), then L
    float* Bs = sm + L::b_off;  // Q K^T (lower tiles)
    float* gs = sm + L::g_off;
    float* bs = sm + L::beta_off;
    float* Ts = Qs;  // T, staged over Qs once the products are done

    const int chunk = blockIdx.x, h = blockIdx.y;
    const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
    const int64_t c0 = static_cast<int64_t>(chunk) * kChunk;
    const int n = static_cast<int>(p.n_tokens - c0 < kChunk ? p.n_tokens - c0 : kChunk);
    float* rec = ws + (static_cast<int64_t>(chunk) * p.n_v_heads + h) * kPrepFloats;

    // 1. g and beta per row (rows t >= n: 0, so they add nothing and gamma stays gamma_{n-1}), and
    // the normalised q and k rows.
    if (tid < kChunk) {
        float g = 0.0f, beta = 0.0f;
        if (tid < n) {
            const int64_t gi = (c0 + tid) * p.n_v_heads + h;
            g = gate_log_decay(p.a[h], p.alpha[gi], p.dt_bias[h]);
            beta = gate_beta(p.b[gi]);
        }
        gs[tid] = g;
        bs[tid] = beta;
    }
    load_chunk_rows<DK>(p, h, c0, n, nullptr, Qs, Ks, nullptr, 0, warp, lane);
    __syncthreads();  // B1: rows, g, beta visible

    // 2. gamma (warp 0, inclusive scan: lane l owns rows 2l, 2l + 1) and its exponentials (arguments
    // <= 0) while all warps multiply: tasks 0..9, the lower 16x16 tiles (ti >= si) of K K^T and
    // Q K^T (one K^T fragment for both).
    if (warp == 0) {
        const float g0 = gs[2 * lane], g1 = gs[2 * lane + 1];
        float x = g0 + g1;
#pragma unroll
        for (int off = 1; off < kWarp; off <<= 1) {
            const float y = __shfl_up_sync(0xFFFFFFFFu, x, off);
            if (lane >= off) x += y;
        }
        float before = __shfl_up_sync(0xFFFFFFFFu, x, 1);
        if (lane == 0) before = 0.0f;
        const float last = __shfl_sync(0xFFFFFFFFu, x, kWarp - 1);  // gamma of row 63
        const float ga = before + g0;
        gs[2 * lane] = ga;
        gs[2 * lane + 1] = x;
        rec[kPrepBeta + 2 * lane] = bs[2 * lane];
        rec[kPrepBeta + 2 * lane + 1] = bs[2 * lane + 1];
        rec[kPrepEg + 2 * lane] = expf(ga);
        rec[kPrepEg + 2 * lane + 1] = expf(x);
        rec[kPrepEd + 2 * lane] = expf(last - ga);
        rec[kPrepEd + 2 * lane + 1] = expf(last - x);
    }
    for (int task = warp; task < 10; task += kChunkWarps) {
        const int ti = task >= 6 ? 3 : task >= 3 ? 2 : task >= 1 ? 1 : 0;
        const int si = task - ti * (ti + 1) / 2;
        Tile acc[2][1];
        zero_tiles(acc);
        const int lhs[2] = {L::k_off + ti * 16 * ldk, L::q_off + ti * 16 * ldk};
        // K^T: element (i, s) = Ks[s][i].
        const int rhs[1] = {L::k_off + si * 16 * ldk};
        mma_steps<ldk, 1, 1, ldk>(acc, sm, lhs, rhs, DK / 8, lane);
        store_tile<ldc>(sm, L::a_off + ti * 16 * ldc + si * 16, acc[0][0], lane);
        store_tile<ldc>(sm, L::b_off + ti * 16 * ldc + si * 16, acc[1][0], lane);
    }
    __syncthreads();  // B2: gamma, A, B visible; Qs free

    // 3. Decays (exp of gamma differences <= 0): L in place, the masked B straight to the record.
    for (int e = tid; e < kChunk * kChunk; e += kChunkThreads) {
        const int t = e / kChunk, s = e % kChunk;
        const float dec = s <= t ? expf(gs[t] - gs[s]) : 0.0f;
        As[t * ldc + s] = s < t ? bs[t] * As[t * ldc + s] * dec : 0.0f;
        rec[kPrepB + e] = s <= t ? Bs[t * ldc + s] * dec : 0.0f;
    }
    __syncthreads();  // B3: L visible

    // 4. T = (I + L)^-1, columns [0, 32) then [32, 64), into Ts.
#pragma unroll 1
    for (int half = 0; half < kChunk / kChunkCols; ++half) {
        const int c_base = half * kChunkCols;
        solve_unit_lower(
            As, ldc, [c_base](int row, int col) { return row == c_base + col ? 1.0f : 0.0f; }, Ts + c_base,
            ldc, warp, lane);
    }
    __syncthreads();  // B4: T visible

    // 5. T to the record.
    for (int e = tid; e < kChunk * kChunk / 4; e += kChunkThreads) {
        const int t = e / (kChunk / 4), c4 = e % (kChunk / 4);
        reinterpret_cast<float4*>(rec + kPrepT)[e] = *reinterpret_cast<const float4*>(Ts + t * ldc + 4 * c4);
    }
}

// The walk, grid (Hv, dv / kChunkCols), kChunkThreads threads, WalkSmem<DK>::bytes of dynamic shared
// memory: one block per (value head, 32 v columns) carries the state slice St [dk][32] through the
// chunks in order (St[i][j] = S[j0 + j][i]). Per chunk, with the preparation's T, masked B and
// gates: X = K St and Y = (e^gamma Q) St (tensor cores), R = beta (V - e^gamma X), V' = T R,
// O = Y + B V', St <- e^gamma_last St + K^T (e^(gamma_last - gamma) V'). Every product is split
// tf32; each warp owns one 16x16 tile of X, Y, R, V' and O (X, Y, O only in its registers), so only
// the full products need the block.
// Writes the raw read-out o (before the gated RMSNorm) to out. Barriers: every thread runs every
// chunk and reaches every __syncthreads (loops have block-uniform bounds).
template <int DK>
__global__ void __launch_bounds__(kChunkThreads, 1)
    delta_net_chunk_walk_kernel(DnArgs p, const float* __restrict__ ws) {
    using L = WalkSmem<DK>;
    constexpr int ldk = L::ldk, ldv = L::ldv, ldc = L::ldc;
    extern __shared__ __align__(128) float sm[];
    float* Ks = sm + L::k_off;  // k rows (normalised)
    float* Qs = sm + L::q_off;  // q rows (normalised, times e^gamma_t / sqrt(dk))
    float* Ss = sm + L::s_off;  // St
    float* Vs = sm + L::v_off;  // v rows of the block's columns, then R
    // sm + L::x_off: V'; sm + L::d_off: e^(gamma_last - gamma) V'
    float* Ts = sm + L::t_off;
    float* Bs = sm + L::b_off;
    float* bs = sm + L::beta_off;
    float* egs = sm + L::eg_off;
    float* eds = sm + L::ed_off;

    const int h = blockIdx.x, j0 = static_cast<int>(blockIdx.y) * kChunkCols;
    const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
    const int ti = warp / 2, tj = warp % 2;  // this warp's tile of the chunk's [64][32] products
    const int64_t inner = static_cast<int64_t>(p.n_v_heads) * p.dv;
    float* S = p.S + static_cast<int64_t>(h) * p.dv * DK;

    for (int e = tid; e < kChunkCols * DK; e += kChunkThreads) {
        const int j = e / DK, i = e % DK;
        Ss[i * ldv + j] = S[static_cast<int64_t>(j0 + j) * DK + i];
    }

    for (int64_t c0 = 0; c0 < p.n_tokens; c0 += kChunk) {
        const int n = static_cast<int>(p.n_tokens - c0 < kChunk ? p.n_tokens - c0 : kChunk);
        const float* rec = ws + (c0 / kChunk * p.n_v_heads + h) * kPrepFloats;

        // 1. The record (T and B: loads issued first, stored after the rows) and the rows. The next
        // chunk's writes here touch only arrays that B4 of this one released.
        constexpr int kVecs = 2 * kChunk * kChunk / 4 / kChunkThreads;  // float4 of T and B per thread
        static_assert(kPrepB == kPrepT + kChunk * kChunk, "T and B adjacent in the record");
        float4 tb[kVecs];
#pragma unroll
        for (int i = 0; i < kVecs; ++i)
            tb[i] = reinterpret_cast<const float4*>(rec + kPrepT)[tid + i * kChunkThreads];
        if (tid < kChunk) {
            bs[tid] = rec[kPrepBeta + tid];
            egs[tid] = rec[kPrepEg + tid];
            eds[tid] = rec[kPrepEd + tid];
        }
        load_chunk_rows<DK>(p, h, c0, n, rec + kPrepEg, Qs, Ks, Vs, j0, warp, lane);
#pragma unroll
        for (int i = 0; i < kVecs; ++i) {
            const int e = tid + i * kChunkThreads;  // float4 index over T then B
            const int m = e / (kChunk * kChunk / 4), r = e % (kChunk * kChunk / 4);
            const int t = r / (kChunk / 4), c4 = r % (kChunk / 4);
            *reinterpret_cast<float4*>((m == 0 ? Ts : Bs) + t * ldc + 4 * c4) = tb[i];
        }
        __syncthreads();  // B1: record, rows (and at the first chunk St) visible

        // 2. X and Y tile (one St fragment for both); R over this warp's tile of V, Y kept in
        // registers for step 4. Each lane reads and writes only its own tile elements.
        Tile y;
        {
            Tile xy[2][1];
            zero_tiles(xy);
            const int lhs[2] = {L::k_off + ti * 16 * ldk, L::q_off + ti * 16 * ldk};
            const int rhs[1] = {L::s_off + tj * 16};
            mma_steps<ldk, 1, ldv, 1>(xy, sm, lhs, rhs, DK / 8, lane);
            y = xy[1][0];
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int t = ti * 16 + tile_row(lane, e), j = tj * 16 + tile_col(lane, hh, e);
                    Vs[t * ldv + j] = bs[t] * (Vs[t * ldv + j] - egs[t] * xy[0][0].c[hh][e]);
                }
        }
        __syncthreads();  // B2: R visible

        // 3. V' = T R (T lower triangular: k-steps up to the tile's last row) into Xs, and its
        // decayed copy into Ds.
        {
            Tile vp[1][1];
            zero_tiles(vp);
            const int lhs[1] = {L::t_off + ti * 16 * ldc};
            const int rhs[1] = {L::v_off + tj * 16};
            mma_steps<ldc, 1, ldv, 1>(vp, sm, lhs, rhs, 2 * (ti + 1), lane);
            store_tile<ldv>(sm, L::x_off + ti * 16 * ldv + tj * 16, vp[0][0], lane);
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                for (int e = 0; e < 4; ++e) vp[0][0].c[hh][e] *= eds[ti * 16 + tile_row(lane, e)];
            store_tile<ldv>(sm, L::d_off + ti * 16 * ldv + tj * 16, vp[0][0], lane);
        }
        __syncthreads();  // B3: V' and Ds visible

        // 4. O tile = Y + B V' (causal: k-steps up to the tile's last row), written out by its warp;
        // St row tiles (warp, warp + 8, ...) <- e^gamma_last St + K^T Ds, both column tiles (one K^T
        // fragment for both).
        {
            Tile o[1][1] = {{y}};
            const int lhs[1] = {L::b_off + ti * 16 * ldc};
            const int rhs[1] = {L::x_off + tj * 16};
            mma_steps<ldc, 1, ldv, 1>(o, sm, lhs, rhs, 2 * (ti + 1), lane);
            float* out = p.out + c0 * inner + static_cast<int64_t>(h) * p.dv + j0 + tj * 16;
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const int t = ti * 16 + tile_row(lane, e);
                    if (t < n)
                        *reinterpret_cast<float2*>(out + t * inner + tile_col(lane, hh, e)) =
                            make_float2(o[0][0].c[hh][e], o[0][0].c[hh][e + 1]);
                }
        }
        const float e_last = egs[kChunk - 1];
        for (int si = warp; si < DK / 16; si += kChunkWarps) {
            Tile st[1][2];
#pragma unroll
            for (int cc = 0; cc < 2; ++cc) {
                load_tile<ldv>(sm, L::s_off + si * 16 * ldv + cc * 16, st[0][cc], lane);
                st[0][cc].scale(e_last);
            }
            // K^T: element (i, s) = Ks[s][i].
            const int lhs[1] = {L::k_off + si * 16};
            const int rhs[2] = {L::d_off, L::d_off + 16};
            mma_steps<1, ldk, ldv, 1>(st, sm, lhs, rhs, kChunk / 8, lane);
#pragma unroll
            for (int cc = 0; cc < 2; ++cc)
                store_tile<ldv>(sm, L::s_off + si * 16 * ldv + cc * 16, st[0][cc], lane);
        }
        __syncthreads();  // B4: St visible; the chunk's arrays free
    }

    // St back (B4 of the last chunk made it visible).
    for (int e = tid; e < kChunkCols * DK; e += kChunkThreads) {
        const int j = e / DK, i = e % DK;
        S[static_cast<int64_t>(j0 + j) * DK + i] = Ss[i * ldv + j];
    }
}

// Gated RMSNorm in place on the chunked kernel's raw outputs: one warp per (token, head) row of dv
// (<= 128) outputs, the same formula as the sequential kernel's.
inline constexpr int kNormWarps = 8;

__global__ void __launch_bounds__(kWarp* kNormWarps) gated_norm_kernel(DnArgs p) {
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kNormWarps + threadIdx.x / kWarp;
    const int lane = threadIdx.x % kWarp;
    if (row >= p.n_tokens * p.n_v_heads) return;  // whole warps; no barriers
    float* o = p.out + row * p.dv;                // rows (t, h) are consecutive: [t][h][dv]
    const float* z = p.z + row * p.dv;
    constexpr int R = kMaxHeadDim / kWarp;
    float v[R];
    float ss = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int j = lane + r * kWarp;
        v[r] = j < p.dv ? o[j] : 0.0f;
        ss += v[r] * v[r];
    }
    ss = warp_sum(ss);
    const float scale = rsqrtf(ss / static_cast<float>(p.dv) + p.eps);
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int j = lane + r * kWarp;
        if (j < p.dv) o[j] = v[r] * scale * p.norm[j] * silu_f(z[j]);
    }
}

int64_t chunk_count(int64_t n_tokens) {
    return (n_tokens + kChunk - 1) / kChunk;
}

template <int DK>
void launch_delta_net_chunked(const DnArgs& p, float* ws, StreamHandle stream) {
    // matvec.cuh: the opt-in past 48 KiB of shared memory, as every other kernel of this backend.
    prepare_smem(reinterpret_cast<const void*>(delta_net_chunk_prep_kernel<DK>), PrepSmem<DK>::bytes,
                 "delta rule preparation");
    prepare_smem(reinterpret_cast<const void*>(delta_net_chunk_walk_kernel<DK>), WalkSmem<DK>::bytes,
                 "delta rule walk");
    const dim3 prep_grid(static_cast<unsigned>(chunk_count(p.n_tokens)), static_cast<unsigned>(p.n_v_heads));
    delta_net_chunk_prep_kernel<DK><<<prep_grid, kChunkThreads, PrepSmem<DK>::bytes, stream>>>(p, ws);
    MOX_CUDA_CHECK_LAUNCH("delta_net_chunk_prep_kernel");
    const dim3 walk_grid(static_cast<unsigned>(p.n_v_heads), static_cast<unsigned>(p.dv / kChunkCols));
    delta_net_chunk_walk_kernel<DK><<<walk_grid, kChunkThreads, WalkSmem<DK>::bytes, stream>>>(p, ws);
    MOX_CUDA_CHECK_LAUNCH("delta_net_chunk_walk_kernel");
    const int64_t rows = p.n_tokens * p.n_v_heads;
    const auto blocks = static_cast<unsigned>((rows + kNormWarps - 1) / kNormWarps);
    gated_norm_kernel<<<blocks, kWarp * kNormWarps, 0, stream>>>(p);
    MOX_CUDA_CHECK_LAUNCH("gated_norm_kernel");
}

bool chunk_supported(int64_t dk, int64_t dv) {
    return (dk == 64 || dk == 128) && dv % kChunkCols == 0;
}

}  // namespace

void conv_silu(float* state, const float* weight, const float* x, int64_t x_stride, int64_t n_tokens,
               int64_t channels, int64_t kernel, float* out, StreamHandle stream) {
    if (kernel < 1 || kernel > kMaxConvKernel)
        fail("conv_silu: kernel {} not in [1, {}]", kernel, kMaxConvKernel);
    if (n_tokens > 1 && x_stride < channels) fail("conv_silu: x_stride {} < channels {}", x_stride, channels);
    if (n_tokens <= 0 || channels <= 0) return;
    const int64_t runs = (n_tokens + kConvTokens - 1) / kConvTokens;
    if (runs > 65535) fail("conv_silu: {} tokens in one call", n_tokens);
    const dim3 grid(static_cast<unsigned>((channels + kConvThreads - 1) / kConvThreads),
                    static_cast<unsigned>(runs));
    conv_silu_kernel<<<grid, kConvThreads, 0, stream>>>(state, weight, x, x_stride, n_tokens, channels,
                                                        static_cast<int>(kernel), out);
    MOX_CUDA_CHECK_LAUNCH("conv_silu_kernel");
}

size_t delta_net_workspace_bytes(const DeltaNetShape& shape, int64_t n_tokens) {
    if (n_tokens <= 0 || shape.n_v_heads <= 0) return 0;
    return static_cast<size_t>(chunk_count(n_tokens) * shape.n_v_heads) * kPrepFloats * sizeof(float);
}

void delta_net(float* S, const float* conv, const float* b, const float* alpha, const float* z,
               const DeltaNetWeights& w, const DeltaNetShape& shape, int64_t n_tokens, float* out,
               void* workspace, size_t workspace_bytes, StreamHandle stream, DeltaNetMethod method) {
    const int64_t Hk = shape.n_k_heads, Hv = shape.n_v_heads, dk = shape.dk, dv = shape.dv;
    if (Hk <= 0 || Hv <= 0 || Hv % Hk != 0)
        fail("delta_net: value heads {} not a positive multiple of key heads {}", Hv, Hk);
    // The sequential kernel keeps a state slice in registers: dk and dv up to 128 (every
    // Qwen3-Next/3.5 size).
    if (dk <= 0 || dk > kMaxHeadDim || dv <= 0 || dv > kMaxHeadDim)
        fail("delta_net: head dims dk {} / dv {} not in [1, {}]", dk, dv, kMaxHeadDim);
    if (Hv > 65535) fail("delta_net: {} value heads", Hv);
    if (method == DeltaNetMethod::chunked && !chunk_supported(dk, dv))
        fail("delta_net: the chunked form needs dk 64 or 128 and dv a multiple of {} (dk {}, dv {})",
             kChunkCols, dk, dv);
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
    const bool chunked =
        method == DeltaNetMethod::chunked ||
        (method == DeltaNetMethod::automatic && n_tokens >= kChunkMinTokens && chunk_supported(dk, dv));
    if (chunked) {
        const size_t need = delta_net_workspace_bytes(shape, n_tokens);
        if (workspace == nullptr || workspace_bytes < need)
            fail("delta_net: the chunked form over {} tokens needs {} B of workspace, got {} B", n_tokens,
                 need, workspace == nullptr ? 0 : workspace_bytes);
        if (chunk_count(n_tokens) > 0x7FFFFFFF) fail("delta_net: {} tokens in one call", n_tokens);
        if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0)
            fail("delta_net: workspace not 16-byte aligned");
        float* ws = static_cast<float*>(workspace);
        if (dk == 64) return launch_delta_net_chunked<64>(p, ws, stream);
        return launch_delta_net_chunked<128>(p, ws, stream);
    }
    if (dk <= kWarp) return launch_delta_net_seq<1>(p, stream);
    if (dk <= 2 * kWarp) return launch_delta_net_seq<2>(p, stream);
    launch_delta_net_seq<4>(p, stream);
}

}  // namespace mox::cuda

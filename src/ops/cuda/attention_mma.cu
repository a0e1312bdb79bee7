// Attention on the tensor cores over f16 K and V caches (ops/cuda_attention.h; dispatched from
// ops/cuda/attention.cu, which keeps the fp32 kernels for every cache type and the split combine).
//
// Both kernels run mma.m16n8k16 (f16 in, f32 accumulate) and keep the fp32 kernels' precision: K and
// V are exact f16 already, and the fp32 operands Q and P enter as two f16 parts (hi = f16(v), lo =
// f16((v - hi) 2^11)), each product taken twice, so a product is exact to 2^-22 relative.
//  - decode (one query token, a long context): attention_mma_kernel, the group's query heads as the
//    8 columns of S^T = K Q^T, keys split across blocks as attention_kernel's;
//  - prefill (many query tokens): attention_prefill_mma_kernel, flash-attention style: a block owns
//    64 query rows of one KV head (16 per warp, the mma's m), walks the keys in tiles of 32 staged in
//    shared memory, S = Q K^T and O += P V per warp with the online softmax in registers.
#include "ops/cuda/attention_params.cuh"
#include "quant/cuda/check.cuh"

#include <cuda_fp16.h>

#include <cmath>

namespace mox::cuda::attn {

namespace {

// ---------------------------------------------------------------------------------------------------
// attention at decode over a long context on the tensor cores (f16 K and V, one query token)
//
// attention_kernel computes scores and the weighted sum of V with fp32 FMAs: 8 query rows x D
// elements per warp in 255 registers, 2 warps per scheduler, a dependent shuffle chain per 2-key
// step: at 32768 keys ~71 us per Qwen3.6 attention layer on the H200 for 64 MB of cache (llama.cpp
// ~28 us). Here a warp takes 16 keys per step through mma.m16n8k16 (f16 in, f32 accumulate):
//   S^T (16 keys x 8 queries) = K_tile (16 x D) Q^T (D x 8),  O^T (D x 8) += V_tile^T (D x 16) P^T,
// the 8 columns being the group's query heads (columns past the group are zero queries, ignored).
// Precision as the fp32 kernel: K and V are exact f16 already, and Q and P are carried as two f16
// parts (hi = f16(v), lo = f16((v - hi) 2^11)), so each product is hi + lo 2^-11 to 2^-22 relative.
// Layouts (lane = 4 rho + c): the mma contracts over k in pairs (2c, 2c+1), (2c+8, 2c+9) of a lane's
// quad position c, so the k order may be permuted as long as both operands agree. For S the k index
// is the head dimension: a lane loads 16 contiguous bytes (dims 32g + 8c .. +7) per 32 dims of a key
// row and uses them for two k-steps; Q's fragments use the same order. For O the k index is the key:
// logical keys (2c, 2c+1, 2c+8, 2c+9) are tile keys (c, c+4, c+8, c+12), and the output dim of row r
// of m-tile mt is (r % 8) D/8 + 2 mt + r / 8, so a lane reads D/8 contiguous dims of its 4 keys and
// pairs them with byte permutes; P^T's fragment is gathered from the S^T layout with 8 shuffles.
constexpr int kMmaWarps = 4;
constexpr float kLoScale = 2048.0f;

__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// (x, y) as the hi and lo f16 parts of two values: hi = f16(v), lo = f16((v - hi) 2^11).
__device__ __forceinline__ void split_pair(float x, float y, uint32_t& hi, uint32_t& lo) {
    const __half hx = __float2half_rn(x), hy = __float2half_rn(y);
    const __half lx = __float2half_rn((x - __half2float(hx)) * kLoScale);
    const __half ly = __float2half_rn((y - __half2float(hy)) * kLoScale);
    hi = static_cast<uint32_t>(__half_as_ushort(hx)) | (static_cast<uint32_t>(__half_as_ushort(hy)) << 16);
    lo = static_cast<uint32_t>(__half_as_ushort(lx)) | (static_cast<uint32_t>(__half_as_ushort(ly)) << 16);
}

__device__ __forceinline__ void prefetch_l1(const uint8_t* p) {
    asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}

// grid (1, n_head_kv, n_split) as attention_kernel's at one query token (same partials for
// combine_kernel), kMmaWarps * 32 threads; group <= 8, f16 K and V.
template <int D>
__global__ void __launch_bounds__(kMmaWarps * 32) attention_mma_kernel(const AttnParams p) {
    constexpr int G = D / 32;  // 32-dim groups of a key row (two k-steps each)
    constexpr int E = D / 8;   // dims of V a lane reads per key
    __shared__ float sm_o[kMmaWarps][8][D];
    __shared__ float sm_m[kMmaWarps][8];
    __shared__ float sm_l[kMmaWarps][8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int rho = lane >> 2, c = lane & 3;
    const int hk = blockIdx.y, split = blockIdx.z;
    const int64_t k_end = min(static_cast<int64_t>(*p.pos0) + 1, p.capacity);  // keys [0, k_end)
    const int64_t k0 = split * p.keys_per_split;
    const int64_t k1 = min(k0 + p.keys_per_split, k_end);

    // Q^T fragments: column rho (query head hk * group + rho), dims 32g + 8c .. +7 as 4 pairs.
    uint32_t qh[G][4], ql[G][4];
    {
        const bool real = rho < p.group;
        const float* src = p.q + static_cast<int64_t>(hk * p.group + (real ? rho : 0)) * D;
#pragma unroll
        for (int g = 0; g < G; ++g)
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                const int d = 32 * g + 8 * c + 2 * w;
                const float x = real ? src[d] * p.scale : 0.0f, y = real ? src[d + 1] * p.scale : 0.0f;
                split_pair(x, y, qh[g][w], ql[g][w]);
            }
    }
    float o[E / 2][4];  // O^T m-tiles: rows (rho, rho + 8) -> dims rho E + 2 mt + (0, 1), columns 2c, 2c+1
#pragma unroll
    for (int mt = 0; mt < E / 2; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[mt][i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // of query columns 2c, 2c + 1
    const uint8_t* kbase = p.k + hk * p.k_head_bytes;
    const uint8_t* vbase = p.v + hk * p.v_head_bytes;
    auto krow = [&](int64_t j) {
        return kbase + static_cast<size_t>(max(k0, min(j, k1 - 1))) * p.k_row_bytes;
    };
    auto vrow = [&](int64_t j) {
        return vbase + static_cast<size_t>(max(k0, min(j, k1 - 1))) * p.v_row_bytes;
    };

    for (int64_t j0 = k0 + warp * kMmaKeys; j0 < k1; j0 += kMmaWarps * kMmaKeys) {
        // The next step's lines into L1 while this one computes (hints: no registers, no faults).
        const int64_t jn = j0 + kMmaWarps * kMmaKeys;
        if (jn < k1) {
#pragma unroll
            for (int g = 0; g < G; g += 2) {
                prefetch_l1(krow(jn + rho) + 64 * g + 16 * c);
                prefetch_l1(krow(jn + rho + 8) + 64 * g + 16 * c);
            }
#pragma unroll
            for (int s = 0; s < 4; ++s) prefetch_l1(vrow(jn + c + 4 * s) + 2 * rho * E);
        }
        // S^T: c0, c1 = keys j0 + rho, queries 2c, 2c + 1; c2, c3 = key j0 + rho + 8.
        float sh[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const uint8_t* ka = krow(j0 + rho) + 16 * c;
        const uint8_t* kb = krow(j0 + rho + 8) + 16 * c;
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const uint4 a = __ldg(reinterpret_cast<const uint4*>(ka + 64 * g));
            const uint4 b = __ldg(reinterpret_cast<const uint4*>(kb + 64 * g));
            mma_f16(sh, a.x, b.x, a.y, b.y, qh[g][0], qh[g][1]);
            mma_f16(sh, a.z, b.z, a.w, b.w, qh[g][2], qh[g][3]);
            mma_f16(sl, a.x, b.x, a.y, b.y, ql[g][0], ql[g][1]);
            mma_f16(sl, a.z, b.z, a.w, b.w, ql[g][2], ql[g][3]);
        }
        float sc[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int64_t j = j0 + rho + (i >= 2 ? 8 : 0);
            sc[i] = j < k1 ? sh[i] + sl[i] * (1.0f / kLoScale) : -INFINITY;
        }
        // Online softmax per query column over the step's 16 keys (the 8 lanes of a quad position).
        float alpha[2], pr[4];
#pragma unroll
        for (int n = 0; n < 2; ++n) {
            float mx = fmaxf(sc[n], sc[n + 2]);
#pragma unroll
            for (int off = 4; off < 32; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, off));
            const float m_new = fmaxf(m[n], mx);
            const bool none = m_new == -INFINITY;
            alpha[n] = none ? 1.0f : expf(m[n] - m_new);
            pr[n] = none ? 0.0f : expf(sc[n] - m_new);
            pr[n + 2] = none ? 0.0f : expf(sc[n + 2] - m_new);
            float sum = pr[n] + pr[n + 2];
#pragma unroll
            for (int off = 4; off < 32; off <<= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, off);
            l[n] = l[n] * alpha[n] + sum;
            m[n] = m_new;
        }
        // P^T fragment of query column rho: tile keys (c, c + 4) and (c + 8, c + 12), from the lanes
        // holding S^T rows c and c + 4 (quad position rho / 2; key + 8 in elements 2, 3).
        const int src_a = 4 * c + (rho >> 1), src_b = 4 * (c + 4) + (rho >> 1), odd = rho & 1;
        float pa[4], pb[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            pa[i] = __shfl_sync(0xFFFFFFFFu, pr[i], src_a);
            pb[i] = __shfl_sync(0xFFFFFFFFu, pr[i], src_b);
        }
        uint32_t bh0, bl0, bh1, bl1;
        split_pair(odd ? pa[1] : pa[0], odd ? pb[1] : pb[0], bh0, bl0);  // keys c, c + 4
        split_pair(odd ? pa[3] : pa[2], odd ? pb[3] : pb[2], bh1, bl1);  // keys c + 8, c + 12
        // O^T += V^T P^T, 8 dims (4 m-tiles) per 16-byte word of each of the lane's 4 keys.
        const uint8_t* v0 = vrow(j0 + c) + 2 * rho * E;
        const uint8_t* v1 = vrow(j0 + c + 4) + 2 * rho * E;
        const uint8_t* v2 = vrow(j0 + c + 8) + 2 * rho * E;
        const uint8_t* v3 = vrow(j0 + c + 12) + 2 * rho * E;
#pragma unroll
        for (int u = 0; u < E / 8; ++u) {
            const uint4 x0 = __ldg(reinterpret_cast<const uint4*>(v0) + u);
            const uint4 x1 = __ldg(reinterpret_cast<const uint4*>(v1) + u);
            const uint4 x2 = __ldg(reinterpret_cast<const uint4*>(v2) + u);
            const uint4 x3 = __ldg(reinterpret_cast<const uint4*>(v3) + u);
            const uint32_t w0[4] = {x0.x, x0.y, x0.z, x0.w}, w1[4] = {x1.x, x1.y, x1.z, x1.w};
            const uint32_t w2[4] = {x2.x, x2.y, x2.z, x2.w}, w3[4] = {x3.x, x3.y, x3.z, x3.w};
#pragma unroll
            for (int w = 0; w < 4; ++w) {  // m-tile 4u + w: dims rho E + 8u + 2w (+1)
                const uint32_t a0 = __byte_perm(w0[w], w1[w], 0x5410), a1 = __byte_perm(w0[w], w1[w], 0x7632);
                const uint32_t a2 = __byte_perm(w2[w], w3[w], 0x5410), a3 = __byte_perm(w2[w], w3[w], 0x7632);
                float th[4] = {0.0f, 0.0f, 0.0f, 0.0f}, tl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                mma_f16(th, a0, a1, a2, a3, bh0, bh1);
                mma_f16(tl, a0, a1, a2, a3, bl0, bl1);
                float* acc = o[4 * u + w];
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    acc[i] = acc[i] * alpha[i & 1] + (th[i] + tl[i] * (1.0f / kLoScale));
            }
        }
    }

    // Merge the warps (every thread reaches this barrier: the loop above has no early exit).
#pragma unroll
    for (int mt = 0; mt < E / 2; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) sm_o[warp][2 * c + (i & 1)][rho * E + 2 * mt + (i >> 1)] = o[mt][i];
    if (rho == 0) {
#pragma unroll
        for (int n = 0; n < 2; ++n) sm_m[warp][2 * c + n] = m[n], sm_l[warp][2 * c + n] = l[n];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < p.group * D; idx += kMmaWarps * 32) {
        const int n = idx / D, col = idx % D;
        float M, L, A;
        merge_partials<kMmaWarps>([&](int w) { return sm_m[w][n]; }, [&](int w) { return sm_l[w][n]; },
                                  [&](int w) { return sm_o[w][n][col]; }, M, L, A);
        const int h = hk * p.group + n;
        store_row<D>(p, split, p.n_head, h, 0, h, col, A, M, L);  // one query token: row h of n_head
    }
}

// ---------------------------------------------------------------------------------------------------
// prefill on the tensor cores
//
// attention_kernel gives prefill 8 query rows per block and fp32 FMAs: 9.5 ms per Qwen3.6 attention
// layer for a 1695-token prompt on the H200 (ncu, bench/results/2026-11-30-mma-prefill-attention-h200),
// 39% of the prompt's time.
// Here a block stages 64 query rows (Q hi and lo parts, f16) once, then per tile of 32 keys copies K
// and V into shared memory (cp.async), and each warp computes S (16 x 32) = Q K^T, the online softmax
// of its 16 rows (a row's 32 scores sit in the 4 lanes of a quad), and O (16 x D) += P V, with P
// taken from S's accumulators as the A operand (the standard register reuse: m16n8 accumulators of
// two adjacent key tiles are one m16k16 A fragment). Fragments come from shared memory by ldmatrix
// (V transposed by ldmatrix.trans); rows are padded by 16 bytes so the 8 row addresses of an 8x8
// matrix fall in distinct banks. Causality: row (t, g) sees keys [0, pos0 + t + 1); a warp skips the
// tiles past its last row's keys.
constexpr int kPfWarps = 4;
constexpr int kPfThreads = kPfWarps * 32;
constexpr int kPfKeys = 32;  // keys per tile
constexpr int kPfPad = 8;    // f16 elements of padding per shared row

template <int D>
constexpr size_t prefill_smem_bytes() {
    return static_cast<size_t>(2 * kPfRows + 2 * kPfKeys) * (D + kPfPad) * sizeof(__half);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 f16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, which lands in r[i].
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// The same, each matrix transposed (lane 4 rho + c gets rows 2c, 2c + 1 of column rho).
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

// grid (row blocks of kPfRows, n_head_kv, n_split), kPfThreads threads, prefill_smem_bytes<D>().
template <int D>
__global__ void __launch_bounds__(kPfThreads) attention_prefill_mma_kernel(const AttnParams p) {
    constexpr int S = D + kPfPad;  // f16 per shared row
    extern __shared__ uint4 pf_smem[];
    __half* q_hi = reinterpret_cast<__half*>(pf_smem);  // [kPfRows][S]
    __half* q_lo = q_hi + kPfRows * S;                  // [kPfRows][S]
    __half* k_s = q_lo + kPfRows * S;                   // [kPfKeys][S]
    __half* v_s = k_s + kPfKeys * S;                    // [kPfKeys][S]
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int rho = lane >> 2, c = lane & 3;
    const int hk = blockIdx.y, split = blockIdx.z;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kPfRows;
    const int64_t pos0 = *p.pos0;

    // Q, scaled, as hi and lo parts; rows past n_rows_q are zeros (and see no key).
    for (int i = tid; i < kPfRows * D / 2; i += kPfThreads) {
        const int r = i / (D / 2), d = 2 * (i % (D / 2));
        const int64_t rg = row0 + r;
        float x = 0.0f, y = 0.0f;
        if (rg < p.n_rows_q) {
            const int64_t t = rg / p.group;
            const int h = hk * p.group + static_cast<int>(rg % p.group);
            const float* src = p.q + (t * p.n_head + h) * D + d;
            x = src[0] * p.scale;
            y = src[1] * p.scale;
        }
        uint32_t hi, lo;
        split_pair(x, y, hi, lo);
        *reinterpret_cast<uint32_t*>(q_hi + r * S + d) = hi;
        *reinterpret_cast<uint32_t*>(q_lo + r * S + d) = lo;
    }
    // Keys [0, key_end) of row rg; rows ascend in t, so a range's last row sees the most keys.
    auto key_end = [&](int64_t rg) -> int64_t {
        return rg < p.n_rows_q ? min(pos0 + rg / p.group + 1, p.capacity) : 0;
    };
    const int64_t wr0 = row0 + warp * 16;  // this warp's first row
    const int64_t ke[2] = {key_end(wr0 + rho), key_end(wr0 + rho + 8)};
    const int64_t k0 = split * p.keys_per_split;
    const int64_t k1 = min(k0 + p.keys_per_split, key_end(min(row0 + kPfRows, p.n_rows_q) - 1));
    const int64_t warp_k1 = wr0 < p.n_rows_q ? min(k1, key_end(min(wr0 + 15, p.n_rows_q - 1))) : k0;

    float o[D / 8][4];  // n-tile nt: rows (rho, rho + 8) x dims nt * 8 + 2c, + 1
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[nt][i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows rho, rho + 8
    const uint8_t* kbase = p.k + hk * p.k_head_bytes;
    const uint8_t* vbase = p.v + hk * p.v_head_bytes;
    // ldmatrix row addresses of this lane: A (16 rows x 16) and V^T (16 keys x 16 dims) take matrix
    // i = lane / 8 as rows + 8 (i & 1), columns + 8 (i >> 1); K (8 keys x 32 dims) as columns + 8 i.
    const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
    const int k_row = lane & 7, k_col = (lane >> 3) * 8;

    for (int64_t kt = k0; kt < k1; kt += kPfKeys) {
        __syncthreads();                // Q staged / the previous tile consumed
        constexpr int kChunks = D / 8;  // 16-byte chunks per row
        for (int i = tid; i < kPfKeys * kChunks; i += kPfThreads) {
            const int r = i / kChunks, ch = i % kChunks;
            const int64_t j = min(kt + r, k1 - 1);  // past k1: a valid row, masked below
            cp_async16(smem_addr(k_s + r * S + ch * 8),
                       kbase + static_cast<size_t>(j) * p.k_row_bytes + ch * 16);
            cp_async16(smem_addr(v_s + r * S + ch * 8),
                       vbase + static_cast<size_t>(j) * p.v_row_bytes + ch * 16);
        }
        cp_async_wait_all();
        __syncthreads();
        if (kt >= warp_k1) continue;  // every row of the warp is past its keys (the barrier is above)

        // S = Q K^T: 4 n-tiles of 8 keys, hi and lo parts of Q in separate accumulators.
        float sh[4][4], sl[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) sh[nt][i] = sl[nt][i] = 0.0f;
#pragma unroll 2
        for (int kd = 0; kd < D; kd += 32) {  // two k-steps of 16 dims
            uint32_t ah[2][4], al[2][4];
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                const int off = (warp * 16 + a_row) * S + kd + 16 * s + a_col;
                ldsm_x4(smem_addr(q_hi + off), ah[s]);
                ldsm_x4(smem_addr(q_lo + off), al[s]);
            }
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                uint32_t b[4];  // (b0, b1) of dims kd .. kd + 15, then of kd + 16 .. kd + 31
                ldsm_x4(smem_addr(k_s + (nt * 8 + k_row) * S + kd + k_col), b);
                mma_f16(sh[nt], ah[0][0], ah[0][1], ah[0][2], ah[0][3], b[0], b[1]);
                mma_f16(sh[nt], ah[1][0], ah[1][1], ah[1][2], ah[1][3], b[2], b[3]);
                mma_f16(sl[nt], al[0][0], al[0][1], al[0][2], al[0][3], b[0], b[1]);
                mma_f16(sl[nt], al[1][0], al[1][1], al[1][2], al[1][3], b[2], b[3]);
            }
        }
        // Masked scores (element i: row rho + 8 (i >> 1), key kt + 8 nt + 2c + (i & 1)), then the
        // online softmax of each row over the tile (a row's 32 keys are in the lanes of one quad).
        float alpha[2];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int64_t j = kt + 8 * nt + 2 * c + e;
                    const int i = 2 * hf + e;
                    sh[nt][i] = j < k1 && j < ke[hf] ? sh[nt][i] + sl[nt][i] * (1.0f / kLoScale) : -INFINITY;
                    mx = fmaxf(mx, sh[nt][i]);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
            const float m_new = fmaxf(m[hf], mx);
            const bool none = m_new == -INFINITY;  // no key of this row yet
            alpha[hf] = none ? 1.0f : expf(m[hf] - m_new);
            float sum = 0.0f;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int i = 2 * hf + e;
                    sh[nt][i] = none ? 0.0f : expf(sh[nt][i] - m_new);
                    sum += sh[nt][i];
                }
            sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
            sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
            l[hf] = l[hf] * alpha[hf] + sum;
            m[hf] = m_new;
        }
        // P as A fragments of the two 16-key k-steps: n-tiles 2s and 2s + 1 of S.
        uint32_t ph[2][4], pl[2][4];
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            split_pair(sh[2 * s][0], sh[2 * s][1], ph[s][0], pl[s][0]);
            split_pair(sh[2 * s][2], sh[2 * s][3], ph[s][1], pl[s][1]);
            split_pair(sh[2 * s + 1][0], sh[2 * s + 1][1], ph[s][2], pl[s][2]);
            split_pair(sh[2 * s + 1][2], sh[2 * s + 1][3], ph[s][3], pl[s][3]);
        }
        // O = O alpha + P V, 16 dims (two n-tiles) per ldmatrix.trans of each k-step.
#pragma unroll
        for (int dn = 0; dn < D / 16; ++dn) {
            float th[2][4], tl[2][4];
#pragma unroll
            for (int u = 0; u < 2; ++u)
#pragma unroll
                for (int i = 0; i < 4; ++i) th[u][i] = tl[u][i] = 0.0f;
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                uint32_t b[4];  // (b0, b1) of dims 16 dn .. + 7, then of 16 dn + 8 .. + 15
                ldsm_x4_trans(smem_addr(v_s + (16 * s + a_row) * S + 16 * dn + a_col), b);
                mma_f16(th[0], ph[s][0], ph[s][1], ph[s][2], ph[s][3], b[0], b[1]);
                mma_f16(tl[0], pl[s][0], pl[s][1], pl[s][2], pl[s][3], b[0], b[1]);
                mma_f16(th[1], ph[s][0], ph[s][1], ph[s][2], ph[s][3], b[2], b[3]);
                mma_f16(tl[1], pl[s][0], pl[s][1], pl[s][2], pl[s][3], b[2], b[3]);
            }
#pragma unroll
            for (int u = 0; u < 2; ++u)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    o[2 * dn + u][i] =
                        o[2 * dn + u][i] * alpha[i >> 1] + (th[u][i] + tl[u][i] * (1.0f / kLoScale));
        }
    }

    const int64_t n_rows_all = p.n_q * p.n_head;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int64_t rg = wr0 + rho + 8 * hf;
        if (rg >= p.n_rows_q) continue;
        const int64_t t = rg / p.group;
        const int h = hk * p.group + static_cast<int>(rg % p.group);
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e)
                store_row<D>(p, split, n_rows_all, t * p.n_head + h, t, h, 8 * nt + 2 * c + e,
                             o[nt][2 * hf + e], m[hf], l[hf]);
    }
}

template <int D>
void launch_prefill(const AttnParams& p, int n_head_kv, StreamHandle stream) {
    constexpr size_t smem = prefill_smem_bytes<D>();
    static const bool attributes_set = [] {
        MOX_CUDA_CHECK(cudaFuncSetAttribute(attention_prefill_mma_kernel<D>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
        return true;
    }();
    (void)attributes_set;
    const dim3 grid(static_cast<unsigned>((p.n_rows_q + kPfRows - 1) / kPfRows),
                    static_cast<unsigned>(n_head_kv), static_cast<unsigned>(p.n_split));
    attention_prefill_mma_kernel<D><<<grid, kPfThreads, smem, stream>>>(p);
    MOX_CUDA_CHECK_LAUNCH("attention_prefill_mma_kernel");
}

}  // namespace

void launch_mma_decode(const AttnParams& p, int64_t D, dim3 grid, StreamHandle stream) {
    if (D == 128)
        attention_mma_kernel<128><<<grid, kMmaWarps * 32, 0, stream>>>(p);
    else
        attention_mma_kernel<256><<<grid, kMmaWarps * 32, 0, stream>>>(p);
    MOX_CUDA_CHECK_LAUNCH("attention_mma_kernel");
}

void launch_mma_prefill(const AttnParams& p, int64_t D, int n_head_kv, StreamHandle stream) {
    if (D == 128)
        launch_prefill<128>(p, n_head_kv, stream);
    else
        launch_prefill<256>(p, n_head_kv, stream);
}

}  // namespace mox::cuda::attn

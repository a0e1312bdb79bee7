// Gated causal attention over a quantized KV cache on the GPU (ops/cuda_attention.h).
//
// kv_store: one block per token row; float types convert element-wise, q8_0/q4_0 take one thread per
// 32-element block and repeat the CPU quantizer's arithmetic operation by operation (explicit _rn
// intrinsics where nvcc could otherwise fuse a multiply and an add), so the bytes match the CPU's.
//
// attention: one kernel for decode and prefill. The rows of one KV head are (token, group member)
// pairs r = t * group + g; a block takes kRows = 8 of them (all 8 query heads of a token in the real
// model), one KV head and one range of keys (a "split"). Each warp walks its own keys of the range
// (S = 2 or 4 keys a step, interleaved with the other warps, the next step's bytes loaded before this
// step's math), lane l holding elements [l*E, l*E+E) of every row of q, of the decoded K/V rows and of
// the accumulators (E = head_dim / 32). The S x 8 partial dot products are summed across the warp by
// a transposed butterfly that leaves one (key, row) score per lane, so each lane computes one exp and
// keeps the softmax state of one row; K/V bytes are read and converted once per block and shared by
// all its rows, and the key loop needs no barrier. The warps then merge through shared memory. With
// one split the block normalises, gates and writes the output; with several (decode: the context is
// cut so that the blocks fill the GPU) it writes (max, sum, acc) partials and combine_kernel merges
// them in a fixed order (deterministic, no atomics). Decode over at most short_max_keys() keys takes
// attention_short_kernel instead: one block per query head (see there why). Over f16 caches, longer
// decode and every prefill run on the tensor cores (ops/cuda/attention_mma.cu), sharing the plan,
// the partials and combine_kernel with attention_kernel (against attention_kernel on the H200: tg128
// at depth 32768 273 / 272 vs 263 t/s, a 2048-token causal prefill 0.64 vs 2.71 ms;
// bench/results/2026-11-30-mma-prefill-attention-h200).
#include "core/tuning.h"
#include "ops/cuda_attention.h"
#include "ops/cuda/attention_params.cuh"
#include "ops/cuda/kv_format.cuh"
#include "quant/cuda/check.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

namespace mox::cuda {

namespace {

using attn::AttnParams;
using attn::gated;

constexpr int kQ8Bytes = 34;  // d f16, 32 x int8
constexpr int kQ4Bytes = 18;  // d f16, 16 bytes of nibbles (element j low, j + 16 high)

// ---------------------------------------------------------------------------------------------------
// kv_store

constexpr int kStoreThreads = 128;

// The f16 scale of a q8_0/q4_0 block: one 16-bit store (blocks of 34 and 18 bytes keep 2-byte
// alignment). Two byte stores of the converted half's bits (st.u8 of the cvt.f16 register) came out
// with a zero low byte on the H200 (nvcc 13, sm_90); the 16-bit store is right.
__device__ __forceinline__ void put_u16(uint8_t* p, uint32_t v) {
    *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(v);
}

// One block per token: row blockIdx.x of src goes to cache row *pos0 + blockIdx.x.
__global__ void __launch_bounds__(kStoreThreads)
    kv_store_kernel(uint8_t* __restrict__ cache, size_t row_bytes, int fmt, int64_t capacity,
                    const int32_t* __restrict__ pos0, const float* __restrict__ src, int64_t src_stride,
                    int64_t row_elems) {
    const int64_t pos = static_cast<int64_t>(*pos0) + blockIdx.x;
    if (pos < 0 || pos >= capacity) return;  // the host cannot check a device position
    const float* x = src + static_cast<int64_t>(blockIdx.x) * src_stride;
    uint8_t* dst = cache + static_cast<size_t>(pos) * row_bytes;
    if (fmt == kFmtF32 || fmt == kFmtF16 || fmt == kFmtBf16) {
        for (int64_t i = threadIdx.x; i < row_elems; i += kStoreThreads) store_elementwise(fmt, dst, i, x[i]);
    } else if (fmt == kFmtQ8_0) {
        // quant/ref_legacy.cpp quantize_q8: d = amax / 127, q = roundf(x * (1 / d)).
        for (int64_t b = threadIdx.x; b < row_elems / 32; b += kStoreThreads) {
            const float* xb = x + b * 32;
            uint8_t* blk = dst + b * kQ8Bytes;
            float amax = 0.0f;
            for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(xb[j]));
            const float d = amax / 127.0f;
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            put_u16(blk, f16_bits(d));
            for (int j = 0; j < 32; ++j)
                blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(roundf(__fmul_rn(xb[j], id))));
        }
    } else {
        // quantize_symmetric(levels 16): d = (signed max-magnitude element) / -8, q = min(15, int(x/d
        // + 8.5)).
        for (int64_t b = threadIdx.x; b < row_elems / 32; b += kStoreThreads) {
            const float* xb = x + b * 32;
            uint8_t* blk = dst + b * kQ4Bytes;
            float amax = 0.0f, mx = 0.0f;
            for (int j = 0; j < 32; ++j) {
                const float ax = fabsf(xb[j]);
                if (ax > amax) {
                    amax = ax;
                    mx = xb[j];
                }
            }
            const float d = mx / -8.0f;
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            put_u16(blk, f16_bits(d));
            for (int j = 0; j < 16; ++j) {
                const int lo = min(15, __float2int_rz(__fadd_rn(__fmul_rn(xb[j], id), 8.5f)));
                const int hi = min(15, __float2int_rz(__fadd_rn(__fmul_rn(xb[j + 16], id), 8.5f)));
                blk[2 + j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// attention

constexpr int kRows = 8;   // query rows per block
constexpr int kWarps = 4;  // warps per block, each with its own keys
constexpr int kThreads = kWarps * 32;
// 2 blocks per SM of an H100/H200 (132 SMs): the most that fit (registers), all in one wave.
constexpr int kTargetBlocks = 264;
constexpr int64_t kMinKeysPerSplit = 256;

// Raw bytes of one lane's E elements of a head row, loaded before any of them is decoded so that
// all loads of a step are in flight together.
template <int E>
struct Raw {
    uint32_t w[E];
    uint32_t s;  // f16 scale of q8_0/q4_0
};

__device__ __forceinline__ uint32_t ld_u16(const uint8_t* p) {
    return *reinterpret_cast<const uint16_t*>(p);
}

// N 32-bit words from p (aligned to 4 * N bytes when N <= 4, to 16 bytes when N is 8).
template <int N>
__device__ __forceinline__ void load_words(const uint8_t* p, uint32_t* w) {
    if constexpr (N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N / 4; ++i) {
            const uint4 u = __ldg(reinterpret_cast<const uint4*>(p) + i);
            w[4 * i] = u.x, w[4 * i + 1] = u.y, w[4 * i + 2] = u.z, w[4 * i + 3] = u.w;
        }
    } else if constexpr (N == 2) {
        const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
        w[0] = u.x, w[1] = u.y;
    } else {
        static_assert(N == 1);
        w[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
    }
}

// Elements [e0, e0 + E) of a head row starting at `head` (E divides 32, so they lie in one block).
template <int E>
__device__ __forceinline__ void load_raw(int fmt, const uint8_t* head, int e0, Raw<E>& r) {
    r.s = 0;
    switch (fmt) {
        case kFmtF32:
            load_words<E>(head + 4 * e0, r.w);
            break;
        case kFmtF16:
        case kFmtBf16:
            load_words<E / 2>(head + 2 * e0, r.w);
            break;
        case kFmtQ8_0: {
            const uint8_t* b = head + kQ8Bytes * (e0 / 32);
            r.s = ld_u16(b);
#pragma unroll
            for (int i = 0; i < E / 2; ++i) r.w[i] = ld_u16(b + 2 + e0 % 32 + 2 * i);
            break;
        }
        default: {  // q4_0: elements o..o+E-1 of the block are nibbles of bytes o % 16 ..
            const uint8_t* b = head + kQ4Bytes * (e0 / 32);
            r.s = ld_u16(b);
#pragma unroll
            for (int i = 0; i < E / 2; ++i) r.w[i] = ld_u16(b + 2 + e0 % 16 + 2 * i);
            break;
        }
    }
}

// The same values as the CPU dequantizers (exact conversions, q * d in fp32).
template <int E>
__device__ __forceinline__ void decode(int fmt, const Raw<E>& r, int e0, float* x) {
    switch (fmt) {
        case kFmtF32:
#pragma unroll
            for (int i = 0; i < E; ++i) x[i] = __uint_as_float(r.w[i]);
            break;
        case kFmtF16:
#pragma unroll
            for (int i = 0; i < E / 2; ++i) {
                x[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(r.w[i] & 0xFFFFu)));
                x[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(r.w[i] >> 16)));
            }
            break;
        case kFmtBf16:
#pragma unroll
            for (int i = 0; i < E / 2; ++i) {
                x[2 * i] = __uint_as_float(r.w[i] << 16);
                x[2 * i + 1] = __uint_as_float(r.w[i] & 0xFFFF0000u);
            }
            break;
        case kFmtQ8_0: {
            const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(r.s)));
#pragma unroll
            for (int i = 0; i < E / 2; ++i) {
                x[2 * i] = static_cast<float>(static_cast<int8_t>(r.w[i] & 0xFFu)) * d;
                x[2 * i + 1] = static_cast<float>(static_cast<int8_t>((r.w[i] >> 8) & 0xFFu)) * d;
            }
            break;
        }
        default: {
            const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(r.s)));
            const int shift = (e0 % 32) >= 16 ? 4 : 0;
#pragma unroll
            for (int i = 0; i < E / 2; ++i) {
                x[2 * i] = static_cast<float>(static_cast<int>((r.w[i] >> shift) & 0xFu) - 8) * d;
                x[2 * i + 1] = static_cast<float>(static_cast<int>((r.w[i] >> (8 + shift)) & 0xFu) - 8) * d;
            }
            break;
        }
    }
}

// One stage of the transposed warp sum: a lane keeps the upper half of its values where its bit o is
// set (the lower half otherwise) and adds its partner's copy of them. Compile-time sizes, so sc stays
// in registers.
template <int kHalf, int kO>
__device__ __forceinline__ void halve(float* sc, int lane) {
    const bool upper = (lane & kO) != 0;
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
        const float send = upper ? sc[i] : sc[i + kHalf];
        const float keep = upper ? sc[i + kHalf] : sc[i];
        sc[i] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, kO);
    }
}

// grid (row chunks, n_head_kv, n_split), kThreads threads.
template <int D>
__global__ void __launch_bounds__(kThreads) attention_kernel(const AttnParams p) {
    constexpr int E = D / 32;
    // Keys a warp loads per step: more bytes in flight, but registers (q and acc take 2 * kRows * E).
    constexpr int S = D >= 256 ? 2 : 4;
    constexpr int kNv = S * kRows;              // (key, row) scores per step: 16 or 32
    constexpr int kStages = kNv == 32 ? 5 : 4;  // halving stages of the transposed sum
    constexpr int kKeyBits = S == 4 ? 2 : 1;    // the first stages split the keys
    constexpr unsigned kFull = 0xFFFFFFFFu;
    // The lane that ends up holding pair idx (its bit for stage k is bit (kStages - 1 - k) of idx).
    auto lane_of = [](int idx) {
        int ln = 0;
#pragma unroll
        for (int k = 0; k < kStages; ++k)
            if (idx & (kNv >> (k + 1))) ln |= 16 >> k;
        return ln;
    };
    __shared__ float sm_acc[kWarps][kRows][D];
    __shared__ float sm_m[kWarps][kRows];
    __shared__ float sm_l[kWarps][kRows];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int hk = blockIdx.y, split = blockIdx.z;
    const int e0 = lane * E;
    const int64_t pos0 = *p.pos0;

    // This block's rows: query (t, h) with keys [0, key_end); padding rows see no key.
    float qr[kRows][E];
    int64_t key_end[kRows];
    int64_t chunk_end = 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int64_t rg = static_cast<int64_t>(blockIdx.x) * kRows + r;
        key_end[r] = 0;
#pragma unroll
        for (int e = 0; e < E; ++e) qr[r][e] = 0.0f;
        if (rg < p.n_rows_q) {
            const int64_t t = rg / p.group;
            const int h = hk * p.group + static_cast<int>(rg % p.group);
            key_end[r] = min(pos0 + t + 1, p.capacity);
            chunk_end = max(chunk_end, key_end[r]);
            const float* src = p.q + (t * p.n_head + h) * D + e0;
#pragma unroll
            for (int e = 0; e < E; ++e) qr[r][e] = src[e] * p.scale;
        }
    }
    const int64_t k0 = split * p.keys_per_split;
    const int64_t k1 = min(k0 + p.keys_per_split, chunk_end);

    // After the transposed warp sum below, this lane holds the score of (key my_s, row my_r) of each
    // step and the softmax state (m_mine, l_mine) of row my_r; acc holds every row.
    int my_idx = 0;
#pragma unroll
    for (int k = 0; k < kStages; ++k)
        if (lane & (16 >> k)) my_idx |= kNv >> (k + 1);
    const int my_r = my_idx % kRows, my_s = my_idx / kRows;
    int64_t my_key_end = 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
        if (r == my_r) my_key_end = key_end[r];
    float m_mine = -INFINITY, l_mine = 0.0f;
    float acc[kRows][E];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int e = 0; e < E; ++e) acc[r][e] = 0.0f;
    const uint8_t* kbase = p.k + hk * p.k_head_bytes;
    const uint8_t* vbase = p.v + hk * p.v_head_bytes;

    // Software pipelined: the next step's rows are loaded before this step's math, so two steps of
    // K/V bytes are in flight per warp. Keys past k1 load a valid row (index clamped) and are masked.
    Raw<E> rk[S], rv[S];
    auto load_step = [&](int64_t j0, Raw<E>* ks, Raw<E>* vs) {
#pragma unroll
        for (int s = 0; s < S; ++s) {
            const int64_t j = max(k0, min(j0 + s, k1 - 1));
            load_raw<E>(p.kf, kbase + static_cast<size_t>(j) * p.k_row_bytes, e0, ks[s]);
            load_raw<E>(p.vf, vbase + static_cast<size_t>(j) * p.v_row_bytes, e0, vs[s]);
        }
    };
    if (k0 + warp * S < k1) load_step(k0 + warp * S, rk, rv);
    for (int64_t j0 = k0 + warp * S; j0 < k1; j0 += kWarps * S) {
        Raw<E> nk[S], nv[S];
        load_step(j0 + kWarps * S, nk, nv);
        float sc[kNv];  // partial dot products, index s * kRows + r
#pragma unroll
        for (int s = 0; s < S; ++s) {
            float kx[E];
            decode<E>(p.kf, rk[s], e0, kx);
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                float dot = 0.0f;
#pragma unroll
                for (int e = 0; e < E; ++e) dot = fmaf(qr[r][e], kx[e], dot);
                sc[s * kRows + r] = dot;
            }
        }
        // Transposed warp sum: each stage halves the values a lane keeps (the upper half where the
        // lane's bit o is set) and adds the partner's copy of them, kNv - 1 shuffles for kNv sums.
        halve<kNv / 2, 16>(sc, lane);
        halve<kNv / 4, 8>(sc, lane);
        halve<kNv / 8, 4>(sc, lane);
        halve<kNv / 16, 2>(sc, lane);
        if constexpr (kStages == 5) halve<1, 1>(sc, lane);
        float score = sc[0];
        if constexpr (kStages == 4) score += __shfl_xor_sync(kFull, score, 1);  // lanes l, l^1 hold one pair
        if (j0 + my_s >= k1 || j0 + my_s >= my_key_end) score = -INFINITY;
        // The row's max and sum over the step's keys: the lanes of one row differ in the key bits.
        float tmax = score;
#pragma unroll
        for (int k = 0; k < kKeyBits; ++k) tmax = fmaxf(tmax, __shfl_xor_sync(kFull, tmax, 16 >> k));
        const float m_new = fmaxf(m_mine, tmax);
        const bool none = m_new == -INFINITY;                    // no key of this row yet
        const float alpha = none ? 1.0f : expf(m_mine - m_new);  // 0 while m_mine is still -inf
        const float pr = none ? 0.0f : expf(score - m_new);
        float psum = pr;
#pragma unroll
        for (int k = 0; k < kKeyBits; ++k) psum += __shfl_xor_sync(kFull, psum, 16 >> k);
        l_mine = l_mine * alpha + psum;
        m_mine = m_new;

        float vx[S][E];
#pragma unroll
        for (int s = 0; s < S; ++s) decode<E>(p.vf, rv[s], e0, vx[s]);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const float a = __shfl_sync(kFull, alpha, lane_of(r));
            float pk[S];
#pragma unroll
            for (int s = 0; s < S; ++s) pk[s] = __shfl_sync(kFull, pr, lane_of(s * kRows + r));
#pragma unroll
            for (int e = 0; e < E; ++e) {
                float v = acc[r][e] * a;
#pragma unroll
                for (int s = 0; s < S; ++s) v = fmaf(pk[s], vx[s][e], v);
                acc[r][e] = v;
            }
        }
#pragma unroll
        for (int s = 0; s < S; ++s) {
            rk[s] = nk[s];
            rv[s] = nv[s];
        }
    }

    // Merge the warps (every thread reaches this barrier: the loop above has no early exit).
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int e = 0; e < E; ++e) sm_acc[warp][r][e0 + e] = acc[r][e];
    if (my_s == 0 && lane == lane_of(my_idx)) {
        sm_m[warp][my_r] = m_mine;
        sm_l[warp][my_r] = l_mine;
    }
    __syncthreads();
    const int64_t n_rows_all = p.n_q * p.n_head;
    for (int idx = threadIdx.x; idx < kRows * D; idx += kThreads) {
        const int r = idx / D, c = idx % D;
        const int64_t rg = static_cast<int64_t>(blockIdx.x) * kRows + r;
        if (rg >= p.n_rows_q) continue;
        float M, L, A;
        attn::merge_partials<kWarps>([&](int w) { return sm_m[w][r]; }, [&](int w) { return sm_l[w][r]; },
                                     [&](int w) { return sm_acc[w][r][c]; }, M, L, A);
        const int64_t t = rg / p.group;
        const int h = hk * p.group + static_cast<int>(rg % p.group);
        attn::store_row<D>(p, split, n_rows_all, t * p.n_head + h, t, h, c, A, M, L);
    }
}

// ---------------------------------------------------------------------------------------------------
// attention at decode over a short context (one query token, max_keys <= kShortMaxKeys)
//
// attention_kernel gives a block all 8 query heads of a KV head (K/V read once for 8 rows): right
// for prefill and long contexts, but at decode over a few hundred keys it is 2 blocks of 4 warps at
// 255 registers with one warp per scheduler: ~18 us of latency chain on the H200 (ncu) for a few KB
// of cache. Here a block owns one query head and every key (no split, no combine): 16 blocks for
// Qwen3.6, each warp walking every 4th group of kShortKeys keys with the scores of a step reduced
// across the warp in interleaved butterflies (all lanes get every score), then the 4 warps merge
// through shared memory. K/V rows are read once per query head; at <= 1024 keys they stay in L2.
// A warp's steps form one dependent chain (load, dot, butterfly, exp, accumulate: ~0.5 us each on the
// H200), so with W warps a context of n keys costs ~n / (4 W) steps: tg512 ran 5% slower than tg128
// at 4 warps (bench/results/2026-11-30-norm-epilogue-bisect-h200). W = 8 and 16 shorten the chain
// (short_warps chooses; see there).
constexpr int kShortKeys = 4;  // keys per warp and step
constexpr int64_t kShortMaxKeys = 1024;  // the longest context it can serve (short_max_keys)

template <int D, int W>
__global__ void __launch_bounds__(W * 32) attention_short_kernel(const AttnParams p) {
    constexpr int E = D / 32;
    __shared__ float sm_acc[W][D];
    __shared__ float sm_m[W];
    __shared__ float sm_l[W];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = static_cast<int>(blockIdx.x), hk = h / p.group;
    const int e0 = lane * E;
    const int64_t k1 = min(static_cast<int64_t>(*p.pos0) + 1, p.capacity);  // the token sees keys [0, k1)

    float qr[E], acc[E];
    const float* src = p.q + static_cast<int64_t>(h) * D + e0;
#pragma unroll
    for (int e = 0; e < E; ++e) qr[e] = src[e] * p.scale, acc[e] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const uint8_t* kbase = p.k + hk * p.k_head_bytes;
    const uint8_t* vbase = p.v + hk * p.v_head_bytes;
    for (int64_t j0 = static_cast<int64_t>(warp) * kShortKeys; j0 < k1; j0 += W * kShortKeys) {
        Raw<E> rk[kShortKeys], rv[kShortKeys];
#pragma unroll
        for (int s = 0; s < kShortKeys; ++s) {  // every load of the step first (past k1: a valid row)
            const int64_t j = min(j0 + s, k1 - 1);
            load_raw<E>(p.kf, kbase + static_cast<size_t>(j) * p.k_row_bytes, e0, rk[s]);
            load_raw<E>(p.vf, vbase + static_cast<size_t>(j) * p.v_row_bytes, e0, rv[s]);
        }
        float sc[kShortKeys];
#pragma unroll
        for (int s = 0; s < kShortKeys; ++s) {
            float kx[E];
            decode<E>(p.kf, rk[s], e0, kx);
            float dot = 0.0f;
#pragma unroll
            for (int e = 0; e < E; ++e) dot = fmaf(qr[e], kx[e], dot);
            sc[s] = dot;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int s = 0; s < kShortKeys; ++s) sc[s] += __shfl_xor_sync(0xFFFFFFFFu, sc[s], o);
        float step_max = sc[0];  // key j0 < k1 always exists
#pragma unroll
        for (int s = 1; s < kShortKeys; ++s) {
            if (j0 + s >= k1) sc[s] = -INFINITY;
            step_max = fmaxf(step_max, sc[s]);
        }
        const float m_new = fmaxf(m, step_max);
        const float alpha = expf(m - m_new);  // 0 on the first step (m = -inf)
        l *= alpha;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] *= alpha;
#pragma unroll
        for (int s = 0; s < kShortKeys; ++s) {
            const float pr = expf(sc[s] - m_new);  // 0 for keys past k1
            l += pr;
            float vx[E];
            decode<E>(p.vf, rv[s], e0, vx);
#pragma unroll
            for (int e = 0; e < E; ++e) acc[e] = fmaf(pr, vx[e], acc[e]);
        }
        m = m_new;
    }

#pragma unroll
    for (int e = 0; e < E; ++e) sm_acc[warp][e0 + e] = acc[e];
    if (lane == 0) sm_m[warp] = m, sm_l[warp] = l;
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w)
        if (sm_l[w] > 0.0f) M = fmaxf(M, sm_m[w]);
    float wt[W], L = 0.0f;
#pragma unroll
    for (int w = 0; w < W; ++w) {
        wt[w] = sm_l[w] > 0.0f ? expf(sm_m[w] - M) : 0.0f;  // a warp that saw no key weighs 0
        L += wt[w] * sm_l[w];
    }
    for (int c = static_cast<int>(threadIdx.x); c < D; c += W * 32) {
        float A = 0.0f;
#pragma unroll
        for (int w = 0; w < W; ++w) A = fmaf(wt[w], sm_acc[w][c], A);
        p.out[static_cast<int64_t>(h) * D + c] = gated(p, 0, h, c, A / L);  // L >= 1: key 0 is seen
    }
}

// One block per output row (t, h) and kCombineCols of its columns: out = sum_s w_s acc_s / sum_s
// w_s l_s with w_s = exp(m_s - max m). kCombineGroups groups of threads take every kCombineGroups-th
// split (many loads in flight, spread over n_rows * D / kCombineCols blocks) and their sums meet in
// shared memory in a fixed order (deterministic).
constexpr int kCombineCols = 64;
constexpr int kCombineGroups = 16;
constexpr int kCombineThreads = kCombineCols * kCombineGroups;

template <int D>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const AttnParams p) {
    constexpr int kT = kCombineThreads;
    __shared__ float sm_w[kTargetBlocks];
    __shared__ float sm_red[kT / 32];
    __shared__ float sm_a[kCombineGroups][kCombineCols];
    __shared__ float sm_l[kCombineGroups];
    const int64_t row = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int cl = tid % kCombineCols, g = tid / kCombineCols;
    const int c = blockIdx.y * kCombineCols + cl;
    const int64_t n_rows_all = p.n_q * p.n_head;
    float mx = -INFINITY;
    for (int s = tid; s < p.n_split; s += kT) {
        const float* ml = p.part_ml + (s * n_rows_all + row) * 2;
        if (ml[1] > 0.0f) mx = fmaxf(mx, ml[0]);
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
    if (lane == 0) sm_red[warp] = mx;
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kT / 32; ++w) M = fmaxf(M, sm_red[w]);
    for (int s = tid; s < p.n_split; s += kT) {
        const float* ml = p.part_ml + (s * n_rows_all + row) * 2;
        sm_w[s] = ml[1] > 0.0f ? expf(ml[0] - M) : 0.0f;  // a split without keys of this row weighs 0
    }
    __syncthreads();
    // Splits without keys wrote acc = 0, l = 0, so their zero weight multiplies finite values.
    float L = 0.0f, A = 0.0f;
    const size_t split_stride = static_cast<size_t>(n_rows_all) * D;
    const float* acc = p.part_acc + row * D + c;
#pragma unroll 4
    for (int s = g; s < p.n_split; s += kCombineGroups) {
        const float w = sm_w[s];
        L += w * p.part_ml[(s * n_rows_all + row) * 2 + 1];
        A += w * acc[s * split_stride];
    }
    sm_a[g][cl] = A;
    if (cl == 0) sm_l[g] = L;
    __syncthreads();
    if (g != 0) return;
    A = 0.0f, L = 0.0f;
#pragma unroll
    for (int i = 0; i < kCombineGroups; ++i) {
        A += sm_a[i][cl];
        L += sm_l[i];
    }
    const int64_t t = row / p.n_head;
    const int h = static_cast<int>(row % p.n_head);
    p.out[row * D + c] = gated(p, t, h, c, A / L);
}

struct Plan {
    int64_t n_chunks = 0;  // blocks of rows_per_block rows per KV head
    int n_split = 1;
    int64_t keys_per_split = 0;
};

// make_plan's first guess of the splits: enough blocks to fill kTargetBlocks, each covering at least
// kMinKeysPerSplit keys. The rounding to whole key steps that follows only lowers it.
int64_t first_splits(const ops::AttentionShape& s, int64_t n_q, int64_t max_keys, int64_t rows_per_block) {
    const int64_t base = (n_q * (s.n_head / s.n_head_kv) + rows_per_block - 1) / rows_per_block * s.n_head_kv;
    return std::max<int64_t>(
        1, std::min((kTargetBlocks + base - 1) / base, std::max<int64_t>(1, max_keys / kMinKeysPerSplit)));
}

// Bytes of the partial results of n_split splits (0 without a split): per split and query row, D
// accumulators and the running max and sum.
size_t split_bytes(const ops::AttentionShape& s, int64_t n_q, int64_t n_split) {
    if (n_split <= 1) return 0;
    return static_cast<size_t>(n_split) * static_cast<size_t>(n_q * s.n_head) *
           static_cast<size_t>(s.head_dim + 2) * sizeof(float);
}

// A pure function of the shape, max_keys and the kernel's rows per block (host values only), so
// the workspace size and the launch agree and a captured graph stays valid while *pos0 + n_q <=
// max_keys.
Plan make_plan(const ops::AttentionShape& s, int64_t n_q, int64_t max_keys, int64_t rows_per_block) {
    MOX_CHECK(s.n_head_kv >= 1 && s.n_head % s.n_head_kv == 0, "{} heads over {} KV heads", s.n_head,
              s.n_head_kv);
    MOX_CHECK(n_q >= 1 && max_keys >= n_q, "{} queries, max_keys {}", n_q, max_keys);
    Plan plan;
    const int64_t group = s.n_head / s.n_head_kv;
    plan.n_chunks = (n_q * group + rows_per_block - 1) / rows_per_block;
    const int64_t n_split = first_splits(s, n_q, max_keys, rows_per_block);
    int64_t per = (max_keys + n_split - 1) / n_split;
    per = (per + 31) / 32 * 32;  // whole key steps of every kernel (16 and 32 keys)
    plan.n_split = static_cast<int>((max_keys + per - 1) / per);
    MOX_CHECK(plan.n_split <= kTargetBlocks, "{} splits",
              plan.n_split);  // combine_kernel holds one weight each
    plan.keys_per_split = per;
    return plan;
}

// Warps per block of attention_short_kernel for a graph sized for max_keys keys: 4 up to 256 keys, 8 up
// to 512, 16 beyond (each warp then walks at most 16 steps). An A/B on the H200: tg512 326.6 vs
// 319.4 t/s with 4 warps at every length, tg128 unchanged (336.0 vs 335.7;
// bench/results/2026-11-30-raw-staged-tiles-h200).
int short_warps(int64_t max_keys) {
    return max_keys <= 256 ? 4 : max_keys <= 512 ? 8 : 16;
}

template <int D>
void launch_short(int warps, unsigned blocks, StreamHandle stream, const AttnParams& p) {
    switch (warps) {
        case 4:
            attention_short_kernel<D, 4><<<blocks, 4 * 32, 0, stream>>>(p);
            break;
        case 8:
            attention_short_kernel<D, 8><<<blocks, 8 * 32, 0, stream>>>(p);
            break;
        default:
            attention_short_kernel<D, 16><<<blocks, 16 * 32, 0, stream>>>(p);
            break;
    }
}

// Decode graphs sized for at most this many keys take attention_short_kernel:
// tuning().attn_short_max_keys (core/tuning.h; 1024 = kShortMaxKeys by default). Against
// attention_kernel it gained 4% decode on the H200 (tg128 320.7 / 318.8 vs 306.8 t/s,
// bench/results/2026-11-30-router-h200). The decode-attention probe put it at 1024 keys at 26.4 us a
// layer with 16 warps, above the tensor-core kernel at 1025 keys, 23.6 us with a 2048-key bucket; end
// to end, tg512: 1024 329.6, 512 328.4, 256 326.4 t/s (bench/results/2026-11-30-decode-fusions-h200).
// Read at every launch, so tests can switch it (ScopedTuning); decode graphs read it once, at capture.
int64_t short_max_keys() {
    return std::min(kShortMaxKeys, tuning().attn_short_max_keys);
}

}  // namespace

void kv_store(const ops::KvView& kv, const int32_t* pos0, int64_t n_rows, const float* k, int64_t k_stride,
              const float* v, int64_t v_stride, StreamHandle stream) {
    if (n_rows == 0) return;
    MOX_CHECK(n_rows > 0 && n_rows <= 0x7FFFFFFF, "kv_store of {} rows", n_rows);
    MOX_CHECK(kv.row_elems % 32 == 0, "KV row of {} elements", kv.row_elems);
    const int kf = kv_fmt(kv.k_type), vf = kv_fmt(kv.v_type);
    const dim3 grid(static_cast<unsigned>(n_rows));
    kv_store_kernel<<<grid, kStoreThreads, 0, stream>>>(kv.k, kv.k_row_bytes, kf, kv.capacity, pos0, k,
                                                        k_stride, kv.row_elems);
    MOX_CUDA_CHECK_LAUNCH("kv_store_kernel");
    kv_store_kernel<<<grid, kStoreThreads, 0, stream>>>(kv.v, kv.v_row_bytes, vf, kv.capacity, pos0, v,
                                                        v_stride, kv.row_elems);
    MOX_CUDA_CHECK_LAUNCH("kv_store_kernel");
}

size_t attention_workspace_bound(const ops::AttentionShape& shape, int64_t max_n_q, int64_t max_keys) {
    // A call's splits never exceed first_splits (the rounding to whole key steps only lowers them),
    // which only grows with max_keys. Over the query counts the need is not monotone: 4096 queries
    // fill the GPU without splits, 952 take two (the workspace sized for 1 and 4096 queries
    // overflowed: bench/results/2026-11-30-decode-fusions-h200).
    MOX_CHECK(max_n_q >= 1 && max_keys >= 1 && shape.n_head_kv >= 1, "attention bound of {} queries, {} keys",
              max_n_q, max_keys);
    size_t most = 0;
    for (int64_t n_q = 1; n_q <= max_n_q; ++n_q)
        for (const int64_t rows : {static_cast<int64_t>(kRows), static_cast<int64_t>(attn::kPfRows)})
            most = std::max(most, split_bytes(shape, n_q, first_splits(shape, n_q, max_keys, rows)));
    return most;
}

size_t attention_workspace_bytes(const ops::AttentionShape& shape, int64_t n_q, int64_t max_keys) {
    // Either kernel may run (the choice also depends on the cache types): room for the larger plan.
    size_t most = 0;
    for (const int64_t rows : {static_cast<int64_t>(kRows), static_cast<int64_t>(attn::kPfRows)})
        most = std::max(most, split_bytes(shape, n_q, make_plan(shape, n_q, max_keys, rows).n_split));
    return most;
}

void attention(const ops::KvView& kv, const ops::AttentionShape& shape, const float* q, int64_t n_q,
               const int32_t* pos0, int64_t max_keys, const AttentionGate& gate, float* out, void* workspace,
               size_t workspace_bytes, StreamHandle stream) {
    const int64_t D = shape.head_dim;
    const bool f16_cache = kv_fmt(kv.k_type) == kFmtF16 && kv_fmt(kv.v_type) == kFmtF16;
    const bool mma = f16_cache && (D == 128 || D == 256);
    const bool mma_prefill = mma && n_q > 1;
    const Plan plan = make_plan(shape, n_q, max_keys, mma_prefill ? attn::kPfRows : kRows);
    MOX_CHECK(D == 64 || D == 128 || D == 256, "CUDA attention: head_dim {} (supported: 64, 128, 256)", D);
    MOX_CHECK(kv.row_elems == shape.n_head_kv * D, "KV row of {} elements for {} x {}", kv.row_elems,
              shape.n_head_kv, D);
    MOX_CHECK(max_keys <= kv.capacity, "max_keys {} beyond the cache capacity {}", max_keys, kv.capacity);
    MOX_CHECK(plan.n_chunks <= 0x7FFFFFFF && shape.n_head_kv <= 65535, "attention grid too large");
    if (const size_t need = split_bytes(shape, n_q, plan.n_split);
        need > 0 && (workspace == nullptr || workspace_bytes < need))
        fail("CUDA attention: {} queries over up to {} keys need {} bytes of workspace, got {}", n_q,
             max_keys, need, workspace == nullptr ? 0 : workspace_bytes);

    AttnParams p{};
    p.k = kv.k;
    p.v = kv.v;
    p.k_row_bytes = kv.k_row_bytes;
    p.v_row_bytes = kv.v_row_bytes;
    p.k_head_bytes = quant::row_bytes(kv.k_type, D);
    p.v_head_bytes = quant::row_bytes(kv.v_type, D);
    p.kf = kv_fmt(kv.k_type);
    p.vf = kv_fmt(kv.v_type);
    p.n_head = static_cast<int>(shape.n_head);
    p.group = static_cast<int>(shape.n_head / shape.n_head_kv);
    p.n_q = n_q;
    p.n_rows_q = n_q * p.group;
    p.capacity = kv.capacity;
    p.pos0 = pos0;
    p.q = q;
    p.scale = shape.scale;
    p.gate = gate.gate;
    p.gate_token_stride = gate.token_stride;
    p.gate_head_stride = gate.head_stride;
    p.out = out;
    p.n_split = plan.n_split;
    p.keys_per_split = plan.keys_per_split;
    if (plan.n_split > 1) {
        p.part_acc = static_cast<float*>(workspace);
        p.part_ml = p.part_acc + static_cast<size_t>(plan.n_split) * static_cast<size_t>(n_q * shape.n_head) *
                                     static_cast<size_t>(D);
    }

    if (n_q == 1 && max_keys <= short_max_keys()) {
        const auto blocks = static_cast<unsigned>(shape.n_head);
        const int warps = short_warps(max_keys);
        switch (D) {
            case 64:
                launch_short<64>(warps, blocks, stream, p);
                break;
            case 128:
                launch_short<128>(warps, blocks, stream, p);
                break;
            default:
                launch_short<256>(warps, blocks, stream, p);
                break;
        }
        MOX_CUDA_CHECK_LAUNCH("attention_short_kernel");
        return;
    }
    const dim3 grid(static_cast<unsigned>(plan.n_chunks), static_cast<unsigned>(shape.n_head_kv),
                    static_cast<unsigned>(plan.n_split));
    const unsigned n_rows_all = static_cast<unsigned>(n_q * shape.n_head);
    const bool mma_decode = mma && n_q == 1 && p.group <= 8 && plan.keys_per_split % attn::kMmaKeys == 0;
    if (mma_decode || mma_prefill) {
        if (mma_decode) {
            MOX_CHECK(plan.n_chunks == 1, "decode attention: {} row chunks", plan.n_chunks);
            attn::launch_mma_decode(p, D, grid, stream);
        } else {
            attn::launch_mma_prefill(p, D, static_cast<int>(shape.n_head_kv), stream);
        }
        if (plan.n_split > 1) {
            if (D == 128)
                combine_kernel<128><<<dim3(n_rows_all, 128 / kCombineCols), kCombineThreads, 0, stream>>>(p);
            else
                combine_kernel<256><<<dim3(n_rows_all, 256 / kCombineCols), kCombineThreads, 0, stream>>>(p);
            MOX_CUDA_CHECK_LAUNCH("combine_kernel");
        }
        return;
    }
    switch (D) {
        case 64:
            attention_kernel<64><<<grid, kThreads, 0, stream>>>(p);
            MOX_CUDA_CHECK_LAUNCH("attention_kernel<64>");
            if (plan.n_split > 1)
                combine_kernel<64><<<dim3(n_rows_all, 64 / kCombineCols), kCombineThreads, 0, stream>>>(p);
            break;
        case 128:
            attention_kernel<128><<<grid, kThreads, 0, stream>>>(p);
            MOX_CUDA_CHECK_LAUNCH("attention_kernel<128>");
            if (plan.n_split > 1)
                combine_kernel<128><<<dim3(n_rows_all, 128 / kCombineCols), kCombineThreads, 0, stream>>>(p);
            break;
        default:
            attention_kernel<256><<<grid, kThreads, 0, stream>>>(p);
            MOX_CUDA_CHECK_LAUNCH("attention_kernel<256>");
            if (plan.n_split > 1)
                combine_kernel<256><<<dim3(n_rows_all, 256 / kCombineCols), kCombineThreads, 0, stream>>>(p);
            break;
    }
    MOX_CUDA_CHECK_LAUNCH("combine_kernel");
}

}  // namespace mox::cuda

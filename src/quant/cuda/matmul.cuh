// The tile machinery of the batched (prefill) matrix products on the tensor cores, shared by the
// dense matmul (quant/cuda/matmul.cu) and the grouped MoE experts (ops/cuda/moe_batch.cu). Only .cu
// files include this header.
//
// One thread block computes a tile C[kBT tokens, kBR output rows] = A W^T, looping over the inner
// dimension in chunks of kSegsPerChunk 32-element segments (segments.cuh):
//   - each of the 256 threads decodes one segment of one weight row (kBR rows x 2 segments) and
//     writes its 32 values, rounded to fp16, into shared memory in the segment's decode order;
//   - the activation chunk [kBT, 64] is read from fp32 rows (any row pointers: dense rows or rows
//     gathered by expert) in the same per-segment order and rounded to fp16, so the two operands
//     agree element by element and a dot product over the chunk is unchanged by the permutation;
//   - 8 warps (2 along tokens x 4 along rows) each own a 32 x 32 sub-tile of 2 x 2 WMMA 16x16x16
//     fragments with fp32 accumulators.
// fp16 (not bf16) operands: 11 significant bits instead of 8 keep the rounding error near 1e-3 of
// sum |w x|; activations and weights of the model stay far below fp16's 65504 (hidden states reach
// a few hundred, SwiGLU intermediates a few thousand at most), and products accumulate in fp32.
#pragma once

#include "quant/cuda/matvec.cuh"

#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>
#include <type_traits>

namespace mox::cuda::mm {

inline constexpr int kBT = 64;                  // tokens per tile
inline constexpr int kBR = 128;                 // output rows per tile
inline constexpr int kSegsPerChunk = 2;         // segments per row per inner-dimension step
inline constexpr int kBK = 32 * kSegsPerChunk;  // inner elements per step
inline constexpr int kMmThreads = 256;          // one weight segment per thread and step
inline constexpr int kLd = kBK + 8;   // halves per staged row: 144 B, ldmatrix without bank conflicts
inline constexpr int kLdC = kBR + 4;  // floats per staged output row
static_assert(kMmThreads == kBR * kSegsPerChunk, "one segment per thread");

using AccFrag = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;

// Shared-memory layout for NW weight matrices sharing one activation tile: x [kBT][kLd] halves,
// then w[NW] [kBR][kLd] halves; after the inner loop the same bytes hold c [kBT][kLdC] floats.
template <int NW>
struct Layout {
    static constexpr int kXBytes = kBT * kLd * 2;
    static constexpr int kWBytes = kBR * kLd * 2;
    static constexpr int kInBytes = kXBytes + NW * kWBytes;
    static constexpr int kCBytes = kBT * kLdC * 4;
    static constexpr int kBytes = kInBytes > kCBytes ? kInBytes : kCBytes;
};

// Converts one decoded segment to fp16 and stores its 32 values (64 bytes, 16-byte aligned).
template <class T>
__device__ __forceinline__ void store_seg_half(const seg::Seg& s, __half* dst) {
    uint4* d4 = reinterpret_cast<uint4*>(dst);
#pragma unroll
    for (int v = 0; v < 4; ++v) {
        uint32_t wd[4];
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int j = 8 * v + 2 * p;
            float a = s.d[v] * s.q[j], b = s.d[v] * s.q[j + 1];
            if constexpr (T::kHasMin) a -= s.m[v], b -= s.m[v];
            const __half2 h = __floats2half2_rn(a, b);
            wd[p] = *reinterpret_cast<const uint32_t*>(&h);
        }
        d4[v] = make_uint4(wd[0], wd[1], wd[2], wd[3]);
    }
}

// Accumulates the block's tile over the whole inner dimension n_in into acc[w][a][b] (warp fragment
// a along tokens, b along rows, for weight matrix w). All threads of the block must call it.
//   wrow[w]: the weight row this thread decodes (row threadIdx.x / 2 of the tile), nullptr past n_out;
//   a_rows:  kBT activation row pointers in shared memory, nullptr for padding tokens;
//   a_valid: tokens of the tile that exist (the rest are padding rows at the end);
//   tbl:     the type's value table in shared memory (staged and synchronised by the caller).
template <class T, int NW>
__device__ void mma_tile(const uint8_t* const (&wrow)[NW], int64_t n_in, const float* const* a_rows,
                         int a_valid, unsigned char* smem, const float* tbl, AccFrag (&acc)[NW][2][2]) {
    using namespace nvcuda;
    __half* xs = reinterpret_cast<__half*>(smem);
    __half* ws = reinterpret_cast<__half*>(smem + Layout<NW>::kXBytes);
    const int tid = threadIdx.x, warp = tid / kWarp;
    const int wt = warp & 1, wr = warp >> 1;  // warp's sub-tile: tokens 32 wt.., rows 32 wr..
    const bool warp_active = wt * 32 < a_valid;
    const int rr = tid >> 1, rs = tid & 1;           // decode role: tile row, segment of the step
    const int kk = tid & (kBK - 1), ti = tid / kBK;  // staging role: chunk column, first token
    const int ks = kk >> 5, kj = kk & 31;
    const int64_t n_segs = n_segments<T>(n_in);

#pragma unroll
    for (int w = 0; w < NW; ++w)
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int b = 0; b < 2; ++b) wmma::fill_fragment(acc[w][a][b], 0.0f);

#pragma unroll 1
    for (int64_t g0 = 0; g0 < n_segs; g0 += kSegsPerChunk) {
        // Activations: element e of every tile token at chunk column kk (-1: zero padding).
        {
            const int64_t g = g0 + ks;
            int64_t e = -1;
            if (g < n_segs) {
                e = segment_elem<T>(g, kj);
                if (e >= n_in) e = -1;
            }
#pragma unroll 4
            for (int i = ti; i < kBT; i += kMmThreads / kBK) {
                const float* a = a_rows[i];
                const float v = (a != nullptr && e >= 0) ? a[e] : 0.0f;
                xs[i * kLd + kk] = __float2half_rn(v);
            }
        }
        // Weights: this thread's segment of each matrix.
#pragma unroll
        for (int w = 0; w < NW; ++w) {
            __half* dst = ws + (w * kBR + rr) * kLd + rs * 32;
            const int64_t g = g0 + rs;
            if (wrow[w] != nullptr && g < n_segs) {
                seg::Seg s;
                T::load(wrow[w], g, n_in, s, tbl);
                store_seg_half<T>(s, dst);
            } else {
                uint4* d4 = reinterpret_cast<uint4*>(dst);
#pragma unroll
                for (int v = 0; v < 4; ++v) d4[v] = make_uint4(0, 0, 0, 0);
            }
        }
        __syncthreads();
        if (warp_active) {  // warp-uniform: sub-tiles of padding tokens only are skipped
#pragma unroll
            for (int k0 = 0; k0 < kBK; k0 += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
#pragma unroll
                for (int a = 0; a < 2; ++a)
                    wmma::load_matrix_sync(fa[a], xs + (wt * 32 + 16 * a) * kLd + k0, kLd);
#pragma unroll
                for (int w = 0; w < NW; ++w) {
#pragma unroll
                    for (int b = 0; b < 2; ++b) {
                        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
                        wmma::load_matrix_sync(fb, ws + (w * kBR + wr * 32 + 16 * b) * kLd + k0, kLd);
#pragma unroll
                        for (int a = 0; a < 2; ++a) wmma::mma_sync(acc[w][a][b], fa[a], fb, acc[w][a][b]);
                    }
                }
            }
        }
        __syncthreads();
    }
}

// Stages one accumulator set into the c area (the caller has passed mma_tile's final barrier, so the
// operand tiles are dead), then writes row r of token i to y_rows[i][r0 + r] for i < a_valid and
// r < rows_valid. All threads of the block must call it.
__device__ __forceinline__ void store_tile(AccFrag (&acc)[2][2], unsigned char* smem, float* const* y_rows,
                                           int a_valid, int64_t r0, int64_t rows_valid) {
    using namespace nvcuda;
    float* c = reinterpret_cast<float*>(smem);
    const int warp = threadIdx.x / kWarp, wt = warp & 1, wr = warp >> 1;
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int b = 0; b < 2; ++b)
            wmma::store_matrix_sync(c + (wt * 32 + 16 * a) * kLdC + wr * 32 + 16 * b, acc[a][b], kLdC,
                                    wmma::mem_row_major);
    __syncthreads();
    const int n_rows = static_cast<int>(rows_valid < kBR ? rows_valid : kBR);
    for (int idx = threadIdx.x; idx < kBT * kBR; idx += kMmThreads) {
        const int i = idx / kBR, r = idx % kBR;
        if (i < a_valid && r < n_rows) y_rows[i][r0 + r] = c[i * kLdC + r];
    }
}

// ---- Version 2 (the default; the tile code above is version 1, tuning().matmul_v1):
//   - activations are converted once per call to fp16 rows in the weight type's segment order
//     (permute_half_kernel), so a chunk of one token is 128 contiguous bytes, copied with cp.async
//     (no register round trip, no per-element index math in the inner loop);
//   - two shared-memory stages: while the warps run the MMAs of chunk s, the same warps have already
//     issued the cp.async of chunk s + 1's activations and decoded its weights into the other stage,
//     so one barrier per chunk instead of two and global latency overlaps tensor-core work;
//   - the token tile BT is 32, 64 or 128 (the MoE experts see ~16 tokens each at 512-token prefill;
//     big dense batches decode each weight once per 128 tokens);
//   - the inner dimension of a block is a range of chunks [g_begin, g_end) (split-K in matmul.cu).
// The fp16 operands are the same values as version 1's, so each MMA sees the same products.

// Halves per permuted activation row: the row's segments rounded up to whole chunks (zeros after).
template <class T>
__host__ __device__ inline int64_t xh_stride(int64_t n_in) {
    const int64_t s = n_segments<T>(n_in);
    return (s + kSegsPerChunk - 1) / kSegsPerChunk * kSegsPerChunk * seg::kSegElems;
}

// Precise mode (P): a value v is carried as two fp16 parts, hi = fp16(v) and lo = fp16((v - hi) 2^11)
// (scaled so that lo stays a normal fp16 number: v - hi is below 2^-11 |v|); v = hi + lo 2^-11 up to
// 2^-22 relative. Products of two such values are taken as hi hi + (hi lo + lo hi) 2^-11 (the lo lo
// term is 2^-22 of the product), in two accumulators.
inline constexpr float kLoScale = 2048.0f, kLoUnscale = 1.0f / 2048.0f;

// xh[r, 32 g + j] = fp16(x[r, e]) with e the element of position j in segment g (segments.cuh), 0 past
// n_in or past the last segment. x: [n_rows, n_in] fp32; xh: [n_rows, xh_stride] halves, or with P
// [n_rows, 2, xh_stride] (hi then lo parts of each row).
// Grid (ceil(stride / 256), ceil(n_rows / kPermuteRows) up to 65535), 256 threads; rows stride over
// grid y. Several rows per block: at one row a block (4096 tokens x 2048: 32K blocks of one load and
// one store per thread) the launch ran at ~1.5 TB/s, paced by block scheduling, not by bytes.
inline constexpr int64_t kPermuteRows = 4;

template <class T, bool P = false>
__global__ void __launch_bounds__(256)
    permute_half_kernel(const float* __restrict__ x, int64_t n_in, int64_t n_rows, __half* __restrict__ xh) {
    const int64_t stride = xh_stride<T>(n_in), n_segs = n_segments<T>(n_in);
    const int64_t p = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
    if (p >= stride) return;
    const int64_t g = p >> 5;
    const int j = static_cast<int>(p & 31);
    int64_t e = -1;
    if (g < n_segs) {
        e = segment_elem<T>(g, j);
        if (e >= n_in) e = -1;
    }
#pragma unroll 4
    for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
        const float v = e >= 0 ? x[r * n_in + e] : 0.0f;
        const __half hi = __float2half_rn(v);
        if constexpr (P) {
            xh[2 * r * stride + p] = hi;
            xh[(2 * r + 1) * stride + p] = __float2half_rn((v - __half2float(hi)) * kLoScale);
        } else {
            xh[r * stride + p] = hi;
        }
    }
}

// Host side: launches permute_half_kernel<T, P> on `stream` (a cudaStream_t).
template <class T, bool P = false>
void permute_half(const float* x, int64_t n_in, int64_t n_rows, __half* xh, cudaStream_t stream) {
    if (n_rows == 0) return;
    const int64_t stride = xh_stride<T>(n_in);
    const int64_t blocks_y = (n_rows + kPermuteRows - 1) / kPermuteRows;
    const dim3 grid(static_cast<unsigned>((stride + 255) / 256),
                    static_cast<unsigned>(blocks_y < 65535 ? blocks_y : 65535));
    permute_half_kernel<T, P><<<grid, 256, 0, stream>>>(x, n_in, n_rows, xh);
    MOX_CUDA_CHECK_LAUNCH("permute_half_kernel");
}

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gsrc) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gsrc) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// Asks L2 for the lines of the block holding segment g (a hint: nothing waits on it, so a block
// prefetched a few chunks ahead is usually in L2 when its demand load comes). Only called for
// g < n_segs, so every address is inside the row (a float row's last segment may be partial:
// its block is clipped to the row's n_in).
template <class T>
__device__ __forceinline__ void prefetch_block(const uint8_t* row, int64_t g, int64_t n_in) {
    constexpr int kBytes = block_bytes<T>();
    const uint8_t* p = row + (g / T::kSegs) * kBytes;
    int bytes = kBytes;
    if constexpr (seg::kIsFloat<T>) {
        const int64_t left = (n_in - g * 32) * (kBytes / 32);
        if (left < bytes) bytes = static_cast<int>(left);
    }
    for (int o = 0; o < bytes; o += 128) asm volatile("prefetch.L2 [%0];" ::"l"(p + o));
    asm volatile("prefetch.L2 [%0];" ::"l"(p + bytes - 1));
}

// Chunks ahead of use that stage_chunk prefetches: one K-quant super-block (4 chunks).
inline constexpr int kPrefetchSegs = 8;

// Warp arrangement of a BT x kBR tile: kWT warps along tokens (32 tokens each), kWR along rows, each
// warp kFB fragments of 16 rows (BT 128: 4 x 2 warps of 32 x 64; BT 64: 2 x 4 warps of 32 x 32;
// BT 32: 1 x 8 warps of 32 x 16).
template <int BT>
struct Shape {
    static_assert(BT == 32 || BT == 64 || BT == 128, "token tile of 32, 64 or 128");
    static constexpr int kWT = BT / 32;
    static constexpr int kWR = (kMmThreads / kWarp) / kWT;
    static constexpr int kRowsPerWarp = kBR / kWR;
    static constexpr int kFB = kRowsPerWarp / 16;
};

// Dynamic shared memory: two stages of { x [parts][BT][kLd], w[NW] [parts][kBR][kLd] } halves (parts:
// hi, and lo with P); after the loop the same bytes hold c [BT][kLdC] floats. Every part starts at a
// multiple of 32 bytes (WMMA loads).
template <int NW, int BT, bool P = false>
struct Layout2 {
    static constexpr int kParts = P ? 2 : 1;
    static constexpr int kXPart = BT * kLd;   // halves from an x hi tile to its lo tile
    static constexpr int kWPart = kBR * kLd;  // halves from a w hi tile to its lo tile
    static constexpr int kXBytes = kParts * kXPart * 2;
    static constexpr int kWBytes = kParts * kWPart * 2;
    static constexpr int kStageBytes = kXBytes + NW * kWBytes;
    static constexpr int kInBytes = 2 * kStageBytes;
    static constexpr int kCBytes = BT * kLdC * 4;
    static constexpr int kBytes = kInBytes > kCBytes ? kInBytes : kCBytes;
    static_assert(kXBytes % 128 == 0 && kWBytes % 128 == 0, "stage parts stay aligned");
};

// Precise mode: one decoded segment as hi and lo fp16 parts (kLoScale above).
template <class T>
__device__ __forceinline__ void store_seg_half_split(const seg::Seg& s, __half* hi, __half* lo) {
    uint4* h4 = reinterpret_cast<uint4*>(hi);
    uint4* l4 = reinterpret_cast<uint4*>(lo);
#pragma unroll
    for (int v = 0; v < 4; ++v) {
        uint32_t wh[4], wl[4];
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int j = 8 * v + 2 * p;
            float a = s.d[v] * s.q[j], b = s.d[v] * s.q[j + 1];
            if constexpr (T::kHasMin) a -= s.m[v], b -= s.m[v];
            const __half2 h = __floats2half2_rn(a, b);
            const __half2 l =
                __floats2half2_rn((a - __low2float(h)) * kLoScale, (b - __high2float(h)) * kLoScale);
            wh[p] = *reinterpret_cast<const uint32_t*>(&h);
            wl[p] = *reinterpret_cast<const uint32_t*>(&l);
        }
        h4[v] = make_uint4(wh[0], wh[1], wh[2], wh[3]);
        l4[v] = make_uint4(wl[0], wl[1], wl[2], wl[3]);
    }
}

// The activations of one chunk (segments g0, g0 + 1) into a stage's x area by cp.async: parts x BT
// tokens x 8 pieces of 16 bytes (64 halves), padding tokens as zeros. With P, a_rows[i] + lo_off is
// the lo part of row i.
template <int BT, bool P>
__device__ __forceinline__ void stage_x(const __half* const* a_rows, int64_t lo_off, int64_t g0, __half* xs) {
    constexpr int kParts = P ? 2 : 1;
#pragma unroll
    for (int c = threadIdx.x; c < kParts * BT * 8; c += kMmThreads) {
        const int part = c / (BT * 8), i = (c >> 3) % BT, q = c & 7;
        __half* dst = xs + part * BT * kLd + i * kLd + q * 8;
        const __half* a = a_rows[i];
        if (a != nullptr)
            cp_async16(dst, a + part * lo_off + g0 * seg::kSegElems + q * 8);
        else
            *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
}

// The warps' MMAs over one staged chunk (x [BT][kLd], w [kBR][kLd] halves) into acc.
template <int BT>
__device__ __forceinline__ void mma_chunk(const __half* xs, const __half* ws, int wt, int wr,
                                          AccFrag (&acc)[2][Shape<BT>::kFB]) {
    using namespace nvcuda;
    using S = Shape<BT>;
#pragma unroll
    for (int k0 = 0; k0 < kBK; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
#pragma unroll
        for (int a = 0; a < 2; ++a) wmma::load_matrix_sync(fa[a], xs + (wt * 32 + 16 * a) * kLd + k0, kLd);
#pragma unroll
        for (int b = 0; b < S::kFB; ++b) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
            wmma::load_matrix_sync(fb, ws + (wr * S::kRowsPerWarp + 16 * b) * kLd + k0, kLd);
#pragma unroll
            for (int a = 0; a < 2; ++a) wmma::mma_sync(acc[a][b], fa[a], fb, acc[a][b]);
        }
    }
}

// One chunk (segments g0, g0 + 1) into a stage: the activations by cp.async (padding tokens as
// zeros), this thread's weight segment of each matrix decoded to fp16 (zeros past the row's end).
// With P, a_rows[i] + lo_off is the lo part of the row, and both parts of both operands are staged.
template <class T, int NW, int BT, bool P>
__device__ __forceinline__ void stage_chunk(const uint8_t* const (&wrow)[NW], int64_t n_in, int64_t n_segs,
                                            const __half* const* a_rows, int64_t lo_off, int64_t g0,
                                            unsigned char* stage, const float* tbl) {
    using L = Layout2<NW, BT, P>;
    __half* ws = reinterpret_cast<__half*>(stage + L::kXBytes);
    const int tid = threadIdx.x;
    stage_x<BT, P>(a_rows, lo_off, g0, reinterpret_cast<__half*>(stage));
    const int rr = tid >> 1, rs = tid & 1;
    const int64_t g = g0 + rs;
    // Prefetch: the block of segment g + kPrefetchSegs, once per block (multi-segment blocks: by the
    // rs = 0 thread when the chunk starts a block).
    const int64_t gp = g + kPrefetchSegs;
    const bool do_prefetch = gp < n_segs && (T::kSegs == 1 || (rs == 0 && gp % T::kSegs == 0));
#pragma unroll
    for (int w = 0; w < NW; ++w) {
        if (do_prefetch && wrow[w] != nullptr) prefetch_block<T>(wrow[w], gp, n_in);
        __half* dst = ws + w * L::kParts * L::kWPart + rr * kLd + rs * 32;
        if (wrow[w] != nullptr && g < n_segs) {
            seg::Seg s;
            T::load(wrow[w], g, n_in, s, tbl);
            if constexpr (P)
                store_seg_half_split<T>(s, dst, dst + L::kWPart);
            else
                store_seg_half<T>(s, dst);
        } else {
#pragma unroll
            for (int part = 0; part < L::kParts; ++part) {
                uint4* d4 = reinterpret_cast<uint4*>(dst + part * L::kWPart);
#pragma unroll
                for (int v = 0; v < 4; ++v) d4[v] = make_uint4(0, 0, 0, 0);
            }
        }
    }
}

// Accumulates the block's tile over segments [g_begin, g_end) (multiples of kSegsPerChunk, at most
// xh_stride / 32) into acc[w][a][b] (token fragment a, row fragment b, weight matrix w). All threads
// of the block call it; it ends with a barrier, after which smem may be reused (store_tile2).
//   wrow[w]: the weight row this thread decodes (tile row threadIdx.x / 2), nullptr past n_out;
//   a_rows:  BT pointers (shared memory) to permuted fp16 activation rows (16-byte aligned, from
//            permute_half), nullptr for padding tokens; a_valid: tokens that exist (then padding);
//   P:       precise mode: lo_off halves from a row's hi part to its lo part; each chunk's hi x hi
//            products go to a fresh fragment added to acc in fp32 (round to nearest), so the tensor
//            cores' own accumulation error stays that of one 64-element chunk.
template <class T, int NW, int BT, bool P = false>
__device__ void mma_tile2(const uint8_t* const (&wrow)[NW], int64_t n_in, const __half* const* a_rows,
                          int64_t lo_off, int a_valid, int64_t g_begin, int64_t g_end, unsigned char* smem,
                          const float* tbl, AccFrag (&acc)[NW][2][Shape<BT>::kFB]) {
    using namespace nvcuda;
    using S = Shape<BT>;
    using L = Layout2<NW, BT, P>;
    constexpr int kFB = S::kFB;
    const int warp = threadIdx.x / kWarp;
    const int wt = warp % S::kWT, wr = warp / S::kWT;
    const bool warp_active = wt * 32 < a_valid;
    const int64_t n_segs = n_segments<T>(n_in);

#pragma unroll
    for (int w = 0; w < NW; ++w)
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int b = 0; b < kFB; ++b) wmma::fill_fragment(acc[w][a][b], 0.0f);
    // Precise mode only: the (hi lo + lo hi) sums, and this chunk's hi hi sums.
    constexpr int kNP = P ? NW : 0;
    AccFrag acc_lo[kNP > 0 ? kNP : 1][2][kFB], acc_chunk[kNP > 0 ? kNP : 1][2][kFB];
    if constexpr (P) {
#pragma unroll
        for (int w = 0; w < NW; ++w)
#pragma unroll
            for (int a = 0; a < 2; ++a)
#pragma unroll
                for (int b = 0; b < kFB; ++b) wmma::fill_fragment(acc_lo[w][a][b], 0.0f);
    }

    const int64_t n_steps = (g_end - g_begin) / kSegsPerChunk;
    if (n_steps <= 0) return;  // uniform over the block
    stage_chunk<T, NW, BT, P>(wrow, n_in, n_segs, a_rows, lo_off, g_begin, smem, tbl);
    cp_async_wait_all();
    __syncthreads();
#pragma unroll 1
    for (int64_t s = 0; s < n_steps; ++s) {
        const unsigned char* cur = smem + (s & 1) * L::kStageBytes;
        // The other stage was last read by the MMAs of step s - 1, which all finished before the
        // barrier that ended that step.
        if (s + 1 < n_steps)  // uniform
            stage_chunk<T, NW, BT, P>(wrow, n_in, n_segs, a_rows, lo_off, g_begin + (s + 1) * kSegsPerChunk,
                                      smem + ((s + 1) & 1) * L::kStageBytes, tbl);
        if (P && warp_active) {
            const __half* xs = reinterpret_cast<const __half*>(cur);
            const __half* ws = reinterpret_cast<const __half*>(cur + L::kXBytes);
#pragma unroll
            for (int w = 0; w < kNP; ++w)
#pragma unroll
                for (int a = 0; a < 2; ++a)
#pragma unroll
                    for (int b = 0; b < kFB; ++b) wmma::fill_fragment(acc_chunk[w][a][b], 0.0f);
#pragma unroll
            for (int k0 = 0; k0 < kBK; k0 += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2], fl[2];
#pragma unroll
                for (int a = 0; a < 2; ++a) {
                    wmma::load_matrix_sync(fa[a], xs + (wt * 32 + 16 * a) * kLd + k0, kLd);
                    wmma::load_matrix_sync(fl[a], xs + L::kXPart + (wt * 32 + 16 * a) * kLd + k0, kLd);
                }
#pragma unroll
                for (int w = 0; w < kNP; ++w) {
#pragma unroll
                    for (int b = 0; b < kFB; ++b) {
                        const __half* wb =
                            ws + w * L::kParts * L::kWPart + (wr * S::kRowsPerWarp + 16 * b) * kLd + k0;
                        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb, fbl;
                        wmma::load_matrix_sync(fb, wb, kLd);
                        wmma::load_matrix_sync(fbl, wb + L::kWPart, kLd);
#pragma unroll
                        for (int a = 0; a < 2; ++a) {
                            wmma::mma_sync(acc_chunk[w][a][b], fa[a], fb, acc_chunk[w][a][b]);
                            wmma::mma_sync(acc_lo[w][a][b], fa[a], fbl, acc_lo[w][a][b]);
                            wmma::mma_sync(acc_lo[w][a][b], fl[a], fb, acc_lo[w][a][b]);
                        }
                    }
                }
            }
#pragma unroll
            for (int w = 0; w < kNP; ++w)
#pragma unroll
                for (int a = 0; a < 2; ++a)
#pragma unroll
                    for (int b = 0; b < kFB; ++b)
#pragma unroll
                        for (int i = 0; i < acc_chunk[w][a][b].num_elements; ++i)
                            acc[w][a][b].x[i] += acc_chunk[w][a][b].x[i];
        }
        if (!P && warp_active) {  // warp-uniform: sub-tiles of padding tokens only are skipped
            const __half* xs = reinterpret_cast<const __half*>(cur);
            const __half* ws = reinterpret_cast<const __half*>(cur + L::kXBytes);
#pragma unroll
            for (int w = 0; w < NW; ++w) mma_chunk<BT>(xs, ws + w * kBR * kLd, wt, wr, acc[w]);
        }
        cp_async_wait_all();  // this thread's copies into the next stage have landed ...
        __syncthreads();      // ... and everyone's are visible; this stage's reads are done
    }
    if constexpr (P) {
#pragma unroll
        for (int w = 0; w < NW; ++w)
#pragma unroll
            for (int a = 0; a < 2; ++a)
#pragma unroll
                for (int b = 0; b < kFB; ++b)
#pragma unroll
                    for (int i = 0; i < acc[w][a][b].num_elements; ++i)
                        acc[w][a][b].x[i] += acc_lo[w][a][b].x[i] * kLoUnscale;
    }
}

// ---- Raw staging (quantized weights, token tiles 32 and 64, not precise): stage_chunk's weight
// loads were the tile's bottleneck at ~16 tokens per expert (ncu of the MoE gate/up at 512 tokens,
// bench/results/2026-11-30-raw-staged-tiles-h200: 43% of the warps' cycles waiting on them, L1 at 84%
// of its throughput with 4.8 useful bytes of each 32-byte sector: a warp's lanes read 16 rows'
// segments, a row apart). Here the block
// first copies the next whole blocks of its 128 rows ("units") into shared memory with cp.async,
// consecutive threads taking consecutive 16-byte pieces of a row, one unit ahead of the decode, which
// then reads them there (segments.cuh's Smem loaders). A unit is at least two chunks (one K-quant
// super-block, four 32-element blocks), so each copy has a step or more to land.

template <class T>
struct RawUnit {
    static constexpr int kSegs = T::kSegs > 2 * kSegsPerChunk ? T::kSegs : 2 * kSegsPerChunk;
    static constexpr int kBytes = kSegs / T::kSegs * block_bytes<T>();  // of one row
    // A unit starts anywhere in a 16-byte piece (blocks of 18, 34, 210 bytes...): its slot holds
    // the 16-byte aligned span around it, in an odd number of pieces, so that the rows a warp decodes
    // (16, at the same offsets) fall on different banks: 128-byte slots (Q3_K, IQ3_XXS) put every
    // row on the same banks, and those types ran 20-35% slower than with direct loads in the
    // calibrations of bench/results/2026-11-30-raw-staged-tiles-h200 (Q5_K's 192 bytes, 8 rows a bank: no
    // gain). With odd slots Q3_K gained 5-14% over the direct loads
    // (bench/results/2026-11-30-decode-fusions-h200/raw-tiles-by-type); IQ3_XXS still lost (below).
    static constexpr int kPieces = (kBytes + 15 + 15) / 16 | 1;
    static constexpr int kSlot = 16 * kPieces;
    static constexpr int kRingBytes = 2 * kBR * kSlot;
};

// The grid i-quants (a weight is a lookup in a codebook): their decode is table loads, not bytes of
// the row, and raw staging made IQ3_XXS 3-10% slower and IQ2_XXS's 4096-token MoE 11% slower than
// the direct loads on the H200 (bench/results/2026-11-30-decode-fusions-h200/raw-tiles-by-type). The
// other five decode the same way and are left out with them (not measured one by one).
template <class T>
inline constexpr bool kGridIQuant =
    std::is_same_v<T, seg::IQ2_XXS> || std::is_same_v<T, seg::IQ2_XS> || std::is_same_v<T, seg::IQ2_S> ||
    std::is_same_v<T, seg::IQ3_XXS> || std::is_same_v<T, seg::IQ3_S> || std::is_same_v<T, seg::IQ1_S> ||
    std::is_same_v<T, seg::IQ1_M>;

// Tiles that have a raw-staged kernel: quantized weights but the grid i-quants, token tiles 32 and
// 64, not precise. Whether it runs is decided per device (raw_tiles_fit, matmul.cu): only where two
// of its blocks fit on an SM. Its ring costs 28-60 KB of shared memory; Q6_K's 240-byte slots at
// tile 64 leave one block per SM on the H200 and ran 16% slower than the direct loads there
// (bench/results/2026-11-30-raw-staged-tiles-h200); on GPUs with ~100 KB per SM (such as sm_86 and
// sm_89) no raw tile fits twice, so they keep the direct loads.
template <class T, int BT, bool P>
inline constexpr bool kRawEligible = !seg::kIsFloat<T> && !kGridIQuant<T> && !P && BT <= 64;

// Dynamic shared memory of a one-matrix tile: Layout2's stages, then the raw ring with R.
template <class T, int BT, bool P, bool R>
inline constexpr int kTileSmemBytes =
    R ? Layout2<1, BT, P>::kInBytes + RawUnit<T>::kRingBytes : Layout2<1, BT, P>::kBytes;

// Issues the cp.async copies of unit u of every tile row (w_rows: kBR row pointers in shared memory,
// nullptr past n_out) into ring slot `slot`; bytes past row_bytes are not the row's and not copied
// (the 16-byte pieces around the row's end are: device allocations are padded by 16 bytes).
template <class T>
__device__ __forceinline__ void issue_unit(const uint8_t* const* w_rows, size_t row_bytes, int64_t u,
                                           unsigned char* slot) {
    using U = RawUnit<T>;
    const int64_t b0 = u * U::kBytes;
    const int64_t b1 = min(b0 + U::kBytes, static_cast<int64_t>(row_bytes));
    for (int c = threadIdx.x; c < kBR * U::kPieces; c += kMmThreads) {
        const int r = c / U::kPieces, q = c % U::kPieces;
        const uint8_t* row = w_rows[r];
        if (row == nullptr) continue;
        const uintptr_t start = reinterpret_cast<uintptr_t>(row + b0) & ~uintptr_t{15};
        const uintptr_t end = (reinterpret_cast<uintptr_t>(row + b1) + 15) & ~uintptr_t{15};
        const uintptr_t src = start + 16 * static_cast<uintptr_t>(q);
        if (src < end) cp_async16(slot + r * U::kSlot + 16 * q, reinterpret_cast<const void*>(src));
    }
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_but_one() {
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

// mma_tile2 (one weight matrix) with raw staging: the same tile, the same fp16 operands and the
// same MMAs in the same order, so the same result. w_rows: the kBR tile rows' pointers in shared
// memory (nullptr past n_out; thread t decodes row t / 2), row_bytes: bytes of one row.
template <class T, int BT>
__device__ void mma_tile2_raw(const uint8_t* const* w_rows, size_t row_bytes, int64_t n_in,
                              const __half* const* a_rows, int a_valid, int64_t g_begin, int64_t g_end,
                              unsigned char* smem, const float* tbl, AccFrag (&acc)[1][2][Shape<BT>::kFB]) {
    using namespace nvcuda;
    using S = Shape<BT>;
    using L = Layout2<1, BT, false>;
    using U = RawUnit<T>;
    const int warp = threadIdx.x / kWarp;
    const int wt = warp % S::kWT, wr = warp / S::kWT;
    const bool warp_active = wt * 32 < a_valid;
    const int64_t n_segs = n_segments<T>(n_in);
    unsigned char* ring = smem + L::kInBytes;
    const int rr = threadIdx.x >> 1, rs = threadIdx.x & 1;
    const uint8_t* my_row = w_rows[rr];

#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int b = 0; b < S::kFB; ++b) wmma::fill_fragment(acc[0][a][b], 0.0f);
    const int64_t n_steps = (g_end - g_begin) / kSegsPerChunk;
    if (n_steps <= 0) return;  // uniform over the block
    const int64_t last_unit = (g_end - 1) / U::kSegs;

    // Decodes chunk g0's segment of this thread's row from the ring into stage `stage`.
    const auto decode = [&](int64_t g0, unsigned char* stage) {
        __half* dst = reinterpret_cast<__half*>(stage + L::kXBytes) + rr * kLd + rs * 32;
        const int64_t g = g0 + rs, u = g0 / U::kSegs;
        if (my_row != nullptr && g < n_segs) {
            const uint8_t* src = ring + (u & 1) * (kBR * U::kSlot) + rr * U::kSlot +
                                 (reinterpret_cast<uintptr_t>(my_row + u * U::kBytes) & 15);
            seg::Seg s;
            T::template load<seg::Smem>(src, g - u * U::kSegs, n_in - u * U::kSegs * seg::kSegElems, s, tbl);
            store_seg_half<T>(s, dst);
        } else {
            uint4* d4 = reinterpret_cast<uint4*>(dst);
#pragma unroll
            for (int v = 0; v < 4; ++v) d4[v] = make_uint4(0, 0, 0, 0);
        }
    };

    // Prologue: the first two units and chunk 0's activations, all landed, then chunk 0 decoded.
    const int64_t u0 = g_begin / U::kSegs;
    issue_unit<T>(w_rows, row_bytes, u0, ring + (u0 & 1) * (kBR * U::kSlot));
    if (u0 + 1 <= last_unit)
        issue_unit<T>(w_rows, row_bytes, u0 + 1, ring + ((u0 + 1) & 1) * (kBR * U::kSlot));
    stage_x<BT, false>(a_rows, 0, g_begin, reinterpret_cast<__half*>(smem));
    cp_async_wait_all();
    __syncthreads();
    decode(g_begin, smem);
    __syncthreads();
#pragma unroll 1
    for (int64_t s = 0; s < n_steps; ++s) {
        unsigned char* cur = smem + (s & 1) * L::kStageBytes;
        if (s + 1 < n_steps) {  // uniform
            unsigned char* next = smem + ((s + 1) & 1) * L::kStageBytes;
            const int64_t g1 = g_begin + (s + 1) * kSegsPerChunk, u1 = g1 / U::kSegs;
            stage_x<BT, false>(a_rows, 0, g1, reinterpret_cast<__half*>(next));
            cp_async_commit();
            // Entering unit u1: the slot of u1 - 1 is free (its last chunk was decoded before the
            // barrier that ended the previous step), so u1 + 1 goes there.
            if (u1 != (g1 - kSegsPerChunk) / U::kSegs && u1 + 1 <= last_unit)
                issue_unit<T>(w_rows, row_bytes, u1 + 1, ring + ((u1 + 1) & 1) * (kBR * U::kSlot));
            cp_async_commit();
            decode(g1, next);
        }
        if (warp_active)  // warp-uniform: sub-tiles of padding tokens only are skipped
            mma_chunk<BT>(reinterpret_cast<const __half*>(cur),
                          reinterpret_cast<const __half*>(cur + L::kXBytes), wt, wr, acc[0]);
        // Every group but this step's unit copy has landed: the next chunk's activations and the
        // unit the next decode reads (issued a step or more ago) ...
        cp_async_wait_but_one();
        __syncthreads();  // ... visible to all, and this stage's reads are done
    }
    cp_async_wait_all();  // no copy may land in shared memory the caller reuses
    __syncthreads();
}

// The tile product of one weight matrix for the kernels: mma_tile2_raw with R (w_rows: the tile
// rows, filled by the kernel only then), else mma_tile2 on the thread's own row my_row.
template <class T, int BT, bool P, bool R>
__device__ __forceinline__ void mma_tile1(const uint8_t* my_row, const uint8_t* const* w_rows,
                                          size_t row_bytes, int64_t n_in, const __half* const* a_rows,
                                          int64_t lo_off, int a_valid, int64_t g_begin, int64_t g_end,
                                          unsigned char* smem, const float* tbl,
                                          AccFrag (&acc)[1][2][Shape<BT>::kFB]) {
    if constexpr (R) {
        static_assert(kRawEligible<T, BT, P>, "no raw-staged tile for this type, tile or mode");
        mma_tile2_raw<T, BT>(w_rows, row_bytes, n_in, a_rows, a_valid, g_begin, g_end, smem, tbl, acc);
    } else {
        const uint8_t* wrow[1] = {my_row};
        mma_tile2<T, 1, BT, P>(wrow, n_in, a_rows, lo_off, a_valid, g_begin, g_end, smem, tbl, acc);
    }
}

// Host side: whether `raw_kernel` (a raw-staged tile kernel of kMmThreads threads and smem_bytes of
// dynamic shared memory) should run instead of its direct-load twin on the current device: it fits
// in a block and two of its blocks fit on an SM. The device check is the caller's to cache
// (raw_tiles_fit, matmul.cu). raw_tiles_enabled: false only while a test forces the direct loads
// (set_direct_tiles, cuda_matmul.h).
bool raw_tiles_fit(const void* raw_kernel, int smem_bytes);
bool raw_tiles_enabled();

// Whether to launch RawKernel (the R = true instance of a tile kernel for T, BT, P) instead of its
// direct-load twin: the device check once per kernel, the test's flag at every call.
template <auto RawKernel, class T, int BT, bool P>
bool use_raw_tiles() {
    static_assert(kRawEligible<T, BT, P>, "no raw-staged tile for this type, tile or mode");
    static const bool fits =
        raw_tiles_fit(reinterpret_cast<const void*>(RawKernel), kTileSmemBytes<T, BT, P, true>);
    return fits && raw_tiles_enabled();
}

// Stages one accumulator set into smem as c [BT][kLdC] floats (token i's row r at c[i * kLdC + r]; the
// caller has passed mma_tile2's final barrier) and returns c once every warp's fragments are in. All
// threads of the block must call it.
template <int BT>
__device__ __forceinline__ const float* stage_acc2(AccFrag (&acc)[2][Shape<BT>::kFB], unsigned char* smem) {
    using namespace nvcuda;
    using S = Shape<BT>;
    float* c = reinterpret_cast<float*>(smem);
    const int warp = threadIdx.x / kWarp, wt = warp % S::kWT, wr = warp / S::kWT;
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int b = 0; b < S::kFB; ++b)
            wmma::store_matrix_sync(c + (wt * 32 + 16 * a) * kLdC + wr * S::kRowsPerWarp + 16 * b, acc[a][b],
                                    kLdC, wmma::mem_row_major);
    __syncthreads();
    return c;
}

// stage_acc2, then row r of token i to y_rows[i][r0 + r] for i < a_valid, r < rows_valid. All
// threads of the block must call it.
template <int BT>
__device__ __forceinline__ void store_tile2(AccFrag (&acc)[2][Shape<BT>::kFB], unsigned char* smem,
                                            float* const* y_rows, int a_valid, int64_t r0,
                                            int64_t rows_valid) {
    const float* c = stage_acc2<BT>(acc, smem);
    const int n_rows = static_cast<int>(rows_valid < kBR ? rows_valid : kBR);
    for (int idx = threadIdx.x; idx < BT * kBR; idx += kMmThreads) {
        const int i = idx / kBR, r = idx % kBR;
        if (i < a_valid && r < n_rows) y_rows[i][r0 + r] = c[i * kLdC + r];
    }
}

}  // namespace mox::cuda::mm

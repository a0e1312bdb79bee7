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
                e = (g / T::kSegs) * T::kBlockElems + T::elem_of(static_cast<int>(g % T::kSegs), kj);
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

}  // namespace mox::cuda::mm

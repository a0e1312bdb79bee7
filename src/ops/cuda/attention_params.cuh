// What the attention kernels of ops/cuda/attention.cu (fp32 FMAs, every cache type, the split
// combine) and ops/cuda/attention_mma.cu (tensor cores, f16 caches) share: the launch parameters,
// the output gate, and the tensor-core launchers the dispatcher in attention.cu calls.
#pragma once

#include "quant/cuda_stream.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mox::cuda::attn {

// One launch's view of the cache, the queries and the output. The rows of one KV head are (token,
// group member) pairs r = t * group + g.
struct AttnParams {
    const uint8_t* k;
    const uint8_t* v;
    size_t k_row_bytes, v_row_bytes;
    size_t k_head_bytes, v_head_bytes;  // bytes of one head's slice of a row
    int kf, vf;
    int n_head, group;
    int64_t n_q;
    int64_t n_rows_q;  // n_q * group: rows per KV head
    int64_t capacity;
    const int32_t* pos0;
    const float* q;
    float scale;
    const float* gate;
    int64_t gate_token_stride, gate_head_stride;
    float* out;
    float* part_acc;  // [n_split][n_q * n_head][D]
    float* part_ml;   // [n_split][n_q * n_head][2] = (max, sum)
    int n_split;
    int64_t keys_per_split;
};

__device__ __forceinline__ float gated(const AttnParams& p, int64_t t, int h, int c, float o) {
    if (p.gate == nullptr) return o;
    const float g = p.gate[t * p.gate_token_stride + h * p.gate_head_stride + c];
    return o * (1.0f / (1.0f + expf(-g)));
}

// Query rows of one KV head per block of the tensor-core prefill kernel (16 per warp).
inline constexpr int kPfRows = 64;

// The softmax merge of W partial results of one row (warps, or splits): w's max m(w), sum l(w) and
// accumulator a(w), l(w) = 0 for one that saw no key; M = the max over those with keys, L and A the
// sums of e^(m(w) - M) l(w) and e^(m(w) - M) a(w), in w's order.
template <int W, class Fm, class Fl, class Fa>
__device__ __forceinline__ void merge_partials(Fm m, Fl l, Fa a, float& M, float& L, float& A) {
    M = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w)
        if (l(w) > 0.0f) M = fmaxf(M, m(w));
    L = 0.0f, A = 0.0f;
#pragma unroll
    for (int w = 0; w < W; ++w) {
        if (l(w) <= 0.0f) continue;  // saw no key of the row
        const float wt = expf(m(w) - M);
        L += wt * l(w);
        A += wt * a(w);
    }
}

// Column col of output row `row` (token t, head h) of n_rows (n_q * n_head): with one split the
// result, normalised and gated (L >= 1: the split saw key 0); with several, this split's partial
// for combine_kernel (acc, and once per row its max and sum).
template <int D>
__device__ __forceinline__ void store_row(const AttnParams& p, int split, int64_t n_rows, int64_t row,
                                          int64_t t, int h, int col, float A, float M, float L) {
    if (p.n_split == 1) {
        p.out[row * D + col] = gated(p, t, h, col, A / L);
        return;
    }
    const int64_t at = split * n_rows + row;
    p.part_acc[at * D + col] = A;
    if (col == 0) {
        p.part_ml[at * 2] = M;
        p.part_ml[at * 2 + 1] = L;
    }
}

// Keys a warp of the tensor-core decode kernel takes per step (keys_per_split must be a multiple).
inline constexpr int kMmaKeys = 16;

// Decode (one query token) over f16 K and V on the tensor cores: grid (1, n_head_kv, n_split),
// group <= 8, head_dim (D) 128 or 256. With n_split > 1 it writes partials for combine_kernel.
void launch_mma_decode(const AttnParams& p, int64_t D, dim3 grid, StreamHandle stream);

// Prefill (n_q >= 1 query tokens) over f16 K and V on the tensor cores, any group, head_dim 128 or
// 256: n_split splits of keys_per_split keys as attention_kernel's (partials when n_split > 1).
void launch_mma_prefill(const AttnParams& p, int64_t D, int n_head_kv, StreamHandle stream);

}  // namespace mox::cuda::attn

// The small per-token operations of the forward pass on the GPU: embedding rows, residual
// add + RMSNorm, per-head q/k norm + partial NEOX RoPE, and the shared expert's sigmoid gate. Same
// math as ops/basic.h (the CPU reference the tests compare with). Plain C++; kernels in
// ops/cuda/basic.cu, linked only with -DMOX_CUDA=ON. All pointers are device memory, fp32 unless
// said otherwise.
#pragma once

#include "ops/attention.h"
#include "ops/weight.h"
#include "quant/cuda_stream.h"

#include <cstdint>

namespace mox::cuda {

// out[t, :] = row ids[t] of `table` (any matvec-supported block type), dequantized. out: [n, n_in].
void embed_rows(const ops::Weight& table, const int32_t* ids, int64_t n, float* out, StreamHandle stream = nullptr);

// For each of n rows of width d: if `add` is not null, x += add (the residual stream; x updated),
// and then x += add2 if that is not null either; then out = x / sqrt(mean(x^2) + eps) * w.
void add_rms_norm(float* x, const float* add, const float* w, int64_t n, int64_t d, float eps, float* out,
                  StreamHandle stream = nullptr, const float* add2 = nullptr);

// add_rms_norm with LayerNorm: out = (x - mean) / sqrt(var + eps) * w + b (ops::layer_norm).
void add_layer_norm(float* x, const float* add, const float* w, const float* b, int64_t n, int64_t d, float eps,
                    float* out, StreamHandle stream = nullptr, const float* add2 = nullptr);

// y[r, :] += bias[:] for n_rows contiguous rows of `width` values (a projection's bias).
void add_bias(float* y, const float* bias, int64_t n_rows, int64_t width, StreamHandle stream = nullptr);

// One token (decode), one launch: out = add_rms_norm's out for x + add (d = W.n_in), and y = W out
// (W: n_out rows of float weights, such as the MoE router), both bit for bit what add_rms_norm and
// then matvec compute. x is not updated: the caller adds `add` later (the next add_rms_norm's add,
// before its add2), since the launch's blocks all read x. Supported: F32 / F16 / BF16 weights, d a
// multiple of 32 up to 4096; anything else throws (the caller keeps the two launches).
bool add_rms_norm_matvec_supported(const ops::Weight& w);
void add_rms_norm_matvec(const float* x, const float* add, const float* norm_w, float eps, float* out,
                         const ops::Weight& w, float* y, StreamHandle stream = nullptr);

// Attention's q and k preparation for n tokens at positions *pos0 + t:
//   q[t, h, :] = rope(rms_norm(qg[t, h, 0:hd]) * q_norm)   (qg rows: n_head heads of q_head_stride
//                                                            values, the query first: 2 * hd for
//                                                            Qwen3.5's [query | gate], hd without)
//   k[t, h, :] = rope(rms_norm(k[t, h, :]) * k_norm)       in place, [n][n_head_kv][hd]
// Without qk_norm the norms are skipped (q_norm, k_norm unused: Mixtral). rope: NEOX rotation of the
// first n_rot dims (pairs i, i + n_rot/2), or with rope_adjacent NORM rotation (pairs 2i, 2i + 1);
// angle pos * theta^(-2i/n_rot), divided by rope_factors[i] when given (device, n_rot/2 floats);
// cos and sin scaled by attn_factor.
struct QkPrepShape {
    int64_t n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
    float eps = 1e-6f;
    float theta = 10000.0f;
    int64_t q_head_stride = 0;  // >= head_dim
    bool qk_norm = true;
    bool rope_adjacent = false;
    const float* rope_factors = nullptr;
    float attn_factor = 1.0f;
};
// With `store` (a cache of f32, f16 or bf16 K and V: qk_cache_store_supported), the prepared k and
// the v rows (v[t * v_stride + h * head_dim ..]) go straight into cache rows *pos0 + t, as
// cuda::kv_store would write them, and k is not written back: the cache write costs no launch of
// its own. Rows at or past the cache's capacity are skipped, as by kv_store.
struct QkCacheStore {
    ops::KvView kv;
    const float* v = nullptr;
    int64_t v_stride = 0;
};
bool qk_cache_store_supported(const ops::KvView& kv);
void qk_norm_rope(const float* qg, const float* q_norm, float* k, const float* k_norm, const int32_t* pos0,
                  int64_t n, const QkPrepShape& shape, float* q, StreamHandle stream = nullptr,
                  const QkCacheStore* store = nullptr);

// Shared expert combine: out[t, :] += sigmoid(dot(gate_inp, u[t, :])) * shared[t, :]. [n, d] each.
void shared_expert_add(float* out, const float* shared, const float* u, const float* gate_inp, int64_t n, int64_t d,
                       StreamHandle stream = nullptr);

// y[t, j] = silu(g[t * stride + j]) * u[t * stride + j] for t < n_rows, j < width; y is [n_rows, width]
// (the shared expert's SwiGLU in prefill; gate and up may sit side by side in one row: stride 2 width).
void swiglu(const float* g, const float* u, int64_t n_rows, int64_t width, int64_t stride, float* y,
            StreamHandle stream = nullptr);

// The arg max of x[0, n) (n < 2^32): the lowest index of the largest value, as std::max_element
// finds it; NaN is never chosen. Writes one device uint64 (`result`), read on the host with
// argmax_index. A memset and one kernel (~4 values per thread), so the greedy token of a decode
// step costs the host 8 bytes instead of a scan of the vocabulary.
void argmax(const float* x, int64_t n, uint64_t* result, StreamHandle stream = nullptr);
// The index argmax wrote into `result`, or -1 when there was none (n was 0 or every value NaN).
int64_t argmax_index(uint64_t result);

}  // namespace mox::cuda

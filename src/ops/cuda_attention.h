// Gated full attention on the GPU: KV-cache stores and flash-style causal attention over
// a cache in f32/f16/bf16/q8_0/q4_0, grouped KV heads, the sigmoid output gate fused. Same math as
// ops/attention.h (the CPU reference these kernels are tested against). Plain C++; kernels in
// ops/cuda/attention.cu, linked only with -DMOX_CUDA=ON. All pointers are device memory.
//
// Positions are read from device memory (`pos0`), never passed by value, so a decode step captured
// in a CUDA graph stays valid as the sequence grows; `max_keys` (host) only bounds the launch grid
// and the workspace, and the graph is re-captured when it has to grow.
#pragma once

#include "ops/attention.h"
#include "quant/cuda_stream.h"

#include <cstddef>
#include <cstdint>

namespace mox::cuda {

// Quantizes n_rows tokens' K and V rows (fp32, row i at k + i * k_stride, v + i * v_stride; row_elems
// = kv.row_elems values each) into cache positions *pos0 + i. kv: an ops::KvView whose k/v point to
// device memory. Supported cache types: f32, f16, bf16, q8_0, q4_0 (rounding as the CPU quantizers).
void kv_store(const ops::KvView& kv, const int32_t* pos0, int64_t n_rows, const float* k, int64_t k_stride,
              const float* v, int64_t v_stride, StreamHandle stream = nullptr);

// The output gate of Qwen3.5 attention: out[t, h, j] *= sigmoid(gate[t * token_stride + h *
// head_stride + j]). A null gate means none.
struct AttentionGate {
    const float* gate = nullptr;
    int64_t token_stride = 0;
    int64_t head_stride = 0;
};

// Causal attention of n_q consecutive query tokens of one sequence: query i sits at position
// *pos0 + i and attends to cache rows [0, *pos0 + i] (already stored). q, out: [n_q, n_head *
// head_dim] fp32; query head h reads KV head h / (n_head / n_head_kv). Requires *pos0 + n_q <=
// max_keys <= kv.capacity. workspace: device scratch of workspace_bytes >= attention_workspace_bytes(
// shape, n_q, max_keys) (split over the context; may be null when that is 0), or the call throws.
// attention_workspace_bound(shape, N, K) is enough for every call with n_q <= N and max_keys <= K: a
// buffer shared by micro-batches of any size and by decode (the need is not monotone in n_q).
size_t attention_workspace_bytes(const ops::AttentionShape& shape, int64_t n_q, int64_t max_keys);
size_t attention_workspace_bound(const ops::AttentionShape& shape, int64_t max_n_q, int64_t max_keys);
void attention(const ops::KvView& kv, const ops::AttentionShape& shape, const float* q, int64_t n_q,
               const int32_t* pos0, int64_t max_keys, const AttentionGate& gate, float* out, void* workspace,
               size_t workspace_bytes, StreamHandle stream = nullptr);

}  // namespace mox::cuda

// Mixture-of-experts decode (batch 1) on the GPU (issue 5): router softmax/top-k, and the routed
// expert FFN in two launches that read the selected expert ids from device memory (no host sync
// between routing and experts). Same semantics as ops/moe.h:
//   out = sum_i w_i * down_e(silu(gate_e x) * up_e x),  e = ids[i], i < k.
// Plain C++; kernels in ops/cuda/moe.cu, linked only with -DMOX_CUDA=ON. Weights are ops::Weight
// views whose data pointers are device memory (cuda::upload_weight), all pointers below are device.
#pragma once

#include "ops/weight.h"
#include "quant/cuda_stream.h"

#include <cstdint>

namespace mox::cuda {

// For each of n_tokens rows of logits [n_tokens, n_expert]: softmax, the k most probable experts
// (ties: lower id) in descending order, weights renormalised to sum 1 (sum clamped below at
// 6.1035e-5) when `renormalize`. ids, weights: [n_tokens, k]. n_expert <= 1024, k <= 32.
void route_softmax_topk(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k, bool renormalize,
                        int32_t* ids, float* weights, StreamHandle stream = nullptr);

// h[i, :] = silu(gate_e x) * up_e x for i < k, e = ids[i]. gate/up: {n_embd, n_ff, n_expert} stacks
// of one type; x [n_embd]; h [k, n_ff].
void moe_gate_up(const ops::Weight& gate, const ops::Weight& up, const int32_t* ids, int64_t k,
                 const float* x, float* h, StreamHandle stream = nullptr);

// out[:] = sum_i weights[i] * down_e h[i, :], e = ids[i] (overwrites out). down: {n_ff, n_embd,
// n_expert}; h [k, n_ff]; out [n_embd]. Each output row sums its k experts in one warp: no atomics,
// the same result on every run.
void moe_down(const ops::Weight& down, const int32_t* ids, const float* weights, int64_t k, const float* h,
              float* out, StreamHandle stream = nullptr);

// Routed experts for a batch of n_tokens tokens (prefill), grouped by expert so each selected
// expert's weights are read once per batch, on the tensor cores:
//   out[t, :] = sum_i weights[t, i] * down_e(silu(gate_e x_t) * up_e x_t),  e = ids[t, i], i < k.
// ids, weights: [n_tokens, k] device (route_softmax_topk's output); x, out: [n_tokens, n_embd] fp32
// (out overwritten). The grouping happens on the device (no host sync). workspace: device scratch of
// moe_batch_workspace_bytes(...) bytes. Tolerance: fp16 operand rounding (about 1e-3 relative);
// precise = true carries both operands as two fp16 parts (three MMAs per product): about 1e-5
// relative at 2-3x the time.
size_t moe_batch_workspace_bytes(const ops::Weight& gate, const ops::Weight& down, int64_t n_tokens, int64_t k);
void moe_batch(const ops::Weight& gate, const ops::Weight& up, const ops::Weight& down, const int32_t* ids,
               const float* weights, int64_t n_tokens, int64_t k, const float* x, float* out, void* workspace,
               StreamHandle stream = nullptr, bool precise = false);

}  // namespace mox::cuda

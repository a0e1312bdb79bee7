// Mixture-of-experts decode (batch 1) on the GPU: router softmax/top-k, and the routed
// expert FFN in two launches that read the selected expert ids from device memory (no host sync
// between routing and experts). Same semantics as ops/moe.h:
//   out = sum_i w_i * down_e(silu(gate_e x) * up_e x),  e = ids[i], i < k,
// optionally plus the sigmoid-gated shared expert (MoeDecodeShared).
// Plain C++; kernels in ops/cuda/moe.cu, linked only with -DMOX_CUDA=ON. Weights are ops::Weight
// views whose data pointers are device memory (cuda::upload_weight), all pointers below are device.
#pragma once

#include "ops/weight.h"
#include "quant/cuda_stream.h"

#include <cstdint>

namespace mox::cuda {

// For each of n_tokens rows of logits (row t at logits + t * logits_stride; 0 means n_expert):
// softmax over the first n_expert entries, the k most probable experts (ties: lower id) in
// descending order, weights renormalised to sum 1 (sum clamped below at 6.1035e-5) when
// `renormalize`. ids, weights: [n_tokens, k]. n_expert <= 1024, k <= 32. A stride of n_expert + 1
// lets the router matvec append one more row (the shared expert's gate g, so its logit g . x sits
// at index n_expert of each row; the router ignores it and MoeDecodeShared::gate_logit points at it).
void route_softmax_topk(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k, bool renormalize,
                        int32_t* ids, float* weights, StreamHandle stream = nullptr,
                        int64_t logits_stride = 0);

// ops::route_sparsemixer on the device (Phi-3.5-MoE; top-2, not renormalised): ids, weights
// [n_tokens, 2]; logits rows at logits + t * logits_stride (0: n_expert). n_expert <= 1024.
void route_sparsemixer(const float* logits, int64_t n_tokens, int64_t n_expert, float jitter, int32_t* ids,
                       float* weights, StreamHandle stream = nullptr, int64_t logits_stride = 0);

// The shared expert of Qwen-style MoE layers, fused into the routed launches below:
//   out = sum_i w_i down_e_i(h_i) + sigmoid(*gate_logit) * down_s(silu(gate_s x) * up_s x).
// gate/up: {n_embd, n_ff_s} and down: {n_ff_s, n_embd} single-expert weights on the device, of any
// matvec type (not necessarily the routed experts' type); gate_logit: a device scalar g . x computed
// by the caller (e.g. logits + n_expert of a router matvec with g appended as its last row).
// When the shared weights have the routed type and n_ff, they are one more expert of the same launch;
// otherwise they take a second launch of the same kernel (same result, one more launch each).
struct MoeDecodeShared {
    const ops::Weight* gate = nullptr;
    const ops::Weight* up = nullptr;
    const ops::Weight* down = nullptr;
    const float* gate_logit = nullptr;
};

// Which kernels moe_gate_up, moe_route_gate_up and moe_down run. by_shape (what the model uses):
// a projection whose rows have 4096 or more inputs (Mixtral's and Phi-3.5-MoE's gate/up and down)
// takes the wide kernels, narrower ones (Qwen3.6's 2048 -> 512) the kernels tuned there. narrow and
// wide force one, for the tests and the benchmark that compare them; the wide kernels exist for the
// quantized types except the grid i-quants (IQ2_*, IQ3_*, IQ1_*), and forcing them on another type,
// or where their shared memory does not fit, is an error. Both are deterministic; they sum in
// different orders, so their results differ in the last bits.
enum class MoeDecodePath { by_shape, narrow, wide };

// h[i, :] = silu(gate_e x) * up_e x for i < k, e = ids[i]. gate/up: {n_embd, n_ff, n_expert} stacks
// of one type; x [n_embd]; h [k, n_ff]. With `shared`, h holds k * n_ff + n_ff_s floats: the shared
// expert's silu(gate_s x) * up_s x follows the routed rows, at h + k * n_ff.
void moe_gate_up(const ops::Weight& gate, const ops::Weight& up, const int32_t* ids, int64_t k,
                 const float* x, float* h, StreamHandle stream = nullptr,
                 const MoeDecodeShared* shared = nullptr, MoeDecodePath path = MoeDecodePath::by_shape);

// route_softmax_topk (one token, logits [n_expert], n_expert = gate.n_expert) fused into
// moe_gate_up: every block of the launch routes for itself (one warp, while the others stage x), so
// the router's launch and its kernel boundary go; ids [k] and weights [k] are still written, for
// moe_down. Same ids and weights as route_softmax_topk, same h as moe_gate_up.
void moe_route_gate_up(const float* logits, bool renormalize, int32_t* ids, float* weights,
                       const ops::Weight& gate, const ops::Weight& up, int64_t k, const float* x, float* h,
                       StreamHandle stream = nullptr, const MoeDecodeShared* shared = nullptr,
                       MoeDecodePath path = MoeDecodePath::by_shape);

// out[:] = sum_i weights[i] * down_e h[i, :], e = ids[i] (overwrites out), plus, with `shared`,
// sigmoid(*shared->gate_logit) * down_s(h + k * n_ff) (h as moe_gate_up left it). down: {n_ff,
// n_embd, n_expert}; h [k, n_ff]; out [n_embd]. Each output row is one warp's fixed set of partial
// sums reduced by a fixed shuffle tree: no atomics, the same bits on every run.
void moe_down(const ops::Weight& down, const int32_t* ids, const float* weights, int64_t k, const float* h,
              float* out, StreamHandle stream = nullptr, const MoeDecodeShared* shared = nullptr,
              MoeDecodePath path = MoeDecodePath::by_shape);

// Routed experts for a batch of n_tokens tokens (prefill), grouped by expert so each selected
// expert's weights are read once per batch, on the tensor cores:
//   out[t, :] = sum_i weights[t, i] * down_e(silu(gate_e x_t) * up_e x_t),  e = ids[t, i], i < k.
// ids, weights: [n_tokens, k] device (route_softmax_topk's output); x, out: [n_tokens, n_embd] fp32
// (out overwritten). The grouping happens on the device (no host sync). workspace: device scratch of
// moe_batch_workspace_bytes(...) bytes. Tolerance: fp16 operand rounding (about 1e-3 relative);
// precise = true carries both operands as two fp16 parts (three MMAs per product): about 1e-5
// relative at 2-3x the time.
size_t moe_batch_workspace_bytes(const ops::Weight& gate, const ops::Weight& down, int64_t n_tokens,
                                 int64_t k);
void moe_batch(const ops::Weight& gate, const ops::Weight& up, const ops::Weight& down, const int32_t* ids,
               const float* weights, int64_t n_tokens, int64_t k, const float* x, float* out, void* workspace,
               StreamHandle stream = nullptr, bool precise = false);

}  // namespace mox::cuda

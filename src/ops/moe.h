// Mixture-of-experts: routing and the routed-expert FFN as one operator per layer
// (shared/spec/qwen35moe.md §3c). The selected experts of all tokens are grouped by expert, so each
// expert's weights are read once per batch: one parallel pass computes gate and up of every active
// expert with SiLU fused (tasks = expert x block of rows), a second computes down (tasks = blocks of
// output rows across all experts) and sums the routing-weighted results per token in ascending expert
// order, as the reference does. Batches of up to MoeOptions::fused_max_tokens tokens (decode) run the
// same arithmetic as one pool job per layer: gate/up tasks first, then down tasks that start on an
// expert as soon as its hidden vector is complete, so no thread waits at a barrier between the
// phases; tasks are sized by the expert bytes they stream (long first, short last) and prefetch ahead
// of the rows they read.
// Both paths give bit-identical results; neither allocates once its scratch has grown.
#pragma once

#include "ops/context.h"
#include "ops/weight.h"

#include <cstdint>
#include <vector>

namespace mox::ops {

// Routing of a batch: for token t, ids[t*k + i] and weights[t*k + i], i < k, plus per-expert
// token counts (the runtime's usage histogram feeds on them).
struct Routing {
    int64_t n_tokens = 0;
    int64_t k = 0;
    std::vector<int32_t> ids;
    std::vector<float> weights;
    std::vector<int32_t> expert_counts;  // [n_expert]
};

// softmax over n_expert logits, top-k by probability (ties: lower id), weights renormalised to sum
// 1 (the sum clamped below at 6.1035e-5 as llama.cpp does) when `renormalize`.
void route_softmax_topk(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k, bool renormalize,
                        Routing& out);

// Phi-3.5-MoE's sparsemixer (RouterKind::sparsemixer; top-2, weights not renormalised): per token,
// expert 1 is the arg max m of the logits s and its weight e's softmax probability among the experts
// with (m - s_j) / max(|s_j|, m) <= 2 * jitter; expert 2 and its weight the same over the logits
// without expert 1 (its own max, the margin still measured on the logits). Ties: the lower id.
void route_sparsemixer(const float* logits, int64_t n_tokens, int64_t n_expert, float jitter, Routing& out);

// 3-D expert stacks: gate/up {n_embd, n_ff, n_expert}, down {n_ff, n_embd, n_expert}.
struct ExpertStack {
    Weight gate, up, down;
};

// Tuning of the one-job path. The defaults suit a 16-core host streaming experts from DRAM
// (bench/kernels/moe_decode_bench.cpp measures them).
struct MoeOptions {
    int64_t fused_max_tokens = 8;  // batches up to this many tokens take the one-job path (0: never)
    int64_t min_task_bytes = 16 << 10;   // expert bytes a task streams: the last ones (balance)
    int64_t max_task_bytes = 256 << 10;  // ... the first ones (long streams, few claims)
    int64_t prefetch_bytes = 0;  // software prefetch distance inside a task's rows (0: none)
};

// out[t] = sum_i weights[t,i] * down_e(silu(gate_e x_t) * up_e x_t), e = ids[t,i]. x, out: [n_tokens, n_embd].
void moe_ffn(const Context& ctx, const ExpertStack& experts, const Routing& routing, const float* x, float* out,
             const MoeOptions& options = {});

// A dense SwiGLU FFN (the shared expert): out = down(silu(gate x) * up x) for n_tokens rows.
void swiglu_ffn(const Context& ctx, const Weight& gate, const Weight& up, const Weight& down, const float* x,
                int64_t n_tokens, float* out, const MoeOptions& options = {});

}  // namespace mox::ops

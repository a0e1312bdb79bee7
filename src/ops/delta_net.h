// Gated DeltaNet pieces (shared/spec/qwen35moe.md §3a): the causal conv, the gated delta rule one
// token at a time (scalar reference + SIMD step chosen by ctx.isa), and the chunked (WY / UT
// transform) form that processes a block of tokens of one head with matrix products.
#pragma once

#include "ops/context.h"

#include <cstdint>

namespace mox::ops {

// Causal depthwise conv of one token over `channels`: state holds the previous kernel-1 inputs
// [kernel-1][channels], oldest first; weight is ggml {kernel, channels} (tap index fastest), tap
// kernel-1 multiplies the current input. Writes the conv output to out and shifts x into state.
void causal_conv_step(float* state, const float* weight, const float* x, int64_t channels, int64_t kernel, float* out);

// One delta-rule step for one value head. S is [dv][dk] (each v column contiguous over k, as
// llama.cpp stores it); q (already scaled) and k are dk long, v and out dv long.
//   S <- exp(g) S;  u = S^T k;  S <- S + k (beta (v - u))^T;  out = S^T q   (read-out after update)
// Uses only ctx.isa (never the pool), so it may run inside a pool task.
void delta_rule_step(const Context& ctx, float* S, const float* q, const float* k, const float* v, float g, float beta,
                     int64_t dk, int64_t dv, float* out);

// The scalar reference of delta_rule_step.
void delta_rule_step_reference(float* S, const float* q, const float* k, const float* v, float g, float beta,
                               int64_t dk, int64_t dv, float* out);

// A block of n_tokens tokens of one value head, strided rows: q_t = q + t * qk_stride (and k),
// v_t = v + t * v_stride, out_t = out + t * out_stride; g and beta [n_tokens]. Same results as
// n_tokens delta_rule_step calls (outputs and final S), computed by delta_rule_step token by token.
struct DeltaRuleSeq {
    const float* q = nullptr;
    const float* k = nullptr;
    int64_t qk_stride = 0;
    const float* v = nullptr;
    int64_t v_stride = 0;
    const float* g = nullptr;
    const float* beta = nullptr;
    float* out = nullptr;
    int64_t out_stride = 0;
    int64_t n_tokens = 0;
    int64_t dk = 0;
    int64_t dv = 0;
};
void delta_rule_sequence(const Context& ctx, float* S, const DeltaRuleSeq& seq);

// The same block in the chunked form (spec §3a "Prefill / chunked form"): per chunk of up to `chunk`
// tokens, a unit lower-triangular solve (I + L) [U W] = [beta V, beta e^gamma K], V' = U - W S,
// O = (e^gamma Q) S + ((Q K^T) masked by e^(gamma_t - gamma_s)) V', S <- e^gamma_C S + K_dec^T V'.
// Equal to the recurrence in exact arithmetic; portable C++ (no ISA-specific code).
// Not used by the model: on the development machine (Xeon, AVX-512) a 512-token prefill of 32 heads
// of 128 x 128 took 142 ms of CPU in this form against 28 ms (avx512) / 33 ms (avx2) for the SIMD
// recurrence (tests/ops/delta_net_fast_test.cpp, PerfStepAndPrefill): the chunked form does ~1.4x
// the recurrence's flops and only pays off with a tuned matrix-multiply kernel behind it.
void delta_rule_chunked(float* S, const DeltaRuleSeq& seq, int64_t chunk = 64);

}  // namespace mox::ops

// Gated DeltaNet pieces (shared/spec/qwen35moe.md §3a), reference fp32, one token at a time.
#pragma once

#include <cstdint>

namespace mox::ops {

// Causal depthwise conv of one token over `channels`: state holds the previous kernel-1 inputs
// [kernel-1][channels], oldest first; weight is ggml {kernel, channels} (tap index fastest), tap
// kernel-1 multiplies the current input. Writes the conv output to out and shifts x into state.
void causal_conv_step(float* state, const float* weight, const float* x, int64_t channels, int64_t kernel, float* out);

// One delta-rule step for one value head. S is [dv][dk] (each v column contiguous over k, as
// llama.cpp stores it); q (already scaled) and k are dk long, v and out dv long.
//   S <- exp(g) S;  u = S^T k;  S <- S + k (beta (v - u))^T;  out = S^T q   (read-out after update)
void delta_rule_step(float* S, const float* q, const float* k, const float* v, float g, float beta, int64_t dk,
                     int64_t dv, float* out);

}  // namespace mox::ops

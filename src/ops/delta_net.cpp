#include "ops/delta_net.h"

#include "ops/cpu/kernels.h"

#include <cmath>
#include <cstring>

namespace mox::ops {

void causal_conv_step(float* state, const float* weight, const float* x, int64_t channels, int64_t kernel, float* out) {
    for (int64_t c = 0; c < channels; ++c) {
        const float* w = weight + c * kernel;
        float sum = w[kernel - 1] * x[c];
        for (int64_t k = 0; k < kernel - 1; ++k) sum += w[k] * state[k * channels + c];
        out[c] = sum;
    }
    if (kernel > 1) {
        std::memmove(state, state + channels, static_cast<size_t>((kernel - 2) * channels) * sizeof(float));
        std::memcpy(state + (kernel - 2) * channels, x, static_cast<size_t>(channels) * sizeof(float));
    }
}

void delta_rule_step_reference(float* S, const float* q, const float* k, const float* v, float g, float beta,
                               int64_t dk, int64_t dv, float* out) {
    const float decay = std::exp(g);
    for (int64_t j = 0; j < dv; ++j) {
        float* col = S + j * dk;
        float u = 0;
        for (int64_t i = 0; i < dk; ++i) {
            col[i] *= decay;
            u += col[i] * k[i];
        }
        const float delta = beta * (v[j] - u);
        float o = 0;
        for (int64_t i = 0; i < dk; ++i) {
            col[i] += k[i] * delta;
            o += col[i] * q[i];
        }
        out[j] = o;
    }
}

void delta_rule_step(const Context& ctx, float* S, const float* q, const float* k, const float* v, float g, float beta,
                     int64_t dk, int64_t dv, float* out) {
#if defined(__x86_64__) || defined(__i386__)
    if (ctx.isa >= quant::Isa::avx512 && dk % 16 == 0)
        return cpu::delta_rule_step_avx512(S, q, k, v, std::exp(g), beta, dk, dv, out);
    if (ctx.isa >= quant::Isa::avx2 && dk % 8 == 0)
        return cpu::delta_rule_step_avx2(S, q, k, v, std::exp(g), beta, dk, dv, out);
#endif
    delta_rule_step_reference(S, q, k, v, g, beta, dk, dv, out);
}

void delta_rule_sequence(const Context& ctx, float* S, const DeltaRuleSeq& s) {
    for (int64_t t = 0; t < s.n_tokens; ++t)
        delta_rule_step(ctx, S, s.q + t * s.qk_stride, s.k + t * s.qk_stride, s.v + t * s.v_stride, s.g[t], s.beta[t],
                        s.dk, s.dv, s.out + t * s.out_stride);
}

}  // namespace mox::ops

#include "ops/moe.h"

#include "ops/basic.h"
#include "ops/linear.h"

#include <algorithm>
#include <numeric>

namespace mox::ops {

void route_softmax_topk(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k, bool renormalize,
                        Routing& out) {
    MOX_CHECK(k >= 1 && k <= n_expert);
    out.n_tokens = n_tokens;
    out.k = k;
    out.ids.resize(static_cast<size_t>(n_tokens * k));
    out.weights.resize(static_cast<size_t>(n_tokens * k));
    out.expert_counts.assign(static_cast<size_t>(n_expert), 0);
    std::vector<float> p(static_cast<size_t>(n_expert));
    std::vector<int32_t> order(static_cast<size_t>(n_expert));
    for (int64_t t = 0; t < n_tokens; ++t) {
        std::copy_n(logits + t * n_expert, n_expert, p.begin());
        softmax(p.data(), n_expert);
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
            return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)] || (p[static_cast<size_t>(a)] == p[static_cast<size_t>(b)] && a < b);
        });
        float sum = 0;
        for (int64_t i = 0; i < k; ++i) sum += p[static_cast<size_t>(order[static_cast<size_t>(i)])];
        const float norm = renormalize ? 1.0f / std::max(sum, 6.1035e-5f) : 1.0f;
        for (int64_t i = 0; i < k; ++i) {
            const int32_t e = order[static_cast<size_t>(i)];
            out.ids[static_cast<size_t>(t * k + i)] = e;
            out.weights[static_cast<size_t>(t * k + i)] = p[static_cast<size_t>(e)] * norm;
            out.expert_counts[static_cast<size_t>(e)]++;
        }
    }
}

void swiglu_ffn(const Context& ctx, const Weight& gate, const Weight& up, const Weight& down, const float* x,
                int64_t n_tokens, float* out) {
    const int64_t n_ff = gate.n_out;
    std::vector<float> g(static_cast<size_t>(n_tokens * n_ff)), u(static_cast<size_t>(n_tokens * n_ff));
    linear(ctx, gate, x, n_tokens, g.data());
    linear(ctx, up, x, n_tokens, u.data());
    for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
    linear(ctx, down, g.data(), n_tokens, out);
}

void moe_ffn(const Context& ctx, const ExpertStack& experts, const Routing& routing, const float* x, float* out) {
    const int64_t n_embd = experts.gate.n_in;
    const int64_t n_expert = experts.gate.n_expert;
    std::fill(out, out + routing.n_tokens * n_embd, 0.0f);
    // Slots (token, rank) grouped by expert.
    std::vector<std::vector<int64_t>> slots(static_cast<size_t>(n_expert));
    for (int64_t s = 0; s < routing.n_tokens * routing.k; ++s) slots[static_cast<size_t>(routing.ids[static_cast<size_t>(s)])].push_back(s);
    std::vector<float> xs, ys;
    for (int64_t e = 0; e < n_expert; ++e) {
        const auto& list = slots[static_cast<size_t>(e)];
        if (list.empty()) continue;
        const int64_t n = static_cast<int64_t>(list.size());
        xs.resize(static_cast<size_t>(n * n_embd));
        ys.resize(static_cast<size_t>(n * n_embd));
        for (int64_t i = 0; i < n; ++i) {
            const int64_t t = list[static_cast<size_t>(i)] / routing.k;
            std::copy_n(x + t * n_embd, n_embd, xs.begin() + i * n_embd);
        }
        swiglu_ffn(ctx, experts.gate.expert(e), experts.up.expert(e), experts.down.expert(e), xs.data(), n, ys.data());
        for (int64_t i = 0; i < n; ++i) {
            const int64_t slot = list[static_cast<size_t>(i)];
            const int64_t t = slot / routing.k;
            const float w = routing.weights[static_cast<size_t>(slot)];
            for (int64_t c = 0; c < n_embd; ++c) out[t * n_embd + c] += w * ys[static_cast<size_t>(i * n_embd + c)];
        }
    }
}

}  // namespace mox::ops

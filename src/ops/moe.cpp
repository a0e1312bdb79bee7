#include "ops/moe.h"

#include "ops/basic.h"
#include "ops/linear.h"

#include <algorithm>
#include <cstring>
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

namespace {

// Slots (token, rank) of a batch grouped by expert. Positions p in [offsets[a], offsets[a+1]) belong to
// experts[a] (ascending ids); a token's positions, ascending, visit its experts in ascending id order,
// the order in which the reference sums them.
struct ExpertGroups {
    std::vector<int32_t> experts;
    std::vector<int64_t> offsets;
    std::vector<int64_t> token;          // [n_slots]
    std::vector<float> weight;           // [n_slots]
    std::vector<int64_t> token_slots;    // [n_tokens * k]: positions of token t, ascending
    int64_t k = 0;
};

void group_by_expert(const Routing& r, int64_t n_expert, ExpertGroups& g) {
    const int64_t n_slots = r.n_tokens * r.k;
    g.k = r.k;
    std::vector<int64_t> count(static_cast<size_t>(n_expert) + 1, 0);
    for (int64_t s = 0; s < n_slots; ++s) {
        const int32_t e = r.ids[static_cast<size_t>(s)];
        MOX_CHECK(e >= 0 && e < n_expert, "expert id {} of {}", e, n_expert);
        count[static_cast<size_t>(e)]++;
    }
    g.experts.clear();
    g.offsets.assign(1, 0);
    std::vector<int64_t> start(static_cast<size_t>(n_expert), 0);
    for (int64_t e = 0; e < n_expert; ++e) {
        if (count[static_cast<size_t>(e)] == 0) continue;
        start[static_cast<size_t>(e)] = g.offsets.back();
        g.experts.push_back(static_cast<int32_t>(e));
        g.offsets.push_back(g.offsets.back() + count[static_cast<size_t>(e)]);
    }
    g.token.resize(static_cast<size_t>(n_slots));
    g.weight.resize(static_cast<size_t>(n_slots));
    g.token_slots.resize(static_cast<size_t>(n_slots));
    // Slots in token order land at increasing positions within each expert.
    for (int64_t s = 0; s < n_slots; ++s) {
        const int64_t p = start[static_cast<size_t>(r.ids[static_cast<size_t>(s)])]++;
        g.token[static_cast<size_t>(p)] = s / r.k;
        g.weight[static_cast<size_t>(p)] = r.weights[static_cast<size_t>(s)];
        g.token_slots[static_cast<size_t>(s)] = p;
    }
    for (int64_t t = 0; t < r.n_tokens; ++t)
        std::sort(g.token_slots.begin() + t * r.k, g.token_slots.begin() + (t + 1) * r.k);
}

// Per-call buffers, kept by the calling thread so decode does not allocate per token.
struct MoeScratch {
    ExpertGroups groups;
    ActivationRows x_gate, x_up, x_down;  // gathered per position
    ActivationRows tokens_act;            // per token, before the gather
    std::vector<float> g, u, h, y;        // [n_slots, n_ff] x3, [n_slots, n_embd]
};

// Copies activation rows of tokens into position order.
void gather(const ActivationRows& per_token, const std::vector<int64_t>& token, ActivationRows& out) {
    out.type = per_token.type;
    out.n_rows = static_cast<int64_t>(token.size());
    out.row_bytes = per_token.row_bytes;
    out.data.resize(out.row_bytes * token.size());
    for (size_t p = 0; p < token.size(); ++p)
        std::memcpy(out.data.data() + p * out.row_bytes, per_token.row(token[p]), out.row_bytes);
}

// out[t] = sum over t's slots (expert order) of weight * down_e(silu(gate_e x_t) * up_e x_t).
void grouped_swiglu(const Context& ctx, const ExpertStack& w, const ExpertGroups& grp, const float* x,
                    int64_t n_tokens, MoeScratch& sc, float* out) {
    const int64_t n_embd = w.gate.n_in, n_ff = w.gate.n_out;
    const auto n_slots = static_cast<int64_t>(grp.token.size());
    const auto n_active = static_cast<int64_t>(grp.experts.size());
    const quant::DotKernel& kg = quant::dot_kernel(w.gate.type, ctx.isa);
    const quant::DotKernel& ku = quant::dot_kernel(w.up.type, ctx.isa);
    const quant::DotKernel& kd = quant::dot_kernel(w.down.type, ctx.isa);

    // Activations: converted once per token, then gathered into position order.
    convert_activations(ctx, kg.act, x, n_tokens, n_embd, sc.tokens_act);
    gather(sc.tokens_act, grp.token, sc.x_gate);
    const ActivationRows* xu = &sc.x_gate;
    if (ku.act != kg.act) {
        convert_activations(ctx, ku.act, x, n_tokens, n_embd, sc.tokens_act);
        gather(sc.tokens_act, grp.token, sc.x_up);
        xu = &sc.x_up;
    }

    // Gate and up of every active expert, SiLU-gated into h: tasks = (expert, block of rows).
    sc.g.resize(static_cast<size_t>(n_slots * n_ff));
    sc.u.resize(sc.g.size());
    sc.h.resize(sc.g.size());
    const int64_t chunk_ff = rows_per_task(ctx, n_ff * n_active);
    const int64_t chunks_ff = (n_ff + chunk_ff - 1) / chunk_ff;
    ctx.parallel(n_active * chunks_ff, [&](int64_t task) {
        const int64_t a = task / chunks_ff;
        const int64_t r0 = (task % chunks_ff) * chunk_ff, r1 = std::min(n_ff, r0 + chunk_ff);
        const int64_t e = grp.experts[static_cast<size_t>(a)];
        const int64_t p0 = grp.offsets[static_cast<size_t>(a)], np = grp.offsets[static_cast<size_t>(a) + 1] - p0;
        float* g = sc.g.data() + p0 * n_ff;
        float* u = sc.u.data() + p0 * n_ff;
        dot_rows(kg, w.gate.expert(e), r0, r1, sc.x_gate.row(p0), sc.x_gate.row_bytes, np, g, n_ff);
        dot_rows(ku, w.up.expert(e), r0, r1, xu->row(p0), xu->row_bytes, np, u, n_ff);
        float* h = sc.h.data() + p0 * n_ff;
        for (int64_t p = 0; p < np; ++p)
            for (int64_t r = r0; r < r1; ++r) h[p * n_ff + r] = silu(g[p * n_ff + r]) * u[p * n_ff + r];
    });

    // Down: tasks own blocks of output rows across all experts, then reduce their rows per token.
    convert_activations(ctx, kd.act, sc.h.data(), n_slots, n_ff, sc.x_down);
    sc.y.resize(static_cast<size_t>(n_slots * n_embd));
    const int64_t chunk_d = rows_per_task(ctx, n_embd);
    const int64_t chunks_d = (n_embd + chunk_d - 1) / chunk_d;
    ctx.parallel(chunks_d, [&](int64_t task) {
        const int64_t r0 = task * chunk_d, r1 = std::min(n_embd, r0 + chunk_d);
        for (int64_t a = 0; a < n_active; ++a) {
            const int64_t p0 = grp.offsets[static_cast<size_t>(a)], np = grp.offsets[static_cast<size_t>(a) + 1] - p0;
            dot_rows(kd, w.down.expert(grp.experts[static_cast<size_t>(a)]), r0, r1, sc.x_down.row(p0),
                     sc.x_down.row_bytes, np, sc.y.data() + p0 * n_embd, n_embd);
        }
        for (int64_t t = 0; t < n_tokens; ++t) {
            float* o = out + t * n_embd;
            for (int64_t r = r0; r < r1; ++r) o[r] = 0.0f;
            for (int64_t i = 0; i < grp.k; ++i) {
                const int64_t p = grp.token_slots[static_cast<size_t>(t * grp.k + i)];
                const float wt = grp.weight[static_cast<size_t>(p)];
                const float* y = sc.y.data() + p * n_embd;
                for (int64_t r = r0; r < r1; ++r) o[r] += wt * y[r];
            }
        }
    });
}

MoeScratch& scratch() {
    thread_local MoeScratch s;
    return s;
}

}  // namespace

void swiglu_ffn(const Context& ctx, const Weight& gate, const Weight& up, const Weight& down, const float* x,
                int64_t n_tokens, float* out) {
    MoeScratch& sc = scratch();
    // One expert holding every token with weight 1 (1 * y is exact, so this is the plain FFN).
    ExpertGroups& g = sc.groups;
    g.k = 1;
    g.experts.assign(1, 0);
    g.offsets = {0, n_tokens};
    g.token.resize(static_cast<size_t>(n_tokens));
    g.token_slots.resize(static_cast<size_t>(n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t) g.token[static_cast<size_t>(t)] = g.token_slots[static_cast<size_t>(t)] = t;
    g.weight.assign(static_cast<size_t>(n_tokens), 1.0f);
    grouped_swiglu(ctx, ExpertStack{gate, up, down}, g, x, n_tokens, sc, out);
}

void moe_ffn(const Context& ctx, const ExpertStack& experts, const Routing& routing, const float* x, float* out) {
    MOX_CHECK(experts.gate.n_in == experts.up.n_in && experts.gate.n_out == experts.up.n_out &&
              experts.down.n_in == experts.gate.n_out && experts.down.n_out == experts.gate.n_in);
    MoeScratch& sc = scratch();
    group_by_expert(routing, experts.gate.n_expert, sc.groups);
    grouped_swiglu(ctx, experts, sc.groups, x, routing.n_tokens, sc, out);
}

}  // namespace mox::ops

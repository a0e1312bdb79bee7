#include "ops/moe.h"

#include "ops/basic.h"
#include "ops/linear.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>

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

// One sparsemixer step over the logits s of one token (archs.md §5.3, transformers' inference form):
// among the experts not yet taken, e = the arg max m (lowest id on ties); the candidates are the
// experts j whose (m - s_j) / max(|s_j|, m) <= 2 * jitter; the weight is e's softmax probability
// among the candidates. Float arithmetic throughout, as transformers computes it in the logits' fp32.
int32_t sparsemixer_pick(const float* s, int64_t n_expert, int32_t taken, float jitter, float& weight) {
    int32_t e = -1;
    for (int64_t j = 0; j < n_expert; ++j)
        if (j != taken && (e < 0 || s[j] > s[e])) e = static_cast<int32_t>(j);
    const float m = s[e];
    const float margin = 2.0f * jitter;
    double sum = 0;
    for (int64_t j = 0; j < n_expert; ++j) {
        if (j == taken) continue;
        const float factor = std::max(std::fabs(s[j]), m);
        if ((m - s[j]) / factor > margin) continue;
        sum += std::exp(static_cast<double>(s[j]) - m);
    }
    weight = static_cast<float>(1.0 / sum);
    return e;
}

}  // namespace

void route_sparsemixer(const float* logits, int64_t n_tokens, int64_t n_expert, float jitter, Routing& out) {
    MOX_CHECK(n_expert >= 2);
    out.n_tokens = n_tokens;
    out.k = 2;
    out.ids.resize(static_cast<size_t>(n_tokens * 2));
    out.weights.resize(static_cast<size_t>(n_tokens * 2));
    out.expert_counts.assign(static_cast<size_t>(n_expert), 0);
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* s = logits + t * n_expert;
        float w1 = 0, w2 = 0;
        const int32_t e1 = sparsemixer_pick(s, n_expert, -1, jitter, w1);
        const int32_t e2 = sparsemixer_pick(s, n_expert, e1, jitter, w2);
        out.ids[static_cast<size_t>(2 * t)] = e1;
        out.ids[static_cast<size_t>(2 * t + 1)] = e2;
        out.weights[static_cast<size_t>(2 * t)] = w1;
        out.weights[static_cast<size_t>(2 * t + 1)] = w2;
        out.expert_counts[static_cast<size_t>(e1)]++;
        out.expert_counts[static_cast<size_t>(e2)]++;
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
    std::vector<int64_t> count, start;  // [n_expert + 1], [n_expert]: kept to avoid per-call allocation
};

void group_by_expert(const Routing& r, int64_t n_expert, ExpertGroups& g) {
    const int64_t n_slots = r.n_tokens * r.k;
    g.k = r.k;
    g.count.assign(static_cast<size_t>(n_expert) + 1, 0);
    for (int64_t s = 0; s < n_slots; ++s) {
        const int32_t e = r.ids[static_cast<size_t>(s)];
        MOX_CHECK(e >= 0 && e < n_expert, "expert id {} of {}", e, n_expert);
        g.count[static_cast<size_t>(e)]++;
    }
    g.experts.clear();
    g.offsets.assign(1, 0);
    g.start.assign(static_cast<size_t>(n_expert), 0);
    for (int64_t e = 0; e < n_expert; ++e) {
        if (g.count[static_cast<size_t>(e)] == 0) continue;
        g.start[static_cast<size_t>(e)] = g.offsets.back();
        g.experts.push_back(static_cast<int32_t>(e));
        g.offsets.push_back(g.offsets.back() + g.count[static_cast<size_t>(e)]);
    }
    g.token.resize(static_cast<size_t>(n_slots));
    g.weight.resize(static_cast<size_t>(n_slots));
    g.token_slots.resize(static_cast<size_t>(n_slots));
    // Slots in token order land at increasing positions within each expert.
    for (int64_t s = 0; s < n_slots; ++s) {
        const int64_t p = g.start[static_cast<size_t>(r.ids[static_cast<size_t>(s)])]++;
        g.token[static_cast<size_t>(p)] = s / r.k;
        g.weight[static_cast<size_t>(p)] = r.weights[static_cast<size_t>(s)];
        g.token_slots[static_cast<size_t>(s)] = p;
    }
    for (int64_t t = 0; t < r.n_tokens; ++t)
        std::sort(g.token_slots.begin() + t * r.k, g.token_slots.begin() + (t + 1) * r.k);
}

// One task of the one-job path: rows [r0, r1) of gate and up (or of down) of active expert a, or
// elements [r0, r1) of the token's activation row converted for gate (a = 0) or up (a = 1).
enum class FusedKind : int32_t { act, gate_up, down };
struct FusedTask {
    FusedKind kind;
    int32_t a;
    int64_t r0, r1;
};

// Per-call buffers, kept by the calling thread so decode does not allocate per token.
struct MoeScratch {
    ExpertGroups groups;
    ActivationRows x_gate, x_up, x_down;      // gathered per position
    ActivationRows tokens_act, tokens_act_up;  // per token, before the gather
    std::vector<float> g, u, h, y;             // [n_slots, n_ff] x3, [n_slots, n_embd]
    std::vector<int32_t> sync;                 // one-job path: counters, one per cache line
    std::vector<FusedTask> tasks;              // one-job path: the task list
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

// out[t] = sum over t's slots (expert order) of weight * y[slot], rows [r0, r1) only. y: [n_slots, n_embd].
void reduce_rows(const ExpertGroups& grp, const float* y, int64_t n_tokens, int64_t n_embd, int64_t r0, int64_t r1,
                 float* out) {
    for (int64_t t = 0; t < n_tokens; ++t) {
        float* o = out + t * n_embd;
        for (int64_t r = r0; r < r1; ++r) o[r] = 0.0f;
        for (int64_t i = 0; i < grp.k; ++i) {
            const int64_t p = grp.token_slots[static_cast<size_t>(t * grp.k + i)];
            const float wt = grp.weight[static_cast<size_t>(p)];
            const float* yp = y + p * n_embd;
            for (int64_t r = r0; r < r1; ++r) o[r] += wt * yp[r];
        }
    }
}

// out[t] = sum over t's slots (expert order) of weight * down_e(silu(gate_e x_t) * up_e x_t).
// Many tokens (prefill): one job for gate/up, one for down, tasks sized by rows.
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
        reduce_rows(grp, sc.y.data(), n_tokens, n_embd, r0, r1, out);
    });
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
}

// dot_rows with software prefetch: before row r is read, the bytes up to `ahead` past its start are
// requested. The hardware prefetchers stop at every 4 KiB page (expert stacks live in the page cache
// or pinned memory, small pages) and ramp up slowly at each task's first rows; a thread streaming at
// its share of DRAM bandwidth needs a few KiB in flight to cover the latency. Same results as dot_rows.
void dot_rows_prefetched(const quant::DotKernel& kernel, const Weight& w, int64_t r0, int64_t r1, const uint8_t* act,
                         size_t act_stride, int64_t n_act_rows, float* y, int64_t y_stride, int64_t ahead) {
    if (ahead <= 0 || n_act_rows > quant::kMaxDotCols) {  // several tiles re-read the rows from cache
        dot_rows(kernel, w, r0, r1, act, act_stride, n_act_rows, y, y_stride);
        return;
    }
    const uint8_t* end = w.row(r1);
    // First cache line not yet requested.
    const uint8_t* next = w.row(r0) - (reinterpret_cast<uintptr_t>(w.row(r0)) & 63);
    float tile[quant::kMaxDotCols];
    const int nc = static_cast<int>(n_act_rows);
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* want = std::min(end, w.row(r) + ahead);
        for (; next < want; next += 64) __builtin_prefetch(next, 0, 3);
        kernel.dot(w.n_in, w.row(r), act, act_stride, nc, tile);
        for (int j = 0; j < nc; ++j) y[j * y_stride + r] = tile[j];
    }
}

// Down rows are counted for the reduction in blocks of this many rows; down tasks cover whole blocks.
constexpr int64_t kReduceRows = 16;

// Converts elements [e0, e1) of an activation row x into `type` at its place in the converted row dst.
// Blocks of the activation formats are independent, so pieces give the bytes of a whole-row conversion.
void convert_piece(quant::TypeId type, const float* x, int64_t e0, int64_t e1, uint8_t* dst) {
    const quant::TypeTraits& t = quant::traits(type);
    quant::quantize_activations(type, x + e0, dst + static_cast<size_t>(e0 / t.block_elems) * t.block_bytes, e1 - e0);
}

// Activation pieces of one token's row of n elements in `type`: whole blocks, at most `max_pieces`.
void add_act_pieces(quant::TypeId type, int32_t which, int64_t n, int64_t max_pieces, std::vector<FusedTask>& tasks) {
    const int64_t blk = quant::traits(type).block_elems;
    const int64_t blocks = n / blk, per = (blocks + max_pieces - 1) / max_pieces;
    for (int64_t b = 0; b < blocks; b += per)
        tasks.push_back({FusedKind::act, which, b * blk, std::min(blocks, b + per) * blk});
}

// The task list of the one-job path: every gate/up task (expert by expert), then every down task.
// Sizes are guided: a task takes about 1/(2 * threads) of the bytes still unassigned, within
// [min_task_bytes, max_task_bytes]. Early tasks are long (long sequential streams, which the hardware
// prefetchers reward, and few claims); the last ones are short, so the threads finish together.
// The caller may already have put activation tasks at the front.
void plan_fused_tasks(const ExpertStack& w, int64_t n_active, int threads, const MoeOptions& opt,
                      std::vector<FusedTask>& tasks) {
    const int64_t n_embd = w.gate.n_in, n_ff = w.gate.n_out;
    const auto ub = static_cast<int64_t>(w.gate.row_bytes + w.up.row_bytes), db = static_cast<int64_t>(w.down.row_bytes);
    const int64_t lo = std::max<int64_t>(1, opt.min_task_bytes), hi = std::max(lo, opt.max_task_bytes);
    int64_t remaining = n_active * (n_ff * ub + n_embd * db);
    const auto add = [&](int32_t a, FusedKind kind, int64_t n_rows, int64_t row_bytes, int64_t align) {
        for (int64_t r0 = 0; r0 < n_rows;) {
            const int64_t want = std::clamp<int64_t>(remaining / (2 * static_cast<int64_t>(threads)), lo, hi);
            int64_t rows = std::max<int64_t>(1, want / row_bytes);
            rows = (rows + align - 1) / align * align;
            // No sliver at an expert's end: a rest under half the smallest task joins this one.
            if ((n_rows - r0 - rows) * row_bytes < lo / 2) rows = n_rows - r0;
            rows = std::min(rows, n_rows - r0);
            tasks.push_back({kind, a, r0, r0 + rows});
            remaining -= rows * row_bytes;
            r0 += rows;
        }
    };
    for (int64_t a = 0; a < n_active; ++a) add(static_cast<int32_t>(a), FusedKind::gate_up, n_ff, ub, 1);
    for (int64_t a = 0; a < n_active; ++a) add(static_cast<int32_t>(a), FusedKind::down, n_embd, db, kReduceRows);
}

// The same arithmetic as grouped_swiglu as one pool job (few tokens: decode), over the task list of
// plan_fused_tasks, after (one token) the pieces of the activation conversion, which gate/up tasks
// wait for. The gate/up task finishing an expert's last rows converts its hidden rows for down
// and marks it ready. A down task waits for its expert to be ready; the task finishing a block of
// output rows for the last expert sums that block per token, in slot order as the reference does.
// Claims follow task order, so every task waited for is running or done when a waiting task starts,
// and a wait always ends. Both lists go expert by expert, so the first experts' down overlaps the last
// gate/up tasks instead of waiting for all of them.
void fused_swiglu(const Context& ctx, const ExpertStack& w, const ExpertGroups& grp, const float* x, int64_t n_tokens,
                  const MoeOptions& opt, MoeScratch& sc, float* out) {
    const int64_t n_embd = w.gate.n_in, n_ff = w.gate.n_out;
    const auto n_slots = static_cast<int64_t>(grp.token.size());
    const auto n_active = static_cast<int64_t>(grp.experts.size());
    const quant::DotKernel& kg = quant::dot_kernel(w.gate.type, ctx.isa);
    const quant::DotKernel& ku = quant::dot_kernel(w.up.type, ctx.isa);
    const quant::DotKernel& kd = quant::dot_kernel(w.down.type, ctx.isa);

    // Activations. One token: every position reads the token's row, nothing to gather, and the job's
    // first tasks convert it in pieces (a whole row takes the reference quantizer ~5 us for Q8_K
    // [2048], which the caller would otherwise spend alone while the workers wait).
    sc.tasks.clear();
    const ActivationRows* ag = &sc.tokens_act;
    const ActivationRows* au = &sc.tokens_act;
    const auto prepare = [&](quant::TypeId type, ActivationRows& rows) {
        rows.type = type;
        rows.n_rows = 1;
        rows.row_bytes = quant::activation_row_bytes(type, n_embd);
        rows.data.resize(rows.row_bytes);
    };
    if (n_tokens == 1) {
        const int64_t max_pieces = std::min(ctx.threads(), 8);
        prepare(kg.act, sc.tokens_act);
        add_act_pieces(kg.act, 0, n_embd, max_pieces, sc.tasks);
        if (ku.act != kg.act) {
            prepare(ku.act, sc.tokens_act_up);
            add_act_pieces(ku.act, 1, n_embd, max_pieces, sc.tasks);
            au = &sc.tokens_act_up;
        }
    } else {
        convert_activations(ctx, kg.act, x, n_tokens, n_embd, sc.tokens_act);
        if (ku.act != kg.act) {
            convert_activations(ctx, ku.act, x, n_tokens, n_embd, sc.tokens_act_up);
            au = &sc.tokens_act_up;
        }
    }
    const auto n_pieces = static_cast<int32_t>(sc.tasks.size());
    if (n_tokens > 1) {
        gather(*ag, grp.token, sc.x_gate);
        if (au != ag) {
            gather(*au, grp.token, sc.x_up);
            au = &sc.x_up;
        } else {
            au = &sc.x_gate;
        }
        ag = &sc.x_gate;
    }
    const auto act_row = [n_tokens](const ActivationRows* a, int64_t p) { return a->row(n_tokens > 1 ? p : 0); };
    // One token that names an expert twice: both positions read the token's row.
    const size_t stride_g = n_tokens > 1 ? ag->row_bytes : 0, stride_u = n_tokens > 1 ? au->row_bytes : 0;

    sc.g.resize(static_cast<size_t>(n_slots * n_ff));
    sc.u.resize(sc.g.size());
    sc.h.resize(sc.g.size());
    sc.y.resize(static_cast<size_t>(n_slots * n_embd));
    ActivationRows& xd = sc.x_down;
    xd.type = kd.act;
    xd.n_rows = n_slots;
    xd.row_bytes = quant::activation_row_bytes(kd.act, n_ff);
    xd.data.resize(xd.row_bytes * static_cast<size_t>(n_slots));

    plan_fused_tasks(w, n_active, ctx.threads(), opt, sc.tasks);
    const int64_t n_blocks = (n_embd + kReduceRows - 1) / kReduceRows;

    // Counters, each on its own cache line: gate/up rows still to do and a ready flag per expert,
    // experts still to do per block of output rows, activation pieces done.
    constexpr size_t kLine = 64 / sizeof(int32_t);
    sc.sync.assign(static_cast<size_t>(2 * n_active + n_blocks + 1) * kLine, 0);
    const auto counter = [&](int64_t i) { return std::atomic_ref<int32_t>(sc.sync[static_cast<size_t>(i) * kLine]); };
    const auto pending_u = [&](int64_t a) { return counter(a); };
    const auto ready = [&](int64_t a) { return counter(n_active + a); };
    const auto pending_d = [&](int64_t b) { return counter(2 * n_active + b); };
    const auto act_done = [&] { return counter(2 * n_active + n_blocks); };
    for (int64_t a = 0; a < n_active; ++a) pending_u(a).store(static_cast<int32_t>(n_ff), std::memory_order_relaxed);
    for (int64_t b = 0; b < n_blocks; ++b) pending_d(b).store(static_cast<int32_t>(n_active), std::memory_order_relaxed);
    std::atomic<bool> failed{false};  // a throwing task must not leave down tasks waiting forever

    const auto finish_rows = [&](int64_t a, int64_t rows, int64_t p0, int64_t np) {
        if (pending_u(a).fetch_sub(static_cast<int32_t>(rows), std::memory_order_acq_rel) != rows) return;
        try {
            for (int64_t p = p0; p < p0 + np; ++p)
                quant::quantize_activations(kd.act, sc.h.data() + p * n_ff,
                                            xd.data.data() + static_cast<size_t>(p) * xd.row_bytes, n_ff);
        } catch (...) {
            failed.store(true);
            ready(a).store(1, std::memory_order_release);
            throw;
        }
        ready(a).store(1, std::memory_order_release);
    };

    // Spins briefly, then yields: on an oversubscribed machine the task waited for may need this core.
    const auto wait_until = [&](auto&& done) {
        for (int spin = 0; !done(); ++spin) {
            if (spin < 4096) cpu_relax();
            else std::this_thread::yield();
        }
    };

    ctx.parallel(static_cast<int64_t>(sc.tasks.size()), [&](int64_t i) {
        const FusedTask t = sc.tasks[static_cast<size_t>(i)];
        const int64_t a = t.a, r0 = t.r0, r1 = t.r1;
        if (t.kind == FusedKind::act) {
            ActivationRows& rows = a == 0 ? sc.tokens_act : sc.tokens_act_up;
            try {
                convert_piece(rows.type, x, r0, r1, rows.data.data());
            } catch (...) {
                failed.store(true);
                act_done().fetch_add(1, std::memory_order_acq_rel);
                throw;
            }
            act_done().fetch_add(1, std::memory_order_acq_rel);
            return;
        }
        const int64_t e = grp.experts[static_cast<size_t>(a)];
        const int64_t p0 = grp.offsets[static_cast<size_t>(a)], np = grp.offsets[static_cast<size_t>(a) + 1] - p0;
        if (t.kind == FusedKind::gate_up) {
            wait_until([&] { return act_done().load(std::memory_order_acquire) == n_pieces; });
            try {
                float* g = sc.g.data() + p0 * n_ff;
                float* u = sc.u.data() + p0 * n_ff;
                dot_rows_prefetched(kg, w.gate.expert(e), r0, r1, act_row(ag, p0), stride_g, np, g, n_ff,
                                    opt.prefetch_bytes);
                dot_rows_prefetched(ku, w.up.expert(e), r0, r1, act_row(au, p0), stride_u, np, u, n_ff,
                                    opt.prefetch_bytes);
                float* h = sc.h.data() + p0 * n_ff;
                for (int64_t p = 0; p < np; ++p)
                    for (int64_t r = r0; r < r1; ++r) h[p * n_ff + r] = silu(g[p * n_ff + r]) * u[p * n_ff + r];
            } catch (...) {
                failed.store(true);
                finish_rows(a, r1 - r0, p0, np);
                throw;
            }
            finish_rows(a, r1 - r0, p0, np);
            return;
        }
        wait_until([&] { return ready(a).load(std::memory_order_acquire) != 0; });
        if (failed.load()) return;
        dot_rows_prefetched(kd, w.down.expert(e), r0, r1, xd.row(p0), xd.row_bytes, np, sc.y.data() + p0 * n_embd,
                            n_embd, opt.prefetch_bytes);
        for (int64_t b = r0 / kReduceRows; b * kReduceRows < r1; ++b)
            if (pending_d(b).fetch_sub(1, std::memory_order_acq_rel) == 1)
                reduce_rows(grp, sc.y.data(), n_tokens, n_embd, b * kReduceRows, std::min(n_embd, (b + 1) * kReduceRows),
                            out);
    });
}

void expert_swiglu(const Context& ctx, const ExpertStack& w, const ExpertGroups& grp, const float* x,
                   int64_t n_tokens, const MoeOptions& opt, MoeScratch& sc, float* out) {
    if (n_tokens <= opt.fused_max_tokens) fused_swiglu(ctx, w, grp, x, n_tokens, opt, sc, out);
    else grouped_swiglu(ctx, w, grp, x, n_tokens, sc, out);
}

MoeScratch& scratch() {
    thread_local MoeScratch s;
    return s;
}

}  // namespace

void swiglu_ffn(const Context& ctx, const Weight& gate, const Weight& up, const Weight& down, const float* x,
                int64_t n_tokens, float* out, const MoeOptions& options) {
    MoeScratch& sc = scratch();
    // One expert holding every token with weight 1 (1 * y is exact, so this is the plain FFN).
    ExpertGroups& g = sc.groups;
    g.k = 1;
    g.experts.assign(1, 0);
    g.offsets.assign({0, n_tokens});
    g.token.resize(static_cast<size_t>(n_tokens));
    g.token_slots.resize(static_cast<size_t>(n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t) g.token[static_cast<size_t>(t)] = g.token_slots[static_cast<size_t>(t)] = t;
    g.weight.assign(static_cast<size_t>(n_tokens), 1.0f);
    expert_swiglu(ctx, ExpertStack{gate, up, down}, g, x, n_tokens, options, sc, out);
}

void moe_ffn(const Context& ctx, const ExpertStack& experts, const Routing& routing, const float* x, float* out,
             const MoeOptions& options) {
    MOX_CHECK(experts.gate.n_in == experts.up.n_in && experts.gate.n_out == experts.up.n_out &&
              experts.down.n_in == experts.gate.n_out && experts.down.n_out == experts.gate.n_in);
    MoeScratch& sc = scratch();
    group_by_expert(routing, experts.gate.n_expert, sc.groups);
    expert_swiglu(ctx, experts, sc.groups, x, routing.n_tokens, options, sc, out);
}

}  // namespace mox::ops

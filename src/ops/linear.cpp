#include "ops/linear.h"

#include <algorithm>

namespace mox::ops {

void dequantize_rows(const Weight& w, int64_t r0, int64_t n, float* dst) {
    const quant::TypeTraits& t = quant::traits(w.type);
    MOX_CHECK(t.dequantize != nullptr, "no dequantizer for {}", t.name);
    for (int64_t r = 0; r < n; ++r) t.dequantize(w.row(r0 + r), dst + r * w.n_in, w.n_in);
}

void convert_activations(const Context& ctx, quant::TypeId type, const float* x, int64_t n_rows, int64_t n,
                         ActivationRows& out) {
    out.type = type;
    out.n_rows = n_rows;
    out.row_bytes = quant::activation_row_bytes(type, n);
    out.data.resize(out.row_bytes * static_cast<size_t>(n_rows));
    constexpr int64_t kRowsPerTask = 8;
    const int64_t n_tasks = (n_rows + kRowsPerTask - 1) / kRowsPerTask;
    auto task = [&](int64_t i) {
        const int64_t end = std::min(n_rows, (i + 1) * kRowsPerTask);
        for (int64_t r = i * kRowsPerTask; r < end; ++r)
            quant::quantize_activations(type, x + r * n, out.data.data() + static_cast<size_t>(r) * out.row_bytes, n);
    };
    if (n_tasks == 1) task(0);
    else ctx.parallel(n_tasks, task);
}

void dot_rows(const quant::DotKernel& kernel, const Weight& w, int64_t r0, int64_t r1, const uint8_t* act,
              size_t act_stride, int64_t n_act_rows, float* y, int64_t y_stride) {
    float tile[quant::kMaxDotCols];
    // Token tiles outside, rows inside: the tile's activations stay in L1 while the task's weight rows
    // (a few KiB each) come from L2 after the first tile.
    for (int64_t t0 = 0; t0 < n_act_rows; t0 += quant::kMaxDotCols) {
        const int nc = static_cast<int>(std::min<int64_t>(quant::kMaxDotCols, n_act_rows - t0));
        const uint8_t* a = act + static_cast<size_t>(t0) * act_stride;
        for (int64_t r = r0; r < r1; ++r) {
            kernel.dot(w.n_in, w.row(r), a, act_stride, nc, tile);
            for (int j = 0; j < nc; ++j) y[(t0 + j) * y_stride + r] = tile[j];
        }
    }
}

int64_t rows_per_task(const Context& ctx, int64_t n_rows) {
    // ~8 tasks per thread balances uneven cores; at least 4 rows keeps the per-task cost above the
    // pool's hand-out cost.
    const int64_t want_tasks = 8 * static_cast<int64_t>(ctx.threads());
    return std::clamp<int64_t>((n_rows + want_tasks - 1) / want_tasks, 4, 256);
}

void linear(const Context& ctx, const Weight& w, const float* x, int64_t n_tokens, float* y) {
    const quant::DotKernel& kernel = quant::dot_kernel(w.type, ctx.isa);
    // Reused across calls (no per-token allocation). Named through a plain reference: inside the
    // lambda below a thread_local would resolve to the worker's own, empty instance.
    thread_local ActivationRows scratch;
    ActivationRows& act = scratch;
    convert_activations(ctx, kernel.act, x, n_tokens, w.n_in, act);
    const int64_t chunk = rows_per_task(ctx, w.n_out);
    const int64_t n_tasks = (w.n_out + chunk - 1) / chunk;
    ctx.parallel(n_tasks, [&](int64_t i) {
        const int64_t r0 = i * chunk;
        dot_rows(kernel, w, r0, std::min(w.n_out, r0 + chunk), act.data.data(), act.row_bytes, n_tokens, y, w.n_out);
    });
}

}  // namespace mox::ops

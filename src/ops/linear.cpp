#include "ops/linear.h"

#include <algorithm>
#include <vector>

namespace mox::ops {

void dequantize_rows(const Weight& w, int64_t r0, int64_t n, float* dst) {
    const quant::TypeTraits& t = quant::traits(w.type);
    MOX_CHECK(t.dequantize != nullptr, "no dequantizer for {}", t.name);
    for (int64_t r = 0; r < n; ++r) t.dequantize(w.row(r0 + r), dst + r * w.n_in, w.n_in);
}

namespace {

float dot(const float* a, const float* b, int64_t n) {
    float sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

}  // namespace

void linear(const Context& ctx, const Weight& w, const float* x, int64_t n_tokens, float* y) {
    constexpr int64_t kRowsPerTask = 16;
    const int64_t n_tasks = (w.n_out + kRowsPerTask - 1) / kRowsPerTask;
    auto task = [&](int64_t task_index) {
        thread_local std::vector<float> rows;
        const int64_t r0 = task_index * kRowsPerTask;
        const int64_t n = std::min(kRowsPerTask, w.n_out - r0);
        rows.resize(static_cast<size_t>(n * w.n_in));
        dequantize_rows(w, r0, n, rows.data());
        for (int64_t t = 0; t < n_tokens; ++t)
            for (int64_t r = 0; r < n; ++r) y[t * w.n_out + r0 + r] = dot(rows.data() + r * w.n_in, x + t * w.n_in, w.n_in);
    };
    if (ctx.pool) ctx.pool->run(n_tasks, task);
    else
        for (int64_t i = 0; i < n_tasks; ++i) task(i);
}

}  // namespace mox::ops

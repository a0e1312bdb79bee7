// y = W x for a batch of activation rows, through the dot kernels of quant/dot.h: activations are
// converted once per call into the kernel's format (Q8_0/Q8_1/Q8_K, or F32 for float weights and
// for the scalar reference kernels), then each task takes a block of weight rows and runs it against
// the batch in tiles of up to kMaxDotCols tokens, so a weight row is read from memory once per call.
#pragma once

#include "ops/context.h"
#include "ops/weight.h"
#include "quant/dot.h"

#include <cstdint>
#include <vector>

namespace mox::ops {

// x: [n_tokens, w.n_in] row-major, y: [n_tokens, w.n_out].
void linear(const Context& ctx, const Weight& w, const float* x, int64_t n_tokens, float* y);

// Dequantizes rows [r0, r0 + n) of w into dst [n, w.n_in].
void dequantize_rows(const Weight& w, int64_t r0, int64_t n, float* dst);

// Activation rows converted to one kernel's format.
struct ActivationRows {
    quant::TypeId type = quant::TypeId::f32;
    int64_t n_rows = 0;
    size_t row_bytes = 0;
    std::vector<uint8_t> data;
    const uint8_t* row(int64_t i) const { return data.data() + static_cast<size_t>(i) * row_bytes; }
};

// Converts x [n_rows, n] (row stride n) into `type`, rows in parallel.
void convert_activations(const Context& ctx, quant::TypeId type, const float* x, int64_t n_rows, int64_t n,
                         ActivationRows& out);

// y[t * y_stride + r] = dot(w row r, activation row t) for r in [r0, r1), t < n_act_rows, with activation
// rows at act + t * act_stride. Runs on the calling thread.
void dot_rows(const quant::DotKernel& kernel, const Weight& w, int64_t r0, int64_t r1, const uint8_t* act,
              size_t act_stride, int64_t n_act_rows, float* y, int64_t y_stride);

// How many weight rows one task takes so that `n_rows` split into enough tasks for the pool.
int64_t rows_per_task(const Context& ctx, int64_t n_rows);

}  // namespace mox::ops

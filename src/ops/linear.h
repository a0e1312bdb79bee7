// y = W x for a batch of activation rows. Reference path: each weight row is dequantized to fp32
// once per call and dotted with every token's activation in fp32, so results do not depend on the
// thread count (each output element is one sequential dot product).
#pragma once

#include "ops/context.h"
#include "ops/weight.h"

#include <cstdint>

namespace mox::ops {

// x: [n_tokens, w.n_in] row-major, y: [n_tokens, w.n_out].
void linear(const Context& ctx, const Weight& w, const float* x, int64_t n_tokens, float* y);

// Dequantizes rows [r0, r0 + n) of w into dst [n, w.n_in].
void dequantize_rows(const Weight& w, int64_t r0, int64_t n, float* dst);

}  // namespace mox::ops

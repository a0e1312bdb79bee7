// A host expert stack {n_in, n_out, n_expert} for the CUDA MoE tests: quantized by the reference
// quantizer from N(0, scale) values, or, for grid i-quants (no quantizer), random valid blocks of
// about that magnitude. The bytes stay alive in the struct; `w` points at them.
#pragma once

#include "cuda_test_util.h"
#include "ops/weight.h"
#include "quant/types.h"
#include "random_blocks.h"

#include <cstdint>
#include <vector>

namespace mox::cuda::test {

struct HostStack {
    std::vector<uint8_t> bytes;
    ops::Weight w;
};

inline HostStack make_stack(quant::TypeId type, int64_t n_in, int64_t n_out, int64_t n_expert, uint32_t seed,
                            float scale) {
    const auto& tr = quant::traits(type);
    HostStack s;
    const size_t rb = quant::row_bytes(type, n_in);
    s.bytes.resize(rb * static_cast<size_t>(n_out * n_expert));
    if (tr.quantize == nullptr) {
        s.bytes = random_blocks(type, n_out * n_expert * (n_in / tr.block_elems), seed, scale / 32);
    } else {
        const auto f = randn(static_cast<size_t>(n_in * n_out * n_expert), seed, scale);
        parallel_for(n_out * n_expert, [&](int64_t r) { tr.quantize(f.data() + r * n_in, s.bytes.data() + r * rb, n_in); });
    }
    s.w = ops::Weight{.data = s.bytes.data(), .type = type, .n_in = n_in, .n_out = n_out, .n_expert = n_expert, .row_bytes = rb};
    return s;
}

}  // namespace mox::cuda::test

// A read-only view of a weight matrix in its stored block format: `n_out` rows of `n_in`
// elements, each row `row_bytes` long (ggml layout: ne0 = n_in is contiguous). Expert stacks
// are 3-D; expert(e) is the 2-D slice of one expert.
#pragma once

#include "core/error.h"
#include "quant/types.h"

#include <cstddef>
#include <cstdint>

namespace mox::ops {

struct Weight {
    const uint8_t* data = nullptr;
    quant::TypeId type = quant::TypeId::f32;
    int64_t n_in = 0;      // ne0
    int64_t n_out = 0;     // ne1
    int64_t n_expert = 1;  // ne2 (1 for plain matrices)
    size_t row_bytes = 0;
    // Bytes from one expert's slice to the next; 0: packed (n_out * row_bytes). A view of the expert
    // cache's slots (larger, uniform slots that hold layers of different types) sets it.
    size_t expert_bytes = 0;

    bool valid() const { return data != nullptr; }
    size_t expert_stride() const { return expert_bytes ? expert_bytes : static_cast<size_t>(n_out) * row_bytes; }
    const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
    Weight expert(int64_t e) const {
        MOX_CHECK(e >= 0 && e < n_expert, "expert {} of {}", e, n_expert);
        Weight w = *this;
        w.data = data + static_cast<size_t>(e) * expert_stride();
        w.n_expert = 1;
        w.expert_bytes = 0;
        return w;
    }
};

}  // namespace mox::ops

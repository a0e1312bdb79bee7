// Test weights for block types that have no reference quantizer (the grid i-quants IQ2_*, IQ3_*,
// IQ1_*): quant::random_grid_blocks (quant/random_blocks.h), with a failed expectation instead of an
// exception for a type it does not know. The tests compare the CUDA kernels against the reference
// dequantizer of these same bytes.
#pragma once

#include "core/error.h"
#include "quant/random_blocks.h"
#include "quant/types.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace mox::cuda::test {

// n_blocks blocks of `type`; |d| uniform in [d_max / 4, d_max), either sign.
inline std::vector<uint8_t> random_blocks(quant::TypeId type, int64_t n_blocks, uint32_t seed, float d_max) {
    try {
        return quant::random_grid_blocks(type, n_blocks, seed, d_max);
    } catch (const Error& e) {
        ADD_FAILURE() << e.what();
        return std::vector<uint8_t>(quant::traits(type).block_bytes * static_cast<size_t>(n_blocks));
    }
}

}  // namespace mox::cuda::test

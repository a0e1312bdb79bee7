// Test weights for block types that have no reference quantizer (the grid i-quants IQ2_*, IQ3_*,
// IQ1_*): random bytes, so every grid index, sign pattern, sub-block scale and delta bit occurs,
// with each block's f16 super-block scale d overwritten by a random finite value. The tests compare
// the CUDA kernels against the reference dequantizer of these same bytes.
#pragma once

#include "core/fp16.h"
#include "quant/types.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace mox::cuda::test {

// n_blocks blocks of `type`; |d| uniform in [d_max / 4, d_max), either sign. d is an f16 at byte 0,
// except IQ1_M, which spreads it over the top nibbles of its four u16 scale words at bytes 48..55
// (word w holds bits 4w..4w+3), spec §4.2.
inline std::vector<uint8_t> random_blocks(quant::TypeId type, int64_t n_blocks, uint32_t seed, float d_max) {
    using quant::TypeId;
    const auto& tr = quant::traits(type);
    const bool known = type == TypeId::iq2_xxs || type == TypeId::iq2_xs || type == TypeId::iq2_s ||
                       type == TypeId::iq3_xxs || type == TypeId::iq3_s || type == TypeId::iq1_s ||
                       type == TypeId::iq1_m;
    EXPECT_TRUE(known) << "random_blocks: no scale layout for " << tr.name;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> mag(0.25f * d_max, d_max);
    std::vector<uint8_t> bytes(tr.block_bytes * static_cast<size_t>(n_blocks));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    for (int64_t i = 0; i < n_blocks; ++i) {
        uint8_t* blk = bytes.data() + i * tr.block_bytes;
        const float d = (rng() & 1) ? mag(rng) : -mag(rng);
        const uint16_t h = fp32_to_fp16(d);
        if (type == TypeId::iq1_m) {
            for (int w = 0; w < 4; ++w) {
                uint8_t& hi = blk[48 + 2 * w + 1];
                hi = static_cast<uint8_t>((hi & 0x0F) | (((h >> (4 * w)) & 0xF) << 4));
            }
        } else {
            blk[0] = static_cast<uint8_t>(h & 0xFF);
            blk[1] = static_cast<uint8_t>(h >> 8);
        }
    }
    return bytes;
}

}  // namespace mox::cuda::test

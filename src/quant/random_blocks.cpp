#include "quant/random_blocks.h"

#include "core/error.h"
#include "core/fp16.h"

#include <random>

namespace mox::quant {

namespace {

bool is_grid_type(TypeId t) {
    return t == TypeId::iq2_xxs || t == TypeId::iq2_xs || t == TypeId::iq2_s || t == TypeId::iq3_xxs ||
           t == TypeId::iq3_s || t == TypeId::iq1_s || t == TypeId::iq1_m;
}

}  // namespace

std::vector<uint8_t> random_grid_blocks(TypeId type, int64_t n_blocks, uint32_t seed, float d_max) {
    const TypeTraits& tr = traits(type);
    if (!is_grid_type(type)) fail("random_grid_blocks: {} is not a grid i-quant", tr.name);
    if (n_blocks < 0) fail("random_grid_blocks: {} blocks", n_blocks);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> mag(0.25f * d_max, d_max);
    std::vector<uint8_t> bytes(tr.block_bytes * static_cast<size_t>(n_blocks));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    for (int64_t i = 0; i < n_blocks; ++i) {
        uint8_t* blk = bytes.data() + static_cast<size_t>(i) * tr.block_bytes;
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

std::vector<uint8_t> random_valid_blocks(TypeId type, int64_t n_blocks, uint32_t seed) {
    const TypeTraits& tr = traits(type);
    if (n_blocks < 0) fail("random_valid_blocks: {} blocks", n_blocks);
    if (tr.quantize == nullptr) {
        if (is_grid_type(type)) return random_grid_blocks(type, n_blocks, seed, 1.0f / 32);
        fail("random_valid_blocks: {} has no quantizer and no known block layout", tr.name);
    }
    const int64_t n = n_blocks * tr.block_elems;
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = dist(rng);
    std::vector<uint8_t> bytes(tr.block_bytes * static_cast<size_t>(n_blocks));
    // One row of blocks per call: the quantizer takes any multiple of the block size.
    if (n > 0) tr.quantize(values.data(), bytes.data(), n);
    return bytes;
}

}  // namespace mox::quant

// quant::random_valid_blocks: every weight type's blocks dequantize (reference) to finite values that
// are not all zero, the same seed gives the same bytes, and types it cannot fill are refused.
#include "quant/random_blocks.h"
#include "core/error.h"
#include "quant/types.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace mox::quant {
namespace {

bool weight_type(const TypeTraits& t) {
    return t.dequantize != nullptr && t.id != TypeId::q8_1 && t.id != TypeId::q8_k && t.id != TypeId::f64;
}

TEST(RandomBlocks, EveryWeightTypeDequantizesToFiniteValues) {
    for (const TypeTraits& t : all_types()) {
        if (!weight_type(t)) continue;
        const int64_t n_blocks = 64;
        const std::vector<uint8_t> bytes = random_valid_blocks(t.id, n_blocks, 7);
        ASSERT_EQ(bytes.size(), t.block_bytes * n_blocks) << t.name;
        std::vector<float> values(static_cast<size_t>(n_blocks * t.block_elems));
        t.dequantize(bytes.data(), values.data(), static_cast<int64_t>(values.size()));
        double sum_abs = 0;
        for (float v : values) {
            ASSERT_TRUE(std::isfinite(v)) << t.name;
            sum_abs += std::fabs(v);
        }
        EXPECT_GT(sum_abs, 0.0) << t.name;
        EXPECT_EQ(random_valid_blocks(t.id, n_blocks, 7), bytes) << t.name;
    }
}

TEST(RandomBlocks, GridBlocksOnlyForGridTypes) {
    EXPECT_THROW(random_grid_blocks(TypeId::q4_k, 4, 1, 1.0f), Error);
    EXPECT_THROW(random_valid_blocks(TypeId::i32, 4, 1), Error);
    EXPECT_EQ(random_grid_blocks(TypeId::iq2_xxs, 3, 1, 1.0f).size(), 3u * 66u);
}

}  // namespace
}  // namespace mox::quant

// Properties of the grid i-quant tables and reference dequantizers that need no outside reference.
// Bit-exactness against the gguf package's numpy code is tested in tests/py/test_iq_grid_interop.py.
#include "quant/iq_grids.h"
#include "quant/reference_iq_grid.h"
#include "quant/types.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <set>
#include <vector>

namespace mox::quant {

// Readable parameter names in gtest/ctest output. Internal linkage: other test files may define
// their own.
[[maybe_unused]] static void PrintTo(TypeId id, std::ostream* os) {
    *os << type_name(id);
}

namespace {

constexpr TypeId kGridTypes[] = {TypeId::iq2_xxs, TypeId::iq2_xs, TypeId::iq2_s, TypeId::iq3_xxs,
                                 TypeId::iq3_s,   TypeId::iq1_s,  TypeId::iq1_m};

template <typename Table>
void expect_entries_in(const Table& table, int width, const std::set<int>& allowed, bool is_signed,
                       const char* name) {
    std::set<typename Table::value_type> distinct;
    for (const auto entry : table) {
        distinct.insert(entry);
        for (int j = 0; j < width; ++j) {
            const uint8_t byte = grid_byte(entry, j);
            const int v = is_signed ? static_cast<int8_t>(byte) : byte;
            ASSERT_TRUE(allowed.count(v)) << name << " entry " << std::hex << entry << " element " << j;
        }
    }
    EXPECT_EQ(distinct.size(), table.size()) << name << " has duplicate entries";
}

TEST(IqGridTables, SizesAndValueSetsMatchSpec) {
    // Spec §4.1.
    static_assert(iq2xxs_grid.size() == 256 && iq2xs_grid.size() == 512 && iq2s_grid.size() == 1024);
    static_assert(iq3xxs_grid.size() == 256 && iq3s_grid.size() == 512 && iq1s_grid.size() == 2048);
    static_assert(ksigns_iq2xs.size() == 128);
    const std::set<int> iq2{8, 25, 43};
    expect_entries_in(iq2xxs_grid, 8, iq2, false, "iq2xxs_grid");
    expect_entries_in(iq2xs_grid, 8, iq2, false, "iq2xs_grid");
    expect_entries_in(iq2s_grid, 8, iq2, false, "iq2s_grid");
    expect_entries_in(iq3xxs_grid, 4, {4, 12, 20, 28, 36, 44, 52, 62}, false, "iq3xxs_grid");
    expect_entries_in(iq3s_grid, 4, {1, 3, 5, 7, 9, 11, 13, 15}, false, "iq3s_grid");
    expect_entries_in(iq1s_grid, 8, {-1, 0, 1}, true, "iq1s_grid");
}

TEST(IqGridTables, SignTableIsIndexPlusParityBit) {
    for (int i = 0; i < 128; ++i) {
        const uint8_t s = ksigns_iq2xs[i];
        EXPECT_EQ(s & 0x7f, i);
        EXPECT_EQ(std::popcount(static_cast<unsigned>(s)) % 2, 0) << "entry " << i;
    }
}

TEST(IqGridTables, RegistryRowsUseTheseDequantizers) {
    EXPECT_EQ(traits(TypeId::iq2_xxs).dequantize, &ref::dequantize_iq2_xxs);
    EXPECT_EQ(traits(TypeId::iq2_xs).dequantize, &ref::dequantize_iq2_xs);
    EXPECT_EQ(traits(TypeId::iq2_s).dequantize, &ref::dequantize_iq2_s);
    EXPECT_EQ(traits(TypeId::iq3_xxs).dequantize, &ref::dequantize_iq3_xxs);
    EXPECT_EQ(traits(TypeId::iq3_s).dequantize, &ref::dequantize_iq3_s);
    EXPECT_EQ(traits(TypeId::iq1_s).dequantize, &ref::dequantize_iq1_s);
    EXPECT_EQ(traits(TypeId::iq1_m).dequantize, &ref::dequantize_iq1_m);
    for (TypeId id : kGridTypes) EXPECT_EQ(traits(id).block_elems, 256);
}

// Writes the fp16 super-scale of one block. IQ1_M has no d field: its bits are the top nibbles of
// the four u16 scale words at bytes 48..55 (word w holds fp16 bits 4w..4w+3), spec §4.2.
void set_scale(TypeId id, uint8_t* block, uint16_t d_bits) {
    if (id == TypeId::iq1_m) {
        for (int w = 0; w < 4; ++w) {
            uint8_t& hi = block[48 + 2 * w + 1];
            hi = static_cast<uint8_t>((hi & 0x0f) | (((d_bits >> (4 * w)) & 0xf) << 4));
        }
    } else {
        block[0] = static_cast<uint8_t>(d_bits & 0xff);
        block[1] = static_cast<uint8_t>(d_bits >> 8);
    }
}

std::vector<uint8_t> random_blocks(TypeId id, int n_blocks, uint16_t d_bits, uint32_t seed) {
    const TypeTraits& t = traits(id);
    std::mt19937 rng(seed);
    std::vector<uint8_t> bytes(t.block_bytes * static_cast<size_t>(n_blocks));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    for (int i = 0; i < n_blocks; ++i) set_scale(id, bytes.data() + i * t.block_bytes, d_bits);
    return bytes;
}

std::vector<float> dequant(TypeId id, const std::vector<uint8_t>& bytes) {
    const TypeTraits& t = traits(id);
    const int64_t n = static_cast<int64_t>(bytes.size() / t.block_bytes) * t.block_elems;
    std::vector<float> out(static_cast<size_t>(n));
    t.dequantize(bytes.data(), out.data(), n);
    return out;
}

uint32_t bits_of(float f) {
    return std::bit_cast<uint32_t>(f);
}

class IqGridDequant : public ::testing::TestWithParam<TypeId> {};

TEST_P(IqGridDequant, ZeroScaleGivesZeros) {
    const auto out = dequant(GetParam(), random_blocks(GetParam(), 8, 0x0000, 1));
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 0.0f) << "element " << i;
}

TEST_P(IqGridDequant, OutputIsLinearInTheScale) {
    // Doubling d (fp16 exponent + 1) doubles every output exactly: scaling by a power of two commutes
    // with every fp32 rounding on the way. Flipping d's sign negates every output exactly.
    std::mt19937 rng(7);
    for (int trial = 0; trial < 50; ++trial) {
        const auto exponent = static_cast<uint16_t>(1 + rng() % 29);  // 1..29, so exponent+1 stays finite
        const auto d = static_cast<uint16_t>((exponent << 10) | (rng() & 0x3ff));
        auto bytes = random_blocks(GetParam(), 4, d, 100 + trial);
        const auto base = dequant(GetParam(), bytes);
        const TypeTraits& t = traits(GetParam());
        for (int b = 0; b < 4; ++b) set_scale(GetParam(), bytes.data() + b * t.block_bytes, d + (1 << 10));
        const auto doubled = dequant(GetParam(), bytes);
        for (int b = 0; b < 4; ++b) set_scale(GetParam(), bytes.data() + b * t.block_bytes, d | 0x8000);
        const auto negated = dequant(GetParam(), bytes);
        for (size_t i = 0; i < base.size(); ++i) {
            ASSERT_EQ(bits_of(doubled[i]), bits_of(2.0f * base[i])) << "trial " << trial << " element " << i;
            ASSERT_EQ(bits_of(negated[i]), bits_of(-base[i])) << "trial " << trial << " element " << i;
        }
    }
}

// The set of values a block with d = 1 can produce, from the spec's formulas (§4.2): a sub-block
// scale times a grid value (times a sign for IQ2/IQ3; plus/minus delta for IQ1).
std::set<float> possible_values_for_unit_scale(TypeId id) {
    std::set<float> values;
    auto add_signed = [&](float scale, std::initializer_list<int> grid) {
        for (int g : grid) {
            values.insert(scale * static_cast<float>(g));
            values.insert(-(scale * static_cast<float>(g)));
        }
    };
    switch (id) {
        case TypeId::iq2_xxs:
        case TypeId::iq2_xs:
        case TypeId::iq2_s:
            for (int s = 0; s < 16; ++s) add_signed((0.5f + static_cast<float>(s)) * 0.25f, {8, 25, 43});
            break;
        case TypeId::iq3_xxs:
            for (int s = 0; s < 16; ++s)
                add_signed((0.5f + static_cast<float>(s)) * 0.5f, {4, 12, 20, 28, 36, 44, 52, 62});
            break;
        case TypeId::iq3_s:
            for (int s = 0; s < 16; ++s)
                add_signed(static_cast<float>(1 + 2 * s), {1, 3, 5, 7, 9, 11, 13, 15});
            break;
        case TypeId::iq1_s:
        case TypeId::iq1_m:
            for (int s = 0; s < 8; ++s)
                for (int g = -1; g <= 1; ++g)
                    for (float delta : {-0.125f, 0.125f})
                        values.insert(static_cast<float>(2 * s + 1) * (static_cast<float>(g) + delta));
            break;
        default:
            ADD_FAILURE() << "not a grid type";
    }
    return values;
}

TEST_P(IqGridDequant, UnitScaleValuesComeFromTheFormula) {
    const std::set<float> allowed = possible_values_for_unit_scale(GetParam());
    const auto out = dequant(GetParam(), random_blocks(GetParam(), 64, 0x3c00 /* 1.0 */, 3));
    std::set<float> seen;
    for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_TRUE(allowed.count(out[i])) << "element " << i << " = " << out[i];
        seen.insert(out[i]);
    }
    // Random blocks should reach a good share of the possible values, not a degenerate few.
    EXPECT_GT(seen.size(), allowed.size() / 2);
}

TEST_P(IqGridDequant, WritesExactlyNElements) {
    const TypeTraits& t = traits(GetParam());
    const auto bytes = random_blocks(GetParam(), 3, 0x3c00, 5);
    constexpr size_t kGuard = 64;
    const float sentinel = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> out(3 * 256 + kGuard, sentinel);
    t.dequantize(bytes.data(), out.data(), 3 * 256);
    for (size_t i = 0; i < 3 * 256; ++i)
        ASSERT_FALSE(std::isnan(out[i])) << "element " << i << " not written";
    for (size_t i = 3 * 256; i < out.size(); ++i)
        ASSERT_TRUE(std::isnan(out[i])) << "wrote past the end at " << i;
    t.dequantize(bytes.data(), out.data(), 0);  // n = 0 touches nothing
}

TEST_P(IqGridDequant, PartialBlockIsAnInternalError) {
    const TypeTraits& t = traits(GetParam());
    const auto bytes = random_blocks(GetParam(), 1, 0x3c00, 6);
    std::vector<float> out(256);
    EXPECT_DEATH(t.dequantize(bytes.data(), out.data(), 128), "not a whole number of blocks");
}

INSTANTIATE_TEST_SUITE_P(GridTypes, IqGridDequant, ::testing::ValuesIn(kGridTypes),
                         [](const auto& info) { return std::string(type_name(info.param)); });

// Sign indices carry 7 bits and imply the 8th: every group of 8 has an even number of negative
// values when d > 0 (all IQ2_XXS/IQ2_XS/IQ3_XXS magnitudes and scales are nonzero).
TEST(IqGridDequantSigns, ParityTypesHaveEvenNegativesPerGroup) {
    for (TypeId id : {TypeId::iq2_xxs, TypeId::iq2_xs, TypeId::iq3_xxs}) {
        const auto out = dequant(id, random_blocks(id, 16, 0x3c00, 11));
        for (size_t g = 0; g < out.size() / 8; ++g) {
            int negatives = 0;
            for (int j = 0; j < 8; ++j) negatives += out[8 * g + j] < 0;
            ASSERT_EQ(negatives % 2, 0) << type_name(id) << " group " << g;
        }
    }
}

// A block assembled by hand from the spec's layout (§4.2), with its values worked out on paper.
TEST(IqGridDequantExamples, Iq2XxsHandBuiltBlock) {
    std::vector<uint8_t> block(66, 0);
    block[1] = 0x3c;  // d = 1.0
    // Sub-block 0: grid indices 0,0,0,0 (all magnitudes 8; iq2xxs_grid[0] is eight 0x08 bytes);
    // word1 = s 3 << 28 | sign index 1 for group 0 (ksigns 0x81: elements 0 and 7 negative).
    const uint32_t word1 = (3u << 28) | 1u;
    for (int k = 0; k < 4; ++k) block[2 + 4 + k] = static_cast<uint8_t>(word1 >> (8 * k));
    ASSERT_EQ(iq2xxs_grid[0], 0x0808080808080808u);
    const auto out = dequant(TypeId::iq2_xxs, block);
    // Scale (0.5 + 3) * 0.25 = 0.875, times 8 = 7.
    for (int j = 0; j < 32; ++j) {
        const float expected = (j == 0 || j == 7) ? -7.0f : 7.0f;
        EXPECT_EQ(out[j], expected) << "element " << j;
    }
    // Sub-blocks 1..7: s = 0, indices 0, signs 0 -> 0.5 * 0.25 * 8 = 1.
    for (int j = 32; j < 256; ++j) EXPECT_EQ(out[j], 1.0f) << "element " << j;
}

TEST(IqGridDequantExamples, Iq1mScaleIsAssembledFromFourNibbles) {
    std::vector<uint8_t> block(56, 0);
    // d = 2.0 = fp16 0x4000: word 3 (bytes 54-55) gets the top nibble 4, the others 0. All 3-bit
    // sub-scales 0 -> dl = 2; all indices 0 and delta bits 0 -> 2 * (grid + 0.125).
    block[55] = 0x40;
    const auto out = dequant(TypeId::iq1_m, block);
    for (int j = 0; j < 256; ++j) {
        const auto g = static_cast<int8_t>(grid_byte(iq1s_grid[0], j % 8));
        EXPECT_EQ(out[j], 2.0f * (static_cast<float>(g) + 0.125f)) << "element " << j;
    }
}

}  // namespace
}  // namespace mox::quant

// fp16 / bf16 / E8M0 conversions, checked against IEEE definitions computed independently in double
// precision (std::ldexp), and against the round-to-nearest-even property on fp32 inputs.
#include "core/fp16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace mox {
namespace {

bool is_nan_fp16(uint16_t h) {
    return (h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0;
}
bool is_nan_bf16(uint16_t b) {
    return (b & 0x7F80) == 0x7F80 && (b & 0x007F) != 0;
}

// The IEEE binary16 value of h, straight from the format's definition (finite h only).
double fp16_value(uint16_t h) {
    const int sign = (h & 0x8000) ? -1 : 1;
    const int exp = (h >> 10) & 0x1F;
    const int mant = h & 0x3FF;
    if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
    return sign * std::ldexp(1.0 + mant / 1024.0, exp - 15);
}

TEST(Fp16, DecodesEveryValueAsTheIeeeDefinition) {
    for (uint32_t i = 0; i < 65536; ++i) {
        const auto h = static_cast<uint16_t>(i);
        const float f = fp16_to_fp32(h);
        const int exp = (h >> 10) & 0x1F;
        if (exp == 0x1F) {
            if (h & 0x3FF) {
                EXPECT_TRUE(std::isnan(f)) << std::hex << h;
            } else {
                EXPECT_TRUE(std::isinf(f)) << std::hex << h;
            }
            EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0);
            continue;
        }
        // Every fp16 value is exactly representable in fp32, signed zeros included.
        EXPECT_EQ(static_cast<double>(f), fp16_value(h)) << std::hex << h;
        EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    }
}

TEST(Fp16, EveryValueRoundTrips) {
    for (uint32_t i = 0; i < 65536; ++i) {
        const auto h = static_cast<uint16_t>(i);
        const uint16_t back = fp32_to_fp16(fp16_to_fp32(h));
        if (is_nan_fp16(h)) {
            EXPECT_EQ(back, (h & 0x8000) | 0x7E00) << std::hex << h;  // canonical quiet NaN, sign kept
        } else {
            EXPECT_EQ(back, h) << std::hex << h;
        }
    }
}

TEST(Fp16, RoundsToNearestEvenOnRandomFloats) {
    // For finite inputs within fp16 range the result must be a nearest fp16 value, and the even one on a
    // tie. Random fp32 bit patterns cover every exponent; those outside fp16's range are clamped.
    std::mt19937 rng(42);
    for (int i = 0; i < 2'000'000; ++i) {
        const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
        if (!std::isfinite(x) || std::fabs(x) >= 65520.0f) continue;
        const uint16_t h = fp32_to_fp16(x);
        ASSERT_FALSE(is_nan_fp16(h));
        const double err = std::fabs(fp16_value(h) - x);
        // The neighbours one step towards and away from zero (same sign; they exist in range).
        const auto mag = static_cast<uint16_t>(h & 0x7FFF);
        const auto sign = static_cast<uint16_t>(h & 0x8000);
        if (mag < 0x7BFF) {
            const double up = std::fabs(fp16_value(static_cast<uint16_t>(sign | (mag + 1))) - x);
            ASSERT_LE(err, up) << x;
            if (err == up) {
                ASSERT_EQ(h & 1, 0) << x;
            }
        }
        if (mag > 0) {
            const double down = std::fabs(fp16_value(static_cast<uint16_t>(sign | (mag - 1))) - x);
            ASSERT_LE(err, down) << x;
            if (err == down) {
                ASSERT_EQ(h & 1, 0) << x;
            }
        }
        if (mag == 0) {  // only at or below half the smallest subnormal
            ASSERT_LE(std::fabs(x), std::ldexp(1.0, -25)) << x;
        }
    }
}

TEST(Fp16, EdgeCases) {
    EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
    EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
    EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
    EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
    EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);                        // largest finite
    EXPECT_EQ(fp32_to_fp16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);  // just below the overflow tie
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);                        // tie between 65504 (odd) and 2^16: inf
    EXPECT_EQ(fp32_to_fp16(1e10f), 0x7C00);
    EXPECT_EQ(fp32_to_fp16(-std::numeric_limits<float>::infinity()), 0xFC00);
    EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::quiet_NaN()), 0x7E00);
    EXPECT_EQ(fp32_to_fp16(-std::numeric_limits<float>::quiet_NaN()), 0xFE00);
    EXPECT_EQ(fp32_to_fp16(std::bit_cast<float>(0x7F800001u)), 0x7E00);  // signalling NaN with low payload
    // Subnormal range: units of 2^-24.
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (0)
    EXPECT_EQ(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -24)), 0x0002);     // tie between 1 and 2 units: even
    EXPECT_EQ(fp32_to_fp16(std::ldexp(2.5f, -24)), 0x0002);     // tie between 2 and 3 units: even
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1023.5f, -24)), 0x0400);  // rounds up into the smallest normal
    EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
    // Normal range ties: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
    EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
    EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
    EXPECT_EQ(fp32_to_fp16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3C01);
}

TEST(Bf16, EveryValueRoundTrips) {
    for (uint32_t i = 0; i < 65536; ++i) {
        const auto b = static_cast<uint16_t>(i);
        const float f = bf16_to_fp32(b);
        EXPECT_EQ(std::bit_cast<uint32_t>(f), i << 16);
        const uint16_t back = fp32_to_bf16(f);
        if (is_nan_bf16(b)) {
            EXPECT_TRUE(is_nan_bf16(back)) << std::hex << b;
            EXPECT_EQ(back, b | 0x40) << std::hex << b;  // forced quiet, payload and sign kept
        } else {
            EXPECT_EQ(back, b) << std::hex << b;
        }
    }
}

TEST(Bf16, RoundsToNearestEvenOnRandomFloats) {
    std::mt19937 rng(7);
    for (int i = 0; i < 2'000'000; ++i) {
        const uint32_t bits = rng();
        const float x = std::bit_cast<float>(bits);
        if (!std::isfinite(x)) continue;
        const uint16_t b = fp32_to_bf16(x);
        const uint16_t lo = static_cast<uint16_t>(bits >> 16);  // truncation: the neighbour towards zero
        const uint32_t rest = bits & 0xFFFF;
        // Round up past half, or on the half when the truncated value is odd.
        const uint16_t expect =
            (rest > 0x8000 || (rest == 0x8000 && (lo & 1))) ? static_cast<uint16_t>(lo + 1) : lo;
        ASSERT_EQ(b, expect) << std::hex << bits;
    }
    EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf
    EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x7F800001u)), 0x7FC0);  // NaN stays NaN, not inf
    EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0xFF80FFFFu)), 0xFFC0);
    EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
}

TEST(E8m0, PowersOfTwo) {
    for (int e = 0; e < 255; ++e) {
        EXPECT_EQ(static_cast<double>(e8m0_to_fp32(static_cast<uint8_t>(e))), std::ldexp(1.0, e - 127)) << e;
    }
    EXPECT_TRUE(std::isinf(e8m0_to_fp32(255)));
    for (int e = 0; e < 256; ++e) {
        EXPECT_EQ(static_cast<double>(e8m0_to_fp32_half(static_cast<uint8_t>(e))), std::ldexp(1.0, e - 128))
            << e;
    }
}

}  // namespace
}  // namespace mox

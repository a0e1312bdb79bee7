#include "core/error.h"
#include "core/units.h"

#include <gtest/gtest.h>

namespace mox {

TEST(Units, ParseSizeBinaryAndDecimal) {
    EXPECT_EQ(parse_size("4096"), 4096u);
    EXPECT_EQ(parse_size("24G"), 24ull << 30);
    EXPECT_EQ(parse_size("24GiB"), 24ull << 30);
    EXPECT_EQ(parse_size("512M"), 512ull << 20);
    EXPECT_EQ(parse_size("24GB"), 24'000'000'000ull);
    EXPECT_EQ(parse_size("1.5K"), 1536u);
}

TEST(Units, ParseSizeRejectsJunk) {
    EXPECT_THROW(parse_size(""), Error);
    EXPECT_THROW(parse_size("abc"), Error);
    EXPECT_THROW(parse_size("-3G"), Error);
    EXPECT_THROW(parse_size("3X"), Error);
    EXPECT_THROW(parse_size("1e30"), Error);
}

TEST(Units, ParseBandwidthIsDecimal) {
    EXPECT_DOUBLE_EQ(parse_bandwidth("936GB/s"), 936e9);
    EXPECT_DOUBLE_EQ(parse_bandwidth("936G/s"), 936e9);
    EXPECT_DOUBLE_EQ(parse_bandwidth("4.46TB/s"), 4.46e12);
    EXPECT_DOUBLE_EQ(parse_bandwidth("81 GB/s"), 81e9);
    EXPECT_THROW(parse_bandwidth("0GB/s"), Error);
    EXPECT_THROW(parse_bandwidth("fast"), Error);
}

TEST(Units, FormatBytes) {
    EXPECT_EQ(format_bytes(512), "512 B");
    EXPECT_EQ(format_bytes(5368709120ull), "5.00 GiB");
}

}  // namespace mox

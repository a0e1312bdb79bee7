#include "core/read_bandwidth.h"
#include "core/error.h"

#include <gtest/gtest.h>

namespace mox {
namespace {

TEST(ReadBandwidth, MeasuresSomethingPlausible) {
    // A small buffer (it fits in cache, so this checks the mechanics, not DRAM speed).
    const ReadBandwidth bw = measure_read_bandwidth(2, 8 << 20, 2);
    EXPECT_GT(bw.bytes_per_s, 1e8);   // > 0.1 GB/s on any machine
    EXPECT_LT(bw.bytes_per_s, 1e13);  // < 10 TB/s
    EXPECT_EQ(bw.buffer_bytes, 8u << 20);
    EXPECT_EQ(bw.threads, 2);
    EXPECT_EQ(bw.passes, 2);
    EXPECT_GE(bandwidth_buffer_bytes(), 256u << 20);
    EXPECT_GE(bandwidth_buffer_bytes(), 2 * last_level_cache_bytes());
    EXPECT_THROW(measure_read_bandwidth(0, 8 << 20), Error);
    EXPECT_THROW(measure_read_bandwidth(2, 8 << 20, 0), Error);
}

}  // namespace
}  // namespace mox

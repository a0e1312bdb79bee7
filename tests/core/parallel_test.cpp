#include "core/error.h"
#include "core/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace mox {

TEST(Parallel, VisitsEveryIndexOnce) {
    std::vector<std::atomic<int>> hits(1000);
    parallel_for(1000, 4, [&](int64_t i) { hits[i]++; });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(Parallel, RethrowsFirstError) {
    EXPECT_THROW(parallel_for(100, 3, [](int64_t i) {
                     if (i == 42) fail("boom at {}", i);
                 }),
                 Error);
}

}  // namespace mox

#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace mox {

TEST(ThreadPool, RunsEveryTaskOnceAcrossManyJobs) {
    ThreadPool pool(3);
    for (int job = 0; job < 200; ++job) {
        const int n = job % 17 + 1;
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.run(n, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
        for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
}

TEST(ThreadPool, SingleThreadPoolRunsInline) {
    ThreadPool pool(1);
    EXPECT_EQ(pool.size(), 1);
    int sum = 0;
    pool.run(10, [&](int64_t i) { sum += static_cast<int>(i); });
    EXPECT_EQ(sum, 45);
}

}  // namespace mox

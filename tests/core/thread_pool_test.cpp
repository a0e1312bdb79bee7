#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include "core/topology.h"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
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

TEST(ThreadPool, RethrowsTheFirstTaskExceptionAfterAllTasks) {
    ThreadPool pool(3);
    std::atomic<int> ran{0};
    EXPECT_THROW(pool.run(64,
                          [&](int64_t i) {
                              ran++;
                              if (i % 7 == 3) throw std::runtime_error("task failed");
                          }),
                 std::runtime_error);
    EXPECT_EQ(ran.load(), 64);
    // The pool is still usable afterwards.
    std::atomic<int> again{0};
    pool.run(10, [&](int64_t) { again++; });
    EXPECT_EQ(again.load(), 10);
}

TEST(ThreadPool, ManyTinyJobsAcrossSleepAndSpin) {
    // Alternates back-to-back jobs (workers spinning) with pauses long enough for them to sleep, to
    // exercise both hand-over paths.
    ThreadPool pool(4, /*pin=*/false);
    int64_t total = 0;
    for (int job = 0; job < 2000; ++job) {
        std::atomic<int64_t> sum{0};
        pool.run(job % 9 + 2, [&](int64_t i) { sum += i + 1; });
        const int64_t n = job % 9 + 2;
        ASSERT_EQ(sum.load(), n * (n + 1) / 2);
        total += sum.load();
        if (job % 500 == 499) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_GT(total, 0);
}

TEST(ThreadPool, MoreTasksThanOneRoundHolds) {
    // The state word counts up to 2^18 - 1 tasks per round; larger jobs run in several rounds.
    ThreadPool pool(3, /*pin=*/false);
    const int64_t n = 600000;
    std::vector<std::atomic<uint8_t>> hits(static_cast<size_t>(n));
    pool.run(n, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
}

TEST(ThreadPool, TakesLambdasWithLargeCaptures) {
    // run() takes a TaskFn (a reference to the callable), so captures of any size work.
    ThreadPool pool(3, /*pin=*/false);
    int64_t a = 1, b = 2, c = 3, d = 4, e = 5;
    std::vector<std::atomic<int64_t>> out(64);
    pool.run(64, [&, a, b, c, d, e](int64_t i) { out[static_cast<size_t>(i)] = i * (a + b + c + d + e); });
    for (int64_t i = 0; i < 64; ++i) ASSERT_EQ(out[static_cast<size_t>(i)].load(), 15 * i);
}

TEST(ThreadPool, SpinWindowIsSettable) {
    ThreadPool pool(3, /*pin=*/false);
    pool.set_spin(std::chrono::microseconds(0));
    EXPECT_EQ(pool.spin().count(), 0);
    // With no spin window the workers sleep between jobs.
    std::atomic<int> n{0};
    for (int job = 0; job < 5; ++job) {
        pool.run(8, [&](int64_t) { n++; });
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_EQ(n.load(), 40);
    EXPECT_GT(pool.sleeps(), 0);
    // A window much longer than the gaps: after the first job wakes them, they never sleep again.
    pool.set_spin(std::chrono::seconds(30));
    EXPECT_EQ(pool.spin().count(), 30'000'000);
    pool.run(8, [&](int64_t) { n++; });
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const int64_t sleeps = pool.sleeps();
    for (int job = 0; job < 5; ++job) {
        pool.run(8, [&](int64_t) { n++; });
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_EQ(pool.sleeps(), sleeps);
    EXPECT_EQ(n.load(), 88);
    pool.set_spin(std::chrono::microseconds(0));  // lets the destructor find them asleep or spinning alike
}

TEST(ThreadPool, HoldKeepsWorkersAwake) {
    ThreadPool pool(3, /*pin=*/false);
    pool.set_spin(std::chrono::microseconds(0));
    std::atomic<int> n{0};
    pool.run(8, [&](int64_t) { n++; });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the workers are asleep now
    {
        ThreadPool::Hold hold(pool);  // wakes them; they spin until released
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        const int64_t sleeps = pool.sleeps();
        for (int job = 0; job < 5; ++job) {
            pool.run(8, [&](int64_t) { n++; });
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        EXPECT_EQ(pool.sleeps(), sleeps);
    }
    // Released: with no spin window they go back to sleep.
    const int64_t before = pool.sleeps();
    pool.run(8, [&](int64_t) { n++; });
    for (int i = 0; i < 500 && pool.sleeps() == before; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_GT(pool.sleeps(), before);
    EXPECT_EQ(n.load(), 56);
}

TEST(ThreadPool, LateWorkersNeverRunAnotherJobsTasks) {
    // Jobs of one or two tasks back to back: workers often arrive after the caller has taken every
    // task, and their claim then lands in the next job. Each job must still run each task exactly once.
    ThreadPool pool(4, /*pin=*/false);
    for (int job = 0; job < 20000; ++job) {
        const int n = job % 3 + 2;
        std::atomic<int> hits[4] = {0, 0, 0, 0};
        pool.run(n, [&](int64_t i) { hits[i]++; });
        for (int i = 0; i < 4; ++i) ASSERT_EQ(hits[i].load(), i < n ? 1 : 0) << "job " << job;
    }
}

TEST(ThreadPool, IdleCallerLeavesEveryTaskToTheWorkers) {
    // With no spin window every job must wake a sleeping worker: a lost wake-up hangs this test.
    ThreadPool pool(3, /*pin=*/false);
    pool.set_caller_works(false);
    pool.set_spin(std::chrono::microseconds(0));
    EXPECT_FALSE(pool.caller_works());
    const std::thread::id caller = std::this_thread::get_id();
    for (int job = 0; job < 3000; ++job) {
        if (job % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(job % 50));
        std::atomic<int> on_caller{0}, ran{0};
        pool.run(job % 7 + 2, [&](int64_t) {
            ran++;
            if (std::this_thread::get_id() == caller) on_caller++;
        });
        ASSERT_EQ(ran.load(), job % 7 + 2);
        ASSERT_EQ(on_caller.load(), 0);
    }
}

TEST(Topology, CountsAreSane) {
    const Topology& t = topology();
    EXPECT_GE(t.physical_cores, 1);
    EXPECT_GE(t.logical_cpus, t.physical_cores);
    EXPECT_GE(t.numa_nodes, 1);
    EXPECT_TRUE(interleave_memory(nullptr, 0));
}

}  // namespace mox

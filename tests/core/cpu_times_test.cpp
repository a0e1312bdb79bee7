// core/cpu_times: /proc parsing (fixed texts, including a command name with spaces and parentheses
// and a kernel without a steal column), the shares of an interval, and a live reading on Linux.
#include "core/cpu_times.h"

#include <gtest/gtest.h>

#include <chrono>

namespace mox {
namespace {

constexpr std::string_view kStat =
    "cpu  1000 20 300 5000 80 10 5 40 7 0\n"
    "cpu0 500 10 150 2500 40 5 2 20 3 0\n";
// pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime ...
constexpr std::string_view kSelf =
    "4242 (mox (worker) x) R 1 4242 4242 0 -1 4194560 900 0 2 0 150 25 0 0 20 0\n";

TEST(CpuTimes, ParsesProcStatAndSelfStat) {
    const auto t = parse_cpu_times(kStat, kSelf);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->total, 1000u + 20 + 300 + 5000 + 80 + 10 + 5 + 40);  // guest (7) not counted twice
    EXPECT_EQ(t->idle, 5000u + 80);
    EXPECT_EQ(t->steal, 40u);
    EXPECT_EQ(t->self, 150u + 25);
}

TEST(CpuTimes, OldKernelWithoutStealAndMalformedInput) {
    const auto t = parse_cpu_times("cpu  10 0 5 100\n", kSelf);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->total, 115u);
    EXPECT_EQ(t->steal, 0u);
    EXPECT_FALSE(parse_cpu_times("cpu0 1 2 3 4\n", kSelf));        // not the machine-wide line
    EXPECT_FALSE(parse_cpu_times("cpu  1 2 3\n", kSelf));          // too few fields
    EXPECT_FALSE(parse_cpu_times("cpu  1 -2 3 4\n", kSelf));       // negative ticks
    EXPECT_FALSE(parse_cpu_times(kStat, "4242 mox R 1 2 3"));      // no command parentheses
    EXPECT_FALSE(parse_cpu_times(kStat, "4242 (mox) R 1 2 3 4"));  // cut before utime
    EXPECT_FALSE(parse_cpu_times("", ""));
}

TEST(CpuTimes, SharesOfAnInterval) {
    const CpuTimes a{.total = 1000, .idle = 600, .steal = 10, .self = 100};
    const CpuTimes b{.total = 2000, .idle = 1000, .steal = 60, .self = 400};
    const auto s = cpu_shares(a, b);
    ASSERT_TRUE(s.has_value());
    EXPECT_DOUBLE_EQ(s->self, 0.3);
    EXPECT_DOUBLE_EQ(s->steal, 0.05);
    EXPECT_DOUBLE_EQ(s->other, (1000.0 - 400 - 50 - 300) / 1000);
    EXPECT_FALSE(cpu_shares(a, a));  // no tick passed
    EXPECT_FALSE(cpu_shares(b, a));  // backwards
    // The process's ticks are read apart from the machine's: a self share above the busy time
    // leaves "other" at 0, never negative.
    const auto c = cpu_shares(a, CpuTimes{.total = 1100, .idle = 690, .steal = 10, .self = 120});
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->other, 0.0);
}

TEST(CpuTimes, LiveReadingSeesThisProcessWork) {
#ifdef __linux__
    const auto a = read_cpu_times();
    ASSERT_TRUE(a.has_value());
    // Spin for ~0.2 s of this thread's time (ticks are 10 ms).
    volatile double x = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (std::chrono::steady_clock::now() < until) x = x + 1.0;
    const auto b = read_cpu_times();
    ASSERT_TRUE(b.has_value());
    EXPECT_GT(b->self, a->self);
    const auto s = cpu_shares(*a, *b);
    ASSERT_TRUE(s.has_value());
    EXPECT_GT(s->self, 0.0);
    EXPECT_LE(s->self + s->other + s->steal, 1.0 + 1e-9);
#else
    GTEST_SKIP() << "reads /proc";
#endif
}

}  // namespace
}  // namespace mox

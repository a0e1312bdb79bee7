#include "engine/routing_stats.h"

#include <gtest/gtest.h>

#include <random>

namespace mox::engine {

TEST(RoutingStats, HandComputedTrace) {
    // One layer, 4 experts, k = 2, tokens: {0,1} {1,2} {0,3} {1,2}
    const std::vector<std::vector<int32_t>> trace = {{0, 1, 1, 2, 0, 3, 1, 2}};
    const RoutingStats s = compute_routing_stats(trace, 4, 2);
    ASSERT_EQ(s.layers.size(), 1u);
    EXPECT_EQ(s.layers[0].counts, (std::vector<int64_t>{2, 3, 2, 1}));
    // Selections after token 0: 6. Repeats from the previous token: t1: 1 (expert 1); t2: none; t3: none.
    EXPECT_DOUBLE_EQ(s.layers[0].repeat_next, 1.0 / 6.0);
    // Within 8: t1: 1; t2: 0 (yes, d=2); t3: 1 (d=2), 2 (d=2) -> 1 + 1 + 2 = 4 of 6.
    EXPECT_DOUBLE_EQ(s.layers[0].repeat_within_8, 4.0 / 6.0);
    EXPECT_EQ(s.layers[0].unused_experts, 0);
    EXPECT_DOUBLE_EQ(s.layers[0].max_over_mean, 3.0 / 2.0);
    EXPECT_EQ(s.layers[0].reuse_distance_hist[64], 4);  // first sightings of 0, 1, 2, 3
}

TEST(RoutingStats, UniformRandomRoutingMatchesTheBaseline) {
    std::mt19937 rng(1);
    const int64_t n_expert = 32, k = 4, n = 20000;
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < n; ++t) {
        std::vector<int32_t> all(n_expert);
        for (int32_t e = 0; e < n_expert; ++e) all[e] = e;
        std::shuffle(all.begin(), all.end(), rng);
        ids.insert(ids.end(), all.begin(), all.begin() + k);
    }
    const RoutingStats s = compute_routing_stats({ids}, n_expert, k);
    EXPECT_NEAR(s.repeat_next, s.random_repeat_next, 0.01);
    EXPECT_NEAR(s.repeat_within_8, s.random_repeat_within_8, 0.01);
    EXPECT_NEAR(s.layers[0].entropy_ratio, 1.0, 0.01);
}

}  // namespace mox::engine

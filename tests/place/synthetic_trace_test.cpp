// The synthetic trace generator's promises (popularity from the skew, next-token repeats from the
// reuse, determinism) and the locality statistics it is measured with.
#include "place/synthetic_trace.h"
#include "cache_test_util.h"
#include "core/error.h"
#include "place/routing_locality.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace mox::place {
namespace {

std::vector<int64_t> popularity(const models::RoutingTrace& t, size_t li) {
    std::vector<int64_t> count(static_cast<size_t>(t.n_expert), 0);
    for (int64_t tok = 0; tok < t.n_tokens; ++tok)
        for (int64_t j = 0; j < t.k; ++j) ++count[t.at(tok, li)[j]];
    return count;
}

TEST(SyntheticTrace, ShapeAndDistinctIdsPerToken) {
    const models::RoutingTrace t = synthetic_routing_trace(3, 10, 4, 200, 1.5, 0.7, 5);
    EXPECT_EQ(t.layers, (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ(t.ids.size(), 200u * 3 * 4);
    for (int64_t tok = 0; tok < t.n_tokens; ++tok) {
        for (size_t li = 0; li < 3; ++li) {
            std::vector<uint16_t> ids(t.at(tok, li), t.at(tok, li) + 4);
            std::sort(ids.begin(), ids.end());
            EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << tok;
            EXPECT_LT(ids.back(), 10);
        }
    }
}

TEST(SyntheticTrace, SameSeedSameTrace) {
    const auto a = synthetic_routing_trace(2, 64, 8, 100, 1.0, 0.5, 9);
    EXPECT_EQ(a.ids, synthetic_routing_trace(2, 64, 8, 100, 1.0, 0.5, 9).ids);
    EXPECT_NE(a.ids, synthetic_routing_trace(2, 64, 8, 100, 1.0, 0.5, 10).ids);
}

TEST(SyntheticTrace, SkewZeroIsUniform) {
    // 16 experts, 8000 tokens x k 2: 1000 selections each expected, a standard deviation of ~29.
    const models::RoutingTrace t = synthetic_routing_trace(1, 16, 2, 8000, 0.0, 0.0, 1);
    for (int64_t c : popularity(t, 0)) EXPECT_NEAR(c, 1000, 150);
    const RoutingLocality l = routing_locality(t);
    EXPECT_NEAR(l.entropy_ratio, 1.0, 0.01);
}

TEST(SyntheticTrace, SkewConcentratesPopularityOnADifferentSetPerLayer) {
    const models::RoutingTrace t = synthetic_routing_trace(2, 64, 1, 20000, 1.2, 0.0, 2);
    std::vector<int64_t> c0 = popularity(t, 0), c1 = popularity(t, 1);
    const auto top0 = std::max_element(c0.begin(), c0.end()) - c0.begin();
    const auto top1 = std::max_element(c1.begin(), c1.end()) - c1.begin();
    EXPECT_NE(top0, top1);  // independent permutations (1 in 64 to coincide for this seed)
    // Zipf 1.2 over 64: rank 0 draws 1 / sum_r (r+1)^-1.2, about 29% of the selections.
    EXPECT_NEAR(static_cast<double>(c0[top0]) / 20000, 0.29, 0.02);
    const RoutingLocality l = routing_locality(t);
    EXPECT_GT(l.top_eighth_share, 0.6);
    EXPECT_LT(l.entropy_ratio, 0.85);
}

TEST(SyntheticTrace, ReuseSetsTheNextTokenRepeatFraction) {
    // Uniform popularity alone repeats about k / n = 1/16 of the previous token's choices.
    for (double reuse : {0.0, 0.3, 0.6, 0.9}) {
        const models::RoutingTrace t = synthetic_routing_trace(4, 64, 4, 3000, 0.0, reuse, 3);
        const RoutingLocality l = routing_locality(t);
        EXPECT_NEAR(l.repeat_next, reuse + (1 - reuse) * l.uniform_repeat_next, 0.02) << reuse;
        EXPECT_GE(l.repeat_within_8, l.repeat_next);
    }
}

TEST(SyntheticTrace, RefusesArgumentsOutOfRange) {
    EXPECT_THROW(synthetic_routing_trace(0, 8, 2, 10, 0, 0, 1), Error);
    EXPECT_THROW(synthetic_routing_trace(1, 8, 9, 10, 0, 0, 1), Error);
    EXPECT_THROW(synthetic_routing_trace(1, 70000, 2, 10, 0, 0, 1), Error);
    EXPECT_THROW(synthetic_routing_trace(1, 8, 2, -1, 0, 0, 1), Error);
    EXPECT_THROW(synthetic_routing_trace(1, 8, 2, 10, -1, 0, 1), Error);
    EXPECT_THROW(synthetic_routing_trace(1, 8, 2, 10, 0, 1.5, 1), Error);
    EXPECT_THROW(synthetic_routing_trace(64, 256, 8, int64_t{1} << 40, 0, 0, 1), Error);
    // k = n_expert: every expert every token, at any skew.
    EXPECT_EQ(synthetic_routing_trace(1, 4, 4, 3, 5.0, 0.5, 1).ids.size(), 12u);
}

TEST(RoutingLocality, HandWorked) {
    // k = 1 over 4 experts: 0 0 1 0 2 3. Tokens 1..5: repeats of the previous token at t1 only
    // (1/5); within 8 at t1 and t3 (2/5). The uniform references: 1/4 and 1 - (3/4)^8.
    const RoutingLocality l = routing_locality(test::sequence_trace(4, {0, 0, 1, 0, 2, 3}));
    EXPECT_DOUBLE_EQ(l.repeat_next, 0.2);
    EXPECT_DOUBLE_EQ(l.repeat_within_8, 0.4);
    EXPECT_DOUBLE_EQ(l.uniform_repeat_next, 0.25);
    EXPECT_DOUBLE_EQ(l.uniform_repeat_within_8, 1 - std::pow(0.75, 8));
    // The top eighth of 4 experts is one expert: 0, with 3 of 6 selections.
    EXPECT_DOUBLE_EQ(l.top_eighth_share, 0.5);
}

}  // namespace
}  // namespace mox::place

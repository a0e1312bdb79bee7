// The cache simulator: keys, counts, warm-up and admission cap on hand-worked traces; the one-pass
// LRU curve against the simulated lru policy; Belady against a search of every schedule.
#include "place/cache_sim.h"
#include "cache_test_util.h"
#include "core/error.h"
#include "place/cache_policies.h"
#include "place/synthetic_trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <map>
#include <utility>

namespace mox::place {
namespace {

using models::ExpertKey;
using test::one_layer_trace;
using test::sequence_trace;

CacheSimResult run_lru(const models::RoutingTrace& trace, int64_t slots, const CacheSimOptions& o = {}) {
    auto policy = make_cache_policy("lru");
    return simulate_cache(trace, *policy, slots, o);
}

TEST(CacheSim, KeysCoverEveryTrunkLayerUpToTheLastTraced) {
    models::RoutingTrace t = one_layer_trace(6, {{0, 5}, {2, 5}});
    t.layers = {3};
    EXPECT_EQ(trace_key_count(t), 4 * 6);
    EXPECT_EQ(trace_key(t, 0, 2), 3 * 6 + 2);
    const std::vector<int64_t> counts = trace_key_counts(t);
    EXPECT_EQ(counts[3 * 6 + 5], 2);
    EXPECT_EQ(counts[3 * 6 + 0], 1);
    EXPECT_EQ(counts[5], 0);
}

TEST(CacheSim, CountsPerLayerAndAfterTheWarmUp) {
    // Layer 0 selects expert 1 every token (hits from t1 on); layer 1 a new expert every token.
    models::RoutingTrace t;
    t.n_expert = 8;
    t.k = 1;
    t.layers = {0, 1};
    t.n_tokens = 4;
    t.ids = {1, 0, 1, 1, 1, 2, 1, 3};
    const CacheSimResult r = run_lru(t, 16, {.warmup_tokens = 2});
    EXPECT_EQ(r.accesses, 8);
    EXPECT_EQ(r.hits, 3);
    EXPECT_DOUBLE_EQ(r.layer_hit_rate(0), 0.75);
    EXPECT_DOUBLE_EQ(r.layer_hit_rate(1), 0.0);
    // Tokens 2 and 3: 4 selections, 2 hits.
    EXPECT_EQ(r.warm_accesses, 4);
    EXPECT_EQ(r.warm_hits, 2);
    EXPECT_DOUBLE_EQ(r.warm_hit_rate(), 0.5);
}

TEST(CacheSim, AdmissionsAfterTheWarmUp) {
    // As above: t0 admits both misses, each later token layer 1's new expert.
    models::RoutingTrace t;
    t.n_expert = 8;
    t.k = 1;
    t.layers = {0, 1};
    t.n_tokens = 4;
    t.ids = {1, 0, 1, 1, 1, 2, 1, 3};
    const CacheSimResult r = run_lru(t, 16, {.warmup_tokens = 2});
    EXPECT_EQ(r.admissions, 5);
    EXPECT_EQ(r.warm_tokens, 2);
    EXPECT_EQ(r.warm_admissions, 2);
    EXPECT_DOUBLE_EQ(r.warm_admissions_per_token(), 1.0);
}

TEST(CacheSim, AnAdmittedExpertServesFromTheNextToken) {
    // k = 2: 0 and 1 miss at t0 and are both in for t1.
    const CacheSimResult r = run_lru(one_layer_trace(4, {{0, 1}, {1, 0}}), 2);
    EXPECT_EQ(r.hits, 2);
    EXPECT_EQ(r.admissions, 2);
}

TEST(CacheSim, AdmissionCapLimitsCopiesPerToken) {
    // 8 slots, every token selects 0..3. Cap 1: t0 copies 0; t1 hits 0, copies 1; t2 hits 0, 1,
    // copies 2: 3 hits, 3 admissions. Without a cap t1 and t2 hit all four: 8 hits.
    const models::RoutingTrace t = one_layer_trace(4, {{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}});
    const CacheSimResult capped = run_lru(t, 8, {.max_admissions_per_token = 1});
    EXPECT_EQ(capped.hits, 3);
    EXPECT_EQ(capped.admissions, 3);
    const CacheSimResult free = run_lru(t, 8);
    EXPECT_EQ(free.hits, 8);
    EXPECT_EQ(free.admissions, 4);
    EXPECT_EQ(run_lru(t, 8, {.max_admissions_per_token = 0}).hits, 0);
}

TEST(CacheSim, ZeroSlotsMissesEverything) {
    const CacheSimResult r = run_lru(sequence_trace(2, {0, 0, 0}), 0);
    EXPECT_EQ(r.hits, 0);
    EXPECT_EQ(r.admissions, 0);
}

// A policy that breaks the contract on purpose.
class BadVictimPolicy final : public models::ExpertCachePolicy {
public:
    std::string name() const override { return "bad"; }
    void reset(int64_t, int64_t) override {}
    void access(ExpertKey, bool) override {}
    void end_token() override {}
    bool admit(ExpertKey) override { return true; }
    ExpertKey victim() override { return 3; }  // never resident in the trace below
    void admitted(ExpertKey) override {}
    void evicted(ExpertKey) override {}
};

TEST(CacheSim, RefusesAVictimThatIsNotResident) {
    BadVictimPolicy bad;
    try {
        simulate_cache(sequence_trace(4, {0, 1, 2}), bad, 1);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("victim 3 is not resident"), std::string::npos) << e.what();
    }
}

TEST(CacheSim, LruCurveHandWorked) {
    // 0 1 0 2 1 0, k = 1. Distances (other keys since the last use): t2: 0 -> 1 (key 1);
    // t4: 1 -> 2 (0, 2); t5: 0 -> 2 (2, 1). So 1 slot hits nothing, 2 slots hit once, 3 slots thrice.
    const LruCurve c = lru_hit_curve(sequence_trace(4, {0, 1, 0, 2, 1, 0}));
    EXPECT_EQ(c.accesses, 6);
    EXPECT_EQ(c.hits_at(0), 0);
    EXPECT_EQ(c.hits_at(1), 0);
    EXPECT_EQ(c.hits_at(2), 1);
    EXPECT_EQ(c.hits_at(3), 3);
    EXPECT_EQ(c.hits_at(100), 3);
}

TEST(CacheSim, LruCurveEqualsTheSimulatedLruAtEverySize) {
    struct Case {
        int64_t layers, experts, k;
        double skew, reuse;
    };
    for (const Case& c : {Case{1, 8, 1, 0.0, 0.0}, Case{2, 16, 2, 1.0, 0.3}, Case{3, 32, 4, 0.5, 0.6},
                          Case{4, 64, 8, 1.2, 0.5}}) {
        const models::RoutingTrace trace =
            synthetic_routing_trace(c.layers, c.experts, c.k, 400, c.skew, c.reuse, 11);
        for (int64_t warmup : {0, 50}) {
            const LruCurve curve = lru_hit_curve(trace, warmup);
            const int64_t n_keys = trace_key_count(trace);
            for (int64_t slots = 0; slots <= n_keys + 2; slots += std::max<int64_t>(1, n_keys / 23)) {
                const CacheSimResult r = run_lru(trace, slots, {.warmup_tokens = warmup});
                EXPECT_EQ(curve.hits_at(slots), r.warm_hits) << c.experts << " slots " << slots;
                EXPECT_EQ(curve.accesses, r.warm_accesses);
            }
        }
    }
}

// The most hits any schedule gets: from any initial pool, after each token any pool drawn from the
// residents and the token's misses (exhaustive over subsets; keys < 8).
int64_t brute_force_best(const models::RoutingTrace& trace, int64_t slots) {
    const int64_t n = trace.n_expert;
    std::map<std::pair<int64_t, uint32_t>, int64_t> memo;
    auto best = [&](auto&& self, int64_t t, uint32_t pool) -> int64_t {
        if (t == trace.n_tokens) return 0;
        if (auto it = memo.find({t, pool}); it != memo.end()) return it->second;
        uint32_t used = 0;
        for (int64_t j = 0; j < trace.k; ++j) used |= 1u << trace.at(t, 0)[j];
        const int64_t hits = std::popcount(used & pool);
        const uint32_t available = pool | used;
        int64_t most = 0;
        for (uint32_t next = available;; next = (next - 1) & available) {
            if (std::popcount(next) <= slots) most = std::max(most, self(self, t + 1, next));
            if (next == 0) break;
        }
        return memo[{t, pool}] = hits + most;
    };
    int64_t most = 0;
    for (uint32_t pool = 0; pool < (1u << n); ++pool)
        if (std::popcount(pool) <= slots) most = std::max(most, best(best, 0, pool));
    return most;
}

TEST(CacheSim, BeladyHandWorked) {
    // 1 slot, 0 1 0 2 0 1: start with 0 (used first) and hit it at t0; bypass 1 at t1 (0 is needed
    // sooner), hit 0 at t2, bypass 2 (never used again), hit 0 at t4; t5 misses 1: 3 hits.
    EXPECT_EQ(belady_hits(sequence_trace(3, {0, 1, 0, 2, 0, 1}), 1), 3);
    // From token 3 on only t4's hit counts.
    EXPECT_EQ(belady_hits(sequence_trace(3, {0, 1, 0, 2, 0, 1}), 1, 3), 1);
}

TEST(CacheSim, BeladyEqualsAnExhaustiveSearchOnTinyTraces) {
    for (uint64_t seed = 1; seed <= 30; ++seed) {
        const int64_t k = 1 + static_cast<int64_t>(seed % 3);
        const models::RoutingTrace trace = synthetic_routing_trace(1, 6, k, 7, 0.7, 0.3, seed);
        for (int64_t slots = 0; slots <= 6; ++slots)
            EXPECT_EQ(belady_hits(trace, slots), brute_force_best(trace, slots))
                << "seed " << seed << " slots " << slots << " k " << k;
    }
}

TEST(CacheSim, BeladyBoundsLruOnLargerTraces) {
    const models::RoutingTrace trace = synthetic_routing_trace(4, 32, 4, 500, 1.0, 0.5, 3);
    const LruCurve lru = lru_hit_curve(trace);
    int64_t previous = 0;
    for (int64_t slots : {0, 4, 16, 32, 64, 128}) {
        const int64_t best = belady_hits(trace, slots);
        EXPECT_GE(best, lru.hits_at(slots)) << slots;
        EXPECT_GE(best, previous) << slots;  // more slots never hurt the optimum
        previous = best;
    }
}

}  // namespace
}  // namespace mox::place

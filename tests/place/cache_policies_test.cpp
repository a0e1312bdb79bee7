// Each cache policy on small traces worked out by hand (the comments give every token's outcome),
// driven by the simulator in the runtime's call order; and the factory's specs and errors.
#include "place/cache_policies.h"
#include "cache_test_util.h"
#include "core/error.h"
#include "place/cache_sim.h"
#include "place/synthetic_trace.h"

#include <gtest/gtest.h>

#include <string>

namespace mox::place {
namespace {

using test::one_layer_trace;
using test::sequence_trace;

CacheSimResult run(const std::string& spec, const models::RoutingTrace& trace, int64_t slots,
                   const CachePolicyOptions& options = {}) {
    auto policy = make_cache_policy(spec, options);
    return simulate_cache(trace, *policy, slots);
}

std::string error_of(const std::string& spec, const CachePolicyOptions& options = {}) {
    try {
        make_cache_policy(spec, options);
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(CachePolicies, LruEvictsTheLeastRecentlyUsed) {
    // 2 slots. t0: 0 misses, in. t1: 1 misses, in. t2: 0 hits. t3: 2 misses, evicts 1 (used at t1,
    // 0 at t2). t4: 1 misses, evicts 0. t5: 0 misses, evicts 2.
    const CacheSimResult r = run("lru", sequence_trace(4, {0, 1, 0, 2, 1, 0}), 2);
    EXPECT_EQ(r.hits, 1);
    EXPECT_EQ(r.misses(), 5);
    EXPECT_EQ(r.admissions, 5);
    EXPECT_EQ(r.evictions, 3);
}

TEST(CachePolicies, LruKeepsALaterHitOverAnEarlierMissOfTheSameToken) {
    // 1 slot, k = 2. t0: 0 and 1 miss; 0 comes in, then 1 (used later) replaces it. t1 selects 2
    // (miss) before 1 (hit): 1 is the more recent, so 2 is not admitted and t2's 1 hits. t2's 3
    // (after 1) replaces 1.
    const CacheSimResult r = run("lru", one_layer_trace(4, {{0, 1}, {2, 1}, {1, 3}}), 1);
    EXPECT_EQ(r.hits, 2);
    EXPECT_EQ(r.admissions, 3);
    EXPECT_EQ(r.evictions, 2);
}

TEST(CachePolicies, LfuWithoutDecayKeepsTheMostSelected) {
    // 1 slot, half-life 0 (plain counts). t0: 0 in (count 1). t1, t2: 0 hits (3). t3, t4: 1 misses
    // with count 1, 2 < 3: refused. t5: 1 reaches 3, a tie that the more recent use wins: 1 in.
    // t6: 1 hits (4). t7: 0 reaches 4, ties with 1 and is more recent: in.
    const CacheSimResult r = run("lfu:half-life=0", sequence_trace(2, {0, 0, 0, 1, 1, 1, 1, 0}), 1);
    EXPECT_EQ(r.hits, 3);
    EXPECT_EQ(r.admissions, 3);
    EXPECT_EQ(r.evictions, 2);
    // LRU on the same trace lets 1 in at t3 and hits t4..t6.
    EXPECT_EQ(run("lru", sequence_trace(2, {0, 0, 0, 1, 1, 1, 1, 0}), 1).hits, 5);
}

TEST(CachePolicies, LfuDecayLetsARecentExpertBeatAnOldCount) {
    // 1 slot: 0 at t0..t2, then 1 at t3 and t4. Half-life 1 token: at t3, 0's count is
    // 1/8 + 1/4 + 1/2 = 0.875 < 1, so 1 comes in and hits at t4 (hits: t1, t2, t4). Without decay
    // 1's counts 1, 2 never beat 3 (hits: t1, t2).
    const models::RoutingTrace trace = sequence_trace(2, {0, 0, 0, 1, 1});
    EXPECT_EQ(run("lfu:half-life=1", trace, 1).hits, 3);
    EXPECT_EQ(run("lfu:half-life=0", trace, 1).hits, 2);
}

TEST(CachePolicies, StaticLoadsTheProfilesHotSetAndAdmitsNothing) {
    // Counts 0:3, 1:2, 2:1, 3:1. Two slots hold {0, 1}: hits at t0, t1, t3, t4, t5.
    const models::RoutingTrace trace = sequence_trace(4, {0, 1, 2, 0, 1, 0, 3});
    CachePolicyOptions o;
    o.profile = trace_key_counts(trace);
    const CacheSimResult r = run("static", trace, 2, o);
    EXPECT_EQ(r.initial, 2);
    EXPECT_EQ(r.hits, 5);
    EXPECT_EQ(r.admissions, 0);
    // A third slot takes 2 (count 1, tied with 3, the lower key first): t2 hits too.
    EXPECT_EQ(run("static", trace, 3, o).hits, 6);
    // More slots than used experts: only the used ones are loaded.
    EXPECT_EQ(run("static", trace, 10, o).initial, 4);
}

TEST(CachePolicies, AdmissionAfterRepeatedMisses) {
    // lru:admit=2, 2 slots. t0: 0 misses (1st). t1: 1 (1st). t2: 0 misses again: in. t3: 2 (1st).
    // t4: 2 again: in. t5: 0 hits. 1 never comes in.
    const CacheSimResult r = run("lru:admit=2", sequence_trace(4, {0, 1, 0, 2, 2, 0}), 2);
    EXPECT_EQ(r.hits, 1);
    EXPECT_EQ(r.admissions, 2);
    EXPECT_EQ(r.evictions, 0);
    EXPECT_EQ(r.policy, "lru:admit=2");
}

TEST(CachePolicies, AdmissionWindowForgetsOldMisses) {
    // 0 misses at t0, t3, t4. With a window of 2 tokens the misses of t0 and t3 are too far apart;
    // those of t3 and t4 count: 0 comes in after t4 (1 admission, no hit). With 32 tokens it comes
    // in after t3 and hits at t4.
    const models::RoutingTrace trace = sequence_trace(4, {0, 1, 2, 0, 0});
    const CacheSimResult narrow = run("lru:admit=2:admit-window=2", trace, 2);
    EXPECT_EQ(narrow.admissions, 1);
    EXPECT_EQ(narrow.hits, 0);
    const CacheSimResult wide = run("lru:admit=2:admit-window=32", trace, 2);
    EXPECT_EQ(wide.admissions, 1);
    EXPECT_EQ(wide.hits, 1);
}

TEST(CachePolicies, AdmissionAfterRepeatsAlsoWrapsLfu) {
    // lfu:admit=3: 0 comes in only after its third miss (t2); t3 hits.
    const CacheSimResult r = run("lfu:admit=3", sequence_trace(2, {0, 0, 0, 0}), 1);
    EXPECT_EQ(r.admissions, 1);
    EXPECT_EQ(r.hits, 1);
}

TEST(CachePolicies, AdaptivePausesOnUnusedAdmissionsAndResumes) {
    // 2 slots, a window of 4 outcomes, reuse 0.5. Tokens 0..7 select new experts. The shadow (an
    // LRU admitting everything) evicts 0, 1, 2 unused after t2, t3, t4, so the pool admits 0..4;
    // after t5 the shadow's 4th outcome (3 evicted unused) makes 0/4 < 0.5: paused, 5, 6, 7 stay
    // out and the pool keeps {3, 4}. t8, t9 select 6 and 7 again: the pool misses them, the shadow
    // hits them, its window becomes f f t t = 0.5, so after t9 admission resumes and 7 comes in
    // (evicting 3). t10 hits 7; t11's 8 comes in. 7 admissions, 1 hit.
    const models::RoutingTrace trace = sequence_trace(16, {0, 1, 2, 3, 4, 5, 6, 7, 6, 7, 7, 8});
    const CacheSimResult r = run("adaptive:outcomes=4:reuse=0.5", trace, 2);
    EXPECT_EQ(r.admissions, 7);
    EXPECT_EQ(r.hits, 1);
    // Plain LRU admits all 9 misses and hits 6, 7, 7 at t8..t10.
    const CacheSimResult lru = run("lru", trace, 2);
    EXPECT_EQ(lru.admissions, 9);
    EXPECT_EQ(lru.hits, 3);
}

TEST(CachePolicies, AdaptiveStopsCopyingOnUniformRouting) {
    // No locality: admitted experts are rarely hit again before eviction, so adaptive copies a small
    // fraction of what LRU copies, for about the same hit rate.
    const models::RoutingTrace trace = synthetic_routing_trace(4, 64, 4, 2000, 0.0, 0.0, 7);
    const CacheSimResult lru = run("lru", trace, 4 * 8);
    const CacheSimResult adaptive = run("adaptive", trace, 4 * 8);
    EXPECT_LT(adaptive.admissions, lru.admissions / 4);
    EXPECT_NEAR(adaptive.hit_rate(), lru.hit_rate(), 0.05);
}

TEST(CachePolicies, EveryPolicyKeepsTheContractOnRandomTraces) {
    // The simulator throws if a victim is not resident or the initial set is wrong; the counts add up.
    for (uint64_t seed = 1; seed <= 4; ++seed) {
        const models::RoutingTrace trace = synthetic_routing_trace(3, 16, 3, 300, 0.8, 0.4, seed);
        CachePolicyOptions o;
        o.profile = trace_key_counts(trace);
        for (const char* spec :
             {"lru", "lfu", "lfu:half-life=4", "static", "adaptive", "lru:admit=2",
              "adaptive:admit=2:outcomes=8", "adaptive:reuse=0:outcomes=1", "lfu:admit=2:admit-window=4"}) {
            for (int64_t slots : {0, 1, 5, 20, 48, 60}) {
                auto policy = make_cache_policy(spec, o);
                const CacheSimResult r =
                    simulate_cache(trace, *policy, slots, {.max_admissions_per_token = 2});
                EXPECT_EQ(r.accesses, 300 * 3 * 3) << spec;
                EXPECT_LE(r.initial + r.admissions - r.evictions, slots) << spec << " " << slots;
                EXPECT_LE(r.hits, belady_hits(trace, slots)) << spec << " " << slots;
            }
        }
    }
}

TEST(CachePolicies, FactoryNamesWhatItKnows) {
    EXPECT_NE(error_of("mru").find("unknown cache policy 'mru' (known: lru, lfu, static, adaptive"),
              std::string::npos)
        << error_of("mru");
    EXPECT_NE(error_of("lru:half-life=3").find("unknown option 'half-life' (lru takes admit, admit-window"),
              std::string::npos)
        << error_of("lru:half-life=3");
    EXPECT_NE(error_of("lru:admit").find("option 'admit' needs a value (admit=VALUE)"), std::string::npos);
    EXPECT_NE(error_of("lru:admit=0").find("admit must be at least 1"), std::string::npos);
    EXPECT_NE(error_of("lru:admit=two").find("admit=two is not a number"), std::string::npos);
    EXPECT_NE(error_of("lfu:half-life=-1").find("half-life must be >= 0"), std::string::npos);
    EXPECT_NE(error_of("adaptive:reuse=1.5").find("reuse must be a fraction"), std::string::npos);
    EXPECT_NE(error_of("static").find("needs a profile"), std::string::npos);
    EXPECT_NE(error_of("static:admit=2").find("static takes none"), std::string::npos);
    EXPECT_EQ(make_cache_policy("lfu:half-life=64")->name(), "lfu:half-life=64");
}

TEST(CachePolicies, StaticRefusesAProfileOfAnotherModel) {
    CachePolicyOptions o;
    o.profile.assign(100, 1);
    auto policy = make_cache_policy("static", o);
    EXPECT_THROW(policy->reset(4, 50), Error);
}

}  // namespace
}  // namespace mox::place

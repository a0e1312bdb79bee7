// Judging an expert cache on a routing trace, without a model: replay the trace's selections through
// a policy exactly as the runtime cache drives it (models/expert_cache_policy.h), the hit rates of an
// always-admitting LRU at every pool size in one pass, and the offline optimum.
//
// Keys are the cache's: trunk layer * n_expert + expert, over every trunk layer up to the last
// traced one. A selection hits when its expert was resident at the start of its token: what a token
// misses is admitted after it, as the runtime copies it while the next token computes.
#pragma once

#include "models/expert_cache_policy.h"
#include "models/routing_trace.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace mox::place {

inline models::ExpertKey trace_key(const models::RoutingTrace& trace, size_t layer_index, uint16_t expert) {
    return static_cast<models::ExpertKey>(trace.layers[layer_index]) * trace.n_expert + expert;
}
// (last traced trunk layer + 1) * n_expert: the key space a cache for the trace's model has.
int64_t trace_key_count(const models::RoutingTrace& trace);
// Selections per key over the whole trace: a profile for the static policy.
std::vector<int64_t> trace_key_counts(const models::RoutingTrace& trace);

struct CacheSimOptions {
    // Tokens at the start that warm the cache up; the warm_* counts leave them out.
    int64_t warmup_tokens = 0;
    // Copies the cache can start per token (the copy bandwidth during one token's compute); the
    // remaining misses of a token are not offered for admission.
    int64_t max_admissions_per_token = std::numeric_limits<int64_t>::max();
};

struct CacheSimResult {
    std::string policy;
    int64_t slots = 0;
    int64_t accesses = 0, hits = 0;  // selections over the whole trace
    int64_t admissions = 0, evictions = 0;
    int64_t initial = 0;                              // keys loaded before the first token (policy.initial())
    std::vector<int64_t> layer_accesses, layer_hits;  // [traced layer]
    int64_t warm_accesses = 0, warm_hits = 0;         // from token warmup_tokens on
    int64_t warm_tokens = 0, warm_admissions = 0;     // likewise (admissions after those tokens)

    int64_t misses() const { return accesses - hits; }
    double hit_rate() const {
        return accesses ? static_cast<double>(hits) / static_cast<double>(accesses) : 0;
    }
    double warm_hit_rate() const {
        return warm_accesses ? static_cast<double>(warm_hits) / static_cast<double>(warm_accesses) : 0;
    }
    double warm_admissions_per_token() const {
        return warm_tokens ? static_cast<double>(warm_admissions) / static_cast<double>(warm_tokens) : 0;
    }
    double layer_hit_rate(size_t li) const {
        return layer_accesses[li]
                   ? static_cast<double>(layer_hits[li]) / static_cast<double>(layer_accesses[li])
                   : 0;
    }
};

// Replays `trace` through `policy` with a pool of `slots` slots, in the call order of
// expert_cache_policy.h. Throws mox::Error when the policy breaks the contract (an initial set
// larger than the pool or with keys out of range, a victim that is not resident).
CacheSimResult simulate_cache(const models::RoutingTrace& trace, models::ExpertCachePolicy& policy,
                              int64_t slots, const CacheSimOptions& options = {});

// Hits of the always-admitting LRU (the lru policy, without an admission cap) for every pool size
// at once, from stack distances (Mattson et al.): a selection hits a pool of C slots when fewer than
// C other keys were selected between its previous selection and the start of its token.
struct LruCurve {
    int64_t accesses = 0;       // selections counted (from token warmup_tokens on)
    std::vector<int64_t> hits;  // [slots] hits of a pool of that many slots; larger pools: hits.back()

    int64_t hits_at(int64_t slots) const;
    double hit_rate(int64_t slots) const {
        return accesses ? static_cast<double>(hits_at(slots)) / static_cast<double>(accesses) : 0;
    }
};
LruCurve lru_hit_curve(const models::RoutingTrace& trace, int64_t warmup_tokens = 0);

// Belady's offline optimum with bypass under the same rules (hits from the token's starting pool,
// admissions among the token's misses, any initial pool): start with the first `slots` keys the
// trace uses, and after each token keep the `slots` keys used again soonest among the residents and
// the misses; a miss used later than every resident is not admitted. The most hits any policy can
// get on the whole trace; with a warm-up, that schedule's hits from token warmup_tokens on.
// O(N log slots).
int64_t belady_hits(const models::RoutingTrace& trace, int64_t slots, int64_t warmup_tokens = 0);

}  // namespace mox::place

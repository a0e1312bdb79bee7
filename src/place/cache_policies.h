// The expert cache's policies (models/expert_cache_policy.h says when the cache calls them), made by
// name. A spec is a name and options, ':'-separated: "lru", "lfu:half-life=64", "lru:admit=2",
// "adaptive:reuse=0.3:outcomes=128". The runtime and the simulator (cache_sim.h) drive the same objects.
//
//   lru       evicts the least recently used resident expert; admits every miss that is among the
//             `slots` most recently used experts (all of them unless one token alone selects more
//             experts than the pool holds), so it is exactly the LRU of stack-distance analysis.
//   lfu       frequency with exponential decay: each selection adds 1 to an expert's count, and every
//             count halves each `half-life` tokens (0: no decay). Evicts the lowest count; admits a
//             miss only when the pool has room or its count beats the victim's. Equal counts: the
//             more recently used one wins.
//   static    a hot set from a profile (selections per expert, e.g. a trace's): initial() is the
//             `slots` most selected experts; nothing else is ever admitted.
//   adaptive  lru that admits only while admissions pay. A shadow lru of the same size that admits
//             every miss runs beside the pool (keys only); of its last `outcomes` admissions, the
//             fraction hit again before their eviction must be at least `reuse`, else admission
//             pauses (a uniform router's misses would only churn the pool), and it resumes as soon
//             as the fraction is back. Judged on the shadow, the measure does not depend on the
//             decision (a paused pool keeps its few admissions longer, which would make them look
//             reused). Until `outcomes` results are known it admits as lru does.
// Options of lru, lfu and adaptive: admit=N admits a key only once it missed N times within the
// last `admit-window` tokens (a one-off selection is cheaper computed where it is than copied).
#pragma once

#include "models/expert_cache_policy.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mox::place {

struct CachePolicyOptions {
    double half_life_tokens = 256;     // lfu: "half-life"
    int64_t admit_after_misses = 1;    // "admit": 1 admits at the first miss
    int64_t admit_window_tokens = 32;  // "admit-window": the tokens those misses must fall within
    double adaptive_min_reuse = 0.25;  // adaptive: "reuse", the reused fraction it needs to admit
    int64_t adaptive_outcomes = 64;  // adaptive: "outcomes", the shadow admissions judged (a sliding window)
    std::vector<int64_t> profile;    // static: selections per key (models::ExpertKey), e.g. from a trace
};

// A policy from a spec ("lfu:half-life=64:admit=2"): the spec's options override `defaults`. Throws
// mox::Error naming the known policies (or a policy's options) when the spec names neither.
std::unique_ptr<models::ExpertCachePolicy> make_cache_policy(std::string_view spec,
                                                             const CachePolicyOptions& defaults = {});

// "lru, lfu, static, adaptive": for help texts and errors.
std::string known_cache_policies();

}  // namespace mox::place

// The expert cache's hit rate predicted from a routing profile (a routing trace of the model): what
// the speed model's ExpertCacheLoad needs to price a plan that spends VRAM on a pool of experts
// instead of whole layers (docs/plan.md "Expert cache").
//
// Only the host layers' selections go through the pool, so the profile is restricted to those
// layers and replayed through the runtime's own policy objects (place/cache_policies.h) by the
// simulator (place/cache_sim.h) under the runtime's admission cap; the first tenth of the trace
// warms the pool up and is not counted. A search asks for many (layers, slots) pairs, often the same
// ones again: results are kept.
#pragma once

#include "models/routing_trace.h"
#include "plan/speed.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mox::plan {

// The runtime's default admissions per token (GpuOptions::expert_cache_admit_cap).
inline constexpr int64_t kDefaultCacheAdmitCap = 32;
// The share of the profile's tokens that warm the pool up before hits are counted.
inline constexpr int64_t kCacheWarmupDivisor = 10;

class CacheHitPredictor {
public:
    // `policy`: a spec of place::make_cache_policy ("lru", "lfu:half-life=128", ...), checked here
    // (a mox::Error names the known policies). `static` takes its hot set from the profile itself.
    CacheHitPredictor(std::shared_ptr<const models::RoutingTrace> profile, std::string policy,
                      int64_t admit_cap = kDefaultCacheAdmitCap);

    // A pool of `slots` experts serving the trunk layers `host_layers` (each traced by the profile):
    // the hit rate over their selections and the admissions per token, after the warm-up.
    ExpertCacheLoad predict(const std::vector<int64_t>& host_layers, int64_t slots);

    const std::string& policy() const { return policy_; }
    int64_t simulations() const { return static_cast<int64_t>(memo_.size()); }

private:
    std::shared_ptr<const models::RoutingTrace> profile_;
    std::string policy_;
    int64_t admit_cap_ = kDefaultCacheAdmitCap;
    std::map<std::pair<std::vector<int64_t>, int64_t>, ExpertCacheLoad> memo_;
};

// The profile's selections of `layers` alone (trunk layers, ascending, each traced by it).
models::RoutingTrace restrict_trace(const models::RoutingTrace& trace, const std::vector<int64_t>& layers);

}  // namespace mox::plan

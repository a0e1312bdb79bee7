#include "plan/cache_hits.h"

#include "core/error.h"
#include "place/cache_policies.h"
#include "place/cache_sim.h"

#include <algorithm>

namespace mox::plan {

models::RoutingTrace restrict_trace(const models::RoutingTrace& trace, const std::vector<int64_t>& layers) {
    models::RoutingTrace out;
    out.arch = trace.arch;
    out.model = trace.model;
    out.n_expert = trace.n_expert;
    out.k = trace.k;
    out.n_tokens = trace.n_tokens;
    std::vector<size_t> index;  // the traced layer of each kept layer
    for (int64_t l : layers) {
        const auto at = std::find(trace.layers.begin(), trace.layers.end(), static_cast<int32_t>(l));
        if (at == trace.layers.end()) fail("the routing profile does not trace layer {}", l);
        if (!out.layers.empty() && out.layers.back() >= l)
            fail("layers to keep must ascend ({} after {})", l, out.layers.back());
        out.layers.push_back(static_cast<int32_t>(l));
        index.push_back(static_cast<size_t>(at - trace.layers.begin()));
    }
    const auto k = static_cast<size_t>(trace.k);
    out.ids.reserve(static_cast<size_t>(trace.n_tokens) * index.size() * k);
    for (int64_t t = 0; t < trace.n_tokens; ++t)
        for (size_t li : index) out.ids.insert(out.ids.end(), trace.at(t, li), trace.at(t, li) + k);
    return out;
}

CacheHitPredictor::CacheHitPredictor(std::shared_ptr<const models::RoutingTrace> profile, std::string policy,
                                     int64_t admit_cap)
    : profile_(std::move(profile)), policy_(std::move(policy)), admit_cap_(admit_cap) {
    MOX_CHECK(profile_ != nullptr, "CacheHitPredictor without a profile");
    if (admit_cap_ < 1) fail("expert cache admission cap {}: at least 1", admit_cap_);
    (void)place::make_cache_policy(policy_);  // a bad spec fails before any search
}

ExpertCacheLoad CacheHitPredictor::predict(const std::vector<int64_t>& host_layers, int64_t slots) {
    if (host_layers.empty() || slots < 1) return {};
    auto key = std::make_pair(host_layers, slots);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    const models::RoutingTrace trace = restrict_trace(*profile_, host_layers);
    place::CachePolicyOptions options;
    if (policy_.starts_with("static")) options.profile = place::trace_key_counts(trace);
    const auto policy = place::make_cache_policy(policy_, options);
    const place::CacheSimResult r = place::simulate_cache(
        trace, *policy, slots,
        {.warmup_tokens = trace.n_tokens / kCacheWarmupDivisor, .max_admissions_per_token = admit_cap_});
    const ExpertCacheLoad load{.hit_rate = r.warm_hit_rate(),
                               .admissions_per_token = r.warm_admissions_per_token()};
    memo_.emplace(std::move(key), load);
    return load;
}

}  // namespace mox::plan

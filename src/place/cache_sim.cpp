#include "place/cache_sim.h"

#include "core/error.h"

#include <algorithm>
#include <set>
#include <utility>

namespace mox::place {

namespace {

using models::ExpertKey;
using models::RoutingTrace;

int64_t selections_per_token(const RoutingTrace& trace) {
    return static_cast<int64_t>(trace.layers.size()) * trace.k;
}

// The trace's selections as keys, in access order: [n_tokens][layers][k].
std::vector<ExpertKey> trace_keys(const RoutingTrace& trace) {
    std::vector<ExpertKey> keys;
    keys.reserve(trace.ids.size());
    for (int64_t t = 0; t < trace.n_tokens; ++t)
        for (size_t li = 0; li < trace.layers.size(); ++li)
            for (int64_t j = 0; j < trace.k; ++j) keys.push_back(trace_key(trace, li, trace.at(t, li)[j]));
    return keys;
}

// Counts over positions 0..n-1 with prefix sums in O(log n).
class Fenwick {
public:
    explicit Fenwick(size_t n) : tree_(n + 1, 0) {}
    void add(size_t at, int64_t delta) {
        for (size_t i = at + 1; i < tree_.size(); i += i & (~i + 1)) tree_[i] += delta;
    }
    // Sum over positions 0..end-1.
    int64_t prefix(size_t end) const {
        int64_t sum = 0;
        for (size_t i = end; i > 0; i -= i & (~i + 1)) sum += tree_[i];
        return sum;
    }

private:
    std::vector<int64_t> tree_;
};

}  // namespace

int64_t trace_key_count(const RoutingTrace& trace) {
    MOX_CHECK(!trace.layers.empty());
    return (static_cast<int64_t>(trace.layers.back()) + 1) * trace.n_expert;
}

std::vector<int64_t> trace_key_counts(const RoutingTrace& trace) {
    std::vector<int64_t> counts(static_cast<size_t>(trace_key_count(trace)), 0);
    for (ExpertKey key : trace_keys(trace)) ++counts[static_cast<size_t>(key)];
    return counts;
}

CacheSimResult simulate_cache(const RoutingTrace& trace, models::ExpertCachePolicy& policy, int64_t slots,
                              const CacheSimOptions& options) {
    MOX_CHECK(slots >= 0);
    const int64_t n_keys = trace_key_count(trace);
    CacheSimResult r;
    r.policy = policy.name();
    r.slots = slots;
    r.layer_accesses.assign(trace.layers.size(), 0);
    r.layer_hits.assign(trace.layers.size(), 0);

    policy.reset(slots, n_keys);
    std::vector<uint8_t> resident(static_cast<size_t>(n_keys), 0);
    int64_t n_resident = 0;
    for (ExpertKey key : policy.initial()) {
        if (key < 0 || key >= n_keys)
            fail("cache policy '{}': initial key {} out of range (the trace has {} keys)", r.policy, key,
                 n_keys);
        if (resident[static_cast<size_t>(key)])
            fail("cache policy '{}': initial key {} given twice", r.policy, key);
        if (n_resident == slots)
            fail("cache policy '{}': more initial keys than the {} slots", r.policy, slots);
        resident[static_cast<size_t>(key)] = 1;
        ++n_resident;
        policy.admitted(key);
    }
    r.initial = n_resident;

    std::vector<ExpertKey> missed;  // this token's misses in access order
    for (int64_t t = 0; t < trace.n_tokens; ++t) {
        const bool warm = t >= options.warmup_tokens;
        r.warm_tokens += warm;
        missed.clear();
        for (size_t li = 0; li < trace.layers.size(); ++li) {
            const uint16_t* ids = trace.at(t, li);
            for (int64_t j = 0; j < trace.k; ++j) {
                const ExpertKey key = trace_key(trace, li, ids[j]);
                const bool hit = resident[static_cast<size_t>(key)] != 0;
                policy.access(key, hit);
                ++r.layer_accesses[li];
                r.layer_hits[li] += hit;
                r.warm_accesses += warm;
                r.warm_hits += warm && hit;
                if (!hit) missed.push_back(key);
            }
        }
        policy.end_token();

        int64_t copies = 0;
        for (ExpertKey key : missed) {
            if (slots == 0 || copies == options.max_admissions_per_token) break;
            if (!policy.admit(key)) continue;
            if (n_resident == slots) {
                const ExpertKey v = policy.victim();
                if (v < 0 || v >= n_keys || !resident[static_cast<size_t>(v)])
                    fail("cache policy '{}': victim {} is not resident", r.policy, v);
                resident[static_cast<size_t>(v)] = 0;
                --n_resident;
                policy.evicted(v);
                ++r.evictions;
            }
            resident[static_cast<size_t>(key)] = 1;
            ++n_resident;
            policy.admitted(key);
            ++r.admissions;
            r.warm_admissions += warm;
            ++copies;
        }
    }
    for (size_t li = 0; li < trace.layers.size(); ++li) {
        r.accesses += r.layer_accesses[li];
        r.hits += r.layer_hits[li];
    }
    return r;
}

int64_t LruCurve::hits_at(int64_t slots) const {
    if (hits.empty() || slots <= 0) return 0;
    return hits[static_cast<size_t>(std::min<int64_t>(slots, static_cast<int64_t>(hits.size()) - 1))];
}

LruCurve lru_hit_curve(const RoutingTrace& trace, int64_t warmup_tokens) {
    const std::vector<ExpertKey> keys = trace_keys(trace);
    const int64_t per_token = selections_per_token(trace);
    // A marker at the position of every key's latest selection before the current token: the
    // markers after a key's previous selection count the distinct keys used since.
    Fenwick latest(keys.size());
    std::vector<int64_t> previous(static_cast<size_t>(trace_key_count(trace)), -1);
    std::vector<int64_t> at_distance;  // [d] selections whose key had d other keys used since
    LruCurve curve;
    for (int64_t t = 0; t < trace.n_tokens; ++t) {
        const size_t start = static_cast<size_t>(t * per_token), end = start + static_cast<size_t>(per_token);
        const bool warm = t >= warmup_tokens;
        curve.accesses += warm ? per_token : 0;
        for (size_t i = start; i < end && warm; ++i) {
            const int64_t p = previous[static_cast<size_t>(keys[i])];
            if (p < 0) continue;  // first use: a miss at every size
            const int64_t d = latest.prefix(start) - latest.prefix(static_cast<size_t>(p) + 1);
            if (static_cast<size_t>(d) >= at_distance.size())
                at_distance.resize(static_cast<size_t>(d) + 1, 0);
            ++at_distance[static_cast<size_t>(d)];
        }
        // Only now: the pool a token sees does not change during the token.
        for (size_t i = start; i < end; ++i) {
            int64_t& p = previous[static_cast<size_t>(keys[i])];
            if (p >= 0) latest.add(static_cast<size_t>(p), -1);
            latest.add(i, +1);
            p = static_cast<int64_t>(i);
        }
    }
    // hits[C] = selections at distance < C.
    curve.hits.assign(at_distance.size() + 1, 0);
    for (size_t d = 0; d < at_distance.size(); ++d) curve.hits[d + 1] = curve.hits[d] + at_distance[d];
    return curve;
}

int64_t belady_hits(const RoutingTrace& trace, int64_t slots, int64_t warmup_tokens) {
    MOX_CHECK(slots >= 0);
    const std::vector<ExpertKey> keys = trace_keys(trace);
    const int64_t never = static_cast<int64_t>(keys.size());  // "next use" of a key not used again
    std::vector<int64_t> next_use(keys.size());
    {
        std::vector<int64_t> upcoming(static_cast<size_t>(trace_key_count(trace)), never);
        for (size_t i = keys.size(); i-- > 0;) {
            next_use[i] = upcoming[static_cast<size_t>(keys[i])];
            upcoming[static_cast<size_t>(keys[i])] = static_cast<int64_t>(i);
        }
    }
    // Residents by next use; the last one is the one needed farthest ahead.
    std::set<std::pair<int64_t, ExpertKey>> residents;
    std::vector<int64_t> resident_next(static_cast<size_t>(trace_key_count(trace)), -1);  // -1: not resident
    // The best initial pool: the first `slots` distinct keys the trace uses.
    for (size_t i = 0; i < keys.size() && static_cast<int64_t>(residents.size()) < slots; ++i) {
        int64_t& next = resident_next[static_cast<size_t>(keys[i])];
        if (next >= 0) continue;
        next = static_cast<int64_t>(i);
        residents.insert({next, keys[i]});
    }
    std::vector<std::pair<int64_t, ExpertKey>> missed;
    const int64_t per_token = selections_per_token(trace);
    int64_t hits = 0;
    for (int64_t t = 0; t < trace.n_tokens; ++t) {
        missed.clear();
        for (int64_t i = t * per_token; i < (t + 1) * per_token; ++i) {
            const ExpertKey key = keys[static_cast<size_t>(i)];
            int64_t& next = resident_next[static_cast<size_t>(key)];
            if (next >= 0) {
                hits += t >= warmup_tokens;
                residents.erase({next, key});
                next = next_use[static_cast<size_t>(i)];
                residents.insert({next, key});
            } else {
                missed.push_back({next_use[static_cast<size_t>(i)], key});
            }
        }
        for (const auto& [next, key] : missed) {
            if (next == never || slots == 0) continue;  // bypass: never useful again
            if (static_cast<int64_t>(residents.size()) == slots) {
                const auto farthest = std::prev(residents.end());
                if (farthest->first < next) continue;  // bypass: every resident is needed sooner
                resident_next[static_cast<size_t>(farthest->second)] = -1;
                residents.erase(farthest);
            }
            residents.insert({next, key});
            resident_next[static_cast<size_t>(key)] = next;
        }
    }
    return hits;
}

}  // namespace mox::place

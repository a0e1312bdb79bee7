// The decision half of the expert cache: which routed experts deserve one of the pool's slots.
//
// The cache (the GPU forward's pool of expert slots shared by every host expert layer, or the
// simulator in place/cache_sim.h over a routing trace) reports every selection it serves and asks
// the policy, after each token, whether a missed expert should come in and whose slot it takes. The
// policies themselves (LRU, frequency with decay, a static hot set, admission after repeated use,
// adaptive admission) live in place/cache_policies.h; both the runtime and the simulator drive the
// same objects in the same order, so a simulated hit rate is the runtime's for the same routing.
//
// Order of calls for one token:
//   access(key, resident) for every selection, layer by layer in trunk order, k per layer;
//   end_token();
//   for each key that missed in this token, in access order, while the cache can take a copy:
//     if admit(key): when the pool is full, v = victim(), evicted(v); then admitted(key).
// An admitted expert serves from the next token on (its copy runs while the next token computes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mox::models {

// One expert of the whole model: trunk layer * n_expert + expert id.
using ExpertKey = int64_t;

// What a cache did since it started (or since the counters were last read and cleared).
struct ExpertCacheStats {
    int64_t slots = 0;          // the pool's size in experts
    uint64_t slot_bytes = 0;    // device bytes per slot (the largest expert of the layers it serves)
    uint64_t device_bytes = 0;  // the pool (its slots and the zero slot) and the slot tables
    int64_t tokens = 0;         // tokens whose selections it served
    int64_t hits = 0, misses = 0;
    int64_t admissions = 0, evictions = 0;
    uint64_t bytes_copied = 0;  // host -> device, by admissions

    double hit_rate() const { return hits + misses > 0 ? static_cast<double>(hits) / (hits + misses) : 0.0; }
};

class ExpertCachePolicy {
public:
    virtual ~ExpertCachePolicy() = default;
    virtual std::string name() const = 0;
    // Before anything else, and to start over: a pool of `slots` slots, keys below `n_keys`.
    virtual void reset(int64_t slots, int64_t n_keys) = 0;
    // Experts to load before the first token (a static hot set, a warm start), at most `slots`.
    virtual std::vector<ExpertKey> initial() const { return {}; }
    // One selection of `key` by the current token; `resident`: served from the pool (a hit).
    virtual void access(ExpertKey key, bool resident) = 0;
    // After the last access of a token (decay, windows, the adaptive mode's bookkeeping).
    virtual void end_token() = 0;
    // Whether `key`, which missed in the token just ended, should be copied into the pool now.
    virtual bool admit(ExpertKey key) = 0;
    // The resident key whose slot the next admission takes (called only when the pool is full).
    virtual ExpertKey victim() = 0;
    // What the cache did (the policy's view of residency follows these two alone).
    virtual void admitted(ExpertKey key) = 0;
    virtual void evicted(ExpertKey key) = 0;
};

}  // namespace mox::models

// Small routing traces written out by hand for the cache policy and simulator tests.
#pragma once

#include "models/routing_trace.h"

#include <cstdint>
#include <vector>

namespace mox::place::test {

// One traced layer (trunk layer 0, so a key is the expert id); tokens[t] = the k ids token t selects.
inline models::RoutingTrace one_layer_trace(int64_t n_expert,
                                            const std::vector<std::vector<uint16_t>>& tokens) {
    models::RoutingTrace t;
    t.n_expert = n_expert;
    t.k = static_cast<int64_t>(tokens.at(0).size());
    t.layers = {0};
    t.n_tokens = static_cast<int64_t>(tokens.size());
    for (const auto& ids : tokens) t.ids.insert(t.ids.end(), ids.begin(), ids.end());
    return t;
}

// k = 1: one id per token.
inline models::RoutingTrace sequence_trace(int64_t n_expert, const std::vector<uint16_t>& ids) {
    std::vector<std::vector<uint16_t>> tokens;
    for (uint16_t id : ids) tokens.push_back({id});
    return one_layer_trace(n_expert, tokens);
}

}  // namespace mox::place::test

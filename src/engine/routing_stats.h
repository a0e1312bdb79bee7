// Statistics of expert routing over a token stream: how skewed expert popularity is and how local
// in time the choices are (what an expert cache can exploit). Reuse is measured per layer: a
// selection of expert e at token t "repeats within d" if e was also selected at one of the tokens
// t-d .. t-1 of the same layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mox::engine {

struct LayerRoutingStats {
    std::vector<int64_t> counts;       // [n_expert] selections
    int64_t unused_experts = 0;
    double max_over_mean = 0;          // busiest expert's count / the even share
    double entropy_ratio = 0;          // entropy of the popularity distribution / log(n_expert)
    double repeat_next = 0;            // fraction of selections repeated from the previous token
    double repeat_within_8 = 0;        // ... from any of the previous 8 tokens
    std::vector<int64_t> reuse_distance_hist;  // [d] for d = 1..64 at index d-1; never seen before at index 64
};

struct RoutingStats {
    int64_t n_tokens = 0, n_expert = 0, k = 0;
    std::vector<LayerRoutingStats> layers;
    double repeat_next = 0, repeat_within_8 = 0;  // over all layers
    double random_repeat_next = 0, random_repeat_within_8 = 0;  // uniform independent routing: k/n, 1-(1-k/n)^8
};

// trace[layer]: [n_tokens * k] expert ids, token-major. Tokens t >= 1 (resp. the 8-token window is
// truncated at the start) count towards the repeat fractions.
RoutingStats compute_routing_stats(const std::vector<std::vector<int32_t>>& trace, int64_t n_expert, int64_t k);

std::string routing_stats_json(const RoutingStats& stats);

}  // namespace mox::engine

// How much a routing trace offers an expert cache: how often a layer selects again what it selected
// in the last tokens, and how unevenly its experts are used, next to what uniform independent
// routing would give.
#pragma once

#include "models/routing_trace.h"

namespace mox::place {

struct RoutingLocality {
    // Of the selections of tokens 1.., the fraction whose expert the same layer also selected at the
    // previous token, resp. at one of the previous 8 (fewer at the start).
    double repeat_next = 0, repeat_within_8 = 0;
    // The same for independent uniform routing: k / n_expert and 1 - (1 - k / n_expert)^8.
    double uniform_repeat_next = 0, uniform_repeat_within_8 = 0;
    // Mean over layers of the popularity's entropy / log(n_expert): 1 is even use, lower is skewed.
    double entropy_ratio = 0;
    // Mean over layers of the share of selections that its most used eighth of the experts takes
    // (uniform: about 1/8).
    double top_eighth_share = 0;
};

RoutingLocality routing_locality(const models::RoutingTrace& trace);

}  // namespace mox::place

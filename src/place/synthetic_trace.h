// Synthetic routing traces with tunable locality, from uniform (no cache can beat its size's share)
// to highly local, to judge caches where no real routing is at hand.
#pragma once

#include "models/routing_trace.h"

#include <cstdint>

namespace mox::place {

// A trace of `n_tokens` tokens over trunk layers 0..n_layers-1, each selecting `k` distinct experts
// of `n_expert` per layer:
//   skew   popularity: in each layer, the expert of rank r (over a random permutation of the
//          experts, a different one per layer) is drawn with weight 1 / (r + 1)^skew. 0: uniform;
//          1: Zipf; larger: fewer experts take most selections.
//   reuse  temporal locality: each of a token's k selections, with this probability, repeats one of
//          the previous token's selections in the same layer (one not yet chosen by this token),
//          else it is drawn from the popularity. The fraction of selections repeated from the
//          previous token is then about reuse + (1 - reuse) * p, where p is what popularity alone
//          repeats (k / n_expert when uniform).
// The same arguments and seed give the same trace on every machine (own integer sampling over
// std::mt19937_64, whose output the standard fixes). arch and model are left empty for the caller.
// Throws mox::Error for sizes out of range or skew < 0, reuse outside [0, 1].
models::RoutingTrace synthetic_routing_trace(int64_t n_layers, int64_t n_expert, int64_t k, int64_t n_tokens,
                                             double skew, double reuse, uint64_t seed);

}  // namespace mox::place

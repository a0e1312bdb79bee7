#include "place/routing_locality.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

namespace mox::place {

RoutingLocality routing_locality(const models::RoutingTrace& trace) {
    RoutingLocality r;
    const double n_expert = static_cast<double>(trace.n_expert);
    const double chance = static_cast<double>(trace.k) / n_expert;
    r.uniform_repeat_next = chance;
    r.uniform_repeat_within_8 = 1 - std::pow(1 - chance, 8);

    int64_t counted = 0, next = 0, within_8 = 0;
    const size_t n_top = std::max<size_t>(1, static_cast<size_t>(trace.n_expert) / 8);
    for (size_t li = 0; li < trace.layers.size(); ++li) {
        std::vector<int64_t> last_token(static_cast<size_t>(trace.n_expert), -1);
        std::vector<int64_t> count(static_cast<size_t>(trace.n_expert), 0);
        for (int64_t t = 0; t < trace.n_tokens; ++t) {
            const uint16_t* ids = trace.at(t, li);
            for (int64_t j = 0; j < trace.k; ++j) {
                int64_t& last = last_token[ids[j]];
                if (t > 0) {
                    ++counted;
                    next += last == t - 1;
                    within_8 += last >= 0 && t - last <= 8;
                }
                last = t;
                ++count[ids[j]];
            }
        }
        const double total = static_cast<double>(trace.n_tokens * trace.k);
        if (total == 0) continue;
        double entropy = 0;
        for (int64_t c : count)
            if (c > 0) entropy -= static_cast<double>(c) / total * std::log(static_cast<double>(c) / total);
        r.entropy_ratio += trace.n_expert > 1 ? entropy / std::log(n_expert) : 1;
        std::partial_sort(count.begin(), count.begin() + static_cast<std::ptrdiff_t>(n_top), count.end(),
                          std::greater<>());
        int64_t top = 0;
        for (size_t i = 0; i < n_top; ++i) top += count[i];
        r.top_eighth_share += static_cast<double>(top) / total;
    }
    const double n_layers = static_cast<double>(trace.layers.size());
    r.entropy_ratio /= n_layers;
    r.top_eighth_share /= n_layers;
    if (counted > 0) {
        r.repeat_next = static_cast<double>(next) / static_cast<double>(counted);
        r.repeat_within_8 = static_cast<double>(within_8) / static_cast<double>(counted);
    }
    return r;
}

}  // namespace mox::place

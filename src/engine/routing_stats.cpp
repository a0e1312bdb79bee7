#include "engine/routing_stats.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace mox::engine {

RoutingStats compute_routing_stats(const std::vector<std::vector<int32_t>>& trace, int64_t n_expert, int64_t k) {
    MOX_CHECK(n_expert > 0 && k > 0);
    RoutingStats out;
    out.n_expert = n_expert;
    out.k = k;
    out.random_repeat_next = static_cast<double>(k) / static_cast<double>(n_expert);
    out.random_repeat_within_8 = 1.0 - std::pow(1.0 - out.random_repeat_next, 8);
    int64_t total_sel = 0, total_next = 0, total_w8 = 0;
    for (const std::vector<int32_t>& ids : trace) {
        MOX_CHECK(ids.size() % static_cast<size_t>(k) == 0);
        const int64_t n = static_cast<int64_t>(ids.size()) / k;
        out.n_tokens = std::max(out.n_tokens, n);
        LayerRoutingStats ls;
        ls.counts.assign(static_cast<size_t>(n_expert), 0);
        ls.reuse_distance_hist.assign(65, 0);
        std::vector<int64_t> last_seen(static_cast<size_t>(n_expert), -1);
        int64_t sel = 0, next = 0, w8 = 0;
        for (int64_t t = 0; t < n; ++t) {
            for (int64_t i = 0; i < k; ++i) {
                const int32_t e = ids[static_cast<size_t>(t * k + i)];
                MOX_CHECK(e >= 0 && e < n_expert);
                ls.counts[static_cast<size_t>(e)]++;
                const int64_t prev = last_seen[static_cast<size_t>(e)];
                const int64_t d = prev < 0 ? -1 : t - prev;
                ls.reuse_distance_hist[d < 1 || d > 64 ? 64 : static_cast<size_t>(d - 1)]++;
                if (t >= 1) {
                    ++sel;
                    next += d == 1;
                    w8 += d >= 1 && d <= 8;
                }
            }
            for (int64_t i = 0; i < k; ++i) last_seen[static_cast<size_t>(ids[static_cast<size_t>(t * k + i)])] = t;
        }
        const double mean = static_cast<double>(n * k) / static_cast<double>(n_expert);
        double entropy = 0;
        for (int64_t c : ls.counts) {
            ls.unused_experts += c == 0;
            if (c > 0) {
                const double p = static_cast<double>(c) / static_cast<double>(n * k);
                entropy -= p * std::log(p);
            }
        }
        ls.max_over_mean = mean > 0 ? static_cast<double>(*std::max_element(ls.counts.begin(), ls.counts.end())) / mean : 0;
        ls.entropy_ratio = n_expert > 1 ? entropy / std::log(static_cast<double>(n_expert)) : 1;
        ls.repeat_next = sel ? static_cast<double>(next) / static_cast<double>(sel) : 0;
        ls.repeat_within_8 = sel ? static_cast<double>(w8) / static_cast<double>(sel) : 0;
        total_sel += sel;
        total_next += next;
        total_w8 += w8;
        out.layers.push_back(std::move(ls));
    }
    out.repeat_next = total_sel ? static_cast<double>(total_next) / static_cast<double>(total_sel) : 0;
    out.repeat_within_8 = total_sel ? static_cast<double>(total_w8) / static_cast<double>(total_sel) : 0;
    return out;
}

std::string routing_stats_json(const RoutingStats& s) {
    nlohmann::json j;
    j["n_tokens"] = s.n_tokens;
    j["n_expert"] = s.n_expert;
    j["experts_per_token"] = s.k;
    j["repeat_next"] = s.repeat_next;
    j["repeat_within_8"] = s.repeat_within_8;
    j["uniform_random_repeat_next"] = s.random_repeat_next;
    j["uniform_random_repeat_within_8"] = s.random_repeat_within_8;
    for (const LayerRoutingStats& l : s.layers)
        j["layers"].push_back({{"counts", l.counts},
                               {"unused_experts", l.unused_experts},
                               {"max_over_mean", l.max_over_mean},
                               {"entropy_ratio", l.entropy_ratio},
                               {"repeat_next", l.repeat_next},
                               {"repeat_within_8", l.repeat_within_8},
                               {"reuse_distance_hist_1_to_64_then_new", l.reuse_distance_hist}});
    return j.dump(1);
}

}  // namespace mox::engine

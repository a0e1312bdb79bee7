// mox cache-sim TRACE: the hit rate of every expert cache policy, Belady's optimum and the LRU curve
// at the pool sizes asked for, on a routing trace.
#include "commands.h"
#include "core/error.h"
#include "models/routing_trace.h"
#include "place/cache_policies.h"
#include "place/cache_sim.h"
#include "place/routing_locality.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace mox::cli {

namespace {

constexpr const char* kAllPolicies = "lru,lfu,static,adaptive,lru:admit=2";

struct CacheSimCli {
    std::string trace;
    std::vector<int64_t> slots, per_layer;
    std::string policies = "all";
    int64_t warmup = 0;
    int64_t admit_cap = -1;  // -1: no cap
    bool json = false;
};

std::vector<std::string> split_policies(const std::string& list) {
    std::vector<std::string> specs;
    const std::string expanded = list == "all" ? kAllPolicies : list;
    for (size_t at = 0; at <= expanded.size();) {
        const size_t end = std::min(expanded.find(',', at), expanded.size());
        std::string spec = expanded.substr(at, end - at);
        if (spec == "all") fail("--policy: 'all' stands alone (it means {})", kAllPolicies);
        if (spec.empty()) fail("--policy: an empty name in '{}'", list);
        specs.push_back(spec);
        at = end + 1;
    }
    return specs;
}

// Total slots to simulate: --slots as given, --per-layer times the traced layers, else an eighth, a
// quarter and a half of every traced layer's experts.
std::vector<int64_t> pool_sizes(const CacheSimCli& o, const models::RoutingTrace& trace) {
    const int64_t n_layers = static_cast<int64_t>(trace.layers.size());
    std::set<int64_t> sizes;
    for (int64_t s : o.slots) {
        if (s < 0) fail("--slots: {} is negative", s);
        sizes.insert(s);
    }
    for (int64_t s : o.per_layer) {
        if (s < 0) fail("--per-layer: {} is negative", s);
        sizes.insert(s * n_layers);
    }
    if (sizes.empty())
        for (int64_t divisor : {8, 4, 2})
            sizes.insert(std::max<int64_t>(1, trace.n_expert / divisor) * n_layers);
    return {sizes.begin(), sizes.end()};
}

struct SizeRow {
    int64_t slots = 0;
    std::vector<place::CacheSimResult> policies;
    double belady = 0, lru_curve = 0;
};

std::string per_layer_text(int64_t slots, int64_t n_layers) {
    if (slots % n_layers == 0) return fmt::format("{}", slots / n_layers);
    return fmt::format("{:.1f}", static_cast<double>(slots) / static_cast<double>(n_layers));
}

std::string trace_summary(const std::string& path, const models::RoutingTrace& t) {
    return fmt::format("trace {}: arch {}, model {}, {} layers (trunk {}..{}), {} experts, k {}, {} tokens",
                       path, t.arch.empty() ? "(none)" : t.arch, t.model.empty() ? "(none)" : t.model,
                       t.layers.size(), t.layers.front(), t.layers.back(), t.n_expert, t.k, t.n_tokens);
}

void print_text(const CacheSimCli& o, const models::RoutingTrace& trace, const place::RoutingLocality& loc,
                const std::vector<SizeRow>& rows, const place::LruCurve& curve) {
    const int64_t n_layers = static_cast<int64_t>(trace.layers.size());
    fmt::print("{}\n", trace_summary(o.trace, trace));
    fmt::print(
        "locality: next-token repeat {:.1f}% (uniform routing {:.1f}%), within 8 tokens {:.1f}% ({:.1f}%); "
        "popularity entropy {:.2f} of even, the top eighth of experts take {:.1f}% of selections\n",
        100 * loc.repeat_next, 100 * loc.uniform_repeat_next, 100 * loc.repeat_within_8,
        100 * loc.uniform_repeat_within_8, loc.entropy_ratio, 100 * loc.top_eighth_share);
    std::string conditions;
    if (o.warmup > 0) conditions += fmt::format(", from token {} on", o.warmup);
    if (o.admit_cap >= 0)
        conditions += fmt::format(", policies copy at most {} experts per token", o.admit_cap);
    fmt::print("hit rate (%){}; static's hot set is counted on this trace itself\n", conditions);

    std::vector<size_t> widths;
    fmt::print("{:>8} {:>9}", "slots", "per-layer");
    for (const place::CacheSimResult& r : rows.front().policies) {
        widths.push_back(std::max<size_t>(6, r.policy.size()));
        fmt::print("  {:>{}}", r.policy, widths.back());
    }
    fmt::print("  {:>6}  {:>9}\n", "belady", "lru-curve");
    for (const SizeRow& row : rows) {
        fmt::print("{:>8} {:>9}", row.slots, per_layer_text(row.slots, n_layers));
        for (size_t i = 0; i < row.policies.size(); ++i)
            fmt::print("  {:>{}.1f}", 100 * row.policies[i].warm_hit_rate(), widths[i]);
        fmt::print("  {:>6.1f}  {:>9.1f}\n", 100 * row.belady, 100 * row.lru_curve);
    }
    fmt::print("LRU curve (slots per layer: hit rate):");
    for (int64_t s = 1;; s = std::min(2 * s, trace.n_expert)) {
        fmt::print(" {}: {:.1f}%", s, 100 * curve.hit_rate(s * n_layers));
        if (s == trace.n_expert) break;
    }
    fmt::print("\n");
}

nlohmann::json to_json(const CacheSimCli& o, const models::RoutingTrace& trace,
                       const place::RoutingLocality& loc, const std::vector<SizeRow>& rows,
                       const place::LruCurve& curve) {
    const int64_t n_layers = static_cast<int64_t>(trace.layers.size());
    nlohmann::json j;
    j["trace"] = {{"path", o.trace},           {"arch", trace.arch},         {"model", trace.model},
                  {"layers", trace.layers},    {"n_expert", trace.n_expert}, {"k", trace.k},
                  {"n_tokens", trace.n_tokens}};
    j["locality"] = {{"repeat_next", loc.repeat_next},
                     {"repeat_within_8", loc.repeat_within_8},
                     {"uniform_repeat_next", loc.uniform_repeat_next},
                     {"uniform_repeat_within_8", loc.uniform_repeat_within_8},
                     {"entropy_ratio", loc.entropy_ratio},
                     {"top_eighth_share", loc.top_eighth_share}};
    j["warmup_tokens"] = o.warmup;
    j["admit_cap"] = o.admit_cap >= 0 ? nlohmann::json(o.admit_cap) : nlohmann::json(nullptr);
    for (const SizeRow& row : rows) {
        nlohmann::json size = {{"slots", row.slots},
                               {"per_layer", static_cast<double>(row.slots) / static_cast<double>(n_layers)},
                               {"belady", row.belady},
                               {"lru_curve", row.lru_curve}};
        for (const place::CacheSimResult& r : row.policies) {
            std::vector<double> layers;
            for (size_t li = 0; li < trace.layers.size(); ++li) layers.push_back(r.layer_hit_rate(li));
            size["policies"][r.policy] = {{"hit_rate", r.warm_hit_rate()}, {"hits", r.warm_hits},
                                          {"accesses", r.warm_accesses},   {"admissions", r.admissions},
                                          {"evictions", r.evictions},      {"layer_hit_rates", layers}};
        }
        j["sizes"].push_back(size);
    }
    // Every per-layer size from 0 to all of a layer's experts.
    for (int64_t s = 0; s <= trace.n_expert; ++s)
        j["lru_curve"].push_back(
            {{"per_layer", s}, {"slots", s * n_layers}, {"hit_rate", curve.hit_rate(s * n_layers)}});
    return j;
}

}  // namespace

void register_cache_sim(CLI::App& app) {
    auto o = std::make_shared<CacheSimCli>();
    CLI::App* cmd = app.add_subcommand(
        "cache-sim",
        "Hit rates of the expert cache's policies, Belady's optimum and the LRU curve on a routing trace");
    cmd->add_option("trace", o->trace, "Routing trace (mox run --routing-trace-out, mox trace-synth)")
        ->required();
    cmd->add_option("--slots", o->slots, "Pool sizes in slots shared by all layers, e.g. 256,512")
        ->delimiter(',');
    cmd->add_option(
           "--per-layer", o->per_layer,
           "Pool sizes in slots per traced layer, e.g. 16,32,64 (default: 1/8, 1/4, 1/2 of the experts)")
        ->delimiter(',');
    cmd->add_option("--policy", o->policies,
                    fmt::format("Policies, comma-separated: {} with options after ':' (lfu:half-life=64, "
                                "lru:admit=2:admit-window=16, adaptive:reuse=0.3); all = {}",
                                place::known_cache_policies(), kAllPolicies))
        ->capture_default_str();
    cmd->add_option("--warmup", o->warmup, "Hit rates from this token on (the first tokens fill the cache)");
    cmd->add_option("--admit-cap", o->admit_cap,
                    "Copies a policy may start per token (the copy bandwidth); default: no limit");
    cmd->add_flag("--json", o->json, "Machine-readable output");
    cmd->callback([o] {
        const std::vector<std::string> specs = split_policies(o->policies);
        place::CachePolicyOptions defaults;
        const models::RoutingTrace trace = models::read_routing_trace(o->trace);
        if (trace.n_tokens == 0) fail("routing trace '{}' has no tokens", o->trace);
        if (o->warmup < 0 || o->warmup >= trace.n_tokens)
            fail("--warmup {} leaves no tokens of the trace's {}", o->warmup, trace.n_tokens);
        if (o->admit_cap < -1) fail("--admit-cap {} is negative", o->admit_cap);
        defaults.profile = place::trace_key_counts(trace);
        std::vector<std::unique_ptr<models::ExpertCachePolicy>> policies;
        for (const std::string& spec : specs) policies.push_back(place::make_cache_policy(spec, defaults));

        const place::CacheSimOptions sim{
            .warmup_tokens = o->warmup,
            .max_admissions_per_token =
                o->admit_cap >= 0 ? o->admit_cap : std::numeric_limits<int64_t>::max()};
        const place::LruCurve curve = place::lru_hit_curve(trace, o->warmup);
        std::vector<SizeRow> rows;
        for (int64_t slots : pool_sizes(*o, trace)) {
            SizeRow row;
            row.slots = slots;
            for (auto& policy : policies)
                row.policies.push_back(place::simulate_cache(trace, *policy, slots, sim));
            row.belady = static_cast<double>(place::belady_hits(trace, slots, o->warmup)) /
                         static_cast<double>(curve.accesses);
            row.lru_curve = curve.hit_rate(slots);
            rows.push_back(std::move(row));
        }
        const place::RoutingLocality locality = place::routing_locality(trace);
        if (o->json)
            fmt::print("{}\n", to_json(*o, trace, locality, rows, curve).dump(2));
        else
            print_text(*o, trace, locality, rows, curve);
    });
}

}  // namespace mox::cli

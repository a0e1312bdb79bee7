#include "placement_options.h"

#include "flag_values.h"
#include "llama_flags.h"

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "models/hparams.h"
#include "place/cache_policies.h"
#include "place/cache_sim.h"
#include "place/execute.h"
#include "plan/auto_plan.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <map>

namespace mox::cli {

void add_rule_options(CLI::App* cmd, PlacementOptions& o) {
    o.cmd = cmd;
    o.ot = cmd->add_option(
                  "--override-tensor", o.override_tensor,
                  "-ot REGEX=DEVICE[,...]: DEVICE CPU, CUDA0 or gpu/pinned_host/mmap_host; first match wins")
               ->allow_extra_args(false);
    o.ncmoe = cmd->add_option("--n-cpu-moe", o.n_cpu_moe, "Keep the experts of the first N layers on the CPU")
                  ->allow_extra_args(false);
    o.cmoe = cmd->add_flag("--cpu-moe", o.cpu_moe, "Keep every layer's experts on the CPU");
    o.layers = cmd->add_option("--moe-cpu-layers", o.moe_cpu_layers,
                               "Keep the experts of these layers on the CPU, e.g. 0-9,20,31-39")
                   ->allow_extra_args(false);
}

void add_placement_options(CLI::App* cmd, PlacementOptions& o) {
    add_rule_options(cmd, o);
    cmd->add_option("--vram-budget", o.vram_budget,
                    "Never allocate more GPU memory than this (e.g. 16GiB), CUDA context included");
    cmd->add_option(
           "--plan", o.plan,
           "auto: the planner places the experts for the VRAM budget (the flags above constrain it); "
           "manual: the flags alone")
        ->capture_default_str();
    cmd->add_option("--profile", o.profile,
                    "Hardware profile for --plan auto (default: `mox calibrate`'s cache)");
    cmd->add_option("--ubatch-size", o.n_ubatch,
                    "Tokens per prefill micro-batch on the GPU (-ub; default: planned, "
                    "512 with --plan manual)");
    cmd->add_option(
        "--stream-min-tokens", o.stream_min_tokens,
        "Prefill micro-batches of at least this many tokens stream CPU-resident experts to the GPU; "
        "smaller ones (and decode) compute them on the CPU (default: planned, 32 with --plan manual)");
    cmd->add_option("--expert-cache", o.expert_cache,
                    "SIZE|auto|off: a pool of this much GPU memory (e.g. 4GiB) holds the hot experts of every "
                    "layer whose experts live in host memory; decode computes those on the GPU, the rest "
                    "on the CPU (docs/expert-cache.md). With --plan auto the plan keeps it free; auto: the "
                    "planner chooses the pool (none a valid choice) from --routing-profile");
    cmd->add_option("--routing-profile", o.routing_profile,
                    "A routing trace of this model (`mox run --routing-trace-out`): --expert-cache auto "
                    "predicts the pool's hit rate from it");
    cmd->add_option("--cache-policy", o.cache_policy,
                    "Which experts the cache keeps: lru, lfu, static, adaptive, with options such as "
                    "lru:admit=2 (docs/expert-cache.md)")
        ->capture_default_str();
    cmd->add_option("--cache-profile", o.cache_profile,
                    "A routing trace of this model whose expert counts choose the static policy's hot set");
    cmd->add_option("--cache-admit-cap", o.cache_admit_cap,
                    "At most this many experts enter the cache per token (their copies run beside decode)")
        ->capture_default_str();
}

uint64_t PlacementOptions::expert_cache_bytes() const {
    if (expert_cache.empty() || expert_cache == "off" || expert_cache == "0" || expert_cache_auto()) return 0;
    return parse_size_flag("--expert-cache", expert_cache);
}

uint64_t PlacementOptions::vram_budget_bytes() const {
    return vram_budget.empty() ? 0 : parse_size_flag("--vram-budget", vram_budget);
}

std::vector<place::OverrideRule> PlacementOptions::rules(int64_t n_layer) const {
    std::vector<place::OverrideRule> out;
    std::map<const CLI::Option*, size_t> seen;  // k-th occurrence of an option = its k-th value
    auto append = [&](std::vector<place::OverrideRule> more) {
        for (auto& r : more) out.push_back(std::move(r));
    };
    for (const CLI::Option* opt : cmd->parse_order()) {
        const size_t k = seen[opt]++;
        if (opt == ot)
            append(place::parse_override_tensor(override_tensor.at(k)));
        else if (opt == ncmoe)
            append(place::n_cpu_moe_rules(n_cpu_moe.at(k), n_layer));
        else if (opt == cmoe && k == 0)
            out.push_back(place::cpu_moe_rule());
        else if (opt == layers)
            append(place::moe_cpu_layers_rules(moe_cpu_layers.at(k), n_layer));
    }
    return out;
}

namespace {

// --expert-cache: the pool and its policy. A plan that left no experts in host memory has nothing
// to cache: said in a note, and the pool is not made.
void with_expert_cache(models::GpuOptions& g, const PlacementOptions& o) {
    const uint64_t bytes = o.expert_cache_bytes();
    if (bytes == 0) return;
    const bool any_host = std::any_of(g.experts.begin(), g.experts.end(),
                                      [](models::ExpertHome h) { return h != models::ExpertHome::gpu; });
    if (!any_host) {
        note(fmt::format("--expert-cache {}: every expert fits on the GPU, so there is nothing to cache",
                         o.expert_cache));
        return;
    }
    g.expert_cache_bytes = bytes;
    place::CachePolicyOptions options;
    if (!o.cache_profile.empty())
        options.profile = place::trace_key_counts(models::read_routing_trace(o.cache_profile));
    g.expert_cache_policy = place::make_cache_policy(o.cache_policy, options);
    g.expert_cache_admit_cap = o.cache_admit_cap;
}

}  // namespace

models::GpuOptions gpu_options(const gguf::File& file, const PlacementOptions& o, int64_t n_gpu_layers,
                               int64_t n_ctx, std::optional<quant::TypeId>& k_type,
                               std::optional<quant::TypeId>& v_type) {
#ifndef MOX_HAVE_CUDA
    // Nothing to plan for (and no calibration to run): say so before anything else.
    fail("{}", no_cuda_reason());
#endif
    const models::Hparams hp = models::read_hparams(file);
    place::PlacementFlags flags;
    flags.n_gpu_layers = n_gpu_layers;
    flags.overrides = o.rules(hp.n_layer);
    if (o.plan != "auto" && o.plan != "manual") fail("--plan {}: expected auto or manual", o.plan);
    if (o.n_ubatch < 0 || o.stream_min_tokens < 0) fail("-ub and --stream-min-tokens must be positive");
    if (o.expert_cache_auto() && o.plan != "auto") fail("--expert-cache auto: the planner sizes the pool (--plan auto)");
    if (o.expert_cache_auto() && o.routing_profile.empty())
        fail("--expert-cache auto: needs --routing-profile TRACE, a routing trace of this model to predict hits from");
    if (!o.routing_profile.empty() && !o.expert_cache_auto())
        fail("--routing-profile {}: it sizes the expert cache, which needs --expert-cache auto", o.routing_profile);
    if (o.plan == "auto") {
        plan::AutoPlanInputs in;
        in.flags = flags;
        in.n_ctx = n_ctx;
        in.k_type = k_type;
        in.v_type = v_type;
        if (o.n_ubatch > 0) in.n_ubatch = o.n_ubatch;
        in.vram_budget = o.vram_budget_bytes();
        in.reserve_bytes = o.expert_cache_bytes();
        in.profile_path = o.profile;
        if (o.expert_cache_auto()) {
            in.routing_profile =
                std::make_shared<const models::RoutingTrace>(models::read_routing_trace(o.routing_profile));
            in.cache_policy = o.cache_policy;
            in.cache_admit_cap = o.cache_admit_cap;
        }
        plan::AutoPlan p = plan::auto_plan(file, in);
        if (o.stream_min_tokens > 0) p.gpu.stream_min_tokens = o.stream_min_tokens;
        log::info("{}", p.summary);
        k_type = p.result.cache.k_type;
        v_type = p.result.cache.v_type;
        with_expert_cache(p.gpu, o);
        return p.gpu;
    }
    if (!k_type || !v_type)
        fail("-ctk/-ctv auto: the planner chooses the KV types, which --plan manual turns off");
    models::GpuOptions g = place::gpu_options_for(place::place_from_flags(file, flags), hp);
    g.vram_budget = o.vram_budget_bytes();
    g.n_ubatch = o.n_ubatch > 0 ? o.n_ubatch : 512;
    g.stream_min_tokens = o.stream_min_tokens > 0 ? o.stream_min_tokens : 32;
    g.n_ctx_max = n_ctx;
    with_expert_cache(g, o);
    return g;
}

}  // namespace mox::cli

// mox plan -m MODEL [placement flags]: where every tensor and expert would live and what memory
// that predicts per device (placement as data + exact memory accounting).
// With --plan auto, a budget (--vram-budget, --ram-budget), --goal or --ctx max, it searches instead
// (plan::plan_auto): the manual flags become constraints, and the hardware profile that
// `mox calibrate` caches supplies the speed model's rates (docs/plan.md).
#include "commands.h"
#include "common_options.h"
#include "core/error.h"
#include "core/units.h"
#include "flag_values.h"
#include "gguf/reader.h"
#include "llama_flags.h"
#include "models/hparams.h"
#include "models/routing_trace.h"
#include "place/flags.h"
#include "place/memory.h"
#include "placement_options.h"
#include "plan/auto_plan.h"
#include "plan/hardware.h"
#include "plan/search.h"
#include "plan/speed.h"
#include "plan_report.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mox::cli {

namespace {

struct PlanOptions {
    std::string model;
    std::string n_gpu_layers = "0";
    PlacementOptions rules;   // -ot, --n-cpu-moe, --cpu-moe, --moe-cpu-layers in command-line order
    std::string n_ctx = "0";  // tokens, 0 (the trained context) or max
    std::string cache_type_k = "f16";
    std::string cache_type_v = "f16";
    bool json = false;
    // The search (plan_auto).
    std::string plan = "manual";
    std::string vram_budget, ram_budget, vram_margin;
    std::string goal = "decode";
    std::string profile;
    int64_t n_ubatch = 0;  // 0: searched (auto) or 512 (manual)
    int64_t stream_min_tokens = 32;
    int64_t prompt_tokens = 0;
    std::string routing_profile;  // a routing trace: the search weighs an expert cache
    std::string cache_policy = "lru";
};

quant::TypeId cache_type(const char* flag, const std::string& name) {
    if (name == "auto")
        fail("{} auto: KV types are searched when planning (--vram-budget, --goal, -c max)", flag);
    const auto t = quant::type_from_name(name);
    if (!t) fail("{} {}: unknown type (use f32, f16, bf16, q8_0 or q4_0)", flag, name);
    return *t;
}

const char* tier_cell(const std::optional<place::Tier>& t, bool split) {
    return split ? "split" : t ? short_tier(*t) : "-";
}

nlohmann::json tier_json(const std::optional<place::Tier>& t, bool split) {
    if (split) return "split";
    if (!t) return nullptr;
    return place::tier_name(*t);
}

std::string bytes_text(uint64_t b) {
    return fmt::format("{} ({} B)", format_bytes(b), b);
}

const char* kind_of(const place::LayerView& v) {
    return v.mtp ? "mtp" : v.attention ? "attention" : "deltanet";
}

struct Plan {
    std::string path;
    int64_t n_gpu_layers = 0;
    std::vector<place::OverrideRule> rules;
    place::Placement placement;
    place::CacheOptions cache;
    place::RunShape run;
    place::MemoryPrediction memory;
    // The speed model's numbers with this machine's profile (none: no profile, or it lacks a rate).
    std::optional<plan::SpeedPrediction> speed;
    std::string speed_missing;  // why there is no speed prediction
};

nlohmann::json to_json(const Plan& p) {
    nlohmann::json j;
    j["model"] = p.path;
    j["n_layer"] = p.placement.n_layer();
    j["n_expert"] = p.placement.n_expert();
    j["n_gpu_layers"] = p.n_gpu_layers;
    for (const auto& r : p.rules)
        j["overrides"].push_back(
            {{"pattern", r.pattern}, {"tier", place::tier_name(r.tier)}, {"origin", r.origin}});
    if (p.rules.empty()) j["overrides"] = nlohmann::json::array();
    for (int64_t l = 0; l < p.placement.n_layer(); ++l) {
        const place::LayerView v = place::layer_view(p.placement, l);
        nlohmann::json e{{"layer", l},
                         {"kind", kind_of(v)},
                         {"mixer", tier_json(v.mixer, v.mixer_split)},
                         {"router", tier_json(v.router, v.router_split)},
                         {"shared_expert", tier_json(v.shared_expert, v.shared_split)},
                         {"norms", tier_json(v.norms, v.norms_split)}};
        for (place::Tier t : place::kAllTiers)
            e["experts"][place::tier_name(t)] = v.experts[static_cast<size_t>(t)];
        j["layers"].push_back(e);
    }
    for (const place::TensorEntry& t : p.placement.tensors())
        if (t.layer < 0)
            j["globals"].push_back(
                {{"name", t.name}, {"tier", place::tier_name(t.tier)}, {"bytes", t.n_bytes}});
    const place::MemoryPrediction& m = p.memory;
    for (place::Tier t : place::kAllTiers) j["weights_bytes"][place::tier_name(t)] = m.weights[t];
    j["weights_bytes"]["total"] = m.weights.total();
    j["kv"] = {{"n_ctx", p.cache.n_ctx},
               {"n_seq", p.cache.n_seq},
               {"k_type", std::string(quant::type_name(p.cache.k_type))},
               {"v_type", std::string(quant::type_name(p.cache.v_type))},
               {"k_row_bytes", m.k_row_bytes},
               {"v_row_bytes", m.v_row_bytes},
               {"layers_gpu", m.attention_layers_gpu},
               {"layers_host", m.attention_layers_host},
               {"gpu_bytes", m.kv_gpu},
               {"host_bytes", m.kv_host}};
    j["state"] = {{"layers_gpu", m.recurrent_layers_gpu},
                  {"layers_host", m.recurrent_layers_host},
                  {"gpu_bytes", m.state_gpu},
                  {"host_bytes", m.state_host}};
    j["allowance"] = {{"cuda_context_bytes", m.allowance.cuda_context_bytes},
                      {"counted_bytes", m.gpu_context()},
                      {"measured", m.allowance.measured},
                      {"source", m.allowance.source}};
    j["gpu_buffers"] = {{"n_ubatch", p.run.n_ubatch},
                        {"activations_bytes", m.buffers.activations},
                        {"matmul_scratch_bytes", m.buffers.matmul_scratch},
                        {"attention_scratch_bytes", m.buffers.attention_scratch},
                        {"staging_bytes", m.buffers.staging},
                        {"device_bytes", m.buffers.device_total()},
                        {"pinned_host_bytes", m.buffers.pinned_host}};
    j["gpu_total_bytes"] = m.gpu_total();
    j["host"] = {{"page_cache_bytes", m.host_page_cache()},
                 {"locked_bytes", m.host_locked()},
                 {"ram_bytes", m.host_ram()},
                 {"total_bytes", m.host_total()}};
    if (p.speed) {
        j["speed"] = {{"decode_tps", p.speed->decode.tokens_per_s},
                      {"decode_half_depth", p.speed->decode_half.depth},
                      {"decode_half_tps", p.speed->decode_half.tokens_per_s},
                      {"prefill_prompt_tokens", p.speed->prefill.prompt_tokens},
                      {"prefill_tps", p.speed->prefill.tokens_per_s},
                      {"notes", p.speed->notes}};
    } else {
        j["speed"] = {{"missing", p.speed_missing}};
    }
    return j;
}

void print_text(const Plan& p) {
    const place::Placement& pl = p.placement;
    const place::MemoryPrediction& m = p.memory;
    fmt::print("{}\n", p.path);
    const int64_t n_layer = pl.n_layer();
    const int64_t n_gpu = p.n_gpu_layers < 0 ? n_layer + 1 : std::min(p.n_gpu_layers, n_layer + 1);
    // llama.cpp's count: the output layer is the last of n_layer + 1, so it goes first.
    std::string on_gpu = "nothing";
    if (n_gpu == 1) on_gpu = "the output layer";
    if (n_gpu > 1)
        on_gpu = fmt::format("the output layer and blocks {}..{}", n_layer + 1 - n_gpu, n_layer - 1);
    fmt::print("  -ngl {}: {} on the GPU by layer (token_embd stays on the host)\n", p.n_gpu_layers, on_gpu);
    if (p.rules.empty()) fmt::print("  overrides: none\n");
    // In order, first match wins; a flag's run of per-layer rules is one line.
    for (size_t i = 0; i < p.rules.size();) {
        size_t j = i + 1;
        while (j < p.rules.size() && p.rules[j].origin == p.rules[i].origin &&
               p.rules[j].tier == p.rules[i].tier)
            ++j;
        if (j - i == 1)
            fmt::print("  override {}: {} -> {}   [{}]\n", i + 1, p.rules[i].pattern,
                       place::tier_name(p.rules[i].tier), p.rules[i].origin);
        else
            fmt::print("  overrides {}-{}: {} .. {} -> {}   [{}]\n", i + 1, j, p.rules[i].pattern,
                       p.rules[j - 1].pattern, place::tier_name(p.rules[i].tier), p.rules[i].origin);
        i = j;
    }

    fmt::print("\n  {:>5}  {:<9} {:<6} {:<6} {:<6} {:<6}  experts gpu/pinned/mmap of {}\n", "layer", "kind",
               "mixer", "router", "shexp", "norms", pl.n_expert());
    for (int64_t l = 0; l < n_layer; ++l) {
        const place::LayerView v = place::layer_view(pl, l);
        fmt::print("  {:>5}  {:<9} {:<6} {:<6} {:<6} {:<6}  {}/{}/{}\n", l, kind_of(v),
                   tier_cell(v.mixer, v.mixer_split), tier_cell(v.router, v.router_split),
                   tier_cell(v.shared_expert, v.shared_split), tier_cell(v.norms, v.norms_split),
                   v.experts[0], v.experts[1], v.experts[2]);
    }
    for (const place::TensorEntry& t : pl.tensors())
        if (t.layer < 0)
            fmt::print("  {:<24} {:<12} {}\n", t.name, place::tier_name(t.tier), format_bytes(t.n_bytes));

    fmt::print("\n  weights by tier (exact, from the file's tensor sizes):\n");
    for (place::Tier t : place::kAllTiers)
        fmt::print("    {:<12} {}\n", place::tier_name(t), bytes_text(m.weights[t]));
    fmt::print("    {:<12} {}\n", "total", bytes_text(m.weights.total()));
    fmt::print("  KV cache: {} tokens x {} seq, K {} ({} B/token/layer), V {} ({} B/token/layer)\n",
               p.cache.n_ctx, p.cache.n_seq, quant::type_name(p.cache.k_type), m.k_row_bytes,
               quant::type_name(p.cache.v_type), m.v_row_bytes);
    fmt::print("    gpu  {} attention layers: {}\n", m.attention_layers_gpu, bytes_text(m.kv_gpu));
    fmt::print("    host {} attention layers: {}\n", m.attention_layers_host, bytes_text(m.kv_host));
    fmt::print("  DeltaNet state (fp32 conv + recurrent):\n");
    fmt::print("    gpu  {} layers: {}\n", m.recurrent_layers_gpu, bytes_text(m.state_gpu));
    fmt::print("    host {} layers: {}\n", m.recurrent_layers_host, bytes_text(m.state_host));
    if (m.gpu_used) {
        fmt::print(
            "  GPU buffers for -ub {}: activations {}, scratch {} + {}, expert staging {} (pinned host {})\n",
            p.run.n_ubatch, format_bytes(m.buffers.activations), format_bytes(m.buffers.matmul_scratch),
            format_bytes(m.buffers.attention_scratch), format_bytes(m.buffers.staging),
            format_bytes(m.buffers.pinned_host));
        fmt::print("  CUDA context: {}{}\n", format_bytes(m.allowance.cuda_context_bytes),
                   m.allowance.measured ? fmt::format(" ({})", m.allowance.source) : "");
        if (!m.allowance.measured) fmt::print("    NOTE: NOT measured: {}\n", m.allowance.source);
    }
    fmt::print("\n  predicted GPU memory:  {}\n", bytes_text(m.gpu_total()));
    fmt::print("  predicted host memory: {}\n", bytes_text(m.host_total()));
    fmt::print("    page cache (mmap_host weights): {}\n", bytes_text(m.host_page_cache()));
    fmt::print("    locked RAM (pinned_host weights): {}\n", bytes_text(m.host_locked()));
    fmt::print("    RAM (KV cache + state on the host): {}\n", bytes_text(m.host_ram()));
    if (p.speed) {
        fmt::print("\n  predicted decode: {:.1f} t/s at depth 0, {:.1f} t/s at depth {}\n",
                   p.speed->decode.tokens_per_s, p.speed->decode_half.tokens_per_s,
                   p.speed->decode_half.depth);
        fmt::print("  predicted prefill: {:.0f} t/s for {} tokens\n", p.speed->prefill.tokens_per_s,
                   p.speed->prefill.prompt_tokens);
        for (const std::string& n : p.speed->notes) fmt::print("    note: {}\n", n);
    } else {
        fmt::print("\n  predicted speed: none ({})\n", p.speed_missing);
    }
}

}  // namespace

void register_plan(CLI::App& app) {
    auto o = std::make_shared<PlanOptions>();
    CLI::App* cmd = app.add_subcommand(
        "plan",
        "Show where each tensor and expert would live (llama.cpp's placement flags) and the memory it takes");
    cmd->add_option("-m,--model", o->model, "GGUF model file (first shard of a split model)")->required();
    cmd->add_option("--n-gpu-layers,--gpu-layers", o->n_gpu_layers,
                    "-ngl N: the last N of the layers + output layer on the GPU, as llama.cpp (all or -1: "
                    "everything; auto: the planner's search)")
        ->capture_default_str();
    add_rule_options(cmd, o->rules);
    cmd->add_option(
        "-c,--ctx-size", o->n_ctx,
        "Context size in tokens (default 8192, as chat and serve, or the trained context if smaller; "
        "0: the trained context; max: the largest that fits, which searches)");
    cmd->add_option("--cache-type-k", o->cache_type_k,
                    "KV cache type for K (-ctk): f32, f16, bf16, q8_0, q4_0 (searched when not given or auto "
                    "and searching)")
        ->capture_default_str();
    cmd->add_option("--cache-type-v", o->cache_type_v,
                    "KV cache type for V (-ctv): f32, f16, bf16, q8_0, q4_0 (searched when not given or auto "
                    "and searching)")
        ->capture_default_str();
    cmd->add_flag("--json", o->json, "Machine-readable output");
    cmd->add_option("--plan", o->plan,
                    "manual: the flags alone; auto: search the placement, KV types, context and batch size "
                    "(implied by --vram-budget, --ram-budget, --goal and -c max)")
        ->capture_default_str();
    cmd->add_option("--vram-budget", o->vram_budget,
                    "GPU memory the plan may use, e.g. 16GiB, 8000MiB (default: all)");
    cmd->add_option("--ram-budget", o->ram_budget,
                    "Locked + anonymous host RAM the plan may use (default: all)");
    cmd->add_option("--vram-margin", o->vram_margin,
                    "Safety margin kept free (default: max(2% of the budget, 256MiB))");
    cmd->add_option("--goal", o->goal, "What the search maximises: decode, prefill or context")
        ->capture_default_str();
    cmd->add_option("--profile", o->profile,
                    "Hardware profile JSON (default: the one `mox calibrate` cached for this machine)");
    cmd->add_option("--ubatch-size", o->n_ubatch, "-ub N: fix the micro-batch size instead of searching it");
    cmd->add_option("--stream-min-tokens", o->stream_min_tokens,
                    "Manual plans: micro-batches of at least this many tokens stream CPU-resident experts")
        ->capture_default_str();
    cmd->add_option("--prompt-tokens", o->prompt_tokens,
                    "Predict prefill for a prompt of N tokens (default 4096 or -c)");
    cmd->add_option("--routing-profile", o->routing_profile,
                    "A routing trace of this model (`mox run --routing-trace-out`): the search also weighs an "
                    "expert cache, a pool of GPU slots for every host layer's hot experts, whose hit rate it "
                    "predicts from the trace (implies the search)");
    cmd->add_option("--cache-policy", o->cache_policy,
                    "The expert cache's policy with --routing-profile: lru, lfu, static, adaptive, with options "
                    "(docs/expert-cache.md)")
        ->capture_default_str();
    add_llama_flags(cmd, Command::plan);
    cmd->callback([o, cmd] {
        // Sizes are checked before a quick calibration or the file make them wait.
        if (!o->vram_budget.empty()) parse_size_flag("--vram-budget", o->vram_budget);
        if (!o->ram_budget.empty()) parse_size_flag("--ram-budget", o->ram_budget);
        if (!o->vram_margin.empty()) parse_size_flag("--vram-margin", o->vram_margin);
        const gguf::File file = gguf::File::open(o->model);
        const models::Hparams hp = models::read_hparams(file);
        // A routing profile of another model fails before a quick calibration would run.
        std::shared_ptr<const models::RoutingTrace> routing_profile;
        if (!o->routing_profile.empty()) {
            routing_profile =
                std::make_shared<const models::RoutingTrace>(models::read_routing_trace(o->routing_profile));
            models::check_trace_fits(*routing_profile, hp, "--routing-profile");
        }
        place::PlacementFlags flags;
        // -ngl auto is llama.cpp's fit: here, the planner's search over every layer.
        const bool ngl_auto = o->n_gpu_layers == "auto";
        flags.n_gpu_layers = ngl_auto ? -1 : place::parse_n_gpu_layers(o->n_gpu_layers);
        flags.overrides = o->rules.rules(hp.n_layer);
        const bool ctx_given = cmd->count("--ctx-size") > 0;
        const bool ctx_max = ctx_given && o->n_ctx == "max";
        const bool wants_search = cmd->count("--vram-budget") > 0 || cmd->count("--ram-budget") > 0 ||
                                  cmd->count("--goal") > 0 || ctx_max || ngl_auto || !o->routing_profile.empty();
        if (o->plan != "manual" && o->plan != "auto") fail("--plan {}: expected manual or auto", o->plan);
        if (o->plan == "manual" && cmd->count("--plan") > 0 && wants_search)
            fail(
                "--plan manual: --vram-budget, --ram-budget, --goal, -c max, -ngl auto and --routing-profile need "
                "the search (--plan auto)");
        const bool search = o->plan == "auto" || wants_search;
        // Not given: chat's and serve's 8192 capped by the trained context; 0: the trained context
        // (llama.cpp's -c 0).
        std::optional<int64_t> n_ctx = std::min<int64_t>(kDefaultContext, hp.n_ctx_train);
        if (ctx_max || (!ctx_given && o->goal == "context")) {
            n_ctx.reset();
        } else if (ctx_given) {
            int64_t v = 0;
            const std::string& t = o->n_ctx;
            const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
            if (ec != std::errc() || end != t.data() + t.size() || v < 0)
                fail("-c {}: expected a number of tokens, 0 (the trained context) or max", t);
            n_ctx = v == 0 ? hp.n_ctx_train : v;
        }
        if (!search) {
            place::CacheOptions cache;
            cache.n_ctx = *n_ctx;
            cache.k_type = cache_type("-ctk", o->cache_type_k);
            cache.v_type = cache_type("-ctv", o->cache_type_v);
            const place::RunShape run{.n_ubatch = o->n_ubatch > 0 ? o->n_ubatch : 512,
                                      .stream_min_tokens = o->stream_min_tokens};
            Plan plan{o->model,
                      flags.n_gpu_layers,
                      flags.overrides,
                      place::place_from_flags(file, flags),
                      cache,
                      run,
                      {},
                      {},
                      {}};
            // The context from this machine's profile when there is one (else a stated placeholder).
            place::Allowance allowance;
            const std::string path = o->profile.empty() ? plan::default_profile_path() : o->profile;
            const std::optional<plan::HardwareProfile> prof = plan::load_profile(path);
            if (prof) allowance = plan::allowance_from_profile(*prof);
            plan.memory = place::predict_memory(plan.placement, hp, cache, allowance, run);
            // The speed of these flags, as `mox bench` predicts it for its rows (a bonus: the
            // memory is this command's job, so a profile without a needed rate only says so).
            if (!prof) {
                plan.speed_missing = fmt::format("no hardware profile at {}: run `mox calibrate`", path);
            } else {
                try {
                    plan.speed = plan::predict_speed(plan.placement, hp, cache,
                                                     {.run = run,
                                                      .stream_min_tokens = run.stream_min_tokens,
                                                      .prompt_tokens = o->prompt_tokens},
                                                     *prof);
                } catch (const Error& e) {
                    plan.speed_missing = e.what();
                }
            }
            if (o->json)
                fmt::print("{}\n", to_json(plan).dump(2));
            else
                print_text(plan);
            return;
        }

        // A profile named by --profile must exist; without one, this machine's cached profile, or a
        // quick calibration cached now (as `mox run/bench --plan auto` do).
        const std::string profile_path = o->profile.empty() ? plan::default_profile_path() : o->profile;
        std::optional<plan::HardwareProfile> profile;
        if (!o->profile.empty()) {
            profile = plan::load_profile(o->profile);
            if (!profile) fail("no hardware profile at {} (--profile)", o->profile);
        } else {
            std::string note;
            profile = plan::profile_or_calibrate(profile_path, plan::weight_types(file), &note);
            fmt::print(stderr, "plan: {}\n", note);
        }
        plan::PlanRequest req{
            .base = place::Placement::uniform(file, place::Tier::gpu), .hparams = hp, .profile = *profile};
        req.n_ctx = n_ctx;
        req.prompt_tokens = o->prompt_tokens;
        req.constraints = plan::constraints_from_flags(file, flags);
        if (!o->vram_budget.empty()) req.vram_budget = plan::parse_budget("--vram-budget", o->vram_budget);
        if (!o->ram_budget.empty()) req.ram_budget = plan::parse_budget("--ram-budget", o->ram_budget);
        if (!o->vram_margin.empty()) req.vram_margin = parse_size_flag("--vram-margin", o->vram_margin);
        const std::optional<plan::Goal> goal = plan::goal_from_name(o->goal);
        if (!goal) fail("--goal {}: expected decode, prefill or context", o->goal);
        req.goal = *goal;
        if (cmd->count("--cache-type-k") > 0 && o->cache_type_k != "auto")
            req.constraints.k_type = cache_type("-ctk", o->cache_type_k);
        if (cmd->count("--cache-type-v") > 0 && o->cache_type_v != "auto")
            req.constraints.v_type = cache_type("-ctv", o->cache_type_v);
        if (cmd->count("--ubatch-size") > 0) req.constraints.n_ubatch = o->n_ubatch;
        if (o->prompt_tokens < 0) fail("--prompt-tokens {}: at least 1", o->prompt_tokens);
        req.routing_profile = routing_profile;
        req.cache_policy = o->cache_policy;
        const plan::PlanResult result = plan::plan_auto(req);
        if (o->json) {
            nlohmann::json j = plan_result_json(o->model, profile_path, *profile, result);
            Plan chosen{o->model,     0, {}, result.placement, result.cache, result.run, result.memory,
                        result.speed, {}};
            j["placement"] = to_json(chosen);
            fmt::print("{}\n", j.dump(2));
        } else {
            print_plan_result(o->model, profile_path, *profile, result);
        }
    });
}

}  // namespace mox::cli

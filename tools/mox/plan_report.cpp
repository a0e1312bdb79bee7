#include "plan_report.h"

#include "core/units.h"
#include "place/flags.h"
#include "quant/types.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace mox::cli {

namespace {

std::string kv_text(quant::TypeId k, quant::TypeId v) {
    return fmt::format("{}/{}", quant::type_name(k), quant::type_name(v));
}

}  // namespace

const char* short_tier(place::Tier t) {
    switch (t) {
        case place::Tier::gpu:
            return "gpu";
        case place::Tier::pinned_host:
            return "pinned";
        case place::Tier::mmap_host:
            return "mmap";
    }
    return "?";
}

namespace {

std::string gb(double bytes) {
    return fmt::format("{:.3f} GB", bytes / 1e9);
}

std::string ms(double s) {
    return fmt::format("{:.2f} ms", s * 1e3);
}

nlohmann::json decode_json(const plan::DecodePrediction& d) {
    return {{"depth", d.depth},
            {"tokens_per_s", d.tokens_per_s},
            {"gpu_weight_bytes", d.gpu_weight_bytes},
            {"gpu_cache_bytes", d.gpu_cache_bytes},
            {"cpu_bytes", d.cpu_bytes},
            {"handoffs", d.handoffs},
            {"kernels", d.kernels},
            {"gpu_s", d.gpu_s},
            {"cpu_s", d.cpu_s},
            {"handoff_s", d.handoff_s},
            {"launch_s", d.launch_s},
            {"overlap_s", d.overlap_s},
            {"cache_hit_rate", d.cache_hit_rate},
            {"cache_copy_bytes", d.cache_copy_bytes},
            {"cache_copy_s", d.cache_copy_s},
            {"total_s", d.total_s}};
}

nlohmann::json prefill_json(const plan::PrefillPrediction& p) {
    return {{"prompt_tokens", p.prompt_tokens},
            {"n_ubatch", p.n_ubatch},
            {"micro_batches", p.micro_batches},
            {"tokens_per_s", p.tokens_per_s},
            {"streaming", p.streaming},
            {"stream_min_tokens", p.stream_min_tokens},
            {"copy_bytes", p.copy_bytes},
            {"cpu_bytes", p.cpu_bytes},
            {"handoffs", p.handoffs},
            {"gpu_compute_s", p.gpu_compute_s},
            {"copy_s", p.copy_s},
            {"copy_stall_s", p.copy_stall_s},
            {"cpu_s", p.cpu_s},
            {"handoff_s", p.handoff_s},
            {"launch_s", p.launch_s},
            {"total_s", p.total_s}};
}

}  // namespace

std::string layer_list(const std::vector<int64_t>& layers) {
    return layers.empty() ? "none" : place::format_layer_list(layers);
}

void print_plan_result(const std::string& model, const std::string& profile_path,
                       const plan::HardwareProfile& profile, const plan::PlanResult& r) {
    fmt::print("{}\n", model);
    fmt::print("  hardware profile: {} ({}{})\n", profile_path,
               profile.measured ? "measured" : "hand-written",
               profile.machine.empty() ? "" : ", " + profile.machine);
    if (profile.gpu)
        fmt::print("    GPU {} {}, host RAM {}\n", profile.gpu->name, format_bytes(profile.gpu->total_bytes),
                   format_bytes(profile.host_ram_bytes));
    else
        fmt::print("    no GPU, host RAM {}\n", format_bytes(profile.host_ram_bytes));
    fmt::print("  goal: {}    VRAM budget {} (margin {})    RAM budget {} (margin {})\n",
               plan::goal_name(r.goal), format_bytes(r.vram_budget), format_bytes(r.vram_margin),
               format_bytes(r.ram_budget), format_bytes(r.ram_margin));

    // The configurations of the chosen host tier (and those without host layers), by KV type and
    // micro-batch: for each, the fewest host layers that fit and, before it, the count that did not.
    const int64_t half = r.cache.n_ctx / 2;
    // With a routing profile: the expert cache's pool and its predicted hit rate per row.
    const bool pools = !r.expert_cache.policy.empty();
    const std::string pool_head = pools ? fmt::format(" {:>10} {:>5}", "pool", "hit") : std::string();
    fmt::print("\n  {:<10} {:>7} {:>5} {:>4} {:<6}{} {:>11} {:>11} {:>8} {:>9} {:>9}\n", "KV k/v", "ctx", "ub",
               "cpu", "host", pool_head, "VRAM", "host RAM", "tg t/s", fmt::format("tg@{}", half),
               fmt::format("pp{}", r.speed.prefill.prompt_tokens));
    std::vector<const plan::PlanCandidate*> rows;
    for (const plan::PlanCandidate& c : r.table)
        if (c.host_tier == r.host_tier || c.host_layers.empty()) rows.push_back(&c);
    // KV pairs in the search's order (most precise first), then by micro-batch.
    auto kv_rank = [&](const plan::PlanCandidate* c) {
        for (size_t i = 0; i < r.table.size(); ++i)
            if (r.table[i].k_type == c->k_type && r.table[i].v_type == c->v_type) return i;
        return r.table.size();
    };
    std::stable_sort(rows.begin(), rows.end(),
                     [&](const plan::PlanCandidate* a, const plan::PlanCandidate* b) {
                         if (kv_rank(a) != kv_rank(b)) return kv_rank(a) < kv_rank(b);
                         return a->n_ubatch < b->n_ubatch;
                     });
    for (const plan::PlanCandidate* c : rows) {
        std::string pool;
        if (pools)
            pool = c->cache_slots > 0 ? fmt::format(" {:>10} {:>4.0f}%", format_bytes(c->cache_bytes),
                                                    100 * c->cache_hit_rate)
                                      : fmt::format(" {:>10} {:>5}", "-", "-");
        const std::string head = fmt::format(
            "  {:<10} {:>7} {:>5} {:>4} {:<6}{} {:>11} {:>11}", kv_text(c->k_type, c->v_type), c->n_ctx,
            c->n_ubatch, c->host_layers.size(), c->host_layers.empty() ? "-" : short_tier(c->host_tier), pool,
            format_bytes(c->vram_bytes), format_bytes(c->host_bytes));
        if (c->fits)
            fmt::print("{} {:>8.1f} {:>9.1f} {:>9.0f}{}\n", head, c->decode_tps, c->decode_half_tps,
                       c->prefill_tps, c->chosen ? "  <- chosen" : "");
        else
            fmt::print("{}   does not fit: {}\n", head, c->why_not);
    }
    fmt::print(
        "  (cpu = layers whose routed experts live on the host{}; all {} rows evaluated are in --json)\n",
        pools ? fmt::format("; pool = the expert cache on the GPU ({}), hit = its hit rate predicted from the "
                            "routing profile",
                            r.expert_cache.policy)
              : std::string(),
        r.table.size());

    const place::MemoryPrediction& m = r.memory;
    const plan::SpeedPrediction& s = r.speed;
    const int64_t n_trunk = static_cast<int64_t>(r.placement.n_layer());
    fmt::print("\n  plan:\n");
    fmt::print("    context {} tokens x {} seq, KV cache K {} / V {}, n_ubatch {}\n", r.cache.n_ctx,
               r.cache.n_seq, quant::type_name(r.cache.k_type), quant::type_name(r.cache.v_type),
               r.run.n_ubatch);
    if (r.host_layers.empty()) {
        fmt::print("    every routed expert on the GPU\n");
    } else {
        fmt::print("    routed experts of {} of {} layers on {}: {}\n", r.host_layers.size(), n_trunk,
                   place::tier_name(r.host_tier), layer_list(r.host_layers));
        if (r.run.stream_experts)
            fmt::print(
                "    prefill streams them to the GPU in micro-batches of >= {} tokens (fewer: the CPU "
                "computes them)\n",
                r.stream_min_tokens);
    }
    const plan::ExpertCachePlan& cache = r.expert_cache;
    if (cache.slots > 0)
        fmt::print(
            "    expert cache: {} on the GPU, {} slots of {} ({}) for the host layers' hot experts: {:.1f}% hits "
            "predicted, {:.1f} admissions per token\n",
            format_bytes(cache.device_bytes), cache.slots, format_bytes(cache.slot_bytes), cache.policy,
            100 * cache.hit_rate, cache.admissions_per_token);
    else if (pools)
        fmt::print("    expert cache: none ({})\n", cache.why_none);
    fmt::print(
        "    GPU memory {} of the {} budget (margin {}): weights {}, KV {}, DeltaNet state {}, CUDA context "
        "{} + buffers {}\n",
        format_bytes(m.gpu_total()), format_bytes(r.vram_budget), format_bytes(r.vram_margin),
        format_bytes(m.weights[place::Tier::gpu]), format_bytes(m.kv_gpu), format_bytes(m.state_gpu),
        format_bytes(m.allowance.cuda_context_bytes), format_bytes(m.buffers.device_total()));
    fmt::print("    host memory: locked {}, page cache {}, RAM {}\n", format_bytes(m.host_locked()),
               format_bytes(m.host_page_cache()), format_bytes(m.host_ram()));
    const plan::DecodePrediction& d = s.decode;
    fmt::print("    decode {:.1f} t/s at depth 0, {:.1f} t/s at depth {}\n", d.tokens_per_s,
               s.decode_half.tokens_per_s, s.decode_half.depth);
    fmt::print(
        "      per token: GPU reads {} of weights + {} of cache, CPU reads {}; {} hand-offs, {} kernels\n",
        gb(d.gpu_weight_bytes), gb(d.gpu_cache_bytes), gb(d.cpu_bytes), d.handoffs, d.kernels);
    fmt::print("      time: GPU {} + CPU {} + hand-offs {} + launches {} - overlap {} = {}\n", ms(d.gpu_s),
               ms(d.cpu_s), ms(d.handoff_s), ms(d.launch_s), ms(d.overlap_s), ms(d.total_s));
    if (cache.slots > 0)
        fmt::print("      the cache copies {} per token (CPU {} of its time: the copies share its DRAM)\n",
                   gb(d.cache_copy_bytes), ms(d.cache_copy_s));
    const plan::PrefillPrediction& p = s.prefill;
    fmt::print("    prefill {:.0f} t/s for a {}-token prompt ({} micro-batches of {})\n", p.tokens_per_s,
               p.prompt_tokens, p.micro_batches, p.n_ubatch);
    fmt::print(
        "      time: GPU {} + copy stall {} + CPU {} + hand-offs {} + launches {} = {} (copies {} in {})\n",
        ms(p.gpu_compute_s), ms(p.copy_stall_s), ms(p.cpu_s), ms(p.handoff_s), ms(p.launch_s), ms(p.total_s),
        gb(p.copy_bytes), ms(p.copy_s));
    auto lower = [](std::string_view t) {
        std::string s(t);
        for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return s;
    };
    std::string flags =
        fmt::format("-c {} -ctk {} -ctv {} -ub {}", r.cache.n_ctx, lower(quant::type_name(r.cache.k_type)),
                    lower(quant::type_name(r.cache.v_type)), r.run.n_ubatch);
    if (!r.host_layers.empty())
        flags = fmt::format("--moe-cpu-layers {} {}", layer_list(r.host_layers), flags);
    if (cache.slots > 0) flags += fmt::format(" --expert-cache {}B --cache-policy {}", cache.pool_bytes, cache.policy);
    fmt::print("    as manual flags: {}\n", flags);
    if (!r.speed.cpu_only) {
        const NCpuMoe n = nearest_n_cpu_moe(r.host_layers);
        const std::string kv = fmt::format("-c {} -ctk {} -ctv {} -ub {}", r.cache.n_ctx,
                                           lower(quant::type_name(r.cache.k_type)),
                                           lower(quant::type_name(r.cache.v_type)), r.run.n_ubatch);
        fmt::print(
            "    nearest llama.cpp flags: -ngl 99 --n-cpu-moe {} {}  ({})\n", n.n, kv,
            n.exact ? "the same placement"
                    : fmt::format("as many layers' experts on the host, but the first {}; the plan keeps {}",
                                  n.n, layer_list(r.host_layers)));
    }
    if (!r.notes.empty()) {
        fmt::print("  notes:\n");
        for (const std::string& n : r.notes) fmt::print("    - {}\n", n);
    }
    if (!profile.measured)
        fmt::print("  NOTE: the profile is hand-written, not measured: the speeds are what-if numbers\n");
}

NCpuMoe nearest_n_cpu_moe(const std::vector<int64_t>& host_layers) {
    NCpuMoe out{.n = static_cast<int64_t>(host_layers.size()), .exact = true};
    for (size_t i = 0; i < host_layers.size(); ++i)
        if (host_layers[i] != static_cast<int64_t>(i)) out.exact = false;
    return out;
}

nlohmann::json plan_result_json(const std::string& model, const std::string& profile_path,
                                const plan::HardwareProfile& profile, const plan::PlanResult& r) {
    nlohmann::json j;
    j["model"] = model;
    j["profile"] = {{"path", profile_path},
                    {"machine", profile.machine},
                    {"measured", profile.measured},
                    {"created", profile.created}};
    j["goal"] = plan::goal_name(r.goal);
    j["budgets"] = {{"vram_bytes", r.vram_budget},
                    {"vram_margin_bytes", r.vram_margin},
                    {"ram_bytes", r.ram_budget},
                    {"ram_margin_bytes", r.ram_margin}};
    const place::MemoryPrediction& m = r.memory;
    nlohmann::json plan{{"n_ctx", r.cache.n_ctx},
                        {"n_seq", r.cache.n_seq},
                        {"k_type", std::string(quant::type_name(r.cache.k_type))},
                        {"v_type", std::string(quant::type_name(r.cache.v_type))},
                        {"n_ubatch", r.run.n_ubatch},
                        {"stream_experts", r.run.stream_experts},
                        {"stream_min_tokens", r.stream_min_tokens},
                        {"host_tier", place::tier_name(r.host_tier)},
                        {"host_layers", r.host_layers},
                        {"moe_cpu_layers", layer_list(r.host_layers)}};
    plan["memory"] = {{"gpu_total_bytes", m.gpu_total()},
                      {"gpu_weights_bytes", m.weights[place::Tier::gpu]},
                      {"kv_gpu_bytes", m.kv_gpu},
                      {"state_gpu_bytes", m.state_gpu},
                      {"cuda_context_bytes", m.allowance.cuda_context_bytes},
                      {"gpu_buffers_bytes", m.buffers.device_total()},
                      {"gpu_staging_bytes", m.buffers.staging},
                      {"allowance_measured", m.allowance.measured},
                      {"allowance_source", m.allowance.source},
                      {"host_locked_bytes", m.host_locked()},
                      {"host_page_cache_bytes", m.host_page_cache()},
                      {"host_ram_bytes", m.host_ram()}};
    plan["decode"] = decode_json(r.speed.decode);
    plan["decode_half"] = decode_json(r.speed.decode_half);
    plan["prefill"] = prefill_json(r.speed.prefill);
    plan["cpu_only"] = r.speed.cpu_only;
    const plan::ExpertCachePlan& pool = r.expert_cache;
    plan["expert_cache"] = {{"slots", pool.slots},
                            {"slot_bytes", pool.slot_bytes},
                            {"pool_bytes", pool.pool_bytes},
                            {"device_bytes", pool.device_bytes},
                            {"policy", pool.policy.empty() ? nlohmann::json(nullptr) : nlohmann::json(pool.policy)},
                            {"hit_rate", pool.hit_rate},
                            {"admissions_per_token", pool.admissions_per_token},
                            {"why_none", pool.why_none}};
    const NCpuMoe n = nearest_n_cpu_moe(r.host_layers);
    plan["n_cpu_moe"] = n.n;  // llama.cpp's nearest --n-cpu-moe
    plan["n_cpu_moe_exact"] = n.exact;
    j["plan"] = std::move(plan);
    j["table"] = nlohmann::json::array();
    for (const plan::PlanCandidate& c : r.table)
        j["table"].push_back({{"k_type", std::string(quant::type_name(c.k_type))},
                              {"v_type", std::string(quant::type_name(c.v_type))},
                              {"n_ctx", c.n_ctx},
                              {"n_ubatch", c.n_ubatch},
                              {"stream_experts", c.stream_experts},
                              {"host_tier", place::tier_name(c.host_tier)},
                              {"host_layers", c.host_layers},
                              {"vram_bytes", c.vram_bytes},
                              {"host_bytes", c.host_bytes},
                              {"page_cache_bytes", c.page_cache_bytes},
                              {"fits", c.fits},
                              {"why_not", c.why_not},
                              {"decode_tps", c.decode_tps},
                              {"decode_half_tps", c.decode_half_tps},
                              {"prefill_tps", c.prefill_tps},
                              {"stream_min_tokens", c.stream_min_tokens},
                              {"cache_slots", c.cache_slots},
                              {"cache_bytes", c.cache_bytes},
                              {"cache_hit_rate", c.cache_hit_rate},
                              {"chosen", c.chosen}});
    j["notes"] = r.notes;
    return j;
}

}  // namespace mox::cli

#include "plan/search.h"

#include "core/error.h"
#include "core/units.h"
#include "models/gpu_memory.h"
#include "plan/cache_hits.h"
#include "quant/types.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <regex>
#include <set>
#include <utility>

namespace mox::plan {

const char* goal_name(Goal g) {
    switch (g) {
        case Goal::decode:
            return "decode";
        case Goal::prefill:
            return "prefill";
        case Goal::context:
            return "context";
    }
    return "?";
}

std::optional<Goal> goal_from_name(std::string_view s) {
    for (Goal g : {Goal::decode, Goal::prefill, Goal::context})
        if (s == goal_name(g)) return g;
    return std::nullopt;
}

uint64_t parse_budget(std::string_view flag, std::string_view text) {
    uint64_t bytes = 0;
    try {
        bytes = parse_size(text);
    } catch (const Error& e) {
        fail("{} {}: {}", flag, text, e.what());
    }
    if (bytes == 0) fail("{} {}: a budget must be more than 0 bytes", flag, text);
    return bytes;
}

uint64_t default_margin(uint64_t budget) {
    return std::max<uint64_t>(budget / 50, 256ull << 20);
}

uint64_t default_ram_margin(uint64_t budget) {
    return std::max<uint64_t>(budget / 10, 2ull << 30);
}

place::Allowance allowance_from_profile(const HardwareProfile& p) {
    place::Allowance a;
    if (p.gpu && p.gpu->context_bytes > 0) {
        a.cuda_context_bytes = p.gpu->context_bytes;
        a.measured = p.measured;
        a.source = p.measured ? fmt::format("mox calibrate on {} ({})", p.machine, p.created)
                              : "CUDA context from a hand-written hardware profile";
    }
    return a;
}

PlanConstraints constraints_from_flags(const gguf::File& file, const place::PlacementFlags& flags) {
    // Every tensor on the GPU unless a rule says otherwise (p_all), and nothing on the GPU unless a
    // rule says so (p_none): a tier that differs from the default in either came from a rule.
    const place::Placement p_all =
        place::place_from_flags(file, {.n_gpu_layers = -1, .overrides = flags.overrides});
    const place::Placement p_none =
        place::place_from_flags(file, {.n_gpu_layers = 0, .overrides = flags.overrides});
    if (flags.n_gpu_layers != 0 && flags.n_gpu_layers != -1 && flags.n_gpu_layers <= p_all.n_layer())
        fail(
            "-ngl {}: a searched plan keeps every non-expert weight on the GPU; leave -ngl out (or all) and "
            "constrain the experts with --n-cpu-moe, --moe-cpu-layers or -ot",
            flags.n_gpu_layers);
    const std::string arch = file.get_string_or("general.architecture", "");
    const auto n_nextn = static_cast<int64_t>(file.get_uint_or(arch + ".nextn_predict_layers", 0));
    const int64_t n_trunk = p_all.n_layer() - n_nextn;
    PlanConstraints c;
    auto origin_of = [&](const std::string& name) {
        for (const place::OverrideRule& r : flags.overrides)
            if (std::regex_search(name, std::regex(r.pattern, std::regex::ECMAScript))) return r.origin;
        return std::string("?");
    };
    for (const place::TensorEntry& e : p_all.tensors()) {
        if (e.part != place::ExpertPart::none || e.layer >= n_trunk) continue;
        if (e.cls == models::TensorClass::embedding) {
            // place_from_flags keeps it mapped unless a rule says otherwise (llama.cpp's input layer).
            if (p_none.tensor(e.name).tier == place::Tier::gpu)
                c.token_embd = place::Tier::gpu;
            else if (e.tier != place::Tier::mmap_host)
                c.token_embd = e.tier;
            continue;
        }
        if (e.tier != place::Tier::gpu)
            fail(
                "{} moves {} to {}: a searched plan keeps every non-expert weight of the trunk and the "
                "output "
                "head on the GPU (only routed experts and token_embd may live on the host)",
                origin_of(e.name), e.name, place::tier_name(e.tier));
    }
    for (int64_t l = 0; l < n_trunk; ++l) {
        if (!p_all.has_experts(l)) continue;
        const place::Tier host = p_all.expert_tier(l, 0);
        if (host != place::Tier::gpu)
            c.layer_experts[l] = host;
        else if (p_none.expert_tier(l, 0) == place::Tier::gpu)
            c.layer_experts[l] = place::Tier::gpu;
    }
    return c;
}

namespace {

// How much a KV type keeps of the values it stores (higher is more precise).
int kv_quality(quant::TypeId t) {
    switch (t) {
        case quant::TypeId::f32:
            return 4;
        case quant::TypeId::f16:
        case quant::TypeId::bf16:
            return 3;
        case quant::TypeId::q8_0:
            return 2;
        case quant::TypeId::q4_0:
            return 1;
        default:
            return 0;
    }
}

struct KvOption {
    quant::TypeId k, v;
    std::pair<int, int> quality() const {
        return {std::min(kv_quality(k), kv_quality(v)), kv_quality(k) + kv_quality(v)};
    }
};

// Layer positions in van der Corput order (0, n/2, n/4, 3n/4, ...): any prefix of it is spread
// evenly over the depth of the model. rank[l] = where layer l comes in that order.
std::vector<int64_t> spread_rank(int64_t n) {
    int bits = 0;
    while ((int64_t{1} << bits) < n) ++bits;
    std::vector<int64_t> rank(static_cast<size_t>(n));
    int64_t next = 0;
    for (int64_t i = 0; i < (int64_t{1} << bits); ++i) {
        int64_t r = 0;
        for (int b = 0; b < bits; ++b)
            if (i & (int64_t{1} << b)) r |= int64_t{1} << (bits - 1 - b);
        if (r < n) rank[static_cast<size_t>(r)] = next++;
    }
    return rank;
}

// The searcher's state: the request with its defaults resolved.
struct Search {
    const PlanRequest& req;
    const models::Hparams& hp;
    bool has_gpu = false;
    uint64_t vram_budget = 0, vram_margin = 0, ram_budget = 0, ram_margin = 0;
    place::Allowance allowance;
    place::Placement work;             // everything in its fixed place; free expert layers on the GPU
    std::vector<int64_t> forced_host;  // layers whose experts the constraints put on the host
    std::vector<int64_t> order;        // free layers, the first to move to the host first
    std::vector<KvOption> kv_options;
    std::vector<int64_t> ubatches;
    std::vector<place::Tier> host_tiers;
    bool stream = true;
    std::vector<std::string> notes;

    explicit Search(const PlanRequest& r) : req(r), hp(r.hparams) {}

    void resolve_budgets();
    void build_work();
    void order_layers();
    void resolve_options();

    place::Placement with_host(place::Tier tier, size_t m) const {
        place::Placement p = work;
        for (size_t i = 0; i < m; ++i) p.set_layer_experts(order[i], tier);
        return p;
    }
    std::vector<int64_t> host_layers(size_t m) const {
        std::vector<int64_t> h = forced_host;
        h.insert(h.end(), order.begin(), order.begin() + static_cast<std::ptrdiff_t>(m));
        std::sort(h.begin(), h.end());
        return h;
    }
    place::CacheOptions cache(const KvOption& kv, int64_t n_ctx) const {
        return {.n_ctx = n_ctx, .k_type = kv.k, .v_type = kv.v, .n_seq = req.n_seq};
    }
    place::MemoryPrediction memory(const place::Placement& p, const place::CacheOptions& c, int64_t ub,
                                   int64_t cache_slots = 0) const {
        return place::predict_memory(
            p, hp, c, allowance,
            place::RunShape{.n_ubatch = ub, .stream_experts = stream, .expert_cache_slots = cache_slots});
    }
    // Empty when the prediction fits both budgets with their margins; else why not.
    std::string misfit(const place::MemoryPrediction& m) const {
        if (has_gpu && m.gpu_total() + vram_margin > vram_budget)
            return fmt::format("VRAM {} + margin {} > budget {} (over by {})", format_bytes(m.gpu_total()),
                               format_bytes(vram_margin), format_bytes(vram_budget),
                               format_bytes(m.gpu_total() + vram_margin - vram_budget));
        const uint64_t host = m.host_locked() + m.host_ram();
        if (ram_budget > 0 && host + ram_margin > ram_budget)
            return fmt::format("locked + anonymous RAM {} + margin {} > budget {} (over by {})",
                               format_bytes(host), format_bytes(ram_margin), format_bytes(ram_budget),
                               format_bytes(host + ram_margin - ram_budget));
        // Pinned weights against the lockable limit. The runtime's own small pinned buffers (hand-off,
        // logits) exist whatever the tier, so they must not decide it: with a typical 8 MiB
        // RLIMIT_MEMLOCK they alone would exceed it and no plan would fit.
        const uint64_t pinned = m.weights[place::Tier::pinned_host];
        if (pinned > 0 && pinned > req.profile.host_lockable_bytes)
            return fmt::format("pinned {} > lockable {}", format_bytes(pinned),
                               format_bytes(req.profile.host_lockable_bytes));
        return {};
    }
    int64_t max_context() const;
};

void Search::resolve_budgets() {
    const HardwareProfile& prof = req.profile;
    has_gpu = prof.gpu.has_value();
    if (has_gpu) {
        const uint64_t total = prof.gpu->total_bytes;
        if (total == 0) fail("the hardware profile's GPU has no memory size (gpu.total_bytes)");
        vram_budget = req.vram_budget.value_or(total);
        if (vram_budget > total) {
            notes.push_back(fmt::format("VRAM budget {} clipped to the GPU's {}", format_bytes(vram_budget),
                                        format_bytes(total)));
            vram_budget = total;
        }
        vram_margin = req.vram_margin.value_or(default_margin(vram_budget));
    } else if (req.vram_budget) {
        notes.push_back("the hardware profile has no GPU: the VRAM budget is ignored (CPU forward)");
    }
    ram_budget = req.ram_budget.value_or(prof.host_ram_bytes);
    if (prof.host_ram_bytes > 0 && ram_budget > prof.host_ram_bytes) {
        notes.push_back(fmt::format("RAM budget {} clipped to the machine's {}", format_bytes(ram_budget),
                                    format_bytes(prof.host_ram_bytes)));
        ram_budget = prof.host_ram_bytes;
    }
    if (ram_budget == 0) notes.push_back("host RAM unknown (profile host_ram_bytes = 0): RAM is not checked");
    ram_margin = ram_budget > 0 ? req.ram_margin.value_or(default_ram_margin(ram_budget)) : 0;
    allowance = allowance_from_profile(prof);
}

// Fixed tiers: non-expert trunk weights and the head on the GPU, token_embd on the host, MTP blocks
// mapped, forced expert layers where the constraints say. Without a GPU: everything mapped.
void Search::build_work() {
    work = req.base;
    if (work.n_layer() != hp.n_layer)
        fail("placement has {} layers but the hyper-parameters {}", work.n_layer(), hp.n_layer);
    const PlanConstraints& c = req.constraints;
    bool has_output = false;
    for (const place::TensorEntry& e : work.tensors()) has_output |= e.cls == models::TensorClass::output;
    for (const place::TensorEntry& e : work.tensors()) {
        if (e.part != place::ExpertPart::none) continue;
        place::Tier t = place::Tier::gpu;
        if (!has_gpu || e.layer >= hp.n_trunk() || e.cls == models::TensorClass::mtp)
            t = place::Tier::mmap_host;
        else if (e.cls == models::TensorClass::embedding)
            t = c.token_embd.value_or(has_output ? place::Tier::mmap_host : place::Tier::gpu);
        work.set_tier(e.name, t);
    }
    for (const auto& [layer, tier] : c.layer_experts)
        if (layer < 0 || layer >= hp.n_trunk() || !work.has_experts(layer))
            fail("expert constraint on layer {}: the model's trunk layers with experts are 0..{}", layer,
                 hp.n_trunk() - 1);
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        if (!work.has_experts(l)) continue;
        place::Tier t = has_gpu ? place::Tier::gpu : place::Tier::mmap_host;
        if (l >= hp.n_trunk())
            t = place::Tier::mmap_host;
        else if (auto it = c.layer_experts.find(l); it != c.layer_experts.end() && has_gpu)
            t = it->second;
        work.set_layer_experts(l, t);
        if (l < hp.n_trunk() && t != place::Tier::gpu && has_gpu) forced_host.push_back(l);
    }
}

// Which layers' experts leave the GPU first. Moving layer L costs hand-off + CPU experts - GPU
// experts per token (host_layer_decode_cost) and frees its stacks' bytes; the cheapest cost per
// byte freed goes first. The hand-off is a fixed cost per layer, so in files whose layers differ
// in expert bytes (Unsloth's UD quants keep some layers' experts at higher precision) the fattest
// layers go first: fewer layers (fewer hand-offs) free the same VRAM. Among equal layers (the
// usual case: one recipe for all), decode does not care which; prefill does a little: spreading
// the host layers over the depth lets each streamed copy overlap the GPU layers before it, so ties
// follow a van der Corput order instead of llama.cpp's --n-cpu-moe "first N layers".
// (Greedy by ratio is not an exact knapsack, but with one hand-off per layer and near-equal layers
// it picks the fewest layers that free the bytes needed.)
void Search::order_layers() {
    if (!has_gpu) return;
    struct Key {
        double ratio;
        int64_t spread;
        int64_t layer;
    };
    const std::vector<int64_t> rank = spread_rank(hp.n_trunk());
    std::vector<Key> keys;
    for (int64_t l = 0; l < hp.n_trunk(); ++l) {
        if (!work.has_experts(l) || req.constraints.layer_experts.contains(l)) continue;
        const double freed = static_cast<double>(work.expert_bytes(l)) * static_cast<double>(work.n_expert());
        const double cost = host_layer_decode_cost(work, hp, l, req.profile);
        keys.push_back({freed > 0 ? cost / freed : cost, rank[static_cast<size_t>(l)], l});
    }
    std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
        return a.ratio != b.ratio ? a.ratio < b.ratio : a.spread < b.spread;
    });
    for (const Key& k : keys) order.push_back(k.layer);
}

void Search::resolve_options() {
    const PlanConstraints& c = req.constraints;
    const std::vector<quant::TypeId> kv_types{quant::TypeId::f16, quant::TypeId::q8_0, quant::TypeId::q4_0};
    // Both fixed: that pair. One fixed: the other searched. None: the same type for K and V.
    for (quant::TypeId k : c.k_type ? std::vector{*c.k_type} : kv_types)
        for (quant::TypeId v : c.v_type ? std::vector{*c.v_type} : kv_types) {
            if (!c.k_type && !c.v_type && k != v) continue;
            try {
                place::validate_cache_options(hp, {.n_ctx = 1, .k_type = k, .v_type = v, .n_seq = req.n_seq});
            } catch (const Error& e) {
                if (c.k_type && c.v_type) throw;
                notes.push_back(
                    fmt::format("KV {}/{} skipped: {}", quant::type_name(k), quant::type_name(v), e.what()));
                continue;
            }
            kv_options.push_back({k, v});
        }
    if (kv_options.empty()) fail("no KV cache type is usable with this model");
    if (c.n_ubatch) {
        if (*c.n_ubatch < 1) fail("-ub {}: at least 1", *c.n_ubatch);
        ubatches = {*c.n_ubatch};
    } else if (has_gpu) {
        ubatches.assign(kUbatchCandidates.begin(), kUbatchCandidates.end());
    } else {
        ubatches = {kUbatchCandidates[0]};  // the CPU forward's buffers do not count against VRAM
    }
    stream = has_gpu && c.stream_experts.value_or(true);
    if (c.host_tier) {
        if (*c.host_tier == place::Tier::gpu) fail("the host tier must be pinned_host or mmap_host");
        host_tiers = {*c.host_tier};
    } else if (!has_gpu) {
        host_tiers = {place::Tier::mmap_host};
    } else {
        host_tiers = {place::Tier::pinned_host, place::Tier::mmap_host};
    }
}

// The largest context (a multiple of kCtxStep, or the trained context) that any configuration the
// constraints allow can hold: the leanest one has every free layer's experts on the host and the
// smallest micro-batch; each KV option is tried (q4_0 reaches furthest).
int64_t Search::max_context() const {
    const place::Placement lean = with_host(host_tiers.back(), order.size());
    const int64_t ub = *std::min_element(ubatches.begin(), ubatches.end());
    int64_t best = 0;
    for (const KvOption& kv : kv_options) {
        auto fits = [&](int64_t n_ctx) { return misfit(memory(lean, cache(kv, n_ctx), ub)).empty(); };
        if (fits(hp.n_ctx_train)) return hp.n_ctx_train;
        // Invariant: lo == 0 or fits(lo * step); hi * step does not fit or lies beyond the trained
        // context (which does not fit).
        int64_t lo = 0, hi = hp.n_ctx_train / kCtxStep + 1;
        while (hi - lo > 1) {
            const int64_t mid = lo + (hi - lo) / 2;
            (fits(mid * kCtxStep) ? lo : hi) = mid;
        }
        best = std::max(best, lo * kCtxStep);
    }
    return best;
}

// Goal value of a fitting candidate, and the tie-breaker.
double objective(Goal g, const PlanCandidate& c) {
    return g == Goal::prefill ? c.prefill_tps : c.decode_tps;
}
double secondary(Goal g, const PlanCandidate& c) {
    return g == Goal::prefill ? c.decode_tps : c.prefill_tps;
}

// The chosen row among the fitting ones. Context is equal for all (fixed or the maximum). KV
// precision first for Goal::context; otherwise the most precise KV class whose best comes within
// kKvTolerance of the overall best. Inside the class: the goal, then the other speed, then less
// VRAM, then the enumeration order (deterministic).
size_t choose(Goal g, const std::vector<PlanCandidate>& rows) {
    std::vector<size_t> fit;
    for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i].fits) fit.push_back(i);
    MOX_CHECK(!fit.empty(), "choose() needs a fitting candidate");
    auto quality = [&](size_t i) { return KvOption{rows[i].k_type, rows[i].v_type}.quality(); };
    double best = 0;
    for (size_t i : fit) best = std::max(best, objective(g, rows[i]));
    std::pair<int, int> cls{-1, -1};
    for (size_t i : fit)
        if (g == Goal::context || objective(g, rows[i]) >= (1.0 - kKvTolerance) * best)
            cls = std::max(cls, quality(i));
    size_t pick = rows.size();
    for (size_t i : fit) {
        if (quality(i) != cls) continue;
        if (pick == rows.size()) {
            pick = i;
            continue;
        }
        const PlanCandidate& a = rows[i];
        const PlanCandidate& b = rows[pick];
        if (objective(g, a) != objective(g, b)) {
            if (objective(g, a) > objective(g, b)) pick = i;
        } else if (secondary(g, a) != secondary(g, b)) {
            if (secondary(g, a) > secondary(g, b)) pick = i;
        } else if (a.vram_bytes < b.vram_bytes) {
            pick = i;
        }
    }
    return pick;
}

// The decode goal with a routing profile: an expert cache instead of some whole layers. From the
// chosen plan's host layers up to every free layer on the host (same KV types, micro-batch and host
// tier), each count's placement leaves part of the budget free; the pool takes it in whole slots, the
// profile predicts its hit rate, the speed model prices the decode. Returns the fastest row, or
// nullopt when no count leaves room for a slot. The counts are priced on a coarse grid first, then
// every count between the best one's neighbours (a pool's simulation costs ~0.1-1 s).
class CacheSearch {
public:
    CacheSearch(const Search& s, const PlanCandidate& base, CacheHitPredictor& hits)
        : s_(s), base_(base), hits_(hits), first_(base.host_layers.size() - s.forced_host.size()) {}

    std::optional<PlanCandidate> best() {
        const size_t last = s_.order.size();
        if (first_ > last) return std::nullopt;
        const size_t span = last - first_;
        const size_t coarse = static_cast<size_t>(kCacheCoarseCandidates);
        const size_t step = span < coarse ? 1 : (span + coarse - 2) / (coarse - 1);
        for (size_t m = first_; m < last; m += step) price(m);
        price(last);
        const std::optional<size_t> at = fastest();
        if (!at) return std::nullopt;
        for (size_t m = *at > first_ + step ? *at - step + 1 : first_; m < std::min(last, *at + step); ++m) price(m);
        return rows_.at(*fastest());
    }
    std::vector<PlanCandidate> rows() const {
        std::vector<PlanCandidate> out;
        for (const auto& [m, row] : rows_) out.push_back(row);
        return out;
    }

private:
    // The row of `m` free layers on the host with the pool the rest of the budget buys, if one slot fits.
    void price(size_t m) {
        if (rows_.contains(m) || none_.contains(m)) return;
        none_.insert(m);
        const place::Placement p = s_.with_host(base_.host_tier, m);
        const std::vector<int64_t> host = s_.host_layers(m);
        const place::CacheOptions cache = s_.cache({base_.k_type, base_.v_type}, base_.n_ctx);
        const place::MemoryPrediction without = s_.memory(p, cache, base_.n_ubatch);
        if (host.empty() || !s_.misfit(without).empty()) return;
        // The slots that fit beside the placement: the budget left, less the pool's fixed part (its
        // tables and lookup: the cache's bytes at 0 slots beyond one slot), in whole slots.
        const uint64_t slot = place::expert_slot_layout(p, s_.hp).bytes;
        const uint64_t fixed = s_.memory(p, cache, base_.n_ubatch, 1).gpu_total() - without.gpu_total() - 2 * slot;
        const uint64_t used = without.gpu_total() + s_.vram_margin + fixed;
        if (slot == 0 || used >= s_.vram_budget) return;
        const auto all_keys = static_cast<int64_t>(host.size()) * s_.work.n_expert();
        const int64_t slots = std::min(models::expert_cache_slots(s_.vram_budget - used, slot), all_keys);
        if (slots < 1) return;
        const place::MemoryPrediction mem = s_.memory(p, cache, base_.n_ubatch, slots);
        if (!s_.misfit(mem).empty()) return;
        const ExpertCacheLoad load = hits_.predict(host, slots);
        const SpeedPrediction sp = predict_speed(
            p, s_.hp, cache,
            {.run = {.n_ubatch = base_.n_ubatch, .stream_experts = s_.stream, .expert_cache_slots = slots},
             .stream_min_tokens = 0,
             .prompt_tokens = s_.req.prompt_tokens,
             .expert_cache = load},
            s_.req.profile);
        PlanCandidate row = base_;
        row.chosen = false;
        row.host_layers = host;
        row.vram_bytes = mem.gpu_total();
        row.host_bytes = mem.host_locked() + mem.host_ram();
        row.page_cache_bytes = mem.host_page_cache();
        row.decode_tps = sp.decode.tokens_per_s;
        row.decode_half_tps = sp.decode_half.tokens_per_s;
        row.prefill_tps = sp.prefill.tokens_per_s;
        row.stream_min_tokens = sp.prefill.stream_min_tokens;
        row.cache_slots = slots;
        row.cache_bytes = mem.buffers.expert_cache;
        row.cache_hit_rate = load.hit_rate;
        none_.erase(m);
        rows_.emplace(m, std::move(row));
    }
    std::optional<size_t> fastest() const {
        std::optional<size_t> at;
        for (const auto& [m, row] : rows_)
            if (!at || row.decode_tps > rows_.at(*at).decode_tps) at = m;
        return at;
    }

    const Search& s_;
    const PlanCandidate& base_;
    CacheHitPredictor& hits_;
    size_t first_;                             // free layers on the host in the base plan
    std::map<size_t, PlanCandidate> rows_;     // by free layers on the host
    std::set<size_t> none_;                    // counts priced without room for a pool
};

}  // namespace

PlanResult plan_auto(const PlanRequest& req) {
    const models::Hparams& hp = req.hparams;
    if (req.n_seq < 1) fail("{} sequences: at least 1", req.n_seq);
    // A profile of another model, or a policy that does not exist, fails before the search.
    std::optional<CacheHitPredictor> hits;
    if (req.routing_profile) {
        models::check_trace_fits(*req.routing_profile, hp, "--routing-profile");
        hits.emplace(req.routing_profile, req.cache_policy, req.cache_admit_cap);
    }
    Search s(req);
    s.resolve_budgets();
    s.build_work();
    s.resolve_options();
    s.order_layers();

    int64_t n_ctx = 0;
    if (req.goal == Goal::context && req.n_ctx)
        fail("--goal context searches the context: drop -c {} (or use --ctx max)", *req.n_ctx);
    if (req.n_ctx) {
        n_ctx = *req.n_ctx;
        place::validate_cache_options(hp, s.cache(s.kv_options.front(), n_ctx));
    } else {
        n_ctx = s.max_context();
        if (n_ctx == 0) {
            const place::MemoryPrediction m =
                s.memory(s.with_host(s.host_tiers.back(), s.order.size()),
                         s.cache(s.kv_options.back(), kCtxStep), s.ubatches.front());
            fail(
                "nothing fits, not even {} tokens of context: the smallest configuration (every expert layer "
                "the constraints allow on the host, KV {}/{}, n_ubatch {}) fails: {}",
                kCtxStep, quant::type_name(s.kv_options.back().k), quant::type_name(s.kv_options.back().v),
                s.ubatches.front(), s.misfit(m));
        }
    }

    // For each configuration (tier, KV, n_ubatch), move layers to the host in `order` until it fits;
    // the first count that fits is that configuration's best (each host layer only adds decode
    // and prefill time), the one before it shows what was missing.
    struct Combo {
        place::Tier tier;
        KvOption kv;
        int64_t ub;
        std::optional<PlanCandidate> last_misfit, first_fit;
    };
    std::vector<Combo> combos;
    for (place::Tier tier : s.host_tiers)
        for (const KvOption& kv : s.kv_options)
            for (int64_t ub : s.ubatches) combos.push_back({tier, kv, ub, {}, {}});
    PlanCandidate smallest;  // the least VRAM seen, for the error when nothing fits
    bool any_seen = false;
    for (place::Tier tier : s.host_tiers) {
        place::Placement p = s.work;
        for (size_t m = 0; m <= s.order.size(); ++m) {
            if (m > 0) p.set_layer_experts(s.order[m - 1], tier);
            bool open = false;
            for (Combo& c : combos) {
                if (c.tier != tier || c.first_fit) continue;
                PlanCandidate row;
                row.k_type = c.kv.k;
                row.v_type = c.kv.v;
                row.n_ctx = n_ctx;
                row.n_ubatch = c.ub;
                row.stream_experts = s.stream;
                row.host_tier = tier;
                row.host_layers = s.host_layers(m);
                const place::MemoryPrediction mem = s.memory(p, s.cache(c.kv, n_ctx), c.ub);
                row.vram_bytes = mem.gpu_total();
                row.host_bytes = mem.host_locked() + mem.host_ram();
                row.page_cache_bytes = mem.host_page_cache();
                row.why_not = s.misfit(mem);
                row.fits = row.why_not.empty();
                if (!any_seen || row.vram_bytes < smallest.vram_bytes ||
                    (row.vram_bytes == smallest.vram_bytes && row.host_bytes < smallest.host_bytes)) {
                    smallest = row;
                    any_seen = true;
                }
                if (row.fits) {
                    SpeedOptions so{.run = {.n_ubatch = c.ub, .stream_experts = s.stream},
                                    .stream_min_tokens = 0,
                                    .prompt_tokens = req.prompt_tokens};
                    const SpeedPrediction sp = predict_speed(p, hp, s.cache(c.kv, n_ctx), so, req.profile);
                    row.decode_tps = sp.decode.tokens_per_s;
                    row.decode_half_tps = sp.decode_half.tokens_per_s;
                    row.prefill_tps = sp.prefill.tokens_per_s;
                    row.stream_min_tokens = sp.prefill.stream_min_tokens;
                    c.first_fit = std::move(row);
                } else {
                    c.last_misfit = std::move(row);
                    open = true;
                }
            }
            if (!open) break;
        }
    }

    PlanResult r;
    r.goal = req.goal;
    for (Combo& c : combos)
        for (std::optional<PlanCandidate>* row : {&c.last_misfit, &c.first_fit}) {
            // Without host layers the tier means nothing: those rows are kept for the first tier only.
            if (!*row || ((*row)->host_layers.empty() && c.tier != s.host_tiers.front())) continue;
            r.table.push_back(std::move(**row));
        }
    if (std::none_of(r.table.begin(), r.table.end(), [](const PlanCandidate& c) { return c.fits; }))
        fail(
            "nothing fits: the smallest configuration ({} expert layers of {} on the host, KV {}/{}, "
            "context {}, n_ubatch {}) fails: {}",
            smallest.host_layers.size(), hp.n_trunk(), quant::type_name(smallest.k_type),
            quant::type_name(smallest.v_type), smallest.n_ctx, smallest.n_ubatch, smallest.why_not);
    size_t pick = choose(req.goal, r.table);
    std::optional<ExpertCacheLoad> cache_load;
    if (hits) {
        r.expert_cache.policy = req.cache_policy;
        if (req.goal != Goal::decode) {
            r.expert_cache.why_none = fmt::format("the {} goal keeps whole layers", goal_name(req.goal));
        } else if (!s.has_gpu) {
            r.expert_cache.why_none = "no GPU";
        } else if (r.table[pick].host_layers.empty()) {
            r.expert_cache.why_none = "every expert fits on the GPU";
        } else {
            CacheSearch search(s, r.table[pick], *hits);
            const std::optional<PlanCandidate> best = search.best();
            const double whole = r.table[pick].decode_tps;
            for (PlanCandidate& row : search.rows()) r.table.push_back(std::move(row));
            if (!best) {
                r.expert_cache.why_none = "no room for a pool of experts in the budget";
            } else if (best->decode_tps <= whole * (1 + kCacheMinGain)) {
                r.expert_cache.why_none = fmt::format(
                    "the best pool ({} slots, {:.0f}% predicted hits) decodes {:.1f} t/s against {:.1f} with whole "
                    "layers",
                    best->cache_slots, 100 * best->cache_hit_rate, best->decode_tps, whole);
            } else {
                for (size_t i = 0; i < r.table.size(); ++i)
                    if (r.table[i].cache_slots == best->cache_slots && r.table[i].host_layers == best->host_layers)
                        pick = i;
                cache_load = hits->predict(best->host_layers, best->cache_slots);
            }
        }
    }
    PlanCandidate& chosen = r.table[pick];
    chosen.chosen = true;

    // Rebuild the chosen placement and check it once more against the budgets.
    r.placement = s.work;
    for (int64_t l : chosen.host_layers)
        if (std::find(s.forced_host.begin(), s.forced_host.end(), l) == s.forced_host.end())
            r.placement.set_layer_experts(l, chosen.host_tier);
    r.cache = s.cache({chosen.k_type, chosen.v_type}, chosen.n_ctx);
    r.run = {.n_ubatch = chosen.n_ubatch,
             .stream_experts = chosen.stream_experts,
             .expert_cache_slots = chosen.cache_slots};
    r.allowance = s.allowance;
    r.memory = place::predict_memory(r.placement, hp, r.cache, r.allowance, r.run);
    MOX_CHECK(s.misfit(r.memory).empty(), "the chosen plan does not fit: {}", s.misfit(r.memory));
    r.speed = predict_speed(
        r.placement, hp, r.cache,
        {.run = r.run, .stream_min_tokens = 0, .prompt_tokens = req.prompt_tokens, .expert_cache = cache_load},
        req.profile);
    if (chosen.cache_slots > 0) {
        ExpertCachePlan& c = r.expert_cache;
        c.slots = chosen.cache_slots;
        c.slot_bytes = place::expert_slot_layout(r.placement, hp).bytes;
        c.pool_bytes = models::expert_cache_pool_bytes(c.slots, c.slot_bytes);
        c.device_bytes = r.memory.buffers.expert_cache;
        c.hit_rate = cache_load->hit_rate;
        c.admissions_per_token = cache_load->admissions_per_token;
    }
    r.stream_min_tokens = r.speed.prefill.stream_min_tokens;
    // The runtime allocates staging buffers only when a micro-batch can reach the threshold: the
    // memory of the plan as it will run (never more than what was checked above).
    r.run.stream_min_tokens = std::max<int64_t>(2, r.stream_min_tokens);
    r.memory = place::predict_memory(r.placement, hp, r.cache, r.allowance, r.run);
    r.host_layers = chosen.host_layers;
    r.host_tier = chosen.host_tier;
    r.vram_budget = s.vram_budget;
    r.vram_margin = s.vram_margin;
    r.ram_budget = s.ram_budget;
    r.ram_margin = s.ram_margin;
    r.notes = std::move(s.notes);
    if (s.ram_budget > 0 && r.memory.host_total() > s.ram_budget)
        r.notes.push_back(
            fmt::format("the mapped host weights ({}) do not all fit in the RAM budget {}: the CPU "
                        "will read some experts from disk (slower than predicted)",
                        format_bytes(r.memory.host_page_cache()), format_bytes(s.ram_budget)));
    for (const std::string& n : r.speed.notes) r.notes.push_back(n);
    return r;
}

}  // namespace mox::plan

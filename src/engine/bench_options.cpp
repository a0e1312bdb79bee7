#include "engine/bench_options.h"

#include "core/error.h"
#include "core/units.h"

#include <charconv>

namespace mox::engine {

namespace {

int64_t parse_int(std::string_view text, std::string_view whole) {
    int64_t v = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, v);
    if (text.empty() || ec != std::errc() || ptr != end) fail("'{}' is not a number (in '{}')", text, whole);
    return v;
}

std::vector<std::string_view> split_commas(std::string_view spec) {
    std::vector<std::string_view> items;
    size_t start = 0;
    for (;;) {
        const size_t comma = spec.find(',', start);
        items.push_back(
            spec.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    return items;
}

// One item: "N", "A-B", "A-B+S" or "A-B*M". A leading '-' is a sign ("-1"), not a range.
void append_item(std::string_view item, std::string_view whole, std::vector<int64_t>& out) {
    if (item.empty()) fail("empty value in '{}'", whole);
    const size_t dash = item.find('-', 1);
    if (dash == std::string_view::npos) {
        out.push_back(parse_int(item, whole));
        return;
    }
    const int64_t first = parse_int(item.substr(0, dash), whole);
    std::string_view rest = item.substr(dash + 1);
    const size_t op_pos = rest.find_first_of("+*");
    const int64_t last = parse_int(rest.substr(0, op_pos), whole);
    const char op = op_pos == std::string_view::npos ? '+' : rest[op_pos];
    const int64_t by = op_pos == std::string_view::npos ? 1 : parse_int(rest.substr(op_pos + 1), whole);
    if (first > last) fail("range '{}' runs backwards", item);
    if (op == '+' && by <= 0) fail("range '{}' needs a step > 0", item);
    if (op == '*' && (by <= 1 || first <= 0)) fail("range '{}' needs a factor > 1 and a start > 0", item);
    constexpr size_t kMaxValues = 100000;  // a typo like 1-1000000000 must not eat the memory
    for (int64_t v = first; v <= last; v = op == '+' ? v + by : v * by) {
        out.push_back(v);
        if (out.size() > kMaxValues) fail("range '{}' has more than {} values", item, kMaxValues);
    }
}

}  // namespace

std::vector<int64_t> parse_int_values(std::string_view spec) {
    std::vector<int64_t> out;
    for (std::string_view item : split_commas(spec)) append_item(item, spec, out);
    return out;
}

std::vector<std::string> parse_string_values(std::string_view spec) {
    std::vector<std::string> out;
    for (std::string_view item : split_commas(spec)) {
        if (item.empty()) fail("empty value in '{}'", spec);
        out.emplace_back(item);
    }
    return out;
}

std::pair<int64_t, int64_t> parse_pg_value(std::string_view spec) {
    const auto items = split_commas(spec);
    if (items.size() != 2) fail("-pg takes 'pp,tg' (two numbers), got '{}'", spec);
    const int64_t pp = parse_int(items[0], spec), tg = parse_int(items[1], spec);
    if (pp <= 0 || tg <= 0) fail("-pg '{}': both numbers must be > 0", spec);
    return {pp, tg};
}

std::string BenchTest::name() const {
    std::string s;
    if (n_prompt > 0) s += "pp" + std::to_string(n_prompt);
    if (n_gen > 0) s += (s.empty() ? "tg" : "+tg") + std::to_string(n_gen);
    if (n_depth > 0) s += " @ d" + std::to_string(n_depth);
    return s;
}

int flash_attn_value(std::string_view text) {
    if (text == "auto" || text == "-1") return -1;
    if (text == "off" || text == "0") return 0;
    if (text == "on" || text == "1") return 1;
    fail("-fa '{}': expected on, off or auto", text);
}

std::string plan_value(std::string_view text) {
    if (text == "manual" || text == "auto") return std::string(text);
    fail("--plan '{}': expected manual or auto", text);
}

void check_supported(const std::vector<BenchConfig>& configs, bool have_cuda) {
    for (const auto& c : configs) {
        const bool placed = c.n_cpu_moe > 0 || c.vram_budget > 0 || !c.override_tensor.empty() ||
                            !c.moe_cpu_layers.empty() || c.cpu_moe || c.expert_cache > 0;
        // A benchmark row says where it ran, so a CPU-only build refuses GPU rows (mox run notes and
        // runs on the CPU instead).
        if ((c.n_gpu_layers != 0 || placed) && !have_cuda)
            fail(
                "-ngl {}{}: this mox was built without CUDA (rebuild with -DMOX_CUDA=ON for the GPU); a "
                "benchmark row "
                "must run where it says: use -ngl 0 without placement flags",
                c.n_gpu_layers,
                placed ? " with placement flags (-ncmoe, --cpu-moe, -ot, --moe-cpu-layers, --vram-budget, "
                         "--expert-cache)"
                       : "");
        if (c.n_gpu_layers == 0 && placed)
            fail(
                "-ngl 0 runs on the CPU: -ncmoe, --cpu-moe, -ot, --moe-cpu-layers, --vram-budget and "
                "--expert-cache need -ngl > 0");
        if (c.plan == "auto" && c.n_gpu_layers == 0)
            fail(
                "--plan auto places the model on the GPU: give -ngl 99 (or leave --plan manual for the CPU)");
    }
}

std::vector<BenchConfig> expand_configs(const BenchParams& p) {
    if (p.models.empty()) fail("no model given (-m)");
    if (p.repetitions < 1) fail("-r {}: at least one repetition is needed", p.repetitions);
    auto check_min = [](const std::vector<int64_t>& values, int64_t min, const char* flag) {
        if (values.empty()) fail("{} has no value", flag);
        for (int64_t v : values)
            if (v < min) fail("{} {}: must be >= {}", flag, v, min);
    };
    check_min(p.n_prompt, 0, "-p");
    check_min(p.n_gen, 0, "-n");
    check_min(p.n_depth, 0, "-d");
    check_min(p.threads, 0, "-t");
    check_min(p.n_batch, 1, "-b");
    check_min(p.n_ubatch, 1, "-ub");
    check_min(p.n_gpu_layers, -1, "-ngl");
    check_min(p.n_cpu_moe, 0, "-ncmoe");
    check_min(p.flash_attn, -1, "-fa");
    if (p.vram_budget.empty()) fail("--vram-budget has no value");
    if (p.plan.empty()) fail("--plan has no value");
    if (p.expert_cache.empty()) fail("--expert-cache has no value");
    if (p.cache_policy.empty()) fail("--cache-policy has no value");
    if (p.cache_admit_cap < 0) fail("--cache-admit-cap {}: expected 0 or more", p.cache_admit_cap);

    std::vector<BenchTest> tests;  // without depth
    for (int64_t n : p.n_prompt)
        if (n > 0) tests.push_back({.n_prompt = n});
    for (int64_t n : p.n_gen)
        if (n > 0) tests.push_back({.n_gen = n});
    for (auto [pp, tg] : p.pg) tests.push_back({.n_prompt = pp, .n_gen = tg});
    if (tests.empty()) fail("no test to run: -p and -n are all 0 and no -pg given");

    std::vector<BenchConfig> out;
    for (const auto& model : p.models)
        for (int64_t nb : p.n_batch)
            for (int64_t nub : p.n_ubatch)
                for (const auto& tk : p.type_k)
                    for (const auto& tv : p.type_v)
                        for (int64_t t : p.threads)
                            for (int64_t ngl : p.n_gpu_layers)
                                for (int64_t ncmoe : p.n_cpu_moe)
                                    for (uint64_t budget : p.vram_budget)
                                        for (const auto& plan : p.plan)
                                            for (uint64_t cache : p.expert_cache)
                                            for (size_t pi = 0; pi < (cache > 0 ? p.cache_policy.size() : 1); ++pi)
                                            for (int64_t fa : p.flash_attn)
                                                for (int64_t depth : p.n_depth)
                                                    for (BenchTest test : tests) {
                                                        test.n_depth = depth;
                                                        out.push_back(
                                                            {.model = model,
                                                             .threads = static_cast<int>(t),
                                                             .type_k = tk,
                                                             .type_v = tv,
                                                             .n_batch = nb,
                                                             .n_ubatch = nub,
                                                             .n_gpu_layers = static_cast<int>(ngl),
                                                             .n_cpu_moe = static_cast<int>(ncmoe),
                                                             .flash_attn = static_cast<int>(fa),
                                                             .vram_budget = budget,
                                                             .plan = plan_value(plan),
                                                             .override_tensor = p.override_tensor,
                                                             .moe_cpu_layers = p.moe_cpu_layers,
                                                             .cpu_moe = p.cpu_moe,
                                                             .stream_min_tokens = p.stream_min_tokens,
                                                             .n_ctx = p.n_ctx,
                                                             .isa = p.isa,
                                                             .pin = p.pin,
                                                             .profile = p.profile,
                                                             .expert_cache = cache,
                                                             .cache_policy = p.cache_policy[pi],
                                                             .cache_admit_cap = p.cache_admit_cap,
                                                             .cache_profile = p.cache_profile,
                                                             .routing_trace = p.routing_trace,
                                                             .test = test});
                                                    }
    return out;
}

std::vector<ScheduleEntry> interleaved_schedule(size_t n_configs, int repetitions, bool compare) {
    std::vector<ScheduleEntry> out;
    out.reserve(n_configs * static_cast<size_t>(repetitions * (compare ? 2 : 1) + 1));
    for (size_t c = 0; c < n_configs; ++c) out.push_back({.config = c, .repetition = 0, .warmup = true});
    for (int r = 1; r <= repetitions; ++r)
        for (size_t c = 0; c < n_configs; ++c) {
            const ScheduleEntry mox{
                .config = c, .repetition = r, .warmup = false, .engine = BenchEngine::mox};
            if (!compare) {
                out.push_back(mox);
                continue;
            }
            ScheduleEntry llama = mox;
            llama.engine = BenchEngine::llama;
            const bool mox_first = r % 2 == 1;
            out.push_back(mox_first ? mox : llama);
            out.push_back(mox_first ? llama : mox);
        }
    return out;
}

}  // namespace mox::engine

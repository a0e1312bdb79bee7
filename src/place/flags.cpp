#include "place/flags.h"

#include "core/error.h"

#include <algorithm>
#include <charconv>
#include <regex>

namespace mox::place {

namespace {

// The routed-expert stacks of a layer: blk.N.ffn_{gate,up,down}_exps (llama.cpp's --cpu-moe
// pattern also names the fused gate_up and the "chexps" variants, which qwen35moe does not have;
// they are kept so the rule means the same on other architectures' files).
constexpr const char* kExpsSuffix = R"(\.ffn_(gate|up|down|gate_up)_(ch)?exps)";

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

bool parse_int(std::string_view s, int64_t& out) {
    s = trim(s);
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

std::vector<std::string_view> split(std::string_view s, char sep) {
    std::vector<std::string_view> out;
    size_t start = 0;
    while (true) {
        const size_t pos = s.find(sep, start);
        out.push_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
        if (pos == std::string_view::npos) return out;
        start = pos + 1;
    }
}

std::regex compile(const OverrideRule& r) {
    try {
        return std::regex(r.pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
        fail("{}: '{}' is not a valid regular expression ({})", r.origin, r.pattern, e.what());
    }
}

}  // namespace

int64_t parse_n_gpu_layers(std::string_view value) {
    if (value == "all") return -1;
    if (value == "auto")
        fail(
            "-ngl auto: the planner's search (--plan auto) decides the placement; "
            "a fixed placement needs a layer count or 'all'");
    int64_t n = 0;
    if (!parse_int(value, n) || n < -1) fail("-ngl {}: expected a layer count >= 0, -1 or 'all'", value);
    return n;
}

Tier tier_from_device(std::string_view device) {
    if (device == "CPU") return Tier::mmap_host;
    if (device == "CUDA0") return Tier::gpu;
    if (const auto t = tier_from_name(device)) return *t;
    if (device.substr(0, 4) == "CUDA") fail("unknown device '{}': mox places on one GPU, CUDA0", device);
    fail("unknown device '{}': expected CPU, CUDA0, or a mox tier (gpu, pinned_host, mmap_host)", device);
}

std::vector<OverrideRule> parse_override_tensor(std::string_view value) {
    std::vector<OverrideRule> rules;
    // Like llama.cpp: items split at ',' and each at its first '=', so a regex can hold neither.
    for (std::string_view item : split(value, ',')) {
        const std::string origin = fmt::format("-ot {}", item);
        const size_t eq = item.find('=');
        if (eq == std::string_view::npos) fail("{}: expected REGEX=DEVICE (e.g. exps=CPU)", origin);
        OverrideRule r{std::string(item.substr(0, eq)), tier_from_device(item.substr(eq + 1)), origin};
        if (r.pattern.empty()) fail("{}: empty tensor pattern (use .* to match every tensor)", origin);
        compile(r);  // reject a bad regex now, with the flag in the message
        rules.push_back(std::move(r));
    }
    return rules;
}

OverrideRule cpu_moe_rule() {
    return {kExpsSuffix, Tier::mmap_host, "--cpu-moe"};
}

std::vector<OverrideRule> n_cpu_moe_rules(int64_t n, int64_t n_layer) {
    if (n < 0) fail("--n-cpu-moe {}: expected a layer count >= 0", n);
    std::vector<OverrideRule> rules;
    // llama.cpp adds one rule per layer below N, existing or not; rules past the last layer match
    // nothing, so they are not made.
    for (int64_t i = 0; i < std::min(n, n_layer); ++i)
        rules.push_back({fmt::format(R"(^blk\.{}{})", i, kExpsSuffix), Tier::mmap_host,
                         fmt::format("--n-cpu-moe {}", n)});
    return rules;
}

std::string format_layer_list(const std::vector<int64_t>& layers) {
    std::string out;
    for (size_t i = 0; i < layers.size();) {
        size_t j = i;
        while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
        if (!out.empty()) out += ',';
        out += j == i ? fmt::format("{}", layers[i]) : fmt::format("{}-{}", layers[i], layers[j]);
        i = j + 1;
    }
    return out;
}

std::vector<int64_t> parse_layer_list(std::string_view list, int64_t n_layer) {
    std::vector<int64_t> layers;
    if (trim(list).empty()) fail("--moe-cpu-layers: empty layer list (expected e.g. 0-9,20,31-39)");
    for (std::string_view item : split(list, ',')) {
        const size_t dash = item.find('-');
        int64_t a = 0, b = 0;
        const bool ok = dash == std::string_view::npos
                            ? parse_int(item, a) && (b = a, true)
                            : parse_int(item.substr(0, dash), a) && parse_int(item.substr(dash + 1), b);
        if (!ok) fail("--moe-cpu-layers: '{}' is not a layer N or a range A-B", trim(item));
        if (a > b) fail("--moe-cpu-layers: range {}-{} runs backwards", a, b);
        if (a < 0 || b >= n_layer)
            fail("--moe-cpu-layers: layer {} out of range: the model has layers 0..{}", a < 0 ? a : b,
                 n_layer - 1);
        for (int64_t l = a; l <= b; ++l) layers.push_back(l);
    }
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    return layers;
}

std::vector<OverrideRule> moe_cpu_layers_rules(std::string_view list, int64_t n_layer) {
    std::vector<OverrideRule> rules;
    for (int64_t l : parse_layer_list(list, n_layer))
        rules.push_back({fmt::format(R"(^blk\.{}{})", l, kExpsSuffix), Tier::mmap_host,
                         fmt::format("--moe-cpu-layers {}", list)});
    return rules;
}

Placement place_from_flags(const gguf::File& file, const PlacementFlags& flags) {
    if (flags.n_gpu_layers < -1) fail("-ngl {}: expected a layer count >= 0 or -1 (all)", flags.n_gpu_layers);
    Placement p = Placement::uniform(file, Tier::mmap_host);
    const int64_t n_layer = p.n_layer();
    // The expert flags match nothing in a dense model: say so instead of running a placement the user
    // did not ask for.
    if (p.dense_ffn())
        for (const OverrideRule& r : flags.overrides)
            if (r.pattern.ends_with(kExpsSuffix) && r.origin.starts_with("--"))
                fail(
                    "{}: this is a dense model (no routed experts); to compute some layers' FFN on the CPU "
                    "use -ot (e.g. -ot 'blk\\.[0-9]\\.ffn_=CPU' for layers 0-9) or --plan auto",
                    r.origin);
    // Layer indices 0..n_layer-1 are blocks, n_layer is the output layer; the last N go to the GPU.
    const int64_t n_gpu = flags.n_gpu_layers == -1 ? n_layer + 1 : std::min(flags.n_gpu_layers, n_layer + 1);
    const int64_t first_gpu = n_layer + 1 - n_gpu;
    auto base_tier = [&](const TensorEntry& e) {
        int64_t index = e.layer;
        if (index < 0) {
            if (e.cls == models::TensorClass::embedding) return Tier::mmap_host;  // the input layer
            index = n_layer;  // output.weight, output_norm.weight (and any other global)
        }
        return index >= first_gpu ? Tier::gpu : Tier::mmap_host;
    };

    std::vector<std::regex> regexes;
    for (const OverrideRule& r : flags.overrides) regexes.push_back(compile(r));

    // One tier per tensor first; the expert stacks of a layer are reconciled after.
    std::vector<Tier> tiers;
    std::vector<int> decided_by;  // rule index, -1 for -ngl
    for (const TensorEntry& e : p.tensors()) {
        Tier t = base_tier(e);
        int by = -1;
        for (size_t i = 0; i < regexes.size(); ++i) {
            if (std::regex_search(e.name, regexes[i])) {
                t = flags.overrides[i].tier;
                by = static_cast<int>(i);
                break;
            }
        }
        tiers.push_back(t);
        decided_by.push_back(by);
    }

    auto origin = [&](size_t i) {
        return decided_by[i] < 0 ? std::string("-ngl")
                                 : flags.overrides[static_cast<size_t>(decided_by[i])].origin;
    };
    std::vector<int64_t> first_stack(static_cast<size_t>(n_layer), -1);
    for (size_t i = 0; i < p.tensors().size(); ++i) {
        const TensorEntry& e = p.tensors()[i];
        if (e.part == ExpertPart::none) {
            p.set_tier(e.name, tiers[i]);
            continue;
        }
        int64_t& first = first_stack[static_cast<size_t>(e.layer)];
        if (first < 0) {
            first = static_cast<int64_t>(i);
            p.set_layer_experts(e.layer, tiers[i]);
        } else if (tiers[static_cast<size_t>(first)] != tiers[i]) {
            const auto f = static_cast<size_t>(first);
            fail(
                "layer {}: {} puts {} on {} but {} puts {} on {}; mox places an expert as a whole "
                "(its gate, up and down slices together), so make the rule match all three stacks "
                "(e.g. ffn_.*_exps; ffn_ in a dense model)",
                e.layer, origin(f), p.tensors()[f].name, tier_name(tiers[f]), origin(i), e.name,
                tier_name(tiers[i]));
        }
    }
    return p;
}

}  // namespace mox::place

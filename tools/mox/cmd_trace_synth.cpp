// mox trace-synth: write a synthetic routing trace with chosen popularity skew and reuse, shaped
// like a model's routed experts or given as layers, experts and k.
#include "commands.h"
#include "core/error.h"
#include "flag_values.h"
#include "gguf/reader.h"
#include "models/hparams.h"
#include "models/routing_trace.h"
#include "place/routing_locality.h"
#include "place/synthetic_trace.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <charconv>
#include <filesystem>
#include <memory>
#include <string>

namespace mox::cli {

namespace {

struct TraceSynthCli {
    std::string output, like, shape;
    int64_t n_tokens = 0;
    double skew = 0, reuse = 0;
    uint64_t seed = 1;
};

struct TraceShape {
    int64_t n_layers = 0, n_expert = 0, k = 0;
    std::string arch, model;
};

// "40,256,8": layers, experts, k.
TraceShape parse_shape(const std::string& text) {
    TraceShape s;
    int64_t* fields[] = {&s.n_layers, &s.n_expert, &s.k};
    const char* at = text.data();
    const char* end = text.data() + text.size();
    for (size_t i = 0; i < 3; ++i) {
        const auto [next, ec] = std::from_chars(at, end, *fields[i]);
        const bool last = i == 2;
        if (ec != std::errc() || (last ? next != end : (next == end || *next != ',')))
            fail("--shape '{}': expected LAYERS,EXPERTS,K, e.g. 40,256,8", text);
        at = next + 1;
    }
    return s;
}

// The trunk layers with routed experts, n_expert, k, arch and name of a GGUF model.
TraceShape shape_of_model(const std::string& path) {
    const gguf::File file = gguf::File::open(path);
    const models::Hparams hp = models::read_hparams(file);
    if (!hp.has_moe())
        fail("--like '{}': {} is a dense model (no routed experts to trace)", path, hp.arch_name());
    return {.n_layers = hp.n_trunk(),
            .n_expert = hp.n_expert,
            .k = hp.n_expert_used,
            .arch = hp.arch_name(),
            .model = file.get_string_or("general.name", std::filesystem::path(path).filename().string())};
}

}  // namespace

void register_trace_synth(CLI::App& app) {
    auto o = std::make_shared<TraceSynthCli>();
    CLI::App* cmd = app.add_subcommand(
        "trace-synth",
        "Write a synthetic routing trace with chosen expert popularity skew and token-to-token reuse");
    cmd->add_option("-o,--output", o->output, "Output trace file")->required();
    CLI::Option* like = cmd->add_option(
        "--like", o->like,
        "A GGUF model whose routed layers, experts and k (and arch and name) the trace takes");
    CLI::Option* shape =
        cmd->add_option("--shape", o->shape, "LAYERS,EXPERTS,K instead of a model, e.g. 40,256,8");
    like->excludes(shape);
    cmd->add_option("-n,--tokens", o->n_tokens, "Tokens")->required();
    cmd->add_option("--skew", o->skew,
                    "Expert popularity per layer: Zipf-like with this exponent over a random order of the "
                    "experts (0 = uniform)")
        ->capture_default_str();
    cmd->add_option("--reuse", o->reuse,
                    "Probability that a selection repeats one of the previous token's in the same layer")
        ->capture_default_str();
    cmd->add_option("--seed", o->seed, "Random seed; same seed, same trace")->capture_default_str();
    cmd->callback([o] {
        if (o->like.empty() == o->shape.empty())
            fail("trace-synth needs --like MODEL.gguf or --shape LAYERS,EXPERTS,K");
        check_writable("-o", o->output);
        const TraceShape s = o->like.empty() ? parse_shape(o->shape) : shape_of_model(o->like);
        models::RoutingTrace trace = place::synthetic_routing_trace(s.n_layers, s.n_expert, s.k, o->n_tokens,
                                                                    o->skew, o->reuse, o->seed);
        trace.arch = s.arch;
        trace.model = fmt::format("synthetic (skew {}, reuse {}, seed {}){}", o->skew, o->reuse, o->seed,
                                  s.model.empty() ? "" : " shaped like " + s.model);
        models::write_routing_trace(o->output, trace);
        const place::RoutingLocality loc = place::routing_locality(trace);
        fmt::print(
            "wrote {}: {} layers, {} experts, k {}, {} tokens; next-token repeat {:.1f}% (uniform routing "
            "{:.1f}%), the top eighth of experts take {:.1f}% of selections\n",
            o->output, s.n_layers, s.n_expert, s.k, o->n_tokens, 100 * loc.repeat_next,
            100 * loc.uniform_repeat_next, 100 * loc.top_eighth_share);
    });
}

}  // namespace mox::cli

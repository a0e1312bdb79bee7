#include "common_options.h"

#include "core/error.h"
#include "core/log.h"

#include <CLI/CLI.hpp>

#include "core/units.h"
#include "place/flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>

namespace mox::cli {

void add_model_options(CLI::App* cmd, ModelOptions& o, Command which, bool model_required) {
    auto* m = cmd->add_option("-m,--model", o.path, "GGUF model file (first shard of a split model)");
    if (model_required) m->required();
    cmd->add_option("-t,--threads", o.threads, "CPU threads (default: one per physical core)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--isa", o.isa, "CPU kernel tier: auto, avx512, avx2, scalar (the reference path)")
        ->capture_default_str();
    cmd->add_flag("--no-pin", o.no_pin, "Do not pin worker threads to cores");
    cmd->add_option("--device", o.device,
                    "Where the model runs: cpu or cuda (also llama.cpp's CUDA0 and none)")
        ->capture_default_str();
    cmd->add_option(
        "--n-gpu-layers,--gpu-layers", o.n_gpu_layers,
        "-ngl: 0 = the CPU; all, -1 or more than the layers = the GPU; auto (default) = the GPU in a "
        "CUDA build with the planner's placement, else the CPU");
    cmd->add_option(
           "-c,--ctx-size", o.n_ctx,
           "Context size in tokens; 0: the model's trained context (default: run, what the prompt and -n "
           "need; chat and serve, 8192; logits and perplexity, the tokens scored)")
        ->check(CLI::NonNegativeNumber);
    add_placement_options(cmd, o.placement);
    cmd->add_option("--routing-trace", o.routing_trace,
                    "Replay a routing trace (`mox run --routing-trace-out`, `mox trace-synth`): the router "
                    "still runs, the experts that run are the trace's (token at position p: trace token p "
                    "mod its length)");
    cmd->add_option(
           "--cache-type-k", o.cache_type_k,
           "KV cache type for K (-ctk): f32, f16, bf16, q8_0, q4_0, or auto (on the GPU: the planner's "
           "choice for the fastest decode that fits; on the CPU: f16)")
        ->capture_default_str();
    cmd->add_option("--cache-type-v", o.cache_type_v, "KV cache type for V (-ctv): as -ctk")
        ->capture_default_str();
    add_llama_flags(cmd, which);
}

int64_t ModelOptions::context(const models::Hparams& hp, int64_t fallback) const {
    if (n_ctx < -1) fail("-c {}: expected a number of tokens, or 0 for the model's trained context", n_ctx);
    if (n_ctx == 0) return hp.n_ctx_train;
    if (n_ctx > 0) return n_ctx;
    return std::min<int64_t>(fallback, hp.n_ctx_train);
}

quant::Isa ModelOptions::cpu_isa() const {
    return cpu_isa_from_flag(isa);
}

models::Device ModelOptions::resolve_device(int64_t n_layer) const {
    (void)n_layer;  // -ngl counts past the layers mean all of them: the GPU either way
    if (!placement.vram_budget.empty()) placement.vram_budget_bytes();  // a bad size fails on any build
    placement.expert_cache_bytes();                                        // likewise
    std::string dev = device;
    std::transform(dev.begin(), dev.end(), dev.begin(), [](unsigned char c) { return std::tolower(c); });
    models::Device d;
    if (dev == "cpu" || dev == "none")
        d = models::Device::cpu;
    else if (dev == "cuda" || dev == "gpu" || dev == "cuda0")
        d = models::Device::cuda;
    else
        fail("--device {}: expected cpu or cuda (one GPU: CUDA0)", device);
    const bool placed = placement.any_rule() || !placement.vram_budget.empty() ||
                        placement.expert_cache_bytes() > 0 || placement.expert_cache_auto();
    // -ngl auto: the GPU with the planner's placement; not given: --device (cpu unless said).
    const bool ngl_count = !n_gpu_layers.empty() && n_gpu_layers != "auto";
    const int64_t ngl = ngl_count ? place::parse_n_gpu_layers(n_gpu_layers) : -1;
    if (ngl == 0) {
        if (d != models::Device::cpu) fail("-ngl 0 and --device {} disagree", device);
        if (placed)
            fail("-ngl 0 runs on the CPU: placement flags (-ot, --n-cpu-moe, --vram-budget, --expert-cache...) "
                 "need the GPU");
        return models::Device::cpu;
    }
    const bool gpu = d == models::Device::cuda || !n_gpu_layers.empty() || placed;
#ifndef MOX_HAVE_CUDA
    // As llama.cpp without a GPU backend: GPU layers and placement are a note and the model runs on
    // the CPU; asking for the GPU by name is an error.
    if (d == models::Device::cuda) fail("--device {}: {}", device, no_cuda_reason());
    if (gpu)
        note(fmt::format("{}: {}; the model runs on the CPU",
                         n_gpu_layers.empty() ? std::string("placement flags") : "-ngl " + n_gpu_layers,
                         no_cuda_reason()));
    return models::Device::cpu;
#else
    return gpu ? models::Device::cuda : models::Device::cpu;
#endif
}

namespace {

// A -ctk/-ctv value: a type, or nullopt for auto.
std::optional<quant::TypeId> kv_type(const std::string& name) {
    if (name == "auto") return std::nullopt;
    auto t = quant::type_from_name(name);
    if (!t) fail("unknown KV cache type '{}'", name);
    return *t;
}

std::string kv_name(quant::TypeId t) {
    std::string s(quant::type_name(t));
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

}  // namespace

std::unique_ptr<models::Model> ModelOptions::load(const gguf::File& file) {
    const models::Device d = resolve_device(models::read_hparams(file).n_layer);
    std::optional<quant::TypeId> k = kv_type(cache_type_k), v = kv_type(cache_type_v);
    models::GpuOptions g;
    if (d == models::Device::cuda) {
        // The context planned for: -c, else 8192 (chat's and serve's default; a job that needs more
        // says so and asks for -c).
        const models::Hparams hp = models::read_hparams(file);
        const int64_t ctx = context(hp, kDefaultContext);
        // -ngl not given or auto with --device cuda: all of it (llama.cpp's -ngl all), then the plan.
        const bool count = !n_gpu_layers.empty() && n_gpu_layers != "auto";
        g = gpu_options(file, placement, count ? place::parse_n_gpu_layers(n_gpu_layers) : -1, ctx, k, v);
    } else if (!k || !v) {
        // Host RAM is not what a quantized cache saves on the CPU path: keep the exact one.
        log::info("-ctk/-ctv auto on the CPU: f16");
    }
    cache_type_k = kv_name(k.value_or(quant::TypeId::f16));
    cache_type_v = kv_name(v.value_or(quant::TypeId::f16));
    std::shared_ptr<const models::RoutingTrace> trace;
    if (!routing_trace.empty())
        trace = std::make_shared<const models::RoutingTrace>(models::read_routing_trace(routing_trace));
    auto model = std::make_unique<models::Model>(file, threads, cpu_isa(), !no_pin, d, g);
    if (trace) {
        model->set_routing_replay(trace);
        fmt::print(stderr, "mox: routing replay: the experts that run are those of {} ({} tokens of {})\n",
                   routing_trace, trace->n_tokens, trace->model);
    }
    return model;
}

models::StateOptions state_options(const ModelOptions& o, const models::Hparams& hp, int64_t n_needed) {
    models::StateOptions so;
    auto type = [](const std::string& name) {
        if (name == "auto") fail("-ctk/-ctv auto is resolved when the model loads");
        auto t = quant::type_from_name(name);
        if (!t) fail("unknown KV cache type '{}'", name);
        return *t;
    };
    so.k_type = type(o.cache_type_k);
    so.v_type = type(o.cache_type_v);
    if (o.n_ctx >= 0) {
        so.n_ctx = o.context(hp, 0);
        if (n_needed > so.n_ctx) fail("{} tokens do not fit the context size {} (-c)", n_needed, so.n_ctx);
    } else {
        if (n_needed > hp.n_ctx_train)
            fail("{} tokens exceed the model's trained context {}", n_needed, hp.n_ctx_train);
        so.n_ctx = std::min<int64_t>(hp.n_ctx_train, std::max<int64_t>(n_needed, 1));
    }
    return so;
}

}  // namespace mox::cli

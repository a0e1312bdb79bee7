#include "common_options.h"

#include "core/error.h"
#include "core/log.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <optional>

namespace mox::cli {

void add_model_options(CLI::App* cmd, ModelOptions& o, bool model_required) {
    auto* m = cmd->add_option("-m,--model", o.path, "GGUF model file (first shard of a split model)");
    if (model_required) m->required();
    cmd->add_option("-t,--threads", o.threads, "CPU threads (default: one per physical core)");
    cmd->add_option("--isa", o.isa, "CPU kernel tier: auto, avx512, avx2, scalar (the reference path)")->capture_default_str();
    cmd->add_flag("--no-pin", o.no_pin, "Do not pin worker threads to cores");
    cmd->add_option("--device", o.device, "Where the model runs: cpu or cuda (every weight on the first GPU)")
        ->capture_default_str();
    cmd->add_option("--n-gpu-layers", o.n_gpu_layers,
                    "Layers on the GPU (-ngl, as llama.cpp): 0 = CPU, all layers (or -1, 99...) = --device cuda");
    cmd->add_option("-c,--ctx-size", o.n_ctx, "Context size in tokens (default: what the job needs)");
    add_placement_options(cmd, o.placement);
    cmd->add_option(
           "--cache-type-k", o.cache_type_k,
           "KV cache type for K (-ctk): f32, f16, bf16, q8_0, q4_0, or auto (on the GPU: the planner's "
           "choice for the fastest decode that fits; on the CPU: f16)")
        ->capture_default_str();
    cmd->add_option("--cache-type-v", o.cache_type_v, "KV cache type for V (-ctv): as -ctk")
        ->capture_default_str();
}

quant::Isa ModelOptions::cpu_isa() const {
    if (isa == "auto") return quant::host_isa();
    const auto want = quant::isa_from_name(isa);
    if (!want) fail("--isa {}: expected auto, avx512, avx2 or scalar", isa);
    if (*want > quant::host_isa())
        fail("--isa {}: this CPU supports up to {}", isa, quant::isa_name(quant::host_isa()));
    return *want;
}

models::Device ModelOptions::resolve_device(int64_t n_layer) const {
    models::Device d;
    if (device == "cpu") d = models::Device::cpu;
    else if (device == "cuda" || device == "gpu") d = models::Device::cuda;
    else fail("--device {}: expected cpu or cuda", device);
    const bool placed = placement.any_rule() || !placement.vram_budget.empty();
    if (n_gpu_layers == -2) return placed ? models::Device::cuda : d;
    if (n_gpu_layers < -1) fail("-ngl {}: expected -1 (all) or a layer count", n_gpu_layers);
    if (n_gpu_layers == 0) {
        if (device != "cpu") fail("-ngl 0 and --device {} disagree", device);
        if (placed) fail("-ngl 0 runs on the CPU: placement flags (-ot, --n-cpu-moe, --vram-budget...) need the GPU");
        return models::Device::cpu;
    }
    return models::Device::cuda;
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
        // The context planned for: -c, else 8192 (mox chat's default; a job that needs more says so
        // and asks for -c).
        const models::Hparams hp = models::read_hparams(file);
        const int64_t ctx = n_ctx > 0 ? n_ctx : std::min<int64_t>(8192, hp.n_ctx_train);
        // -ngl not given with --device cuda: all of it (llama.cpp's -ngl all), then the plan.
        g = gpu_options(file, placement, n_gpu_layers == -2 ? -1 : n_gpu_layers, ctx, k, v);
    } else if (!k || !v) {
        // Host RAM is not what a quantized cache saves on the CPU path: keep the exact one.
        log::info("-ctk/-ctv auto on the CPU: f16");
    }
    cache_type_k = kv_name(k.value_or(quant::TypeId::f16));
    cache_type_v = kv_name(v.value_or(quant::TypeId::f16));
    return std::make_unique<models::Model>(file, threads, cpu_isa(), !no_pin, d, g);
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
    if (o.n_ctx > 0) {
        if (n_needed > o.n_ctx) fail("{} tokens do not fit the context size {} (-c)", n_needed, o.n_ctx);
        so.n_ctx = o.n_ctx;
    } else {
        if (n_needed > hp.n_ctx_train)
            fail("{} tokens exceed the model's trained context {}", n_needed, hp.n_ctx_train);
        so.n_ctx = std::min<int64_t>(hp.n_ctx_train, std::max<int64_t>(n_needed, 1));
    }
    return so;
}

}  // namespace mox::cli

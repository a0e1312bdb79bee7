#include "engine/bench_run.h"

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "engine/bench_machine.h"
#include "gguf/reader.h"
#include "models/hparams.h"
#include "models/model.h"
#include "models/summary.h"
#include "place/cache_policies.h"
#include "place/cache_sim.h"
#include "place/execute.h"
#include "place/flags.h"
#include "place/memory.h"
#include "plan/auto_plan.h"
#include "plan/hardware.h"
#include "plan/speed.h"
#include "text/tokenizer.h"
#include "text/vocab_io.h"

#include <fmt/format.h>

#ifdef MOX_HAVE_CUDA
#include "ops/cuda_device.h"
#include "ops/cuda_memory.h"
#endif

#include <algorithm>
#include <cctype>
#include <chrono>
#include <random>

namespace mox::engine {

struct BenchRunner::Loaded {
    explicit Loaded(gguf::File f) : file(std::move(f)) {}
    gguf::File file;
    std::unique_ptr<text::Tokenizer> tokenizer;
    std::vector<int32_t> corpus;  // the corpus in this model's tokens
    // Loaded once per setup (threads, device, placement...: what is fixed at load), keyed by a text
    // naming it. At most one GPU setup is alive at a time (they would share the device's memory).
    struct Setup {
        std::unique_ptr<models::Model> model;
        std::optional<place::Placement> placement;  // GPU setups: what runs (the flags' or the plan's)
        models::GpuOptions gpu;
        std::optional<models::RoutingTrace> trace;  // --routing-trace
        int64_t trace_at = 0;                       // the trace token the next run starts at
    };
    std::map<std::string, Setup> by_setup;
    BenchModelInfo info;
};

namespace {

// The trace starting at token `first` (and wrapping around).
models::RoutingTrace rotated(const models::RoutingTrace& t, int64_t first) {
    models::RoutingTrace r = t;
    const auto row = static_cast<ptrdiff_t>(t.layers.size() * static_cast<size_t>(t.k));
    std::rotate(r.ids.begin(), r.ids.begin() + first * row, r.ids.end());
    return r;
}

}  // namespace

BenchRunner::BenchRunner(std::string corpus_text) : corpus_text_(std::move(corpus_text)) {}
BenchRunner::~BenchRunner() = default;
BenchRunner::BenchRunner(BenchRunner&&) noexcept = default;

BenchRunner BenchRunner::random_tokens(uint64_t seed) {
    BenchRunner r("");
    r.random_seed_ = seed;
    return r;
}

BenchRunner::Loaded& BenchRunner::load(const std::string& path) {
    auto it = models_.find(path);
    if (it != models_.end()) return *it->second;
    auto m = std::make_unique<Loaded>(gguf::File::open(path));
    m->tokenizer = std::make_unique<text::Tokenizer>(text::vocab_from_gguf(m->file));
    if (random_seed_) {
        // 64 Ki ids, cycled like the corpus; every id of the vocabulary equally likely.
        std::mt19937_64 rng(*random_seed_);
        const auto n_vocab = static_cast<uint64_t>(m->tokenizer->vocab().tokens.size());
        m->corpus.resize(65536);
        for (int32_t& id : m->corpus) id = static_cast<int32_t>(rng() % n_vocab);
    } else {
        m->corpus = m->tokenizer->encode(corpus_text_);
    }
    if (m->corpus.empty()) fail("the benchmark corpus has no tokens");

    BenchModelInfo& info = m->info;
    info.filename = path;
    std::map<std::string, uint64_t> bytes_by_type;
    for (const auto& t : m->file.tensors()) {
        info.size += t.n_bytes;
        info.n_params += static_cast<uint64_t>(t.n_elements());
        bytes_by_type[std::string(quant::type_name(t.type))] += t.n_bytes;
    }
    std::string dominant = "?";
    uint64_t most = 0;
    for (const auto& [name, b] : bytes_by_type)
        if (b > most) most = b, dominant = name;
    std::transform(dominant.begin(), dominant.end(), dominant.begin(),
                   [](unsigned char c) { return std::toupper(c); });
    const models::Hparams shape = models::read_hparams(m->file);
    std::optional<uint32_t> file_type;
    if (m->file.find("general.file_type"))
        file_type = static_cast<uint32_t>(m->file.get_uint_or("general.file_type", 0));
    info.type = llama_model_type(m->file.get_string_or("general.architecture", "unknown"), shape.n_layer,
                                 shape.n_expert, file_type, dominant);
    info.sha256 = model_fingerprint(path);
    // Decode roofline inputs: the same accounting `mox inspect` prints.
    const models::ModelSummary summary = models::summarize(m->file);
    info.weight_bytes_per_token = summary.bytes_per_token;
    info.recurrent_state_bytes = summary.recurrent_state_bytes;
    const models::Hparams hp = models::read_hparams(m->file);
    const double kv_heads = static_cast<double>(hp.n_attention_layers() * hp.n_head_kv);
    info.kv_k_elems_per_token = kv_heads * static_cast<double>(hp.head_dim_k);
    info.kv_v_elems_per_token = kv_heads * static_cast<double>(hp.head_dim_v);
    return *models_.emplace(path, std::move(m)).first->second;
}

const BenchModelInfo& BenchRunner::model_info(const std::string& path) {
    return load(path).info;
}

BenchSample BenchRunner::run(const BenchConfig& c) {
    Loaded& m = load(c.model);
    const models::Hparams hp = models::read_hparams(m.file);
    const models::Device device = c.n_gpu_layers == 0 ? models::Device::cpu : models::Device::cuda;
    const int64_t needed = std::max<int64_t>(1, c.test.n_depth + c.test.n_prompt + c.test.n_gen);
    if (c.n_ctx > 0 && c.n_ctx < needed)
        fail("-c {}: the test {} needs {} tokens of context", c.n_ctx, c.test.name(), needed);
    const int64_t n_ctx = c.n_ctx > 0 ? c.n_ctx : needed;
    auto kv_type = [](const std::string& name) {
        if (name == "auto")
            fail(
                "-ctk/-ctv auto: mox bench measures the KV types it is given (a list such as f16,q8_0); "
                "`mox plan` shows what the planner would choose");
        auto t = quant::type_from_name(name);
        if (!t) fail("unknown KV cache type '{}'", name);
        return *t;
    };
    // What is fixed at load (thread pool, placement, budget, micro-batch, context) names the setup.
    std::string setup = fmt::format("t{} {} isa {} pin {}", c.threads,
                                    device == models::Device::cpu ? "cpu" : "cuda", c.isa, c.pin);
    if (device == models::Device::cuda)
        setup += fmt::format(
            " ngl{} ncmoe{} cmoe{} ot[{}] layers[{}] budget{} ub{} stream{} ctx{} plan {} kv {}/{}",
            c.n_gpu_layers, c.n_cpu_moe, c.cpu_moe, c.override_tensor, c.moe_cpu_layers, c.vram_budget,
            c.n_ubatch, c.stream_min_tokens, n_ctx, c.plan, c.type_k, c.type_v);
    if (c.expert_cache > 0)
        setup += fmt::format(" cache{} {} cap{} profile[{}]", c.expert_cache, c.cache_policy, c.cache_admit_cap,
                             c.cache_profile);
    if (!c.routing_trace.empty()) setup += " replay " + c.routing_trace;
    Loaded::Setup& su = m.by_setup[setup];
    if (!su.model) {
        if (device == models::Device::cuda) {
            for (auto& [key, other] : m.by_setup)  // free the device for this setup
                if (key != setup && other.model && other.model->device() == models::Device::cuda)
                    other.model.reset();
            // The placement from the flags, in llama.cpp's order of precedence: -ot rules first (they
            // win), then -ncmoe, then --moe-cpu-layers (first match wins, place/flags.h).
            place::PlacementFlags flags;
            flags.n_gpu_layers = c.n_gpu_layers;
            if (!c.override_tensor.empty()) flags.overrides = place::parse_override_tensor(c.override_tensor);
            for (auto& r : place::n_cpu_moe_rules(c.n_cpu_moe, hp.n_layer))
                flags.overrides.push_back(std::move(r));
            if (!c.moe_cpu_layers.empty())
                for (auto& r : place::moe_cpu_layers_rules(c.moe_cpu_layers, hp.n_layer))
                    flags.overrides.push_back(std::move(r));
            if (c.cpu_moe) flags.overrides.push_back(place::cpu_moe_rule());
            if (c.plan == "auto") {
                // The planner, with the flags as constraints and this configuration's context, KV
                // types and micro-batch fixed.
                plan::AutoPlanInputs in;
                in.flags = flags;
                in.flags.n_gpu_layers = -1;
                in.n_ctx = n_ctx;
                in.k_type = kv_type(c.type_k);
                in.v_type = kv_type(c.type_v);
                in.n_ubatch = c.n_ubatch;
                in.vram_budget = c.vram_budget;
                in.reserve_bytes = c.expert_cache;
                in.profile_path = c.profile;
                plan::AutoPlan p = plan::auto_plan(m.file, in);
                fmt::print(stderr, "{}\n", p.summary);
                su.placement = p.result.placement;
                su.gpu = p.gpu;
            } else {
                su.placement = place::place_from_flags(m.file, flags);
                su.gpu = place::gpu_options_for(*su.placement, hp);
                su.gpu.vram_budget = c.vram_budget;
                su.gpu.n_ubatch = c.n_ubatch;
                su.gpu.stream_min_tokens = c.stream_min_tokens;
                su.gpu.n_ctx_max = n_ctx;
            }
            if (c.expert_cache > 0) {
                su.gpu.expert_cache_bytes = c.expert_cache;
                place::CachePolicyOptions options;
                if (!c.cache_profile.empty())
                    options.profile = place::trace_key_counts(models::read_routing_trace(c.cache_profile));
                su.gpu.expert_cache_policy = place::make_cache_policy(c.cache_policy, options);
                su.gpu.expert_cache_admit_cap = c.cache_admit_cap;
            }
        }
        const quant::Isa isa = c.isa == "auto" ? quant::host_isa() : quant::isa_from_name(c.isa).value();
        su.model = std::make_unique<models::Model>(m.file, c.threads, isa, c.pin, device, su.gpu);
        if (!c.routing_trace.empty()) su.trace = models::read_routing_trace(c.routing_trace);
    }
    if (su.trace) {
        // Each run (warm-up and repetitions alike) continues the trace where the last one stopped, so
        // a cache kept warm across runs meets tokens it has not seen, as a server's would; the trace
        // wraps around at its end.
        su.model->set_routing_replay(std::make_shared<const models::RoutingTrace>(rotated(*su.trace, su.trace_at)));
        su.trace_at = (su.trace_at + c.test.n_depth + c.test.n_prompt + c.test.n_gen) % su.trace->n_tokens;
    }
    const std::unique_ptr<models::Model>& model = su.model;

    models::StateOptions so;
    so.k_type = kv_type(c.type_k);
    so.v_type = kv_type(c.type_v);
    so.n_ctx = n_ctx;
    auto state = model->new_state(so);

    const auto& corpus = m.corpus;
    auto corpus_tokens = [&](int64_t first, int64_t n) {
        std::vector<int32_t> ids(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i)
            ids[static_cast<size_t>(i)] = corpus[static_cast<size_t>(first + i) % corpus.size()];
        return ids;
    };
    std::vector<float> logits;
    bool have_logits = false;
    // [first, first + n) of the corpus through the model in chunks of n_ubatch; logits of the last token.
    auto process = [&](int64_t first, int64_t n) {
        const std::vector<int32_t> ids = corpus_tokens(first, n);
        for (int64_t at = 0; at < n; at += c.n_ubatch) {
            const int64_t len = std::min(c.n_ubatch, n - at);
            models::SequenceBatch b{state.get(),
                                    std::span<const int32_t>(ids.data() + at, static_cast<size_t>(len))};
            model->forward(std::span(&b, 1), false, logits);
            have_logits = true;
        }
    };
    const int64_t n_text = m.tokenizer->n_tokens();  // padding rows of the vocabulary have no text
    // The next token of tg: greedy. The GPU path finds the arg max on the device (the host scan of a
    // 248K vocabulary took ~0.33 ms of each ~2.9 ms decode step on the H200 machine,
    // bench/results/2026-11-30-device-argmax-h200; llama-bench samples nothing); the host scans when
    // the device's pick is a padding row or there is none.
    auto host_pick = [&] {
        return static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + n_text) -
                                    logits.begin());
    };
    auto greedy = [&] {
        if (const std::optional<int32_t> a = model->last_argmax(); a && *a < n_text) return *a;
        return host_pick();
    };

    process(0, c.test.n_depth);  // untimed: the context the test runs at

    const std::optional<models::ExpertCacheStats> cache0 = model->expert_cache_stats();
    const std::optional<CpuTimes> cpu0 = read_cpu_times();
    const auto t0 = std::chrono::steady_clock::now();
    if (c.test.n_prompt > 0) process(c.test.n_depth, c.test.n_prompt);
    if (c.test.n_gen > 0) {
        int32_t next = have_logits ? greedy() : corpus[static_cast<size_t>(c.test.n_depth) % corpus.size()];
        for (int64_t i = 0; i < c.test.n_gen; ++i) {
            models::SequenceBatch b{state.get(), std::span<const int32_t>(&next, 1)};
            // Only the arg max comes back where the device finds it (the GPU path: 8 bytes, not the 1
            // MB logit row and the host's copy of it while the GPU waits).
            const std::optional<int32_t> a = model->forward_argmax(std::span(&b, 1), n_text, logits);
            next = a ? *a : host_pick();
        }
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    const std::optional<CpuTimes> cpu1 = read_cpu_times();
    const double tokens = static_cast<double>(c.test.n_prompt + c.test.n_gen);
    BenchSample sample{.ns = ns,
                       .tokens_per_s = ns > 0 ? tokens * 1e9 / ns : 0,
                       .vram_bytes = std::nullopt,
                       .predicted_vram_bytes = std::nullopt,
                       .predicted_tps = std::nullopt,
                       .cpu = cpu0 && cpu1 ? cpu_shares(*cpu0, *cpu1) : std::nullopt,
                       .cache = std::nullopt};
    if (const std::optional<models::ExpertCacheStats> cache1 = model->expert_cache_stats(); cache0 && cache1) {
        models::ExpertCacheStats d = *cache1;
        d.tokens -= cache0->tokens;
        d.hits -= cache0->hits;
        d.misses -= cache0->misses;
        d.admissions -= cache0->admissions;
        d.evictions -= cache0->evictions;
        d.bytes_copied -= cache0->bytes_copied;
        sample.cache = d;
    }
#ifdef MOX_HAVE_CUDA
    if (device == models::Device::cuda) {
        // Everything this process holds on the device (weights, activations, this row's state)
        // plus the CUDA context, as the driver counts it: total - free.
        const ops::CudaDeviceInfo info = ops::cuda_devices().front();
        sample.vram_bytes = info.total_bytes - info.free_bytes;
        const place::Allowance context{.cuda_context_bytes = cuda::context_bytes(),
                                       .measured = true,
                                       .source = "measured when the model was loaded"};
        const place::CacheOptions cache{.n_ctx = so.n_ctx, .k_type = so.k_type, .v_type = so.v_type};
        const place::RunShape run{.n_ubatch = su.gpu.n_ubatch, .stream_min_tokens = su.gpu.stream_min_tokens};
        sample.predicted_vram_bytes =
            place::predict_memory(*su.placement, hp, cache, context, run).gpu_total() +
            (sample.cache ? sample.cache->device_bytes : 0);  // the expert cache's pool: its exact size
        // The speed model's number for this row, when this machine has a hardware profile.
        // A profile without this model's types (a quick one made for another model) leaves the
        // cell empty and says why once: the measurement is the benchmark's job, the prediction a bonus.
        if (const auto profile =
                plan::load_profile(c.profile.empty() ? plan::default_profile_path() : c.profile);
            profile && c.test.n_prompt + c.test.n_gen > 0) {
            try {
                const plan::SpeedPrediction sp =
                    plan::predict_speed(*su.placement, hp, cache,
                                        {.run = run,
                                         .stream_min_tokens = su.gpu.stream_min_tokens,
                                         .prompt_tokens = std::max<int64_t>(1, c.test.n_prompt)},
                                        *profile);
                if (c.test.n_gen == 0)
                    sample.predicted_tps = sp.prefill.tokens_per_s;
                else if (c.test.n_prompt == 0)  // at the mean context of the generated tokens
                    sample.predicted_tps = plan::predict_decode(*su.placement, hp, cache,
                                                                c.test.n_depth + c.test.n_gen / 2, *profile)
                                               .tokens_per_s;
            } catch (const Error& e) {
                static bool said = false;
                if (!said) log::warn("bench: no predicted t/s: {}", e.what());
                said = true;
            }
        }
    }
#endif
    return sample;
}

}  // namespace mox::engine

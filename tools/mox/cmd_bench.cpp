// mox bench: llama-bench's options and tables, measured honestly (warm-up per configuration,
// repetitions interleaved across configurations, real-text prompts, median and spread). The logic
// lives in src/engine/bench_*; this file parses flags, drives the schedule and prints.
#include "commands.h"
#include "core/error.h"
#include "core/read_bandwidth.h"
#include "core/topology.h"
#include "core/units.h"
#include "engine/bench_compare.h"
#include "engine/bench_machine.h"
#include "engine/bench_options.h"
#include "engine/bench_report.h"
#include "engine/bench_run.h"
#include "flag_values.h"
#include "llama_flags.h"
#ifdef MOX_HAVE_CUDA
#include "ops/cuda_device.h"
#endif

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "build_commit.h"  // generated at build time: MOX_BUILD_COMMIT
#ifndef MOX_BENCH_CORPUS
#define MOX_BENCH_CORPUS ""
#endif
#ifndef MOX_BENCH_PLOT_SCRIPT
#define MOX_BENCH_PLOT_SCRIPT ""
#endif

namespace mox::cli {

namespace {

struct BenchFlags {
    std::vector<std::string> models, n_prompt, n_gen, pg, n_depth, threads, type_k, type_v, n_batch, n_ubatch,
        n_gpu_layers, n_cpu_moe, flash_attn, vram_budget, plan, expert_cache, cache_policy;
    int64_t cache_admit_cap = 32;
    std::string cache_profile, routing_trace;
    int repetitions = 5;
    std::string output = "md";
    std::string output_err;  // -oe: a second format, on stderr (llama-bench's option)
    std::string corpus = MOX_BENCH_CORPUS;
    bool random_prompt = false;         // uniformly random token ids instead of the corpus
    std::string compare, compare_args;  // llama-bench path, extra llama-bench arguments
    std::vector<std::string> plots;     // .svg / .png files
    std::string plot_x;                 // field on the x axis (default: the first swept one)
    std::string host_bandwidth;         // given instead of measured; "0": no roofline
    std::string override_tensor, moe_cpu_layers;
    bool cpu_moe = false;
    int64_t stream_min_tokens = 32;
    int64_t n_ctx = 0;
    // As mox run's.
    std::string isa = "auto";
    bool no_pin = false;
    std::string device;  // cpu or cuda: the default of -ngl (0 or 99)
    std::string profile;
};

// The plotting script and interpreter; the environment overrides the build's defaults.
std::string plot_script() {
    const char* env = std::getenv("MOX_BENCH_PLOT_SCRIPT");
    return env && *env ? env : MOX_BENCH_PLOT_SCRIPT;
}
std::string python() {
    const char* env = std::getenv("MOX_PYTHON");
    return env && *env ? env : "python3";
}

std::vector<std::string> plot_args(const BenchFlags& f, const std::string& json_path) {
    std::vector<std::string> a{plot_script(), json_path};
    for (const auto& p : f.plots) a.push_back(p);
    if (!f.plot_x.empty()) a.insert(a.end(), {"--x", f.plot_x});
    return a;
}

// Every occurrence of a flag may hold a list or range; occurrences add up (llama-bench's rule).
std::vector<int64_t> int_values(const std::vector<std::string>& specs, std::vector<int64_t> fallback) {
    if (specs.empty()) return fallback;
    std::vector<int64_t> out;
    for (const auto& s : specs)
        for (int64_t v : engine::parse_int_values(s)) out.push_back(v);
    return out;
}

std::vector<std::string> string_values(const std::vector<std::string>& specs,
                                       std::vector<std::string> fallback) {
    if (specs.empty()) return fallback;
    std::vector<std::string> out;
    for (const auto& s : specs)
        for (auto& v : engine::parse_string_values(s)) out.push_back(std::move(v));
    return out;
}

engine::BenchParams params_from(const BenchFlags& f) {
    engine::BenchParams p;
    p.models = f.models;
    p.n_prompt = int_values(f.n_prompt, p.n_prompt);
    p.n_gen = int_values(f.n_gen, p.n_gen);
    p.n_depth = int_values(f.n_depth, p.n_depth);
    for (const auto& s : f.pg) p.pg.push_back(engine::parse_pg_value(s));
    // llama-bench: when only -pg is given, the default pp/tg tests are still run; keep that.
    // One thread per physical core, as mox run (0 means the same); the row records the number used.
    const int cores = topology().physical_cores;
    p.threads = int_values(f.threads, {cores});
    for (auto& t : p.threads)
        if (t == 0) t = cores;
    p.type_k = string_values(f.type_k, p.type_k);
    p.type_v = string_values(f.type_v, p.type_v);
    p.n_batch = int_values(f.n_batch, p.n_batch);
    p.n_ubatch = int_values(f.n_ubatch, p.n_ubatch);
    std::string dev = f.device;
    std::transform(dev.begin(), dev.end(), dev.begin(), [](unsigned char c) { return std::tolower(c); });
    if (!dev.empty() && dev != "cpu" && dev != "none" && dev != "cuda" && dev != "cuda0" && dev != "gpu")
        fail("--device {}: expected cpu or cuda (one GPU: CUDA0)", f.device);
    const bool on_cpu = dev == "cpu" || dev == "none";
    p.n_gpu_layers = int_values(f.n_gpu_layers, {dev.empty() || on_cpu ? 0 : 99});
    for (int64_t n : p.n_gpu_layers)
        if (!dev.empty() && (n == 0) != on_cpu) fail("-ngl {} and --device {} disagree", n, f.device);
    p.n_cpu_moe = int_values(f.n_cpu_moe, p.n_cpu_moe);
    p.flash_attn.clear();
    for (const auto& v : string_values(f.flash_attn, {"auto"}))
        p.flash_attn.push_back(engine::flash_attn_value(v));
    p.vram_budget.clear();
    for (const auto& v : string_values(f.vram_budget, {"0"}))
        for (const auto& item : engine::parse_string_values(v))
            p.vram_budget.push_back(parse_size_flag("--vram-budget", item));
    // A budget is the planner's job (as in mox plan): --vram-budget without --plan plans.
    p.plan = string_values(f.plan, {f.vram_budget.empty() ? "manual" : "auto"});
    p.override_tensor = f.override_tensor;
    p.moe_cpu_layers = f.moe_cpu_layers;
    p.cpu_moe = f.cpu_moe;
    p.isa = f.isa;
    if (f.isa != "auto") cpu_isa_from_flag(f.isa);  // fails now on a name or tier this CPU lacks
    p.pin = !f.no_pin;
    p.profile = f.profile;
    p.stream_min_tokens = f.stream_min_tokens;
    p.expert_cache.clear();
    for (const auto& v : string_values(f.expert_cache, {"off"}))
        for (const auto& item : engine::parse_string_values(v))
            p.expert_cache.push_back(item == "off" || item == "0" ? 0 : parse_size_flag("--expert-cache", item));
    p.cache_policy = string_values(f.cache_policy, p.cache_policy);
    p.cache_admit_cap = f.cache_admit_cap;
    p.routing_trace = f.routing_trace;
    p.cache_profile = f.cache_profile;
    p.n_ctx = f.n_ctx;
    p.repetitions = f.repetitions;
    return p;
}

void progress(size_t done, size_t total, const engine::BenchConfig& c, const engine::ScheduleEntry& e,
              int reps) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / std::max<size_t>(total, 1));
    const std::string what =
        e.warmup ? "warm-up"
                 : fmt::format("{} rep {}/{}", e.engine == engine::BenchEngine::mox ? "mox" : "llama-bench",
                               e.repetition, reps);
    fmt::print(stderr, "\r\033[K[{}{}] {}/{} {} t={} ctk={} ctv={} {}", std::string(filled, '#'),
               std::string(kWidth - filled, '.'), done, total, c.test.name(), c.threads, c.type_k, c.type_v,
               what);
    std::fflush(stderr);
}

// Writes text to a fresh temporary file and returns its path (the plot script reads the results).
std::string write_temp(const std::string& text) {
    std::string path = (std::filesystem::temp_directory_path() / "mox-bench-XXXXXX.json").string();
    const int fd = mkstemps(path.data(), 5);
    if (fd < 0) fail("cannot create a temporary file in {}", std::filesystem::temp_directory_path().string());
    close(fd);
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

void check_plot_setup(const BenchFlags& f) {
    for (const auto& p : f.plots) {
        const std::string ext = std::filesystem::path(p).extension().string();
        if (ext != ".svg" && ext != ".png") fail("--plot '{}': the file must end in .svg or .png", p);
    }
    if (plot_script().empty() || !std::filesystem::exists(plot_script()))
        fail("--plot: plotting script '{}' not found (set MOX_BENCH_PLOT_SCRIPT)", plot_script());
    // Fails now, not after a long run, when matplotlib is missing.
    const engine::ProcessResult r = engine::run_process(python(), {plot_script(), "--check"});
    if (r.exit_code != 0) fail("--plot: '{} {} --check' failed:\n{}", python(), plot_script(), r.err + r.out);
}

// Host read bandwidth per thread count used by the sweep (measured once each, before the runs).
std::map<int, double> host_bandwidths(const BenchFlags& f, const std::vector<engine::BenchConfig>& configs,
                                      engine::BenchMeta& meta, bool tty) {
    std::map<int, double> bw;
    if (!f.host_bandwidth.empty()) {
        if (f.host_bandwidth == "0" || f.host_bandwidth == "off") return bw;  // no roofline
        const double given = parse_bandwidth_flag("--host-bandwidth", f.host_bandwidth);
        for (const auto& c : configs) bw[c.threads] = given;
        meta.bandwidth_source = "given";
        return bw;
    }
    // Only CPU decode rows read host memory.
    auto cpu_tg = [](const engine::BenchConfig& c) { return c.test.n_gen > 0 && c.n_gpu_layers == 0; };
    if (std::none_of(configs.begin(), configs.end(), cpu_tg)) return bw;
    meta.bandwidth_source = "measured";
    meta.bandwidth_buffer = bandwidth_buffer_bytes();
    for (const auto& c : configs) {
        if (bw.count(c.threads) || !cpu_tg(c)) continue;
        if (tty)
            fmt::print(stderr, "\r\033[Kmeasuring host read bandwidth ({} threads, {})", c.threads,
                       format_bytes(meta.bandwidth_buffer));
        bw[c.threads] = measure_read_bandwidth(c.threads, meta.bandwidth_buffer).bytes_per_s;
    }
    return bw;
}

void run_bench(const BenchFlags& f) {
    const engine::BenchParams params = params_from(f);
    const std::vector<engine::BenchConfig> configs = engine::expand_configs(params);
#ifdef MOX_HAVE_CUDA
    engine::check_supported(configs, true);
#else
    engine::check_supported(configs, false);
#endif
    engine::format_results(f.output, {}, {});  // an unknown -o fails now, not after the run
    if (!f.output_err.empty()) engine::format_results(f.output_err, {}, {});
    if (!f.plots.empty()) check_plot_setup(f);
    const std::vector<std::string> compare_extra = engine::split_args(f.compare_args);
    if (!f.compare.empty() && access(f.compare.c_str(), X_OK) != 0)
        fail("--compare '{}': not an executable file", f.compare);
    if (f.compare.empty() && !f.compare_args.empty()) fail("--compare-args needs --compare");

    auto make_runner = [&] {
        if (f.random_prompt) return engine::BenchRunner::random_tokens(42);
        if (std::filesystem::is_directory(f.corpus))
            fail("--corpus '{}' is a directory: give a text file of it", f.corpus);
        std::ifstream in(f.corpus, std::ios::binary);
        if (!in) fail("cannot read the benchmark corpus '{}' (--corpus)", f.corpus);
        std::stringstream ss;
        ss << in.rdbuf();
        return engine::BenchRunner(ss.str());
    };
    engine::BenchRunner runner = make_runner();

    engine::BenchMeta meta;
    meta.build_commit = MOX_BUILD_COMMIT;
    meta.cpu_info = engine::cpu_model_name();
    meta.cpu_cores = engine::logical_cpus();
    meta.corpus = f.random_prompt ? "random token ids (seed 42)" : f.corpus;
    meta.compare = !f.compare.empty();
    {
        const bool gpu =
            std::any_of(configs.begin(), configs.end(), [](const auto& c) { return c.n_gpu_layers != 0; });
        const bool cpu =
            std::any_of(configs.begin(), configs.end(), [](const auto& c) { return c.n_gpu_layers == 0; });
        meta.backends = gpu && cpu ? "CPU,CUDA" : gpu ? "CUDA" : "CPU";
    }

    std::vector<engine::BenchResult> results(configs.size());
    for (size_t i = 0; i < configs.size(); ++i) {
        results[i].config = configs[i];
        results[i].model = runner.model_info(configs[i].model);
        if (meta.compare) results[i].llama.emplace();
    }
    const bool tty = isatty(STDERR_FILENO) != 0;
    const std::map<int, double> bw = host_bandwidths(f, configs, meta, tty);
    for (auto& r : results)
        if (auto it = bw.find(r.config.threads); it != bw.end() && r.config.n_gpu_layers == 0)
            r.host_read_bytes_per_s = it->second;
#ifdef MOX_HAVE_CUDA
    for (auto& r : results)
        if (r.config.n_gpu_layers != 0) r.gpu_bytes_per_s = ops::cuda_devices().front().peak_bandwidth;
#endif

    auto schedule = engine::interleaved_schedule(configs.size(), params.repetitions, meta.compare);
    // GPU configurations that differ in what is fixed at load (placement, budget, micro-batch,
    // context...) would reload the whole model for every repetition if interleaved: they run one
    // setup after another instead (interleaved within a setup, e.g. its pp and tg tests).
    auto setup_of = [&](const engine::BenchConfig& c) {
        if (c.n_gpu_layers == 0) return std::string("cpu");
        return fmt::format("{} {} {} {} {} {} {} {} {} {} {} {}", c.n_gpu_layers, c.n_cpu_moe, c.vram_budget,
                           c.plan, c.n_ubatch, c.override_tensor, c.moe_cpu_layers, c.stream_min_tokens,
                           c.type_k, c.type_v, c.expert_cache, c.cache_policy);
    };
    std::stable_sort(schedule.begin(), schedule.end(), [&](const auto& a, const auto& b) {
        return setup_of(configs[a.config]) < setup_of(configs[b.config]);
    });
    for (size_t k = 0; k < schedule.size(); ++k) {
        const auto& e = schedule[k];
        if (tty) progress(k, schedule.size(), configs[e.config], e, params.repetitions);
        auto& r = results[e.config];
        if (!e.warmup && r.test_time.empty()) r.test_time = engine::utc_now_iso8601();
        if (e.engine == engine::BenchEngine::llama) {
            const engine::LlamaBenchSample s =
                engine::run_llama_bench(f.compare, configs[e.config], compare_extra);
            r.llama->samples_ns.push_back(s.ns);
            r.llama->samples_ts.push_back(s.tokens_per_s);
            r.llama->run_slots.push_back(static_cast<int64_t>(k));
            r.llama->build_commit = s.build_commit;
            continue;
        }
        const engine::BenchSample s = runner.run(configs[e.config]);
        if (e.warmup) continue;
        r.samples_ns.push_back(s.ns);
        r.samples_ts.push_back(s.tokens_per_s);
        r.run_slots.push_back(static_cast<int64_t>(k));
        // The shares stay parallel to the samples: once a repetition has none, the row stops recording.
        if (s.cpu && r.host_cpu_other.size() + 1 == r.samples_ts.size()) {
            r.host_cpu_other.push_back(s.cpu->other);
            r.host_cpu_steal.push_back(s.cpu->steal);
        }
        if (e.repetition == params.repetitions) {
            const engine::MemoryUse mem = engine::process_memory();
            r.host_rss_bytes = mem.rss_bytes;
            r.host_peak_bytes = mem.peak_bytes;
            r.vram_bytes = s.vram_bytes;
            r.predicted_vram_bytes = s.predicted_vram_bytes;
            r.predicted_tps = s.predicted_tps;
            if (s.cache) {  // the last repetition's: the cache warmed by the earlier ones, as in a server
                r.expert_cache_hit_rate = s.cache->hit_rate();
                r.pcie_bytes = s.cache->bytes_copied;
                if (s.cache->tokens > 0)
                    r.expert_cache_misses_per_token =
                        static_cast<double>(s.cache->misses) / static_cast<double>(s.cache->tokens);
            }
        }
    }
    if (tty) fmt::print(stderr, "\r\033[K");
    fmt::print("{}", engine::format_results(f.output, results, meta));
    std::fflush(stdout);
    if (!f.output_err.empty()) fmt::print(stderr, "{}", engine::format_results(f.output_err, results, meta));

    if (f.plots.empty()) return;
    const std::string json_path = write_temp(engine::format_json(results, meta));
    const engine::ProcessResult p = engine::run_process(python(), plot_args(f, json_path));
    std::filesystem::remove(json_path);
    if (p.exit_code != 0) fail("--plot failed:\n{}", p.err + p.out);
    if (tty && !p.out.empty()) fmt::print(stderr, "{}", p.out);
}

}  // namespace

void register_bench(CLI::App& app) {
    auto f = std::make_shared<BenchFlags>();
    CLI::App* cmd = app.add_subcommand(
        "bench", "Benchmark prompt processing and generation (llama-bench's options and columns)");
    cmd->footer(
        "Each test option takes several values: '1,2,3', ranges 'first-last', 'first-last+step', "
        "'first-last*mult', or the flag repeated. Every combination is one configuration; each is warmed up "
        "once, then repetitions run interleaved across configurations. See docs/bench.md.");
    auto multi = [&](const std::string& names, std::vector<std::string>& into, const std::string& help) {
        cmd->add_option(names, into, help)->allow_extra_args(false);
    };
    multi("-m,--model", f->models, "GGUF model file(s)");
    multi("-p,--n-prompt", f->n_prompt, "Prompt tokens of a pp test (default 512; 0: none)");
    multi("-n,--n-gen", f->n_gen, "Generated tokens of a tg test (default 128; 0: none)");
    multi("--pg", f->pg, "pp+tg test 'pp,tg' (-pg)");
    multi("-d,--n-depth", f->n_depth,
          "Context already filled (by an untimed prefill) before the test (default 0)");
    multi("-t,--threads", f->threads, "CPU threads (default: one per physical core)");
    multi("--cache-type-k", f->type_k, "KV cache type for K (-ctk; default f16)");
    multi("--cache-type-v", f->type_v, "KV cache type for V (-ctv; default f16)");
    multi("-b,--batch-size", f->n_batch, "Logical batch size (default 2048; recorded, not acted on)");
    multi("--ubatch-size", f->n_ubatch, "Tokens per forward pass during prefill (-ub; default 512)");
    multi(
        "--n-gpu-layers,--gpu-layers", f->n_gpu_layers,
        "Layers on the GPU (-ngl: 0 = CPU, 99 = all; needs a CUDA build; default: 0, 99 with --device cuda)");
    multi("--n-cpu-moe", f->n_cpu_moe,
          "Keep the experts of the first N layers on the CPU (-ncmoe, with -ngl 99)");
    cmd->add_option(
        "--override-tensor", f->override_tensor,
        "-ot REGEX=DEVICE[,...] for every configuration (as llama.cpp; passed to llama-bench too)");
    cmd->add_option("-c,--ctx-size", f->n_ctx,
                    "Context of every run's state (the KV cache held; default 0: what the test needs)");
    cmd->add_option("--moe-cpu-layers", f->moe_cpu_layers,
                    "Keep the experts of these layers on the CPU, e.g. 0-9,20");
    cmd->add_flag("--cpu-moe", f->cpu_moe, "Keep every layer's experts on the CPU (-cmoe, with -ngl 99)");
    cmd->add_option("--isa", f->isa, "CPU kernel tier: auto, avx512, avx2, scalar (the reference path)")
        ->capture_default_str();
    cmd->add_flag("--no-pin", f->no_pin, "Do not pin worker threads to cores");
    cmd->add_option("--device", f->device, "cpu or cuda: the default of -ngl (0 or 99)");
    cmd->add_option(
        "--profile", f->profile,
        "Hardware profile for --plan auto and the predicted t/s (default: `mox calibrate`'s cache)");
    cmd->add_option(
           "--stream-min-tokens", f->stream_min_tokens,
           "Prefill micro-batches of at least this many tokens stream CPU-resident experts to the GPU")
        ->capture_default_str();
    multi("--flash-attn", f->flash_attn, "on|off|auto (-fa; recorded, not acted on)");
    cmd->add_option("-r,--repetitions", f->repetitions, "Timed repetitions per configuration")
        ->capture_default_str();
    cmd->add_option("-o,--output", f->output, "Output format: md, csv, json, jsonl, sql")
        ->capture_default_str();
    cmd->add_option("--output-err", f->output_err, "Also print this format on stderr (-oe)");
    multi("--vram-budget", f->vram_budget,
          "GPU memory budget(s), e.g. 24G,16G: mox never allocates more (CUDA context included; 0: none)");
    multi("--expert-cache", f->expert_cache,
          "Expert cache size(s) on the GPU, e.g. off,4GiB (docs/expert-cache.md; rows with host expert layers)");
    multi("--cache-policy", f->cache_policy, "Expert cache policies, e.g. lru,lfu,lru:admit=2");
    cmd->add_option("--cache-admit-cap", f->cache_admit_cap, "Most experts admitted to the cache per token")
        ->capture_default_str();
    cmd->add_option("--cache-profile", f->cache_profile,
                    "A routing trace whose expert counts choose the static policy's hot set");
    cmd->add_option("--routing-trace", f->routing_trace,
                    "Replay this routing trace: the experts that run are the trace's (every row says so)");
    multi("--plan", f->plan,
          "manual (placement from the flags) or auto (the planner within --vram-budget; flags constrain it); "
          "default: auto with --vram-budget, else manual");
    cmd->add_option("--corpus", f->corpus, "Text file prompts are made of (default: bench/corpus)");
    cmd->add_flag("--random-prompt", f->random_prompt,
                  "Prompts of random token ids (llama-bench's way) instead of real text; they route experts "
                  "unlike text");
    cmd->add_option("--compare", f->compare,
                    "llama.cpp's llama-bench: run it on the same file and options, interleaved with mox");
    cmd->add_option("--compare-args", f->compare_args,
                    "Extra llama-bench arguments, split on spaces (e.g. \"--repack 0\")");
    cmd->add_option("--plot", f->plots, "Plot t/s and memory against the swept option (.svg or .png)")
        ->allow_extra_args(false);
    cmd->add_option("--plot-x", f->plot_x, "Field on the plot's x axis (default: the first swept option)");
    cmd->add_option("--host-bandwidth", f->host_bandwidth,
                    "Host read bandwidth for the roofline, e.g. 80GB/s, instead of measuring it (0: none)");
    add_llama_flags(cmd, Command::bench);
    cmd->callback([f] { run_bench(*f); });
}

}  // namespace mox::cli

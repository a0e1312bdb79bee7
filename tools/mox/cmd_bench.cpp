// mox bench: llama-bench's options and tables, measured honestly (warm-up per configuration,
// repetitions interleaved across configurations, real-text prompts, median and spread). The logic
// lives in src/engine/bench_*; this file parses flags, drives the schedule and prints.
#include "commands.h"
#include "core/error.h"
#include "engine/bench_machine.h"
#include "engine/bench_options.h"
#include "engine/bench_report.h"
#include "engine/bench_run.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <fstream>
#include <memory>
#include <sstream>

#ifndef MOX_BUILD_COMMIT
#define MOX_BUILD_COMMIT "unknown"
#endif
#ifndef MOX_BENCH_CORPUS
#define MOX_BENCH_CORPUS ""
#endif

namespace mox::cli {

namespace {

struct BenchFlags {
    std::vector<std::string> models, n_prompt, n_gen, pg, n_depth, threads, type_k, type_v, n_batch, n_ubatch,
        n_gpu_layers, n_cpu_moe, flash_attn;
    int repetitions = 5;
    std::string output = "md";
    std::string corpus = MOX_BENCH_CORPUS;
};

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
    p.threads = int_values(f.threads, {engine::logical_cpus()});
    for (auto& t : p.threads)
        if (t == 0) t = engine::logical_cpus();  // record the number actually used
    p.type_k = string_values(f.type_k, p.type_k);
    p.type_v = string_values(f.type_v, p.type_v);
    p.n_batch = int_values(f.n_batch, p.n_batch);
    p.n_ubatch = int_values(f.n_ubatch, p.n_ubatch);
    p.n_gpu_layers = int_values(f.n_gpu_layers, p.n_gpu_layers);
    p.n_cpu_moe = int_values(f.n_cpu_moe, p.n_cpu_moe);
    p.flash_attn.clear();
    for (const auto& v : string_values(f.flash_attn, {"auto"}))
        p.flash_attn.push_back(engine::flash_attn_value(v));
    p.repetitions = f.repetitions;
    return p;
}

// Only the CPU path exists; a GPU request is refused rather than silently run on the CPU.
void check_backend(const std::vector<engine::BenchConfig>& configs) {
    for (const auto& c : configs) {
        if (c.n_gpu_layers == 0) continue;
#ifdef MOX_HAVE_CUDA
        fail("-ngl {}: mox bench runs the CPU path only so far (use -ngl 0)", c.n_gpu_layers);
#else
        fail("-ngl {}: CUDA backend not built; this mox runs models on the CPU only (use -ngl 0)",
             c.n_gpu_layers);
#endif
    }
}

void progress(size_t done, size_t total, const engine::BenchConfig& c, const engine::ScheduleEntry& e,
              int reps) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / std::max<size_t>(total, 1));
    const std::string what = e.warmup ? "warm-up" : fmt::format("rep {}/{}", e.repetition, reps);
    fmt::print(stderr, "\r\033[K[{}{}] {}/{} {} t={} ctk={} ctv={} {}", std::string(filled, '#'),
               std::string(kWidth - filled, '.'), done, total, c.test.name(), c.threads, c.type_k, c.type_v,
               what);
    std::fflush(stderr);
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
    multi("-t,--threads", f->threads, "CPU threads (default: all logical CPUs)");
    multi("--cache-type-k", f->type_k, "KV cache type for K (-ctk; default f16)");
    multi("--cache-type-v", f->type_v, "KV cache type for V (-ctv; default f16)");
    multi("-b,--batch-size", f->n_batch, "Logical batch size (default 2048; recorded, not acted on)");
    multi("--ubatch-size", f->n_ubatch, "Tokens per forward pass during prefill (-ub; default 512)");
    multi("--n-gpu-layers", f->n_gpu_layers, "Layers on the GPU (-ngl; only 0 until the GPU path lands)");
    multi("--n-cpu-moe", f->n_cpu_moe,
          "MoE layers kept on the CPU (-ncmoe; recorded; everything is on the CPU)");
    multi("--flash-attn", f->flash_attn, "on|off|auto (-fa; recorded, not acted on)");
    cmd->add_option("-r,--repetitions", f->repetitions, "Timed repetitions per configuration")
        ->capture_default_str();
    cmd->add_option("-o,--output", f->output, "Output format: md, csv, json, jsonl, sql")
        ->capture_default_str();
    cmd->add_option("--corpus", f->corpus, "Text file prompts are made of (default: bench/corpus)");
    cmd->callback([f] {
        const engine::BenchParams params = params_from(*f);
        const std::vector<engine::BenchConfig> configs = engine::expand_configs(params);
        check_backend(configs);
        engine::format_results(f->output, {}, {});  // an unknown -o fails now, not after the run

        std::ifstream in(f->corpus, std::ios::binary);
        if (!in) fail("cannot read the benchmark corpus '{}' (--corpus)", f->corpus);
        std::stringstream ss;
        ss << in.rdbuf();
        engine::BenchRunner runner(ss.str());

        engine::BenchMeta meta;
        meta.build_commit = MOX_BUILD_COMMIT;
        meta.cpu_info = engine::cpu_model_name();
        meta.cpu_cores = engine::logical_cpus();
        meta.corpus = f->corpus;

        std::vector<engine::BenchResult> results(configs.size());
        for (size_t i = 0; i < configs.size(); ++i) {
            results[i].config = configs[i];
            results[i].model = runner.model_info(configs[i].model);
        }
        const auto schedule = engine::interleaved_schedule(configs.size(), params.repetitions);
        const bool tty = isatty(STDERR_FILENO) != 0;
        for (size_t k = 0; k < schedule.size(); ++k) {
            const auto& e = schedule[k];
            if (tty) progress(k, schedule.size(), configs[e.config], e, params.repetitions);
            auto& r = results[e.config];
            if (!e.warmup && r.test_time.empty()) r.test_time = engine::utc_now_iso8601();
            const engine::BenchSample s = runner.run(configs[e.config]);
            if (e.warmup) continue;
            r.samples_ns.push_back(s.ns);
            r.samples_ts.push_back(s.tokens_per_s);
            r.run_slots.push_back(static_cast<int64_t>(k));
            if (e.repetition == params.repetitions) {
                const engine::MemoryUse mem = engine::process_memory();
                r.host_rss_bytes = mem.rss_bytes;
                r.host_peak_bytes = mem.peak_bytes;
            }
        }
        if (tty) fmt::print(stderr, "\r\033[K");
        fmt::print("{}", engine::format_results(f->output, results, meta));
    });
}

}  // namespace mox::cli

// mox: one executable, subcommands (run, inspect, synth, ...).
#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/tuning.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

namespace {

// llama.cpp spells some long options with one dash (-ctk, -ngl, ...); CLI11 reserves single-dash
// names for one letter, so they are rewritten to their long form before parsing.
std::vector<std::string> expand_llama_style_options(int argc, char** argv) {
    static const std::pair<const char*, const char*> kAliases[] = {
        {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-ngl", "--n-gpu-layers"},
        {"-ncmoe", "--n-cpu-moe"},  {"-ub", "--ubatch-size"},   {"-fa", "--flash-attn"},
        {"-ot", "--override-tensor"}, {"-pg", "--pg"}, {"-oe", "--output-err"}};
    std::vector<std::string> args(argv, argv + argc);
    for (size_t i = 1; i < args.size(); ++i)
        for (const auto& [short_name, long_name] : kAliases)
            if (args[i] == short_name) args[i] = long_name;
    return args;
}

}  // namespace

int main(int argc, char** argv) {
    // CUDA's default lazy module loading stays: kernels load at first use, which grows the context
    // by a few MiB after mox measured it for --vram-budget (inside the planner's margin; `mox
    // calibrate` measures the context after its probes ran the kernels). Eager loading made that
    // exact while mox was the only library, but it also loads every kernel cuBLAS has for the GPU:
    // ~460 MiB on the H200 (bench/results/2026-11-30-cublas-projections-h200), VRAM a small card needs
    // for experts.
    CLI::App app{"mox: Mixture-of-Experts inference that plans its own GPU/CPU placement"};
    app.require_subcommand(1);
    bool verbose = false;
    app.add_flag("-v,--verbose", verbose, "Debug logging");
    app.parse_complete_callback([&] {
        if (verbose) mox::log::set_level(mox::log::Level::debug);
        mox::tuning();  // a bad MOX_* tuning value is an error before any command runs (core/tuning.h)
    });
    mox::cli::register_run(app);
    mox::cli::register_chat(app);
    mox::cli::register_perplexity(app);
    mox::cli::register_inspect(app);
    mox::cli::register_synth(app);
    mox::cli::register_logits(app);
    mox::cli::register_devices(app);
    mox::cli::register_convert(app);
    mox::cli::register_bench(app);
    mox::cli::register_plan(app);
    mox::cli::register_calibrate(app);
    mox::cli::register_serve(app);
    try {
        std::vector<std::string> args = expand_llama_style_options(argc, argv);
        std::vector<char*> ptrs;
        for (auto& a : args) ptrs.push_back(a.data());
        app.parse(static_cast<int>(ptrs.size()), ptrs.data());
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const mox::Error& e) {
        std::fprintf(stderr, "mox: error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "mox: error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mox: error: %s\n", e.what());
        return 1;
    }
    return 0;
}

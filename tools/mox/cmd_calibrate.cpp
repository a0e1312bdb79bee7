// mox calibrate: measures this machine's bandwidths and fixed costs for the planner's speed model
// (docs/calibrate.md) and caches them as a hardware profile (plan/hardware.h); --show prints a saved one.
#include "commands.h"
#include "core/error.h"
#include "core/units.h"
#include "plan/calibrate.h"
#include "plan/hardware.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "build_commit.h"  // generated at build time: MOX_BUILD_COMMIT

namespace mox::cli {

namespace {

struct CalibrateFlags {
    std::string out;
    bool quick = false;
    std::string types;
    int threads = 0;
    bool json = false;
    bool no_gpu = false;
    std::string show_path;
};

std::vector<quant::TypeId> parse_types(const std::string& list) {
    std::vector<quant::TypeId> out;
    size_t pos = 0;
    while (pos <= list.size()) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        const std::string name = list.substr(pos, comma - pos);
        pos = comma + 1;
        if (name.empty()) continue;
        const auto id = quant::type_from_name(name);
        if (!id) fail("--types: unknown weight type '{}'", name);
        out.push_back(*id);
    }
    if (out.empty()) fail("--types: no type given");
    return out;
}

std::string rate(const std::map<std::string, double>& m, const std::string& key, const char* format) {
    const auto it = m.find(key);
    return it == m.end() ? std::string("-") : fmt::format(fmt::runtime(format), it->second);
}

// Every type that has any entry, in the order of the first table that names it.
std::vector<std::string> type_keys(const std::map<std::string, double>& a,
                                   const std::map<std::string, double>& b) {
    std::vector<std::string> keys;
    for (const auto* m : {&a, &b})
        for (const auto& [k, v] : *m)
            if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    return keys;
}

void print_profile(const plan::HardwareProfile& p) {
    fmt::print("machine {}  ({} {}, mox {})\n", p.machine.empty() ? "?" : p.machine,
               p.measured ? "measured" : "written by hand", p.created.empty() ? "?" : p.created,
               p.mox_commit.empty() ? "?" : p.mox_commit);
    fmt::print("host\n");
    fmt::print("  {:<46} {}\n", "RAM (MemTotal)", format_bytes(p.host_ram_bytes));
    fmt::print("  {:<46} {}\n", "pinnable memory (RLIMIT_MEMLOCK, or RAM)",
               format_bytes(p.host_lockable_bytes));
    fmt::print("cpu ({} threads)\n", p.cpu.threads);
    fmt::print("  {:<46} {:.1f} GB/s\n", "DRAM streaming read, all threads", p.cpu.dram_gbps);
    fmt::print("  routed experts (ops::moe_ffn, k = 8, 2048 x 512 experts):\n");
    fmt::print("    {:<10} {:>22} {:>26}\n", "type", "batch 1: weight GB/s", "prefill batch: GFLOP/s");
    for (const std::string& t : type_keys(p.cpu.expert_gbps, p.cpu.expert_gflops))
        fmt::print("    {:<10} {:>22} {:>26}\n", t, rate(p.cpu.expert_gbps, t, "{:.1f}"),
                   rate(p.cpu.expert_gflops, t, "{:.1f}"));
    if (!p.gpu) {
        fmt::print("gpu: none measured\n");
        return;
    }
    const plan::GpuProfile& g = *p.gpu;
    fmt::print("gpu {} ({})\n", g.name, format_bytes(g.total_bytes));
    fmt::print("  {:<46} {}\n", "memory in use with mox's context and kernels",
               format_bytes(g.context_bytes));
    fmt::print("  {:<46} {:.1f} GB/s\n", "host -> device copy, pinned memory", g.h2d_pinned_gbps);
    fmt::print("  {:<46} {:.1f} GB/s\n", "host -> device copy, pageable memory", g.h2d_pageable_gbps);
    fmt::print("  {:<46} {:.2f} us per kernel\n", "launch gap in a replayed graph", g.launch_gap_s * 1e6);
    fmt::print("  {:<46} {:.2f} us\n", "host round trip in a graph (copy, callback, copy)",
               g.host_roundtrip_s * 1e6);
    if (g.handoff_roundtrip_s > 0)
        fmt::print("  {:<46} {:.2f} us\n", "decode hand-off to the CPU (publish, collect)",
                   g.handoff_roundtrip_s * 1e6);
    if (g.deltanet_step_s > 0)
        fmt::print("  {:<46} {:.2f} us per layer ({} of state)\n", "Gated DeltaNet decode step (conv + delta rule)",
                   g.deltanet_step_s * 1e6, format_bytes(g.deltanet_state_bytes));
    if (!g.attention_decode_f16.empty()) {
        std::string points;
        for (const auto& [keys, s] : g.attention_decode_f16)
            points += fmt::format("{}{} keys {:.2f} us", points.empty() ? "" : ", ", keys, s * 1e6);
        fmt::print("  {:<46} {}\n", "decode attention per layer (f16 cache)", points);
    }
    if (g.deltanet_prefill_token_s > 0)
        fmt::print("  {:<46} {:.3f} us per token and layer\n", "Gated DeltaNet prefill (conv + chunked rule)",
                   g.deltanet_prefill_token_s * 1e6);
    const std::string large = g.moe_prefill_large_tokens > 0
                                  ? fmt::format("MoE, {} tokens: TFLOP/s", g.moe_prefill_large_tokens)
                                  : std::string("MoE, large batch: TFLOP/s");
    fmt::print("    {:<10} {:>28} {:>28} {:>28} {:>28} {:>28}\n", "type", "matvec, 1 token: weight GB/s",
               "MoE decode layer: weight GB/s", "matmul, 512 tokens: TFLOP/s", "MoE, 512 tokens: TFLOP/s",
               large);
    for (const std::string& t : type_keys(g.matvec_gbps, g.matmul_tflops))
        fmt::print("    {:<10} {:>28} {:>28} {:>28} {:>28} {:>28}\n", t, rate(g.matvec_gbps, t, "{:.1f}"),
                   rate(g.moe_decode_gbps, t, "{:.1f}"), rate(g.matmul_tflops, t, "{:.2f}"),
                   rate(g.moe_prefill_tflops, t, "{:.2f}"), rate(g.moe_prefill_large_tflops, t, "{:.2f}"));
}

void run(const CalibrateFlags& f, bool show) {
    if (show) {
        const std::string path = f.show_path.empty() ? plan::default_profile_path() : f.show_path;
        const auto p = plan::load_profile(path);
        if (!p) fail("no hardware profile at {}: run `mox calibrate` first", path);
        if (f.json)
            fmt::print("{}", plan::profile_to_json(*p));
        else {
            fmt::print("{}\n", path);
            print_profile(*p);
        }
        return;
    }
    plan::CalibrateOptions o = f.quick ? plan::quick_calibrate_options() : plan::CalibrateOptions{};
    if (!f.types.empty()) o.types = parse_types(f.types);
    o.threads = f.threads;
    o.gpu = !f.no_gpu;
    o.mox_commit = MOX_BUILD_COMMIT;
    const auto t0 = std::chrono::steady_clock::now();
    o.progress = [&](const std::string& what) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "calibrate [%5.1f s] %s\n", s, what.c_str());
    };
    std::vector<std::string> notes;
    const plan::HardwareProfile p = plan::calibrate(o, &notes);
    const std::string path = f.out.empty() ? plan::default_profile_path() : f.out;
    plan::save_profile(p, path);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (f.json) {
        fmt::print("{}", plan::profile_to_json(p));
    } else {
        print_profile(p);
        for (const std::string& n : notes) fmt::print("note: {}\n", n);
    }
    std::fprintf(stderr, "calibrate: done in %.1f s; profile saved to %s\n", secs, path.c_str());
}

}  // namespace

void register_calibrate(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand(
        "calibrate", "Measure this machine's bandwidths and overheads for the planner and cache them");
    auto f = std::make_shared<CalibrateFlags>();
    cmd->add_option("--out", f->out, "Where to save the profile (default: the per-machine cache file)");
    cmd->add_flag("--quick", f->quick, "Fewer types, smaller buffers and repetitions (a few seconds)");
    cmd->add_option("--types", f->types, "Weight types to measure, comma-separated (e.g. q4_K,q8_0)");
    cmd->add_option("-t,--threads", f->threads, "CPU threads (default: one per physical core)");
    cmd->add_flag("--json", f->json, "Print the profile as JSON instead of a table");
    cmd->add_flag("--no-gpu", f->no_gpu, "Measure the CPU only");
    CLI::Option* show =
        cmd->add_option("--show", f->show_path, "Print a saved profile (default: this machine's)")
            ->expected(0, 1);
    cmd->callback([f, show] { run(*f, show->count() > 0); });
}

}  // namespace mox::cli

// mox_sampler_bench: the host time of one token's sampling (engine::Sampler::sample) over a
// vocabulary of Qwen3.6's size, for the sampler settings people use: greedy, the defaults (top-k 40,
// top-p 0.95, min-p 0.05, temperature 0.8), top-k alone, and the defaults with a repetition penalty.
// On a GPU this runs between two decode steps while the GPU waits, so its microseconds add to every
// generated token. Logits are N(0, sigma) (a flat worst case for the selection) or, with --peaked,
// one token well above the rest, as trained models' usually are. Single-threaded; reported per
// setting: calls, median and p10 / p90 / min / max microseconds, and the share of a core the run got.
#include "bench_common.h"
#include "engine/sampler.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using mox::engine::Sampler;
using mox::engine::SamplerParams;

struct Setting {
    std::string name;
    SamplerParams params;
    bool history = false;  // a 64-token history for the penalties
};

double percentile(std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    const auto i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"mox_sampler_bench: host microseconds of one token's sampling"};
    int64_t vocab = 248320;
    int reps = 300;
    float sigma = 3.0f;
    bool peaked = false;
    std::string label;
    app.add_option("--vocab", vocab, "vocabulary size")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
    app.add_option("-r,--reps", reps, "timed calls per setting (after 10 warm-up calls)")
        ->check(CLI::PositiveNumber);
    app.add_option("--sigma", sigma, "standard deviation of the logits")->check(CLI::PositiveNumber);
    app.add_flag("--peaked", peaked, "one logit 10 sigma above the rest");
    app.add_option("--label", label, "printed in the table's first column (e.g. the commit)");
    CLI11_PARSE(app, argc, argv);

    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (float& x : logits) x = dist(rng);
    if (peaked) logits[static_cast<size_t>(vocab / 3)] = 10.0f * sigma;
    std::vector<int32_t> history(64);
    for (int32_t& id : history) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));

    SamplerParams greedy;
    greedy.temperature = 0.0f;
    SamplerParams defaults;  // SamplerParams' defaults: top-k 40, top-p 0.95, min-p 0.05, temperature 0.8
    SamplerParams top_k;
    top_k.top_p = 1.0f, top_k.min_p = 0.0f;
    SamplerParams penalty = defaults;
    penalty.repetition_penalty = 1.1f;
    const std::vector<Setting> settings = {{"greedy", greedy, false},
                                           {"defaults", defaults, false},
                                           {"top-k 40 only", top_k, false},
                                           {"defaults + repetition penalty 1.1", penalty, true}};

    fmt::print(
        "| build | setting | vocabulary | logits | calls | median us | p10 | p90 | min | max | cpu share "
        "|\n");
    fmt::print("| :-- | :-- | --: | :-- | --: | --: | --: | --: | --: | --: | --: |\n");
    for (const Setting& s : settings) {
        SamplerParams p = s.params;
        p.seed = 1;
        Sampler sampler(p);
        const std::vector<int32_t> hist = s.history ? history : std::vector<int32_t>{};
        int64_t sink = 0;
        for (int i = 0; i < 10; ++i) sink += sampler.sample(logits, hist);
        std::vector<double> us;
        us.reserve(static_cast<size_t>(reps));
        const double cpu0 = mox::bench::process_cpu_seconds();
        const auto wall0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            sink += sampler.sample(logits, hist);
            us.push_back(
                std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        }
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
        const double share = wall > 0 ? (mox::bench::process_cpu_seconds() - cpu0) / wall : 0;
        fmt::print("| {} | {} | {} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.2f} |\n",
                   label.empty() ? "-" : label, s.name, vocab,
                   peaked ? "peaked" : fmt::format("N(0, {})", sigma), reps, percentile(us, 0.5),
                   percentile(us, 0.1), percentile(us, 0.9), *std::min_element(us.begin(), us.end()),
                   *std::max_element(us.begin(), us.end()), share);
        if (sink == -1) fmt::print("unreachable\n");  // keeps the calls observable
    }
    return 0;
}

// mox_moe_bench: the CPU half of a hybrid decode step, ops::moe_ffn for one token (or a few), against
// the DRAM bandwidth of the same memory.
//
// It builds --layers expert stacks of the real shapes and types (Qwen3.6-35B-A3B Q4_K_M by default:
// 256 experts, gate/up Q4_K [512 x 2048], down Q6_K [2048 x 512]), at least --min-mib in all, far
// beyond the last-level cache. Each call takes the next layer and top-k experts drawn from that layer's
// shuffled deck, so an expert comes back only after every other expert of every layer has been read:
// every call streams its ~14-16 MB from DRAM, as decode does. Between calls the caller waits --gap-us
// (spinning, or sleeping with --gap sleep), the GPU's part of the layer in the hybrid backend, during
// which the pool's workers idle (spin, then sleep after the pool's spin window).
//
// Several operator configurations (MoeOptions: --min-task-kib, --max-task-kib and --prefetch lists, and the
// two-job path) are timed in turn on the same stacks, in rounds. Reported per configuration: time per call
// (median, min, p10, p90, max, mean), GB/s of the expert bytes the call touched and the fraction of a
// STREAM-style read of the same buffers on the same pool; overall, how often workers slept.
// Before timing, the first call is checked: each one-job configuration must equal the two-job path bit for
// bit and stay within 5% RMS of the scalar reference kernels, and the timed calls must not touch the heap
// (counted through a replaced operator new); the tool exits 1 otherwise.
#include "bench_common.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "core/topology.h"
#include "engine/bench_machine.h"
#include "ops/moe.h"
#include "quant/dot.h"
#include "quant/types.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <new>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

// Every operator new of the process, on any thread: the timed decode calls must make none.
namespace {
std::atomic<int64_t> g_allocations{0};
void* counted_alloc(size_t n) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
    throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t n) {
    return counted_alloc(n);
}
void* operator new[](size_t n) {
    return counted_alloc(n);
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
    std::free(p);
}

namespace {

using mox::quant::TypeId;
using Clock = std::chrono::steady_clock;

struct Options {
    int threads = 0;  // 0: one per physical core
    int64_t layers = 0;
    int64_t min_mib = 2048;
    int64_t n_embd = 2048, n_ff = 512, n_expert = 256, k = 8, tokens = 1;
    std::string gate = "q4_k", up, down = "q6_k";
    int64_t calls = 1000, warmup = 100;
    double gap_us = 0;
    std::string gap_mode = "spin";
    int64_t spin_us = -1;  // -1: the pool's default (MOX_SPIN_US or 200)
    bool hold = false;
    bool caller_idle = false;
    bool huge_pages = false;
    std::string isa;
    std::vector<int64_t> min_task_kib{mox::ops::MoeOptions{}.min_task_bytes >> 10};
    std::vector<int64_t> max_task_kib{mox::ops::MoeOptions{}.max_task_bytes >> 10};
    std::vector<int64_t> prefetch{mox::ops::MoeOptions{}.prefetch_bytes};
    int64_t fused_max_tokens = mox::ops::MoeOptions{}.fused_max_tokens;
    bool two_job = true;
    int64_t rounds = 5;
    int64_t stream_mib = 1024;
    std::string output = "md";
    bool check = true;
};

double percentile(std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

// Anonymous memory with the page size decode sees: small pages by default (the runtime's experts live
// in the page cache or in pinned buffers), 2 MiB transparent huge pages with --huge-pages.
struct Region {
    uint8_t* data = nullptr;
    size_t size = 0;
    Region(size_t bytes, bool huge) : size(bytes) {
        void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) mox::fail("cannot map {} MiB for the expert stacks", bytes >> 20);
        madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
        data = static_cast<uint8_t*>(p);
    }
    ~Region() {
        if (data) munmap(data, size);
    }
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;
};

struct Layers {
    std::vector<std::unique_ptr<Region>> regions;
    std::vector<mox::ops::ExpertStack> stacks;
    size_t layer_bytes = 0;
    size_t expert_bytes = 0;  // gate + up + down of one expert
};

mox::ops::Weight stack_view(const uint8_t* data, TypeId type, int64_t n_in, int64_t n_out, int64_t n_expert) {
    mox::ops::Weight w;
    w.data = data;
    w.type = type;
    w.n_in = n_in;
    w.n_out = n_out;
    w.n_expert = n_expert;
    w.row_bytes = mox::quant::row_bytes(type, n_in);
    return w;
}

Layers make_layers(const Options& o, TypeId tg, TypeId tu, TypeId td) {
    Layers L;
    const size_t gate_b = mox::quant::row_bytes(tg, o.n_embd) * static_cast<size_t>(o.n_ff);
    const size_t up_b = mox::quant::row_bytes(tu, o.n_embd) * static_cast<size_t>(o.n_ff);
    const size_t down_b = mox::quant::row_bytes(td, o.n_ff) * static_cast<size_t>(o.n_embd);
    L.expert_bytes = gate_b + up_b + down_b;
    L.layer_bytes = L.expert_bytes * static_cast<size_t>(o.n_expert);
    const size_t min_bytes = static_cast<size_t>(o.min_mib) << 20;
    const int64_t n_layers =
        o.layers > 0
            ? o.layers
            : std::max<int64_t>(2, static_cast<int64_t>((min_bytes + L.layer_bytes - 1) / L.layer_bytes));
    for (int64_t l = 0; l < n_layers; ++l) {
        auto r = std::make_unique<Region>(L.layer_bytes, o.huge_pages);
        uint8_t* p = r->data;
        const size_t ne = static_cast<size_t>(o.n_expert);
        const auto seed = static_cast<uint32_t>(1234 + 3 * l);  // distinct rows per layer and stack
        mox::bench::fill_weight_rows(tg, o.n_embd, ne * static_cast<size_t>(o.n_ff), p, seed);
        mox::bench::fill_weight_rows(tu, o.n_embd, ne * static_cast<size_t>(o.n_ff), p + gate_b * ne, seed + 1);
        mox::bench::fill_weight_rows(td, o.n_ff, ne * static_cast<size_t>(o.n_embd), p + (gate_b + up_b) * ne, seed + 2);
        L.stacks.push_back({stack_view(p, tg, o.n_embd, o.n_ff, o.n_expert),
                            stack_view(p + gate_b * ne, tu, o.n_embd, o.n_ff, o.n_expert),
                            stack_view(p + (gate_b + up_b) * ne, td, o.n_ff, o.n_embd, o.n_expert)});
        L.regions.push_back(std::move(r));
    }
    return L;
}

// Top-k routing from per-layer decks: distinct experts per token, an expert reused only once the deck
// of its layer is exhausted.
struct Router {
    std::vector<std::vector<int32_t>> decks;
    std::vector<size_t> next;
    std::mt19937 rng{77};

    Router(int64_t n_layers, int64_t n_expert)
        : decks(static_cast<size_t>(n_layers)), next(static_cast<size_t>(n_layers), 0) {
        for (auto& d : decks) {
            d.resize(static_cast<size_t>(n_expert));
            std::iota(d.begin(), d.end(), 0);
            std::shuffle(d.begin(), d.end(), rng);
        }
    }
    // Fills r (capacity kept: no allocation once sized) for n_tokens tokens of layer l.
    void route(size_t l, int64_t n_tokens, int64_t k, int64_t n_expert, mox::ops::Routing& r) {
        r.n_tokens = n_tokens;
        r.k = k;
        r.ids.resize(static_cast<size_t>(n_tokens * k));
        r.weights.resize(r.ids.size());
        r.expert_counts.assign(static_cast<size_t>(n_expert), 0);
        std::uniform_real_distribution<float> w(0.05f, 1.0f);
        std::vector<int32_t>& d = decks[l];
        for (int64_t t = 0; t < n_tokens; ++t) {
            if (next[l] + static_cast<size_t>(k) > d.size()) {
                std::shuffle(d.begin(), d.end(), rng);
                next[l] = 0;
            }
            float sum = 0;
            for (int64_t i = 0; i < k; ++i) {
                const int32_t e = d[next[l]++];
                r.ids[static_cast<size_t>(t * k + i)] = e;
                r.expert_counts[static_cast<size_t>(e)]++;
                sum += r.weights[static_cast<size_t>(t * k + i)] = w(rng);
            }
            for (int64_t i = 0; i < k; ++i) r.weights[static_cast<size_t>(t * k + i)] /= sum;
        }
    }
};

// STREAM-style read of the first `bytes` of the layers' memory on the pool: 64-bit integer sums,
// four accumulators, 16 contiguous chunks per thread. Median GB/s of `reps`.
double stream_read(mox::ThreadPool& pool, const Layers& L, size_t bytes, int reps) {
    std::vector<std::pair<const uint64_t*, size_t>> parts;  // (start, words) per region
    size_t left = bytes;
    for (const auto& r : L.regions) {
        if (left == 0) break;
        const size_t n = std::min(left, r->size) / 32 * 4;
        parts.emplace_back(reinterpret_cast<const uint64_t*>(r->data), n);
        left -= std::min(left, r->size);
    }
    const int64_t per_part = 16 * pool.size();
    std::vector<uint64_t> partial(parts.size() * static_cast<size_t>(per_part));
    std::vector<double> gbs;
    size_t words = 0;
    for (const auto& p : parts) words += p.second;
    for (int rep = 0; rep <= reps; ++rep) {
        const auto t0 = Clock::now();
        pool.run(static_cast<int64_t>(partial.size()), [&](int64_t i) {
            const auto& [p, n] = parts[static_cast<size_t>(i / per_part)];
            const size_t c = static_cast<size_t>(i % per_part);
            const size_t w0 = n * c / static_cast<size_t>(per_part) / 4 * 4,
                         w1 = n * (c + 1) / static_cast<size_t>(per_part) / 4 * 4;
            uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (size_t w = w0; w < w1; w += 4) {
                s0 += p[w];
                s1 += p[w + 1];
                s2 += p[w + 2];
                s3 += p[w + 3];
            }
            partial[static_cast<size_t>(i)] = s0 + s1 + s2 + s3;
        });
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        if (rep > 0) gbs.push_back(static_cast<double>(words * 8) / s / 1e9);
    }
    uint64_t sink = 0;
    for (uint64_t v : partial) sink += v;
    if (sink == 42) std::fputc(' ', stderr);  // keeps the sums observable
    return percentile(gbs, 0.5);
}

double rel_rms(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
        den += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

void wait_gap(double us, bool sleep) {
    if (us <= 0) return;
    const auto until = Clock::now() + std::chrono::nanoseconds(static_cast<int64_t>(us * 1000));
    if (sleep)
        std::this_thread::sleep_until(until);
    else
        while (Clock::now() < until) {
        }
}

TypeId parse_type(const std::string& s, const char* what) {
    const auto t = mox::quant::type_from_name(s);
    if (!t) mox::fail("--{} {}: unknown type", what, s);
    return *t;
}

// One variant of the operator being timed.
struct Config {
    std::string name;
    mox::ops::MoeOptions moe;
    std::vector<double> us;  // per timed call
    double bytes = 0;        // expert bytes touched, summed over timed calls
    double wall = 0;
};

// Every combination of --min-task-kib x --max-task-kib x --prefetch on the one-job path, then the
// two-job path (fused_max_tokens 0) unless --no-two-job.
std::vector<Config> make_configs(const Options& o) {
    std::vector<Config> configs;
    for (int64_t lo : o.min_task_kib)
        for (int64_t hi : o.max_task_kib)
            for (int64_t pf : o.prefetch) {
                if (hi < lo) continue;
                Config c;
                c.moe.fused_max_tokens = std::max(o.fused_max_tokens, o.tokens);
                c.moe.min_task_bytes = lo << 10;
                c.moe.max_task_bytes = hi << 10;
                c.moe.prefetch_bytes = pf;
                c.name = fmt::format("one job, tasks {}-{} KiB, prefetch {} B", lo, hi, pf);
                configs.push_back(std::move(c));
            }
    if (o.two_job) {
        Config c;
        c.moe.fused_max_tokens = 0;
        c.name = "two jobs (prefill path)";
        configs.push_back(std::move(c));
    }
    return configs;
}

int run(const Options& o) {
    if (o.tokens < 1 || o.k < 1 || o.k > o.n_expert) mox::fail("need 1 <= k <= n_expert and tokens >= 1");
    if (o.calls < 1 || o.rounds < 1)
        mox::fail("--calls {} --rounds {}: need at least one", o.calls, o.rounds);
    const TypeId tg = parse_type(o.gate, "gate"), tu = parse_type(o.up.empty() ? o.gate : o.up, "up"),
                 td = parse_type(o.down, "down");
    mox::quant::Isa isa = mox::quant::host_isa();
    if (!o.isa.empty()) {
        const auto i = mox::quant::isa_from_name(o.isa);
        if (!i || *i > isa)
            mox::fail("--isa {}: expected scalar, avx2 or avx512, at most {}", o.isa,
                      mox::quant::isa_name(isa));
        isa = *i;
    }
    std::vector<Config> configs = make_configs(o);
    if (configs.empty())
        mox::fail("nothing to time: give task sizes and --prefetch values or drop --no-two-job");

    mox::ThreadPool pool(o.threads);
    if (o.spin_us >= 0) pool.set_spin(std::chrono::microseconds(o.spin_us));
    pool.set_caller_works(!o.caller_idle);
    const mox::ops::Context ctx{&pool, isa};
    fmt::print(stderr, "filling expert stacks...\n");
    const Layers L = make_layers(o, tg, tu, td);
    const auto n_layers = static_cast<int64_t>(L.stacks.size());

    std::mt19937 rng(5);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    constexpr int kInputs = 16;
    std::vector<float> xs(static_cast<size_t>(kInputs * o.tokens * o.n_embd));
    for (float& v : xs) v = gauss(rng);
    std::vector<float> out(static_cast<size_t>(o.tokens * o.n_embd));
    Router router(n_layers, o.n_expert);
    mox::ops::Routing r;

    // Every configuration against the two-job path (bit for bit) and the scalar reference (5% RMS).
    bool ok = true;
    double check_err = 0;
    if (o.check) {
        router.route(0, o.tokens, o.k, o.n_expert, r);
        std::vector<float> two_job(out.size()), ref(out.size());
        mox::ops::MoeOptions two;
        two.fused_max_tokens = 0;
        mox::ops::moe_ffn(ctx, L.stacks[0], r, xs.data(), two_job.data(), two);
        mox::ops::moe_ffn(mox::ops::Context{nullptr, mox::quant::Isa::scalar}, L.stacks[0], r, xs.data(),
                          ref.data());
        check_err = rel_rms(two_job, ref);
        if (!(check_err <= 0.05)) {
            fmt::print(stderr, "rel RMS {:.3g} against the scalar reference\n", check_err);
            ok = false;
        }
        for (const Config& c : configs) {
            mox::ops::moe_ffn(ctx, L.stacks[0], r, xs.data(), out.data(), c.moe);
            if (std::memcmp(out.data(), two_job.data(), out.size() * sizeof(float)) != 0) {
                fmt::print(stderr, "{}: differs from the two-job path\n", c.name);
                ok = false;
            }
        }
    }

    const size_t stream_bytes =
        std::min(static_cast<size_t>(o.stream_mib) << 20, L.layer_bytes * static_cast<size_t>(n_layers));
    const double stream_gbs = stream_read(pool, L, stream_bytes, 5);

    // Rounds: each configuration runs calls / rounds calls in turn, so slow drifts of the machine
    // (other processes, clocks) spread over all of them. The first round also runs the warm-up.
    std::unique_ptr<mox::ThreadPool::Hold> hold;
    if (o.hold) hold = std::make_unique<mox::ThreadPool::Hold>(pool);
    const int64_t per_round = std::max<int64_t>(1, o.calls / o.rounds);
    for (Config& c : configs) c.us.reserve(static_cast<size_t>(per_round * o.rounds));
    const bool sleep_gap = o.gap_mode == "sleep";
    int64_t call = 0;
    double cpu = 0, busy = 0;
    const int64_t sleeps0 = pool.sleeps();
    int64_t allocs = 0;
    for (int64_t round = 0; round < o.rounds; ++round) {
        for (Config& c : configs) {
            const int64_t n = per_round + (round == 0 ? o.warmup : 0);
            int64_t allocs0 = 0;
            double cpu0 = 0;
            for (int64_t i = 0; i < n; ++i, ++call) {
                const bool timed = round > 0 || i >= o.warmup;
                if (round == 0 && i == o.warmup) {
                    allocs0 = g_allocations.load();
                    cpu0 = mox::bench::process_cpu_seconds();
                } else if (round > 0 && i == 0) {
                    allocs0 = g_allocations.load();
                    cpu0 = mox::bench::process_cpu_seconds();
                }
                const auto l = static_cast<size_t>(call % n_layers);
                router.route(l, o.tokens, o.k, o.n_expert, r);
                const float* x = xs.data() + (call % kInputs) * o.tokens * o.n_embd;
                wait_gap(o.gap_us, sleep_gap);
                const auto t0 = Clock::now();
                mox::ops::moe_ffn(ctx, L.stacks[l], r, x, out.data(), c.moe);
                const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
                if (!timed) continue;
                c.us.push_back(sec * 1e6);
                c.wall += sec;
                int64_t distinct = 0;
                for (int32_t e : r.expert_counts) distinct += e > 0;
                c.bytes += static_cast<double>(distinct) * static_cast<double>(L.expert_bytes);
            }
            allocs += g_allocations.load() - allocs0;
            cpu += mox::bench::process_cpu_seconds() - cpu0;
        }
    }
    for (const Config& c : configs) busy += c.wall + o.gap_us * 1e-6 * static_cast<double>(c.us.size());
    const int64_t sleeps = pool.sleeps() - sleeps0;
    hold.reset();
    if (allocs > 0) {
        fmt::print(stderr, "{} heap allocations during the timed calls\n", allocs);
        ok = false;
    }
    const double cpu_share = cpu / (busy * pool.size());

    struct Row {
        double med, min, p10, p90, max, mean, mb, gbs_med, gbs_mean;
    };
    auto row_of = [](const Config& c) {
        const double med = percentile(c.us, 0.5), mb = c.bytes / static_cast<double>(c.us.size()) / 1e6;
        return Row{med,
                   percentile(c.us, 0),
                   percentile(c.us, 0.1),
                   percentile(c.us, 0.9),
                   percentile(c.us, 1),
                   c.wall * 1e6 / static_cast<double>(c.us.size()),
                   mb,
                   mb * 1e6 / (med * 1e-6) / 1e9,
                   c.bytes / c.wall / 1e9};
    };
    if (o.output == "json") {
        nlohmann::json j;
        j["cpu"] = mox::engine::cpu_model_name();
        j["threads"] = pool.size();
        j["isa"] = mox::quant::isa_name(isa);
        j["types"] = {mox::quant::type_name(tg), mox::quant::type_name(tu), mox::quant::type_name(td)};
        j["shape"] = {{"n_embd", o.n_embd},
                      {"n_ff", o.n_ff},
                      {"n_expert", o.n_expert},
                      {"k", o.k},
                      {"tokens", o.tokens}};
        j["layers"] = n_layers;
        j["stack_mib"] = static_cast<double>(L.layer_bytes * static_cast<size_t>(n_layers)) / (1 << 20);
        j["huge_pages"] = o.huge_pages;
        j["gap_us"] = o.gap_us;
        j["gap_mode"] = o.gap_mode;
        j["spin_us"] = pool.spin().count();
        j["hold"] = o.hold;
        j["caller_idle"] = o.caller_idle;
        j["stream_read_gbs"] = stream_gbs;
        j["worker_sleeps"] = sleeps;
        j["heap_allocations"] = allocs;
        j["cpu_share"] = cpu_share;
        j["check_rel_rms"] = check_err;
        j["ok"] = ok;
        for (const Config& c : configs) {
            const Row w = row_of(c);
            j["configs"].push_back({{"name", c.name},
                                    {"fused_max_tokens", c.moe.fused_max_tokens},
                                    {"min_task_bytes", c.moe.min_task_bytes},
                                    {"max_task_bytes", c.moe.max_task_bytes},
                                    {"prefetch_bytes", c.moe.prefetch_bytes},
                                    {"calls", c.us.size()},
                                    {"us",
                                     {{"median", w.med},
                                      {"min", w.min},
                                      {"p10", w.p10},
                                      {"p90", w.p90},
                                      {"max", w.max},
                                      {"mean", w.mean}}},
                                    {"mb_per_call", w.mb},
                                    {"gbs_median", w.gbs_med},
                                    {"gbs_mean", w.gbs_mean},
                                    {"fraction_of_stream", w.gbs_med / stream_gbs}});
        }
        std::printf("%s\n", j.dump(2).c_str());
    } else {
        fmt::print(
            "CPU: {}, {} thread(s), tier {}; gate {}, up {}, down {}; n_embd {}, n_ff {}, {} experts, "
            "top-{}, "
            "{} token(s)\n",
            mox::engine::cpu_model_name(), pool.size(), mox::quant::isa_name(isa), mox::quant::type_name(tg),
            mox::quant::type_name(tu), mox::quant::type_name(td), o.n_embd, o.n_ff, o.n_expert, o.k,
            o.tokens);
        fmt::print(
            "{} layers, {:.0f} MiB of experts ({} pages); gap {} us ({}), pool spin {} us{}{}; {} rounds\n",
            n_layers, static_cast<double>(L.layer_bytes * static_cast<size_t>(n_layers)) / (1 << 20),
            o.huge_pages ? "huge" : "small", o.gap_us, o.gap_mode, pool.spin().count(),
            o.hold ? ", held" : "", o.caller_idle ? ", caller idle" : "", o.rounds);
        fmt::print("STREAM-style read of the stacks: {:.1f} GB/s\n\n", stream_gbs);
        fmt::print(
            "| operator | calls | us median | [min, p10, p90, max] | us mean | MB/call | GB/s (median) | of "
            "STREAM |\n");
        fmt::print("|---|---:|---:|---|---:|---:|---:|---:|\n");
        for (const Config& c : configs) {
            const Row w = row_of(c);
            fmt::print(
                "| {} | {} | {:.1f} | [{:.1f}, {:.1f}, {:.1f}, {:.1f}] | {:.1f} | {:.2f} | {:.1f} | {:.0f}% "
                "|\n",
                c.name, c.us.size(), w.med, w.min, w.p10, w.p90, w.max, w.mean, w.mb, w.gbs_med,
                100.0 * w.gbs_med / stream_gbs);
        }
        fmt::print(
            "\nduring the timed calls: {} worker sleeps, {} heap allocations; cpu share {:.0f}%; check: rel "
            "RMS "
            "{:.2g} vs scalar{}\n",
            sleeps, allocs, 100.0 * cpu_share, check_err, ok ? "" : " FAILED");
    }
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{"mox_moe_bench: batch-1 CPU MoE layer (ops::moe_ffn) against DRAM bandwidth"};
    app.add_option("-t,--threads", o.threads, "Threads including the caller (0: one per physical core)");
    app.add_option("--layers", o.layers, "Layers of expert stacks (0: enough for --min-mib, at least 2)");
    app.add_option("--min-mib", o.min_mib, "Least expert memory in all, beyond the last-level cache");
    app.add_option("--n-embd", o.n_embd, "Model width");
    app.add_option("--n-ff", o.n_ff, "Expert hidden width");
    app.add_option("--n-expert", o.n_expert, "Experts per layer");
    app.add_option("-k,--top-k", o.k, "Experts per token");
    app.add_option("--tokens", o.tokens, "Tokens per call (1: decode)");
    app.add_option("--gate", o.gate, "Gate type, e.g. q4_k, q5_k, iq4_xs");
    app.add_option("--up", o.up, "Up type (default: the gate's)");
    app.add_option("--down", o.down, "Down type, e.g. q6_k, q4_k");
    app.add_option("-n,--calls", o.calls, "Timed calls per configuration");
    app.add_option("--warmup", o.warmup, "Untimed calls per configuration first");
    app.add_option("--gap-us", o.gap_us, "Wait before each call, the GPU's part of a hybrid layer");
    app.add_option("--gap", o.gap_mode, "How the caller waits: spin or sleep")
        ->check(CLI::IsMember({"spin", "sleep"}));
    app.add_option("--spin-us", o.spin_us, "Pool workers' spin window before sleeping (default: the pool's)");
    app.add_flag("--hold", o.hold, "Keep the pool's workers spinning for the whole run (ThreadPool::Hold)");
    app.add_flag("--caller-idle", o.caller_idle,
                 "The calling thread takes no tasks (ThreadPool::set_caller_works)");
    app.add_flag("--huge-pages", o.huge_pages,
                 "Back the stacks with transparent huge pages (default: small pages)");
    app.add_option("--isa", o.isa, "Kernel tier cap: scalar, avx2, avx512");
    app.add_option("--min-task-kib", o.min_task_kib, "MoeOptions::min_task_bytes / 1024, a list to compare")
        ->delimiter(',');
    app.add_option("--max-task-kib", o.max_task_kib, "MoeOptions::max_task_bytes / 1024, a list to compare")
        ->delimiter(',');
    app.add_option("--prefetch", o.prefetch,
                   "MoeOptions::prefetch_bytes (0: no software prefetch), a list to compare")
        ->delimiter(',');
    app.add_flag("!--no-two-job", o.two_job, "Leave out the two-job (prefill) path");
    app.add_option("--rounds", o.rounds, "Rounds over the configurations (calls split between them)");
    app.add_option("--stream-mib", o.stream_mib, "Bytes the STREAM-style read covers");
    app.add_option("-o,--output", o.output, "md or json")->check(CLI::IsMember({"md", "json"}));
    app.add_flag("!--no-check", o.check, "Skip the correctness check");
    CLI11_PARSE(app, argc, argv);
    try {
        return run(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
}

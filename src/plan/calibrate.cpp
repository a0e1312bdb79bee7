#include "plan/calibrate.h"

#include "core/error.h"
#include "core/read_bandwidth.h"
#include "core/thread_pool.h"
#include "core/topology.h"
#include "core/units.h"
#include "ops/context.h"
#include "ops/moe.h"
#include "quant/random_blocks.h"
#ifdef MOX_HAVE_CUDA
#include "ops/cuda_memory.h"
#include "ops/cuda_probe.h"
#include "quant/cuda_matmul.h"
#include "quant/cuda_matvec.h"
#endif

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

namespace mox::plan {

namespace {

using quant::TypeId;
using Clock = std::chrono::steady_clock;

// The expert shape of Qwen3.5/3.6-MoE (shared/spec/qwen35moe.md): gate/up 2048 -> 512, down 512 -> 2048.
constexpr int64_t kEmbd = 2048, kFf = 512;
// Experts of one layer of the real model: a prefill batch routes its tokens among this many.
constexpr int64_t kLayerExperts = 256;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
    MOX_CHECK(!v.empty());
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
};
using Bytes = std::unique_ptr<uint8_t[], FreeDeleter>;

// Page-aligned and not touched here: the pool's threads first-touch it, as they will read it.
Bytes alloc_pages(uint64_t bytes) {
    constexpr uint64_t kPage = 4096;
    const uint64_t rounded = (bytes + kPage - 1) / kPage * kPage;
    void* p = std::aligned_alloc(kPage, rounded);
    if (!p) fail("calibration: cannot allocate {}", format_bytes(bytes));
    // Spread over the NUMA nodes as mox spreads model weights (a no-op on one node).
    interleave_memory(p, rounded);
    return Bytes(static_cast<uint8_t*>(p));
}

std::string hostname() {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "unknown";
    return buf;
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// ---- experts

uint64_t expert_bytes(TypeId type) {
    return 2 * static_cast<uint64_t>(kFf) * quant::row_bytes(type, kEmbd) +
           static_cast<uint64_t>(kEmbd) * quant::row_bytes(type, kFf);
}

uint64_t auto_stack_bytes() {
    const uint64_t llc = last_level_cache_bytes();
    // Random experts must come from DRAM as in a real model, whose host experts are many GB: with the
    // stack only 4x the last-level cache about a quarter of the picks hit it. On the H200 machine
    // (300 MiB of L3) a profile had Q6_K experts at 101 GB/s and Q4_K at 89 against a DRAM read of
    // 84, and the speed model over-predicted every plan with host experts (up to +18.5%,
    // bench/results/2026-11-30-cublas-projections-h200). 16x the cache (one per NUMA node, a rough
    // upper bound) and at least 1 GiB, as the DRAM probe reads.
    constexpr uint64_t kMinBytes = uint64_t{1} << 30;
    uint64_t bytes = std::max(kMinBytes, 16 * llc * static_cast<uint64_t>(std::max(1, topology().numa_nodes)));
    const uint64_t ram = host_ram_bytes();
    if (ram) bytes = std::min(bytes, ram / 4);
    return std::min(bytes, uint64_t{8} << 30);
}

// One buffer reused for every type (allocated for the largest), so each type only pays for a copy.
// Types ops::moe_ffn can hold experts in with the calibration's expert shape (n_ff 512): block
// formats with a dequantizer, not the activation-side Q8_K/Q8_1.
bool expert_type(TypeId type) {
    const quant::TypeTraits& tr = quant::traits(type);
    return tr.dequantize && kFf % tr.block_elems == 0 && tr.id != TypeId::q8_k && tr.id != TypeId::q8_1;
}

class ExpertBench {
public:
    ExpertBench(ThreadPool& pool, const CalibrateOptions& o) : pool_(pool), o_(o) {
        if (o.expert_k < 1) fail("calibration: {} experts per token", o.expert_k);
        if (o.decode_reps < 1 || o.prefill_reps < 1 || o.prefill_tokens < 1 || !(o.decode_min_seconds >= 0))
            fail(
                "calibration: decode reps {}, prefill reps {} and tokens {} must be >= 1 and the decode "
                "probe's seconds ({}) >= 0",
                o.decode_reps, o.prefill_reps, o.prefill_tokens, o.decode_min_seconds);
        stack_bytes_ = o.expert_stack_bytes ? o.expert_stack_bytes : auto_stack_bytes();
    }

    ExpertRates measure(TypeId type) {
        const quant::TypeTraits& tr = quant::traits(type);
        if (!expert_type(type))
            fail("calibration: {} is not a weight type mox can run experts in", tr.name);
        const uint64_t per_expert = expert_bytes(type);
        const int64_t n_expert = std::max<int64_t>(
            2 * o_.expert_k, static_cast<int64_t>((stack_bytes_ + per_expert - 1) / per_expert));
        const ops::ExpertStack stack = fill(type, n_expert);
        const ops::Context ctx{.pool = &pool_, .isa = quant::host_isa()};
        std::mt19937 rng(1234);
        ExpertRates r;
        r.gbps = decode(ctx, stack, rng) / 1e9;
        r.gflops = prefill(ctx, stack, rng) / 1e9;
        return r;
    }

private:
    ops::ExpertStack fill(TypeId type, int64_t n_expert) {
        const quant::TypeTraits& tr = quant::traits(type);
        const uint64_t total = expert_bytes(type) * static_cast<uint64_t>(n_expert);
        if (total > capacity_) {
            buffer_.reset();
            buffer_ = alloc_pages(total);
            capacity_ = total;
        }
        // A pool of valid blocks (~256K values), repeated over the whole stack: every row is whole
        // blocks, so the stack is one stream of blocks and any tiling of the pool is valid.
        const std::vector<uint8_t> blocks =
            quant::random_valid_blocks(type, std::max<int64_t>(1, 262144 / tr.block_elems), 99);
        const uint64_t chunk = blocks.size();
        const int64_t n_chunks = static_cast<int64_t>((total + chunk - 1) / chunk);
        uint8_t* base = buffer_.get();
        pool_.run(n_chunks, [&](int64_t i) {
            const uint64_t off = static_cast<uint64_t>(i) * chunk;
            std::memcpy(base + off, blocks.data(), std::min(chunk, total - off));
        });
        const size_t rb_gu = quant::row_bytes(type, kEmbd), rb_d = quant::row_bytes(type, kFf);
        const ops::Weight gate{.data = base,
                               .type = type,
                               .n_in = kEmbd,
                               .n_out = kFf,
                               .n_expert = n_expert,
                               .row_bytes = rb_gu};
        ops::Weight up = gate;
        up.data = base + static_cast<size_t>(n_expert * kFf) * rb_gu;
        const ops::Weight down{.data = base + 2 * static_cast<size_t>(n_expert * kFf) * rb_gu,
                               .type = type,
                               .n_in = kFf,
                               .n_out = kEmbd,
                               .n_expert = n_expert,
                               .row_bytes = rb_d};
        return {gate, up, down};
    }

    // Routing of n_tokens tokens, each to k distinct experts drawn from `candidates`, weights 1/k.
    ops::Routing route(int64_t n_tokens, const std::vector<int32_t>& candidates, int64_t n_expert,
                       std::mt19937& rng) const {
        const int64_t k = o_.expert_k;
        ops::Routing r;
        r.n_tokens = n_tokens;
        r.k = k;
        r.expert_counts.assign(static_cast<size_t>(n_expert), 0);
        std::vector<int32_t> pick(candidates);
        for (int64_t t = 0; t < n_tokens; ++t) {
            // Partial Fisher-Yates: the first k entries become a uniform random k-subset.
            for (int64_t i = 0; i < k; ++i) {
                std::uniform_int_distribution<size_t> d(static_cast<size_t>(i), pick.size() - 1);
                std::swap(pick[static_cast<size_t>(i)], pick[d(rng)]);
                r.ids.push_back(pick[static_cast<size_t>(i)]);
                r.weights.push_back(1.0f / static_cast<float>(k));
                r.expert_counts[static_cast<size_t>(pick[static_cast<size_t>(i)])]++;
            }
        }
        return r;
    }

    static std::vector<float> random_activations(int64_t n, std::mt19937& rng) {
        std::normal_distribution<float> dist(0.0f, 1.0f);
        std::vector<float> x(static_cast<size_t>(n));
        for (float& v : x) v = dist(rng);
        return x;
    }

    // Batch 1, k fresh random experts of the whole stack per call: weight bytes per second.
    double decode(const ops::Context& ctx, const ops::ExpertStack& s, std::mt19937& rng) const {
        const int64_t n_expert = s.gate.n_expert;
        std::vector<int32_t> all(static_cast<size_t>(n_expert));
        std::iota(all.begin(), all.end(), 0);
        const std::vector<float> x = random_activations(kEmbd, rng);
        std::vector<float> out(kEmbd);
        std::vector<double> secs;
        constexpr int kWarmup = 2;
        constexpr size_t kMaxCalls = 100000;
        const auto start = Clock::now();
        for (int i = 0; i < kWarmup; ++i)
            ops::moe_ffn(ctx, s, route(1, all, n_expert, rng), x.data(), out.data());
        while (secs.size() < static_cast<size_t>(o_.decode_reps) ||
               (seconds_since(start) < o_.decode_min_seconds && secs.size() < kMaxCalls)) {
            const ops::Routing r = route(1, all, n_expert, rng);
            const auto t0 = Clock::now();
            ops::moe_ffn(ctx, s, r, x.data(), out.data());
            secs.push_back(seconds_since(t0));
        }
        return static_cast<double>(o_.expert_k) * static_cast<double>(expert_bytes(s.gate.type)) /
               median(secs);
    }

    // prefill_tokens tokens routed among a layer's worth of experts (a window of the stack that moves
    // each call): FLOP/s.
    double prefill(const ops::Context& ctx, const ops::ExpertStack& s, std::mt19937& rng) const {
        const int64_t n_expert = s.gate.n_expert, n_tokens = o_.prefill_tokens;
        const int64_t window = std::min(kLayerExperts, n_expert);
        const std::vector<float> x = random_activations(n_tokens * kEmbd, rng);
        std::vector<float> out(static_cast<size_t>(n_tokens * kEmbd));
        std::vector<double> secs;
        std::uniform_int_distribution<int64_t> start_dist(0, n_expert - 1);
        constexpr int kWarmup = 1;
        for (int i = 0; i < kWarmup + o_.prefill_reps; ++i) {
            const int64_t start = start_dist(rng);
            std::vector<int32_t> candidates(static_cast<size_t>(window));
            for (int64_t j = 0; j < window; ++j)
                candidates[static_cast<size_t>(j)] = static_cast<int32_t>((start + j) % n_expert);
            const ops::Routing r = route(n_tokens, candidates, n_expert, rng);
            const auto t0 = Clock::now();
            ops::moe_ffn(ctx, s, r, x.data(), out.data());
            if (i >= kWarmup) secs.push_back(seconds_since(t0));
        }
        // gate, up (kFf x kEmbd each) and down (kEmbd x kFf) per (token, expert); 2 FLOPs per multiply-add.
        const double flops = 2.0 * static_cast<double>(n_tokens) * o_.expert_k * 3.0 * kFf * kEmbd;
        return flops / median(secs);
    }

    ThreadPool& pool_;
    const CalibrateOptions& o_;
    uint64_t stack_bytes_ = 0;
    Bytes buffer_;
    uint64_t capacity_ = 0;
};

void progress(const CalibrateOptions& o, const std::string& what) {
    if (o.progress) o.progress(what);
}


}  // namespace

std::vector<TypeId> default_calibration_types() {
    return {TypeId::q4_k, TypeId::q5_k, TypeId::q6_k,  TypeId::q8_0,    TypeId::iq4_xs,
            TypeId::q3_k, TypeId::q2_k, TypeId::mxfp4, TypeId::iq2_xxs, TypeId::iq3_xxs};
}

CalibrateOptions quick_calibrate_options() {
    CalibrateOptions o;
    o.types = {TypeId::q4_k, TypeId::q8_0};
    o.dram_bytes = uint64_t{256} << 20;
    o.dram_reps = 3;
    o.expert_stack_bytes = 0;  // the full size: a stack that fits a cache measures the cache
    o.decode_reps = 10;
    o.decode_min_seconds = 0;
    o.prefill_tokens = 128;
    o.prefill_reps = 1;
    o.gpu_copy_bytes = uint64_t{64} << 20;
    o.gpu_matvec_bytes = uint64_t{128} << 20;
    o.gpu_reps = 5;
    return o;
}

uint64_t host_ram_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("MemTotal:", 0) != 0) continue;
        std::istringstream fields(line.substr(9));
        uint64_t kib = 0;
        std::string unit;
        if (fields >> kib >> unit && unit == "kB") return kib * 1024;
        return 0;
    }
    return 0;
}

std::optional<CpuTimes> parse_cpu_times(const std::string& stat_text) {
    std::istringstream in(stat_text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("cpu ", 0) != 0) continue;
        std::istringstream fields(line.substr(4));
        // user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
        uint64_t v[8] = {};
        for (uint64_t& x : v)
            if (!(fields >> x)) return std::nullopt;
        CpuTimes t;
        for (uint64_t x : v) t.total += x;
        t.busy = t.total - v[3] - v[4];
        return t;
    }
    return std::nullopt;
}

std::optional<double> host_busy_fraction(double window_s) {
    auto sample = []() -> std::optional<CpuTimes> {
        std::ifstream in("/proc/stat");
        if (!in) return std::nullopt;
        std::ostringstream text;
        text << in.rdbuf();
        return parse_cpu_times(text.str());
    };
    const auto a = sample();
    std::this_thread::sleep_for(std::chrono::duration<double>(window_s));
    const auto b = sample();
    if (!a || !b || b->total <= a->total || b->busy < a->busy) return std::nullopt;
    return static_cast<double>(b->busy - a->busy) / static_cast<double>(b->total - a->total);
}

uint64_t host_lockable_bytes(uint64_t ram) {
    rlimit lim{};
    if (getrlimit(RLIMIT_MEMLOCK, &lim) != 0) return 0;
    if (lim.rlim_cur == RLIM_INFINITY) return ram;
    return std::min<uint64_t>(lim.rlim_cur, ram ? ram : lim.rlim_cur);
}

double measure_dram_gbps(int threads, uint64_t bytes, int reps) {
    if (threads <= 0) threads = topology().physical_cores;
    return measure_read_bandwidth(threads, bytes, reps).bytes_per_s / 1e9;
}

ExpertRates measure_expert_rates(TypeId type, const CalibrateOptions& o) {
    ThreadPool pool(o.threads);
    ExpertBench bench(pool, o);
    return bench.measure(type);
}

CpuProfile calibrate_cpu(const CalibrateOptions& o) {
    ThreadPool pool(o.threads);
    CpuProfile cpu;
    cpu.threads = pool.size();
    progress(o, fmt::format("DRAM read, {} threads, {}", pool.size(), format_bytes(o.dram_bytes)));
    cpu.dram_gbps = measure_dram_gbps(pool.size(), o.dram_bytes, o.dram_reps);
    ExpertBench bench(pool, o);
    for (const TypeId type : o.types) {
        const std::string name(quant::type_name(type));
        progress(o, fmt::format("CPU experts {}", name));
        const ExpertRates r = bench.measure(type);
        cpu.expert_gbps[name] = r.gbps;
        cpu.expert_gflops[name] = r.gflops;
    }
    return cpu;
}

std::vector<TypeId> calibrate_missing_types(HardwareProfile& p, const std::vector<TypeId>& types,
                                            const CalibrateOptions& o) {
    auto has = [](const std::map<std::string, double>& m, const std::string& name) {
        const auto it = m.find(name);
        return it != m.end() && it->second > 0;
    };
    std::vector<TypeId> measured;
    std::unique_ptr<ThreadPool> pool;
    std::unique_ptr<ExpertBench> bench;
    for (const TypeId type : types) {
        if (!quant::traits(type).is_quantized) continue;  // float weights: speed.cpp's best-rate stand-in
        const std::string name(quant::type_name(type));
        bool any = false;
        if (expert_type(type) && (!has(p.cpu.expert_gbps, name) || !has(p.cpu.expert_gflops, name))) {
            if (!bench) {
                pool = std::make_unique<ThreadPool>(o.threads);
                bench = std::make_unique<ExpertBench>(*pool, o);
            }
            progress(o, fmt::format("CPU experts {}", name));
            const ExpertRates r = bench->measure(type);
            p.cpu.expert_gbps[name] = r.gbps;
            p.cpu.expert_gflops[name] = r.gflops;
            any = true;
        }
#ifdef MOX_HAVE_CUDA
        if (p.gpu && o.gpu && cuda::device_count() > 0) {
            if (cuda::matvec_supported(type) && !has(p.gpu->matvec_gbps, name)) {
                progress(o, fmt::format("GPU matvec {}", name));
                p.gpu->matvec_gbps[name] = cuda::probe_matvec_gbps(type, o.gpu_matvec_bytes, 2 * o.gpu_reps);
                any = true;
            }
            if (cuda::matmul_supported(type) && !has(p.gpu->matmul_tflops, name)) {
                progress(o, fmt::format("GPU matmul {}", name));
                p.gpu->matmul_tflops[name] = cuda::probe_matmul_tflops(type, o.gpu_matmul_tokens, o.gpu_reps);
                any = true;
            }
            if (cuda::matvec_supported(type) && !has(p.gpu->moe_decode_gbps, name)) {
                progress(o, fmt::format("GPU MoE decode {}", name));
                p.gpu->moe_decode_gbps[name] = cuda::probe_moe_decode_gbps(type, o.gpu_reps);
                any = true;
            }
            if (cuda::matmul_supported(type) && !has(p.gpu->moe_prefill_tflops, name)) {
                progress(o, fmt::format("GPU MoE prefill {}", name));
                GpuProfile& g = *p.gpu;
                const int64_t small = o.gpu_matmul_tokens;
                g.moe_prefill_tflops[name] = cuda::probe_moe_prefill_tflops(type, small, o.gpu_reps);
                // The larger size the profile already uses (or this run's, for a profile without one).
                const int64_t large =
                    g.moe_prefill_large_tokens > 0 ? g.moe_prefill_large_tokens : o.gpu_moe_large_tokens;
                if (large > small) {
                    g.moe_prefill_large_tflops[name] =
                        cuda::probe_moe_prefill_tflops(type, large, o.gpu_reps);
                    g.moe_prefill_large_tokens = large;
                }
                any = true;
            }
        }
#endif
        if (any) measured.push_back(type);
    }
    return measured;
}

HardwareProfile calibrate(const CalibrateOptions& o, std::vector<std::string>* notes) {
    auto note = [&](std::string s) {
        if (notes) notes->push_back(std::move(s));
    };
    HardwareProfile p;
    p.machine = hostname();
    p.created = utc_now();
    p.mox_commit = o.mox_commit;
    p.measured = true;
    p.host_ram_bytes = host_ram_bytes();
    p.host_lockable_bytes = host_lockable_bytes(p.host_ram_bytes);
    if (const auto busy = host_busy_fraction(); busy && *busy > kBusyHostFraction)
        note(fmt::format(
            "WARNING: other processes kept {:.0f}% of the CPUs busy when calibration started: the CPU rates "
            "and the host round trip measured now will be low; run `mox calibrate` again on an idle machine",
            100 * *busy));
#ifdef MOX_HAVE_CUDA
    if (o.gpu && cuda::device_count() > 0) {
        // First, before anything of ours is allocated on the device: the bare context.
        progress(o, "GPU context");
        const cuda::DeviceMemoryUse first = cuda::probe_memory_use();
        GpuProfile g;
        g.name = first.name;
        g.total_bytes = first.total_bytes;
        progress(o, "GPU host->device copies");
        g.h2d_pinned_gbps = cuda::probe_h2d_gbps(true, o.gpu_copy_bytes, o.gpu_reps);
        g.h2d_pageable_gbps = cuda::probe_h2d_gbps(false, o.gpu_copy_bytes, o.gpu_reps);
        progress(o, "GPU graph launch gap and host round trips");
        g.launch_gap_s = cuda::probe_launch_gap_s(400, o.gpu_reps);
        g.host_roundtrip_s = cuda::probe_host_roundtrip_s(50, o.gpu_reps);
        g.handoff_roundtrip_s = cuda::probe_handoff_roundtrip_s(40, o.gpu_reps);
        progress(o, "GPU Gated DeltaNet decode step and prefill");
        g.deltanet_step_s = cuda::probe_deltanet_step_s(&g.deltanet_state_bytes, o.gpu_reps);
        progress(o, "GPU decode attention");
        for (const int64_t keys : {256, 1024, 4096, 32768})
            g.attention_decode_f16.emplace_back(keys, cuda::probe_attention_decode_s(keys, o.gpu_reps));
        uint64_t prefill_state = 0;
        g.deltanet_prefill_token_s =
            cuda::probe_deltanet_prefill_token_s(&prefill_state, o.gpu_matmul_tokens, o.gpu_reps);
        MOX_CHECK(prefill_state == g.deltanet_state_bytes, "DeltaNet probes of two shapes");
        for (const TypeId type : o.types) {
            const std::string name(quant::type_name(type));
            progress(o, fmt::format("GPU matvec, MoE decode, matmul and MoE prefill {}", name));
            if (cuda::matvec_supported(type)) {
                g.matvec_gbps[name] = cuda::probe_matvec_gbps(type, o.gpu_matvec_bytes, 2 * o.gpu_reps);
                g.moe_decode_gbps[name] = cuda::probe_moe_decode_gbps(type, o.gpu_reps);
            } else {
                note(fmt::format("GPU: no matvec kernel for {}", name));
            }
            if (cuda::matmul_supported(type)) {
                g.matmul_tflops[name] = cuda::probe_matmul_tflops(type, o.gpu_matmul_tokens, o.gpu_reps);
                g.moe_prefill_tflops[name] =
                    cuda::probe_moe_prefill_tflops(type, o.gpu_matmul_tokens, o.gpu_reps);
                if (o.gpu_moe_large_tokens > o.gpu_matmul_tokens) {
                    g.moe_prefill_large_tflops[name] =
                        cuda::probe_moe_prefill_tflops(type, o.gpu_moe_large_tokens, o.gpu_reps);
                    g.moe_prefill_large_tokens = o.gpu_moe_large_tokens;
                }
            } else
                note(fmt::format("GPU: no matmul kernel for {}", name));
        }
        // Again, with every probe buffer freed: now the kernels the probes ran are loaded too (CUDA
        // loads modules at first launch), which the engine's context will also carry.
        const cuda::DeviceMemoryUse after = cuda::probe_memory_use();
        g.context_bytes = std::max(first.used_bytes, after.used_bytes);
        note(fmt::format(
            "GPU memory in use: {} right after creating the context, {} after the probes (kernels "
            "loaded, buffers freed); this counts other processes on the GPU too",
            format_bytes(first.used_bytes), format_bytes(after.used_bytes)));
        p.gpu = std::move(g);
    } else if (o.gpu) {
        note("no CUDA device: GPU not measured");
    }
#else
    if (o.gpu) note("built without CUDA: GPU not measured");
#endif
    p.cpu = calibrate_cpu(o);
    return p;
}

}  // namespace mox::plan

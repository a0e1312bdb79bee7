// mox_kernel_bench: how close each CPU dot kernel gets to memory bandwidth (bench/README.md).
//
// One run measures
//  (a) a STREAM-style read bandwidth: a sum over a buffer of --size-mib, split over -t threads;
//  (b) per weight type x ISA tier: a matvec (one activation row, n_cols = 1) over a weight matrix of
//      --size-mib bytes with --k elements per row, far larger than the last-level cache, so every call
//      streams the weights from DRAM as decode does. Reported: weight GB/s, the fraction of (a), and
//      the time per matvec;
//  (c) a prefill tile (n_cols = kMaxDotCols activation rows per weight row pass) over --prefill-mib
//      of the same matrix, in GFLOP/s (2 * rows * k * n_cols / time).
// Each number is the median of -r repetitions, with min and max. Rows are split over a ThreadPool
// in contiguous chunks, several per thread, handed out dynamically.
//
// Before timing, each kernel's first rows are checked against the scalar reference kernel (the same
// activation format), so the table never reports the speed of a wrong kernel.
#include "bench_common.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/bench_machine.h"
#include "quant/dot.h"
#include "quant/types.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using mox::quant::DotKernel;
using mox::quant::Isa;
using mox::quant::TypeId;

struct Options {
    int threads = 1;
    std::vector<std::string> types;  // empty: every weight type with a kernel
    std::vector<std::string> isas;   // empty: every SIMD tier the CPU runs
    std::string output = "md";
    int64_t size_mib = 1024;
    int64_t prefill_mib = 64;
    int64_t k = 4096;
    int repetitions = 7;
};

struct Stats {
    double median = 0, min = 0, max = 0;
};

Stats stats_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    const double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return {med, v.front(), v.back()};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Wall and CPU seconds summed over timed passes.
struct Share {
    double wall = 0, cpu = 0;
    double of(int threads) const { return wall > 0 ? cpu / (wall * threads) : 0; }
};

// (a) Read bandwidth: 64-bit integer sums (integer addition vectorizes without reassociation flags),
// four independent accumulators per thread.
Stats stream_read(mox::ThreadPool& pool, const std::vector<uint8_t>& buf, int reps, Share& share) {
    const size_t words = buf.size() / 8;
    const int64_t n_tasks = 16 * pool.size();
    std::vector<uint64_t> partial(static_cast<size_t>(n_tasks));
    std::vector<double> gbs;
    uint64_t sink = 0;
    for (int r = 0; r < reps + 1; ++r) {  // the first pass warms up and is not counted
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = mox::bench::process_cpu_seconds();
        pool.run(n_tasks, [&](int64_t i) {
            const size_t w0 = words * static_cast<size_t>(i) / static_cast<size_t>(n_tasks) / 4 * 4;
            const size_t w1 = i + 1 == n_tasks
                                  ? words / 4 * 4
                                  : words * static_cast<size_t>(i + 1) / static_cast<size_t>(n_tasks) / 4 * 4;
            const auto* p = reinterpret_cast<const uint64_t*>(buf.data());
            uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (size_t w = w0; w < w1; w += 4) {
                s0 += p[w];
                s1 += p[w + 1];
                s2 += p[w + 2];
                s3 += p[w + 3];
            }
            partial[static_cast<size_t>(i)] = s0 + s1 + s2 + s3;
        });
        const double s = seconds_since(t0);
        if (r > 0) {
            share.wall += s;
            share.cpu += mox::bench::process_cpu_seconds() - c0;
        }
        for (uint64_t v : partial) sink += v;
        if (r > 0) gbs.push_back(static_cast<double>(words / 4 * 4 * 8) / s / 1e9);
    }
    if (sink == 42) std::fputc(' ', stderr);  // keeps the sums observable
    return stats_of(gbs);
}

// Weight bytes of one type (bench_common.h).
void fill_weights(TypeId type, int64_t k, size_t rows, std::vector<uint8_t>& w) {
    mox::bench::fill_weight_rows(type, k, rows, w.data(), 17 + static_cast<uint32_t>(type), 64);
}

struct Result {
    TypeId type;
    Isa isa;
    double bits_per_weight;
    Stats matvec_gbs, matvec_ms, prefill_gflops;
    double max_rel_err;
    double cpu_share;  // of the matvec passes
};

// Runs kernel rows [r0, r1) of the matrix against n_cols activation rows.
void run_rows(const DotKernel& kern, const uint8_t* w, size_t rb, int64_t k, const uint8_t* act, size_t arow,
              int n_cols, size_t r0, size_t r1, float* out) {
    for (size_t r = r0; r < r1; ++r)
        kern.dot(k, w + r * rb, act, arow, n_cols, out + r * static_cast<size_t>(n_cols));
}

Stats time_pass(mox::ThreadPool& pool, const DotKernel& kern, const std::vector<uint8_t>& w, size_t rb,
                int64_t k, const std::vector<uint8_t>& act, size_t arow, int n_cols, size_t rows,
                std::vector<float>& out, int reps, Share& share) {
    const int64_t n_tasks = std::min<int64_t>(static_cast<int64_t>(rows), 16 * pool.size());
    std::vector<double> secs;
    for (int r = 0; r < reps + 1; ++r) {  // first pass: warm-up
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = mox::bench::process_cpu_seconds();
        pool.run(n_tasks, [&](int64_t i) {
            const size_t a = rows * static_cast<size_t>(i) / static_cast<size_t>(n_tasks);
            const size_t b = rows * static_cast<size_t>(i + 1) / static_cast<size_t>(n_tasks);
            run_rows(kern, w.data(), rb, k, act.data(), arow, n_cols, a, b, out.data());
        });
        const double wall = seconds_since(t0);
        if (r > 0) {
            secs.push_back(wall);
            share.wall += wall;
            share.cpu += mox::bench::process_cpu_seconds() - c0;
        }
    }
    return stats_of(secs);
}

Result bench_kernel(mox::ThreadPool& pool, const DotKernel& kern, const Options& o,
                    const std::vector<uint8_t>& w, size_t rows) {
    const size_t rb = mox::quant::row_bytes(kern.weight, o.k);
    const int nc = mox::quant::kMaxDotCols;
    const size_t arow = mox::quant::activation_row_bytes(kern.act, o.k);
    std::mt19937 rng(99);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(o.k * nc));
    for (float& v : x) v = gauss(rng);
    std::vector<uint8_t> act(arow * nc);
    for (int j = 0; j < nc; ++j)
        mox::quant::quantize_activations(kern.act, x.data() + j * o.k, act.data() + j * arow, o.k);
    std::vector<float> out(rows * nc);

    Result res{};
    res.type = kern.weight;
    res.isa = kern.isa;
    res.bits_per_weight = 8.0 * static_cast<double>(rb) / static_cast<double>(o.k);
    // Against the scalar kernel on the same activation bytes (it reads them as dequantized fp32 when
    // the act format is not F32, so compare through a scalar run on the dequantized activations).
    {
        const DotKernel& ref = mox::quant::dot_kernel(kern.weight, Isa::scalar);
        std::vector<float> af(static_cast<size_t>(o.k * nc));
        for (int j = 0; j < nc; ++j) {
            if (kern.act == TypeId::f32)
                std::memcpy(af.data() + j * o.k, act.data() + j * arow, arow);
            else
                mox::quant::traits(kern.act).dequantize(act.data() + j * arow, af.data() + j * o.k, o.k);
        }
        float got[mox::quant::kMaxDotCols], want[mox::quant::kMaxDotCols];
        for (size_t r = 0; r < std::min<size_t>(rows, 8); ++r) {
            kern.dot(o.k, w.data() + r * rb, act.data(), arow, nc, got);
            ref.dot(o.k, w.data() + r * rb, af.data(), static_cast<size_t>(o.k) * 4, nc, want);
            for (int j = 0; j < nc; ++j) {
                const double scale = std::max(1e-3, static_cast<double>(std::fabs(want[j])));
                res.max_rel_err = std::max(res.max_rel_err, std::fabs(got[j] - want[j]) / scale);
            }
        }
    }
    Share share, pf_share;
    const Stats mv = time_pass(pool, kern, w, rb, o.k, act, arow, 1, rows, out, o.repetitions, share);
    res.cpu_share = share.of(pool.size());
    const double bytes = static_cast<double>(rows * rb);
    res.matvec_gbs = {bytes / mv.median / 1e9, bytes / mv.max / 1e9, bytes / mv.min / 1e9};
    res.matvec_ms = {mv.median * 1e3, mv.min * 1e3, mv.max * 1e3};

    const size_t prows = std::clamp<size_t>(static_cast<size_t>(o.prefill_mib) * (1u << 20) / rb, 1, rows);
    const Stats pf = time_pass(pool, kern, w, rb, o.k, act, arow, nc, prows, out, o.repetitions, pf_share);
    const double flops = 2.0 * static_cast<double>(prows) * static_cast<double>(o.k) * nc;
    res.prefill_gflops = {flops / pf.median / 1e9, flops / pf.max / 1e9, flops / pf.min / 1e9};
    return res;
}

int run(const Options& o) {
    if (o.k <= 0 || o.k % 256 != 0) mox::fail("--k {}: must be a positive multiple of 256", o.k);
    if (o.repetitions < 1) mox::fail("-r {}: need at least one repetition", o.repetitions);
    const Isa host = mox::quant::host_isa();
    std::vector<Isa> isas;
    if (o.isas.empty()) {
        for (Isa i : {Isa::avx2, Isa::avx512})
            if (i <= host) isas.push_back(i);
        if (isas.empty()) isas.push_back(Isa::scalar);
    } else {
        for (const std::string& s : o.isas) {
            const auto i = mox::quant::isa_from_name(s);
            if (!i) mox::fail("--isa {}: expected scalar, avx2 or avx512", s);
            if (*i > host)
                mox::fail("--isa {}: this CPU (or MOX_ISA) only runs up to {}", s,
                          mox::quant::isa_name(host));
            isas.push_back(*i);
        }
    }
    const std::vector<DotKernel> all = mox::quant::all_dot_kernels();
    std::vector<TypeId> types;
    if (o.types.empty()) {
        for (const DotKernel& k : all)
            if (std::find(types.begin(), types.end(), k.weight) == types.end()) types.push_back(k.weight);
    } else {
        for (const std::string& s : o.types) {
            const auto t = mox::quant::type_from_name(s);
            if (!t) mox::fail("--types {}: unknown type", s);
            types.push_back(*t);
        }
    }

    mox::ThreadPool pool(o.threads);
    const size_t size = static_cast<size_t>(o.size_mib) << 20;
    Stats stream;
    Share stream_share;
    {
        std::vector<uint8_t> buf(size);  // zero-filled: every page is touched before timing
        for (size_t i = 0; i < size; i += 4096) buf[i] = static_cast<uint8_t>(i >> 12);
        stream = stream_read(pool, buf, o.repetitions, stream_share);
    }

    std::vector<Result> results;
    std::vector<std::string> missing;
    for (TypeId t : types) {
        std::vector<const DotKernel*> kernels;
        for (Isa isa : isas) {
            const auto it = std::find_if(all.begin(), all.end(),
                                         [&](const DotKernel& k) { return k.weight == t && k.isa == isa; });
            if (it == all.end())
                missing.push_back(fmt::format("{}/{}", mox::quant::type_name(t), mox::quant::isa_name(isa)));
            else
                kernels.push_back(&*it);
        }
        if (kernels.empty()) continue;
        const size_t rb = mox::quant::row_bytes(t, o.k);
        const size_t rows = std::max<size_t>(1, size / rb);
        std::vector<uint8_t> w(rows * rb);
        fill_weights(t, o.k, rows, w);
        for (const DotKernel* k : kernels) {
            results.push_back(bench_kernel(pool, *k, o, w, rows));
            std::fprintf(stderr, "  %s/%s done\n", std::string(mox::quant::type_name(t)).c_str(),
                         std::string(mox::quant::isa_name(k->isa)).c_str());
        }
    }

    int bad = 0;
    for (const Result& r : results) bad += r.max_rel_err > 1e-2;
    if (o.output == "json") {
        nlohmann::json j;
        j["cpu"] = mox::engine::cpu_model_name();
        j["threads"] = pool.size();
        j["host_isa"] = mox::quant::isa_name(host);
        j["size_mib"] = o.size_mib;
        j["k"] = o.k;
        j["repetitions"] = o.repetitions;
        j["stream_read_gbs"] = {{"median", stream.median}, {"min", stream.min}, {"max", stream.max}};
        j["stream_cpu_share"] = stream_share.of(pool.size());
        j["missing"] = missing;
        for (const Result& r : results) {
            auto s = [](const Stats& v) {
                return nlohmann::json{{"median", v.median}, {"min", v.min}, {"max", v.max}};
            };
            j["kernels"].push_back({{"type", mox::quant::type_name(r.type)},
                                    {"isa", mox::quant::isa_name(r.isa)},
                                    {"bits_per_weight", r.bits_per_weight},
                                    {"matvec_gbs", s(r.matvec_gbs)},
                                    {"matvec_ms", s(r.matvec_ms)},
                                    {"fraction_of_stream", r.matvec_gbs.median / stream.median},
                                    {"prefill_gflops", s(r.prefill_gflops)},
                                    {"max_rel_err_vs_scalar", r.max_rel_err},
                                    {"matvec_cpu_share", r.cpu_share}});
        }
        std::printf("%s\n", j.dump(2).c_str());
    } else {
        std::printf(
            "CPU: %s, %d thread(s), tier %s; matrix %lld MiB, k = %lld, %d repetitions (median "
            "[min-max])\n\n",
            mox::engine::cpu_model_name().c_str(), pool.size(), std::string(mox::quant::isa_name(host)).c_str(),
            static_cast<long long>(o.size_mib), static_cast<long long>(o.k), o.repetitions);
        fmt::print("STREAM-style read: {:.1f} GB/s [{:.1f}-{:.1f}], cpu share {:.0f}%\n\n", stream.median,
                   stream.min, stream.max, 100.0 * stream_share.of(pool.size()));
        fmt::print(
            "| type | isa | bpw | matvec GB/s | of STREAM | ms / matvec | cpu share | prefill x{} GFLOP/s | "
            "err |\n",
            mox::quant::kMaxDotCols);
        fmt::print("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
        for (const Result& r : results)
            fmt::print(
                "| {} | {} | {:.2f} | {:.1f} [{:.1f}-{:.1f}] | {:.0f}% | {:.2f} | {:.0f}% | {:.1f} "
                "[{:.1f}-{:.1f}] | {:.0e}{} |\n",
                mox::quant::type_name(r.type), mox::quant::isa_name(r.isa), r.bits_per_weight,
                r.matvec_gbs.median, r.matvec_gbs.min, r.matvec_gbs.max,
                100.0 * r.matvec_gbs.median / stream.median, r.matvec_ms.median, 100.0 * r.cpu_share,
                r.prefill_gflops.median, r.prefill_gflops.min, r.prefill_gflops.max, r.max_rel_err,
                r.max_rel_err > 1e-2 ? " WRONG" : "");
        if (!missing.empty()) {
            std::string m;
            for (const std::string& s : missing) m += (m.empty() ? "" : ", ") + s;
            std::printf("\nno kernel: %s\n", m.c_str());
        }
    }
    if (bad) std::fprintf(stderr, "%d kernel(s) disagree with the scalar reference\n", bad);
    return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{"mox_kernel_bench: CPU dot-kernel bandwidth and throughput against a STREAM-style read"};
    app.add_option("-t,--threads", o.threads, "Threads (including the caller)")->check(CLI::Range(1, 1024));
    app.add_option("--types", o.types, "Weight types, e.g. q4_k,iq2_xxs (default: all with a kernel)")
        ->delimiter(',');
    app.add_option("--isa", o.isas, "Tiers, e.g. scalar,avx2,avx512 (default: the SIMD tiers this CPU runs)")
        ->delimiter(',');
    app.add_option("-o,--output", o.output, "md or json")->check(CLI::IsMember({"md", "json"}));
    app.add_option("--size-mib", o.size_mib, "Weight matrix and STREAM buffer size (beyond the LLC)")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--prefill-mib", o.prefill_mib, "Part of the matrix the prefill tile runs over")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--k", o.k, "Elements per weight row (a multiple of 256)");
    app.add_option("-r,--repetitions", o.repetitions, "Timed repetitions (median, min, max)");
    CLI11_PARSE(app, argc, argv);
    try {
        return run(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
}

// The attention paths (decode and causal prefill blocks) at every ISA tier this CPU runs, scalar
// (attention_reference) included, against a double-precision softmax(q K^T) V over the dequantized
// cache rows (double_oracle.h): every KV cache type, head dims 64/128/256, 1..5000 keys, several GQA
// ratios, with and without a thread pool (so the context split and its merge run too). Outputs sit
// between guard zones that must come back untouched. At MOX_ISA=scalar only the reference runs, and
// is still held to the same bound.
#include "double_oracle.h"

#include "core/thread_pool.h"
#include "ops/attention.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

namespace mox::ops {

namespace {

using quant::TypeId;

constexpr size_t kGuard = 64;                // floats of guard on each side of an output
constexpr uint32_t kGuardBits = 0x7fc0dead;  // a NaN payload no kernel writes

struct Cache {
    std::vector<uint8_t> k, v;
    KvView view;
};

Cache make_cache(TypeId type, int64_t row_elems, int64_t n, uint32_t seed) {
    Cache c;
    const size_t rb = quant::row_bytes(type, row_elems);
    c.k.resize(rb * static_cast<size_t>(n));
    c.v.resize(rb * static_cast<size_t>(n));
    c.view = KvView{c.k.data(), c.v.data(), type, type, row_elems, rb, rb, n};
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> kr(static_cast<size_t>(row_elems)), vr(kr.size());
    for (int64_t p = 0; p < n; ++p) {
        for (float& x : kr) x = dist(rng);
        for (float& x : vr) x = dist(rng);
        kv_store(c.view, p, kr.data(), vr.data());
    }
    return c;
}

// Output buffer with guard zones.
struct Guarded {
    explicit Guarded(size_t n) : buf(n + 2 * kGuard) {
        for (float& x : buf) std::memcpy(&x, &kGuardBits, 4);
    }
    float* data() { return buf.data() + kGuard; }
    bool guards_intact() const {
        for (size_t i = 0; i < buf.size(); ++i) {
            if (i >= kGuard && i < buf.size() - kGuard) continue;
            uint32_t bits;
            std::memcpy(&bits, &buf[i], 4);
            if (bits != kGuardBits) return false;
        }
        return true;
    }
    std::vector<float> buf;
};

// Every path computes on the same dequantized rows as the oracle (the fast one block by block in
// registers, the reference through the type's reference dequantizer), so the KV type does not change
// the bound: fp32 rounding of the dots, the softmax and the weighted sum over up to 5000 keys, and the
// fast path's polynomial exp (< 2e-7 relative). Error measure: |got - want| / (1 + |want|). Worst
// measured over all cases: 3.0e-6 (the reference, a prefill block), 1.9e-6 (avx2), 1.9e-6 (avx512);
// the bound is ~3x the worst.
constexpr double kTolerance = 1e-5;

// The tiers this CPU runs, scalar (the reference) first.
std::vector<quant::Isa> tiers() {
    std::vector<quant::Isa> out;
    for (quant::Isa isa : {quant::Isa::scalar, quant::Isa::avx2, quant::Isa::avx512})
        if (isa <= quant::host_isa()) out.push_back(isa);
    return out;
}

struct GqaShape {
    int64_t n_head, n_head_kv;
};

void expect_close(const float* got, const std::vector<double>& want, const std::string& what) {
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double e = std::abs(double(got[i]) - want[i]) / (1.0 + std::abs(want[i]));
        if (!(e <= worst)) worst = e, at = i;  // NaN counts as worst
    }
    EXPECT_LE(worst, kTolerance) << what << " at " << at << ": " << got[at] << " vs " << want[at];
}

}  // namespace

TEST(AttentionFast, DecodeMatchesDoublePrecision) {
    ThreadPool pool(3);
    for (TypeId type : {TypeId::f32, TypeId::f16, TypeId::bf16, TypeId::q8_0, TypeId::q4_0})
        for (int64_t d : {64, 128, 256})
            for (GqaShape g : {GqaShape{4, 4}, GqaShape{8, 2}, GqaShape{16, 2}}) {
                const int64_t max_keys = 5000;
                Cache c = make_cache(type, g.n_head_kv * d, max_keys, static_cast<uint32_t>(d + g.n_head));
                std::mt19937 rng(7);
                std::normal_distribution<float> dist(0.0f, 2.0f);  // peaky softmax: scores of std ~2
                std::vector<float> q(static_cast<size_t>(g.n_head * d));
                for (float& x : q) x = dist(rng);
                const AttentionShape shape{g.n_head, g.n_head_kv, d, 1.0f / std::sqrt(float(d))};
                for (int64_t n_keys : {1, 7, 300, 5000}) {
                    const std::vector<double> want = oracle::attention(c.view, shape, q.data(), n_keys);
                    for (quant::Isa isa : tiers())
                        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
                            Guarded got(q.size());
                            attention(Context{p, isa}, c.view, shape, q.data(), n_keys, got.data());
                            const std::string what = fmt::format(
                                "{} d={} H={}/{} keys={} isa={} threads={}", quant::type_name(type), d,
                                g.n_head, g.n_head_kv, n_keys, quant::isa_name(isa), p ? p->size() : 1);
                            expect_close(got.data(), want, what);
                            EXPECT_TRUE(got.guards_intact()) << what;
                        }
                }
            }
}

TEST(AttentionFast, PrefillBlockMatchesDoublePrecision) {
    ThreadPool pool(3);
    struct Case {
        int64_t pos0, n_q;
    };
    // A first block, a block after a long past, one token, and blocks whose rows span several
    // 32-row blocks with a ragged last one.
    for (TypeId type : {TypeId::f32, TypeId::f16, TypeId::bf16, TypeId::q8_0, TypeId::q4_0})
        for (int64_t d : {64, 256})
            for (GqaShape g : {GqaShape{2, 2}, GqaShape{6, 2}, GqaShape{16, 2}})
                for (Case cs : {Case{0, 1}, Case{0, 37}, Case{700, 5}, Case{1200, 21}}) {
                    const int64_t n_ctx = cs.pos0 + cs.n_q;
                    Cache c = make_cache(type, g.n_head_kv * d, n_ctx, static_cast<uint32_t>(n_ctx + d));
                    std::mt19937 rng(11);
                    std::normal_distribution<float> dist(0.0f, 2.0f);
                    const size_t row = static_cast<size_t>(g.n_head * d);
                    std::vector<float> q(row * static_cast<size_t>(cs.n_q));
                    for (float& x : q) x = dist(rng);
                    const AttentionShape shape{g.n_head, g.n_head_kv, d, 1.0f / std::sqrt(float(d))};
                    std::vector<double> want;
                    for (int64_t i = 0; i < cs.n_q; ++i) {
                        const std::vector<double> w =
                            oracle::attention(c.view, shape, q.data() + i * row, cs.pos0 + i + 1);
                        want.insert(want.end(), w.begin(), w.end());
                    }
                    for (quant::Isa isa : tiers())
                        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
                            Guarded got(q.size());
                            attention_batch(Context{p, isa}, c.view, shape, q.data(), cs.n_q, cs.pos0,
                                            got.data());
                            const std::string what =
                                fmt::format("{} d={} H={}/{} pos0={} n_q={} isa={} threads={}",
                                            quant::type_name(type), d, g.n_head, g.n_head_kv, cs.pos0, cs.n_q,
                                            quant::isa_name(isa), p ? p->size() : 1);
                            expect_close(got.data(), want, what);
                            EXPECT_TRUE(got.guards_intact()) << what;
                        }
                }
}

TEST(AttentionFast, MixedKAndVTypes) {
    const int64_t H = 8, Hkv = 2, d = 128, n = 333;
    Cache ck = make_cache(TypeId::q8_0, Hkv * d, n, 1), cv = make_cache(TypeId::bf16, Hkv * d, n, 2);
    KvView kv = ck.view;
    kv.v = cv.view.v;
    kv.v_type = TypeId::bf16;
    kv.v_row_bytes = cv.view.v_row_bytes;
    std::vector<float> q(static_cast<size_t>(H * d));
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.0f, 2.0f);
    for (float& x : q) x = dist(rng);
    const AttentionShape shape{H, Hkv, d, 1.0f / std::sqrt(float(d))};
    const std::vector<double> want = oracle::attention(kv, shape, q.data(), n);
    for (quant::Isa isa : tiers()) {
        Guarded got(q.size());
        attention(Context{nullptr, isa}, kv, shape, q.data(), n, got.data());
        expect_close(got.data(), want, fmt::format("q8_0 K / bf16 V isa={}", quant::isa_name(isa)));
        EXPECT_TRUE(got.guards_intact());
    }
}

TEST(AttentionFast, ScalarTierIsTheReference) {
    const int64_t H = 4, Hkv = 2, d = 64, n = 50;
    Cache c = make_cache(TypeId::f16, Hkv * d, n, 5);
    std::vector<float> q(static_cast<size_t>(H * d), 0.25f), want(q.size()), got(q.size());
    const AttentionShape shape{H, Hkv, d, 0.125f};
    attention_reference(c.view, shape, q.data(), n, want.data());
    attention(Context{nullptr, quant::Isa::scalar}, c.view, shape, q.data(), n, got.data());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

}  // namespace mox::ops

namespace mox::ops {

// Timing, not a check: run with --gtest_also_run_disabled_tests --gtest_filter='*Perf*'. Times are
// process CPU time per call (summed over threads), which stays meaningful on a shared, loaded machine.
// Decode at batch 1 over the model's shape (16 heads, 2 KV heads, head dim 256).
TEST(AttentionFast, DISABLED_PerfDecode) {
    const int64_t H = 16, Hkv = 2, d = 256;
    const AttentionShape shape{H, Hkv, d, 1.0f / 16};
    std::vector<float> q(static_cast<size_t>(H * d), 0.5f), out(q.size());
    ThreadPool pool2(2);
    auto time_ms = [](auto&& fn) {
        fn();
        int reps = 0;
        const std::clock_t c0 = std::clock();
        double ms = 0;
        do {
            fn();
            ++reps;
            ms = 1e3 * static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
        } while (ms < 300);
        return ms / reps;
    };
    for (TypeId type : {TypeId::f16, TypeId::q8_0})
        for (int64_t n : {4096, 32768}) {
            Cache c = make_cache(type, Hkv * d, n, 1);
            const double mb = 2.0 * static_cast<double>(c.view.k_row_bytes) * static_cast<double>(n) / 1e6;
            const double ref = time_ms([&] { attention_reference(c.view, shape, q.data(), n, out.data()); });
            fmt::print("{} keys={:6} ({:.0f} MB K+V): reference {:8.3f} ms", quant::type_name(type), n, mb,
                       ref);
            for (quant::Isa isa : tiers())
                for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool2}) {
                    if (isa == quant::Isa::scalar) continue;  // timed above as the reference
                    const double ms = time_ms([&] {
                        attention(Context{p, isa}, c.view, shape, q.data(), n, out.data());
                    });
                    fmt::print(" | {} {}t {:7.3f} ms ({:.1f} GB/s)", quant::isa_name(isa), p ? 2 : 1, ms,
                               mb / ms);
                }
            fmt::print("\n");
        }
}

// A 512-token prefill block from an empty cache (causal), model shape, f16 cache.
TEST(AttentionFast, DISABLED_PerfPrefill) {
    const int64_t H = 16, Hkv = 2, d = 256, n = 512;
    const AttentionShape shape{H, Hkv, d, 1.0f / 16};
    Cache c = make_cache(TypeId::f16, Hkv * d, n, 1);
    std::vector<float> q(static_cast<size_t>(n * H * d), 0.5f), out(q.size());
    ThreadPool pool2(2);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool2}) {
        fmt::print("prefill {} tokens, {} thread(s):", n, p ? 2 : 1);
        for (quant::Isa isa : {quant::Isa::scalar, quant::Isa::avx2, quant::Isa::avx512}) {
            if (isa > quant::host_isa()) continue;
            const std::clock_t c0 = std::clock();
            attention_batch(Context{p, isa}, c.view, shape, q.data(), n, 0, out.data());
            fmt::print(" | {} {:.1f} ms", quant::isa_name(isa),
                       1e3 * double(std::clock() - c0) / CLOCKS_PER_SEC);
        }
        fmt::print("\n");
    }
}

}  // namespace mox::ops

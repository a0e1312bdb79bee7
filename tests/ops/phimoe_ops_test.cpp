// The reference ops Phi-3.5-MoE adds (ops/basic.h, ops/moe.h) against double-precision formulas
// written here: LayerNorm with a bias, rotary embedding with per-pair frequency factors and an
// attention factor, and sparsemixer routing (hand-made cases for its margin, then random logits).
#include "ops/basic.h"
#include "ops/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace mox::ops {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f, float mean = 0.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(mean, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

TEST(PhimoeOps, LayerNormMatchesTheDoubleFormula) {
    for (const int64_t n : {1, 7, 128, 4096}) {
        // A large mean on purpose: the centring must not lose the small variations around it.
        const auto x = randn(static_cast<size_t>(n), 1 + static_cast<uint32_t>(n), 0.5f, 30.0f);
        const auto w = randn(static_cast<size_t>(n), 2, 0.3f, 1.0f),
                   b = randn(static_cast<size_t>(n), 3, 0.1f);
        std::vector<float> out(static_cast<size_t>(n));
        layer_norm(x.data(), w.data(), b.data(), n, 1e-5f, out.data());
        double mean = 0, var = 0;
        for (float v : x) mean += v;
        mean /= static_cast<double>(n);
        for (float v : x) var += (v - mean) * (v - mean);
        var /= static_cast<double>(n);
        for (int64_t i = 0; i < n; ++i) {
            const double want = (x[i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i];
            EXPECT_NEAR(out[i], want, 2e-6 * (1 + std::abs(want))) << "n " << n << " i " << i;
        }
        std::vector<float> in_place = x;  // out may alias x
        layer_norm(in_place.data(), w.data(), b.data(), n, 1e-5f, in_place.data());
        EXPECT_EQ(in_place, out);
    }
}

TEST(PhimoeOps, RopeWithFactorsAndAttentionFactorMatchesTheDoubleFormula) {
    const int64_t n_rot = 64, hd = 96;  // partial: dims n_rot.. untouched
    std::vector<float> f(n_rot / 2);
    for (int64_t i = 0; i < n_rot / 2; ++i) f[i] = 1.0f + static_cast<float>(i) * 0.37f;  // 1 .. 12.5
    const RopeScaling scaling{f.data(), 1.19f};
    for (const bool neox : {true, false}) {
        for (const int64_t pos : {0, 1, 17, 4095, 131071}) {
            const auto head = randn(static_cast<size_t>(hd), 7 + static_cast<uint32_t>(pos));
            std::vector<float> got = head;
            if (neox)
                rope_neox(got.data(), n_rot, pos, 10000.0, scaling);
            else
                rope_norm(got.data(), n_rot, pos, 10000.0, scaling);
            for (int64_t i = 0; i < n_rot / 2; ++i) {
                const double angle = static_cast<double>(pos) *
                                     std::pow(10000.0, -2.0 * static_cast<double>(i) / n_rot) / f[i];
                const double c = std::cos(angle) * 1.19, s = std::sin(angle) * 1.19;
                const int64_t a = neox ? i : 2 * i, bi = neox ? i + n_rot / 2 : 2 * i + 1;
                EXPECT_NEAR(got[a], head[a] * c - head[bi] * s, 1e-5) << pos << " " << i;
                EXPECT_NEAR(got[bi], head[a] * s + head[bi] * c, 1e-5) << pos << " " << i;
            }
            for (int64_t i = n_rot; i < hd; ++i) EXPECT_EQ(got[i], head[i]);
        }
    }
    // No factors and a factor of one: the plain rotation.
    const auto head = randn(static_cast<size_t>(hd), 99);
    std::vector<float> a = head, b = head;
    rope_neox(a.data(), n_rot, 123, 1e6);
    rope_neox(b.data(), n_rot, 123, 1e6, RopeScaling{});
    EXPECT_EQ(a, b);
}

// The sparsemixer formula in double, written from the definition (archs.md §5.3).
void sparsemixer_double(const std::vector<float>& s, double jitter, int32_t ids[2], double w[2]) {
    const int64_t n = static_cast<int64_t>(s.size());
    int32_t taken = -1;
    for (int step = 0; step < 2; ++step) {
        int32_t e = -1;
        for (int64_t j = 0; j < n; ++j)
            if (j != taken && (e < 0 || s[j] > s[e])) e = static_cast<int32_t>(j);
        const double m = s[e];
        double sum = 0;
        for (int64_t j = 0; j < n; ++j)
            if (j != taken && (m - s[j]) / std::max<double>(std::abs(s[j]), m) <= 2 * jitter)
                sum += std::exp(s[j] - m);
        ids[step] = e;
        w[step] = 1.0 / sum;
        taken = e;
    }
}

TEST(PhimoeOps, SparsemixerHandMadeCases) {
    Routing r;
    // One clear winner per step: each weight is 1 (no other expert within 2% of the max).
    route_sparsemixer(std::vector<float>{1.0f, 5.0f, 3.0f, -2.0f}.data(), 1, 4, 0.01f, r);
    EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2}));
    EXPECT_EQ(r.weights, (std::vector<float>{1.0f, 1.0f}));
    // Experts 0 and 2 within 1% of the max 10: the softmax over the three candidates; the second step
    // measures its margin from its own max (9.95) and finds expert 2 (9.9) inside it too.
    route_sparsemixer(std::vector<float>{9.95f, 10.0f, 9.9f, 1.0f}.data(), 1, 4, 0.01f, r);
    EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 0}));
    const double z1 = 1 + std::exp(9.95 - 10.0) + std::exp(9.9 - 10.0);
    EXPECT_NEAR(r.weights[0], 1 / z1, 1e-6);
    EXPECT_NEAR(r.weights[1], 1 / (1 + std::exp(9.9 - 9.95)), 1e-6);
    // Ties: the lower id first; the weights are not renormalised (they need not sum to 1).
    route_sparsemixer(std::vector<float>{2.0f, 7.0f, 7.0f, 0.5f}.data(), 1, 4, 0.01f, r);
    EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2}));
    EXPECT_NEAR(r.weights[0], 0.5, 1e-7);
    EXPECT_NEAR(r.weights[1], 1.0, 1e-7);
    EXPECT_EQ(r.expert_counts, (std::vector<int32_t>{0, 1, 1, 0}));
}

TEST(PhimoeOps, SparsemixerMatchesTheDoubleFormulaOnRandomLogits) {
    const int64_t E = 16, T = 500;
    // Logits near a common value, so that several experts often fall inside the 2% margin.
    const auto logits = randn(static_cast<size_t>(E * T), 42, 0.3f, 6.0f);
    Routing r;
    route_sparsemixer(logits.data(), T, E, 0.01f, r);
    int64_t shared_weight = 0;
    for (int64_t t = 0; t < T; ++t) {
        const std::vector<float> s(logits.begin() + t * E, logits.begin() + (t + 1) * E);
        int32_t ids[2];
        double w[2];
        sparsemixer_double(s, 0.01f, ids, w);
        for (int k = 0; k < 2; ++k) {
            EXPECT_EQ(r.ids[static_cast<size_t>(2 * t + k)], ids[k]) << "token " << t;
            EXPECT_NEAR(r.weights[static_cast<size_t>(2 * t + k)], w[k], 1e-6) << "token " << t;
            shared_weight += w[k] < 1.0;
        }
    }
    EXPECT_GT(shared_weight, T / 4);  // the softmax among candidates is exercised, not only weight 1
}

}  // namespace
}  // namespace mox::ops

// Reference ops against direct formulas computed independently in double precision.
#include "ops/attention.h"
#include "ops/basic.h"
#include "ops/delta_net.h"
#include "ops/moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace mox::ops {

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

}  // namespace

TEST(Ops, RmsNormMatchesFormula) {
    auto x = randn(96, 1), w = randn(96, 2);
    std::vector<float> out(96);
    rms_norm(x.data(), w.data(), 96, 1e-6f, out.data());
    double ms = 0;
    for (float v : x) ms += double(v) * v;
    ms /= 96;
    for (int i = 0; i < 96; ++i) EXPECT_NEAR(out[i], x[i] / std::sqrt(ms + 1e-6) * w[i], 1e-5);
}

TEST(Ops, RopeNeoxRotatesPairsAndKeepsTail) {
    auto x = randn(64, 3);
    auto y = x;
    rope_neox(y.data(), 16, 7, 10000.0);
    for (int i = 16; i < 64; ++i) EXPECT_EQ(y[i], x[i]);  // beyond n_rot untouched
    for (int i = 0; i < 8; ++i) {
        const double a = 7 * std::pow(10000.0, -2.0 * i / 16);
        EXPECT_NEAR(y[i], x[i] * std::cos(a) - x[i + 8] * std::sin(a), 1e-5);
        EXPECT_NEAR(y[i + 8], x[i] * std::sin(a) + x[i + 8] * std::cos(a), 1e-5);
    }
    auto z = x;
    rope_neox(z.data(), 16, 0, 10000.0);
    for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(z[i], x[i]);  // position 0 is the identity
}

TEST(Ops, RopeNormRotatesAdjacentPairs) {
    auto x = randn(64, 4);
    auto y = x;
    rope_norm(y.data(), 32, 11, 1e6);
    for (int i = 32; i < 64; ++i) EXPECT_EQ(y[i], x[i]);
    for (int i = 0; i < 16; ++i) {
        const double a = 11 * std::pow(1e6, -2.0 * i / 32);
        EXPECT_NEAR(y[2 * i], x[2 * i] * std::cos(a) - x[2 * i + 1] * std::sin(a), 1e-5);
        EXPECT_NEAR(y[2 * i + 1], x[2 * i] * std::sin(a) + x[2 * i + 1] * std::cos(a), 1e-5);
    }
    // NORM on permuted rows is NEOX on the original rows (why the converter permutes q and k):
    // row 2i + s of the permuted head is row s * n/2 + i of the original.
    std::vector<float> permuted(64);
    for (int i = 0; i < 32; ++i)
        for (int s = 0; s < 2; ++s) permuted[2 * i + s] = x[s * 32 + i];
    rope_norm(permuted.data(), 64, 5, 1e4);
    auto neox = x;
    rope_neox(neox.data(), 64, 5, 1e4);
    for (int i = 0; i < 32; ++i)
        for (int s = 0; s < 2; ++s) EXPECT_FLOAT_EQ(permuted[2 * i + s], neox[s * 32 + i]);
}

TEST(Ops, CausalConvMatchesDirectConvolution) {
    const int C = 5, K = 4, T = 9;
    auto w = randn(C * K, 4), xs = randn(C * T, 5);
    std::vector<float> state((K - 1) * C, 0.0f), out(C);
    for (int t = 0; t < T; ++t) {
        causal_conv_step(state.data(), w.data(), &xs[t * C], C, K, out.data());
        for (int c = 0; c < C; ++c) {
            double ref = 0;
            for (int k = 0; k < K; ++k) {
                const int src = t - (K - 1) + k;  // tap K-1 is the current token
                if (src >= 0) ref += double(w[c * K + k]) * xs[src * C + c];
            }
            EXPECT_NEAR(out[c], ref, 1e-5) << "t=" << t << " c=" << c;
        }
    }
}

TEST(Ops, CausalConvSequenceByChannelBlocksEqualsTokenSteps) {
    const int64_t C = 37, K = 4, n = 11;
    std::mt19937 rng(3);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    std::vector<float> w(static_cast<size_t>(C * K)), x(static_cast<size_t>(n * C)), s0(static_cast<size_t>((K - 1) * C));
    for (auto* v : {&w, &x, &s0})
        for (float& f : *v) f = gauss(rng);
    std::vector<float> s_step = s0, s_seq = s0, out_step(x.size()), out_seq(x.size());
    for (int64_t t = 0; t < n; ++t) causal_conv_step(s_step.data(), w.data(), &x[t * C], C, K, &out_step[t * C]);
    for (int64_t c0 = 0; c0 < C; c0 += 10)
        causal_conv_sequence(s_seq.data(), w.data(), x.data(), n, C, K, c0, std::min<int64_t>(C, c0 + 10), out_seq.data());
    EXPECT_EQ(out_seq, out_step);
    EXPECT_EQ(s_seq, s_step);
}

TEST(Ops, DeltaRuleMatchesMatrixRecurrence) {
    const int dk = 6, dv = 5, T = 12;
    std::vector<float> S(dv * dk, 0.0f), out(dv);
    std::vector<double> R(dk * dv, 0.0);  // R[i][j]: k-index i, v-index j
    for (int t = 0; t < T; ++t) {
        auto q = randn(dk, 100 + t), k = randn(dk, 200 + t), v = randn(dv, 300 + t);
        const float g = -0.3f * (t % 3), beta = 0.2f + 0.05f * t;
        delta_rule_step_reference(S.data(), q.data(), k.data(), v.data(), g, beta, dk, dv, out.data());
        for (double& r : R) r *= std::exp(double(g));
        for (int j = 0; j < dv; ++j) {
            double u = 0;
            for (int i = 0; i < dk; ++i) u += R[i * dv + j] * k[i];
            const double delta = beta * (v[j] - u);
            for (int i = 0; i < dk; ++i) R[i * dv + j] += k[i] * delta;
        }
        for (int j = 0; j < dv; ++j) {
            double o = 0;
            for (int i = 0; i < dk; ++i) o += R[i * dv + j] * q[i];
            EXPECT_NEAR(out[j], o, 1e-4) << "t=" << t;
        }
    }
}

TEST(Ops, RoutingPicksTopKAndRenormalises) {
    const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.5f, 0.3f, 2.0f};
    Routing r;
    route_softmax_topk(logits.data(), 1, 6, 3, true, r);
    EXPECT_EQ(r.ids[0], 1);  // tie with 5: lower id first
    EXPECT_EQ(r.ids[1], 5);
    EXPECT_EQ(r.ids[2], 3);
    const double e1 = std::exp(2.0), e3 = std::exp(1.5);
    EXPECT_NEAR(r.weights[0], e1 / (2 * e1 + e3), 1e-6);
    EXPECT_NEAR(r.weights[2], e3 / (2 * e1 + e3), 1e-6);
    EXPECT_EQ(r.expert_counts[1] + r.expert_counts[5] + r.expert_counts[3], 3);
    EXPECT_EQ(r.expert_counts[0], 0);
}

TEST(Ops, AttentionOverF32CacheMatchesSoftmaxFormula) {
    const int H = 4, Hkv = 2, d = 8, n = 5;
    std::vector<uint8_t> kbuf(n * Hkv * d * 4), vbuf(kbuf.size());
    KvView kv{kbuf.data(), vbuf.data(), quant::TypeId::f32, quant::TypeId::f32, Hkv * d, Hkv * d * 4u, Hkv * d * 4u, n};
    std::vector<std::vector<float>> ks, vs;
    for (int j = 0; j < n; ++j) {
        ks.push_back(randn(Hkv * d, 10 + j));
        vs.push_back(randn(Hkv * d, 20 + j));
        kv_store(kv, j, ks.back().data(), vs.back().data());
    }
    auto q = randn(H * d, 30);
    std::vector<float> out(H * d);
    const float scale = 1.0f / std::sqrt(float(d));
    attention_reference(kv, {H, Hkv, d, scale}, q.data(), n, out.data());
    for (int h = 0; h < H; ++h) {
        const int g = h / (H / Hkv);
        std::vector<double> s(n);
        double mx = -1e30, sum = 0;
        for (int j = 0; j < n; ++j) {
            double dot = 0;
            for (int i = 0; i < d; ++i) dot += double(q[h * d + i]) * ks[j][g * d + i];
            s[j] = dot * scale;
            mx = std::max(mx, s[j]);
        }
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int i = 0; i < d; ++i) {
            double o = 0;
            for (int j = 0; j < n; ++j) o += s[j] / sum * vs[j][g * d + i];
            EXPECT_NEAR(out[h * d + i], o, 1e-5);
        }
    }
}

}  // namespace mox::ops

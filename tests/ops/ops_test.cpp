// Reference ops against direct formulas computed independently in double precision (double_oracle.h
// for the ones the fast-op tests share).
#include "double_oracle.h"

#include "core/thread_pool.h"
#include "ops/attention.h"
#include "ops/basic.h"
#include "ops/delta_net.h"
#include "ops/moe.h"

#include <gtest/gtest.h>

#include <cfloat>
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

// |got - want| / |want| in units of float's epsilon (2^-23).
double ulps(float got, double want) {
    return std::fabs(got - want) / (std::fabs(want) * FLT_EPSILON);
}

// Relative RMS error of got against the double-precision want.
double rel_rms(const std::vector<float>& got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return std::sqrt(num / den);
}

// n_expert random matrices [n_out, n_in] (Gaussian values, std 0.05) in `type`.
struct OwnedWeight {
    std::vector<uint8_t> bytes;
    Weight w;
};
OwnedWeight random_weight(quant::TypeId type, int64_t n_in, int64_t n_out, int64_t n_expert, uint32_t seed) {
    const size_t rb = quant::row_bytes(type, n_in);
    OwnedWeight o;
    o.bytes.resize(rb * static_cast<size_t>(n_out * n_expert));
    for (int64_t r = 0; r < n_out * n_expert; ++r) {
        const std::vector<float> row =
            randn(static_cast<size_t>(n_in), seed + static_cast<uint32_t>(r), 0.05f);
        quant::traits(type).quantize(row.data(), o.bytes.data() + static_cast<size_t>(r) * rb, n_in);
    }
    o.w = Weight{o.bytes.data(), type, n_in, n_out, n_expert, rb};
    return o;
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

// The scale is 1 / max(||x||, eps) rounded once to fp32, then one fp32 product per element: worst
// measured 0.6 ulp; bound 2 ulp. Below eps the vector is divided by eps, not blown up.
TEST(Ops, L2NormMatchesFormula) {
    for (int64_t n : {1, 7, 128, 4096}) {
        const std::vector<float> x = randn(static_cast<size_t>(n), static_cast<uint32_t>(40 + n), 3.0f);
        std::vector<float> y = x;
        l2_norm(y.data(), n, 1e-6f);
        double ss = 0;
        for (float v : x) ss += double(v) * v;
        for (int64_t i = 0; i < n; ++i)
            EXPECT_LE(ulps(y[i], x[i] / std::sqrt(ss)), 2.0) << "n=" << n << " i=" << i;
    }
    std::vector<float> tiny = {3e-8f, -4e-8f};  // norm 5e-8 < eps 1e-6
    l2_norm(tiny.data(), 2, 1e-6f);
    EXPECT_LE(ulps(tiny[0], 3e-8 / 1e-6), 2.0);
    EXPECT_LE(ulps(tiny[1], -4e-8 / 1e-6), 2.0);
}

// silu, sigmoid and softplus (the gates of the FFN, the attention output, the shared expert and the
// DeltaNet decay) against their double formulas over [-30, 30] and beyond, relative error in ulp.
// fp32 exp and one division or log1p: worst measured silu 1.2, sigmoid 0.9, softplus 0.9 ulp; bound
// 4 ulp. Softplus is the identity above 20 (torch's threshold), off the exact
// value by ln(1 + e^-20) ~ 2e-9 there: far below an ulp of 20.
TEST(Ops, ActivationsMatchFormulas) {
    std::vector<float> xs;
    for (int i = -3000; i <= 3000; ++i) xs.push_back(static_cast<float>(i) / 100.0f);
    for (float x : randn(2000, 77, 8.0f)) xs.push_back(x);
    for (float x : {1e-6f, -1e-6f, 1e-30f, -1e-30f, 19.99f, 20.0f, 20.01f, 60.0f, -60.0f, 85.0f, -85.0f})
        xs.push_back(x);
    for (float x : xs) {
        const double e_silu = x == 0 ? 0 : ulps(silu(x), oracle::silu(x));
        const double e_sig = ulps(sigmoid(x), oracle::sigmoid(x));
        const double e_sp = ulps(softplus(x), oracle::softplus(x));
        EXPECT_LE(e_silu, 4.0) << "silu " << x;
        EXPECT_LE(e_sig, 4.0) << "sigmoid " << x;
        EXPECT_LE(e_sp, 4.0) << "softplus " << x;
    }
    EXPECT_EQ(silu(0.0f), 0.0f);
    EXPECT_EQ(sigmoid(0.0f), 0.5f);
    EXPECT_EQ(softplus(50.0f), 50.0f);  // the identity branch
    // Far out the fp32 exp overflows or underflows; the results stay finite and on the right side.
    EXPECT_EQ(sigmoid(-200.0f), 0.0f);
    EXPECT_EQ(sigmoid(200.0f), 1.0f);
    EXPECT_EQ(silu(200.0f), 200.0f);
    EXPECT_LE(std::fabs(silu(-200.0f)), 1e-30f);
    EXPECT_EQ(softplus(-200.0f), 0.0f);
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

// The shared-expert FFN on the reference kernels (fp32 activations, weights dequantized per row):
// down(silu(gate x) * up x) against double precision, for float and block-quantized weights. Only fp32
// rounding of the sums and of silu: worst measured relative RMS 8.7e-7; bound 4e-6.
TEST(Ops, SwigluFfnMatchesDoublePrecision) {
    ThreadPool pool(2, /*pin=*/false);
    const Context ref{&pool, quant::Isa::scalar};
    for (quant::TypeId type :
         {quant::TypeId::f32, quant::TypeId::f16, quant::TypeId::q8_0, quant::TypeId::q4_k}) {
        const int64_t n_embd = 256, n_ff = 512;
        const OwnedWeight gate = random_weight(type, n_embd, n_ff, 1, 1),
                          up = random_weight(type, n_embd, n_ff, 1, 2);
        const OwnedWeight down = random_weight(type, n_ff, n_embd, 1, 3);
        const oracle::Matrix g = oracle::matrix(gate.w), u = oracle::matrix(up.w), d = oracle::matrix(down.w);
        for (int64_t n_tokens : {1, 3, 12}) {
            const std::vector<float> x =
                randn(static_cast<size_t>(n_tokens * n_embd), 50 + static_cast<uint32_t>(n_tokens));
            std::vector<float> got(x.size());
            swiglu_ffn(ref, gate.w, up.w, down.w, x.data(), n_tokens, got.data());
            std::vector<double> want;
            for (int64_t t = 0; t < n_tokens; ++t) {
                const std::vector<double> y = oracle::swiglu(g, u, d, &x[static_cast<size_t>(t * n_embd)]);
                want.insert(want.end(), y.begin(), y.end());
            }
            EXPECT_LE(rel_rms(got, want), 4e-6) << quant::type_name(type) << " tokens " << n_tokens;
        }
    }
}

// A whole MoE layer as the models compose it from the reference ops: router softmax and top-k
// (renormalised or not), the routed experts' SwiGLU FFNs summed with the routing weights (moe_ffn),
// and a shared expert scaled by the sigmoid of its gate logit. Against the same layer in double
// precision: the routing picks the same experts with weights within 2.5e-7 relative (worst measured;
// bound 1e-6), and the output's relative RMS error is at most 6.4e-7 (bound 3e-6).
TEST(Ops, MoeLayerMatchesDoublePrecision) {
    ThreadPool pool(2, /*pin=*/false);
    const Context ref{&pool, quant::Isa::scalar};
    const int64_t n_embd = 256, n_ff = 256, n_expert = 16, k = 4;
    for (quant::TypeId type : {quant::TypeId::f32, quant::TypeId::q4_k})
        for (bool renormalize : {true, false})
            for (int64_t n_tokens : {1, 9}) {
                const uint32_t seed =
                    100 * static_cast<uint32_t>(type) + 10 * renormalize + static_cast<uint32_t>(n_tokens);
                const OwnedWeight gate = random_weight(type, n_embd, n_ff, n_expert, seed);
                const OwnedWeight up = random_weight(type, n_embd, n_ff, n_expert, seed + 5000);
                const OwnedWeight down = random_weight(type, n_ff, n_embd, n_expert, seed + 10000);
                const OwnedWeight sh_gate = random_weight(type, n_embd, n_ff, 1, seed + 20000);
                const OwnedWeight sh_up = random_weight(type, n_embd, n_ff, 1, seed + 21000);
                const OwnedWeight sh_down = random_weight(type, n_ff, n_embd, 1, seed + 22000);
                const std::vector<float> gate_inp = randn(static_cast<size_t>(n_embd), seed + 3, 0.1f);
                const std::vector<float> x = randn(static_cast<size_t>(n_tokens * n_embd), seed + 4);
                const std::vector<float> logits =
                    randn(static_cast<size_t>(n_tokens * n_expert), seed + 6, 2.0f);
                const ExpertStack stack{gate.w, up.w, down.w};

                Routing r;
                route_softmax_topk(logits.data(), n_tokens, n_expert, k, renormalize, r);
                std::vector<float> got(x.size()), shared(x.size());
                moe_ffn(ref, stack, r, x.data(), got.data());
                swiglu_ffn(ref, sh_gate.w, sh_up.w, sh_down.w, x.data(), n_tokens, shared.data());
                for (int64_t t = 0; t < n_tokens; ++t) {
                    float logit = 0;
                    for (int64_t c = 0; c < n_embd; ++c)
                        logit += gate_inp[c] * x[static_cast<size_t>(t * n_embd + c)];
                    const float s = sigmoid(logit);
                    for (int64_t c = 0; c < n_embd; ++c)
                        got[static_cast<size_t>(t * n_embd + c)] +=
                            s * shared[static_cast<size_t>(t * n_embd + c)];
                }

                // The same layer in double precision, routed by the oracle's own top-k.
                const oracle::Matrix sg = oracle::matrix(sh_gate.w), su = oracle::matrix(sh_up.w),
                                     sd = oracle::matrix(sh_down.w);
                Routing exact = r;
                std::vector<double> want(x.size(), 0.0);
                for (int64_t t = 0; t < n_tokens; ++t) {
                    const oracle::TopK top = oracle::softmax_topk(&logits[static_cast<size_t>(t * n_expert)],
                                                                  n_expert, k, renormalize);
                    for (int64_t i = 0; i < k; ++i) {
                        const size_t slot = static_cast<size_t>(t * k + i);
                        ASSERT_EQ(r.ids[slot], top.ids[static_cast<size_t>(i)])
                            << "token " << t << " rank " << i;
                        const double e = std::fabs(r.weights[slot] - top.weights[static_cast<size_t>(i)]) /
                                         top.weights[static_cast<size_t>(i)];
                        EXPECT_LE(e, 1e-6) << "token " << t << " rank " << i;
                        exact.weights[slot] = static_cast<float>(top.weights[static_cast<size_t>(i)]);
                    }
                    double logit = 0;
                    for (int64_t c = 0; c < n_embd; ++c)
                        logit += double(gate_inp[c]) * x[static_cast<size_t>(t * n_embd + c)];
                    const std::vector<double> y =
                        oracle::swiglu(sg, su, sd, &x[static_cast<size_t>(t * n_embd)]);
                    for (int64_t c = 0; c < n_embd; ++c)
                        want[static_cast<size_t>(t * n_embd + c)] = oracle::sigmoid(logit) * y[c];
                }
                const std::vector<double> routed = oracle::moe(stack, exact, x.data());
                for (size_t i = 0; i < want.size(); ++i) want[i] += routed[i];
                EXPECT_LE(rel_rms(got, want), 3e-6)
                    << quant::type_name(type) << (renormalize ? " renormalised" : "") << " tokens "
                    << n_tokens;
                int32_t total = 0;
                for (int32_t c : r.expert_counts) total += c;
                EXPECT_EQ(total, n_tokens * k);
            }
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

// The chunked (WY / UT transform) form of the gated delta rule for one head (ops/delta_net.h).
//
// Derivation (per chunk, local tokens t = 0..n-1, S0 the incoming state as a dk x dv matrix,
// gamma_t = g_0 + ... + g_t): unrolling S_t = e^g_t S_{t-1} + k_t delta_t^T gives
//   S_t = e^gamma_t S0 + sum_{s<=t} e^(gamma_t - gamma_s) k_s delta_s^T, and
//   delta_t = beta_t (v_t - e^gamma_t S0^T k_t - sum_{s<t} e^(gamma_t - gamma_s) (k_s.k_t) delta_s),
// so (I + L) Delta = beta V - (beta e^gamma K) S0 with L_ts = beta_t (k_t.k_s) e^(gamma_t - gamma_s)
// for s < t. With U = (I+L)^-1 beta V and W = (I+L)^-1 beta e^gamma K: Delta = U - W S0, and
//   o_t = e^gamma_t S0^T q_t + sum_{s<=t} e^(gamma_t - gamma_s) (q_t.k_s) delta_s,
//   S_n = e^gamma_{n-1} S0 + sum_s e^(gamma_{n-1} - gamma_s) k_s delta_s^T.
// Only differences gamma_t - gamma_s <= 0 are exponentiated, so nothing overflows however strong
// the decay.
//
// Inside the function the state is held transposed, St [dk][dv], so that every product below is
// a run of axpy loops over contiguous rows (which the compiler vectorizes without reassociating
// sums).
#include "core/error.h"
#include "ops/delta_net.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mox::ops {

namespace {

void axpy(float a, const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace

void delta_rule_chunked(float* S, const DeltaRuleSeq& seq, int64_t chunk) {
    MOX_CHECK(chunk >= 1, "chunk size {}", chunk);
    const int64_t dk = seq.dk, dv = seq.dv, C = std::min(chunk, std::max<int64_t>(seq.n_tokens, 1));
    auto buf = [](int64_t n) { return std::vector<float>(static_cast<size_t>(n)); };
    std::vector<float> St = buf(dk * dv);
    std::vector<float> Kt = buf(dk * C);  // [dk][C]: column s is k_s
    std::vector<float> A = buf(C * C),
                       B = buf(C * C);  // A_ts = beta_t k_t.k_s e^(..) (s<t), B_ts = q_t.k_s e^(..) (s<=t)
    std::vector<float> U = buf(C * dv), W = buf(C * dk);
    std::vector<float> gamma = buf(C), egamma = buf(C);

    for (int64_t j = 0; j < dv; ++j)
        for (int64_t i = 0; i < dk; ++i) St[static_cast<size_t>(i * dv + j)] = S[j * dk + i];

    for (int64_t c0 = 0; c0 < seq.n_tokens; c0 += C) {
        const int64_t n = std::min(C, seq.n_tokens - c0);
        auto q = [&](int64_t t) { return seq.q + (c0 + t) * seq.qk_stride; };
        auto k = [&](int64_t t) { return seq.k + (c0 + t) * seq.qk_stride; };
        float acc_g = 0;
        for (int64_t t = 0; t < n; ++t) {
            acc_g += seq.g[c0 + t];
            gamma[static_cast<size_t>(t)] = acc_g;
            egamma[static_cast<size_t>(t)] = std::exp(acc_g);
            for (int64_t i = 0; i < dk; ++i) Kt[static_cast<size_t>(i * C + t)] = k(t)[i];
        }

        // Rows of A and B: k_t.k_s and q_t.k_s for s <= t, then the decay and beta factors.
        for (int64_t t = 0; t < n; ++t) {
            float* a = &A[static_cast<size_t>(t * C)];
            float* b = &B[static_cast<size_t>(t * C)];
            std::fill(a, a + t + 1, 0.0f);
            std::fill(b, b + t + 1, 0.0f);
            for (int64_t i = 0; i < dk; ++i) {
                const float* kti = &Kt[static_cast<size_t>(i * C)];
                axpy(k(t)[i], kti, a, t);
                axpy(q(t)[i], kti, b, t + 1);
            }
            const float bt = seq.beta[c0 + t], gt = gamma[static_cast<size_t>(t)];
            for (int64_t s = 0; s <= t; ++s) {
                const float e = std::exp(gt - gamma[static_cast<size_t>(s)]);
                a[s] *= bt * e;
                b[s] *= e;
            }
        }

        // Forward substitution through the unit lower-triangular I + A:
        //   U_t = beta_t v_t - sum_{s<t} A_ts U_s;  W_t = beta_t e^gamma_t k_t - sum_{s<t} A_ts W_s.
        for (int64_t t = 0; t < n; ++t) {
            float* u = &U[static_cast<size_t>(t * dv)];
            float* w = &W[static_cast<size_t>(t * dk)];
            const float bt = seq.beta[c0 + t];
            const float* vt = seq.v + (c0 + t) * seq.v_stride;
            for (int64_t j = 0; j < dv; ++j) u[j] = bt * vt[j];
            const float bw = bt * egamma[static_cast<size_t>(t)];
            for (int64_t i = 0; i < dk; ++i) w[i] = bw * k(t)[i];
            for (int64_t s = 0; s < t; ++s) {
                const float a = A[static_cast<size_t>(t * C + s)];
                axpy(-a, &U[static_cast<size_t>(s * dv)], u, dv);
                axpy(-a, &W[static_cast<size_t>(s * dk)], w, dk);
            }
        }

        // Delta = U - W S0 (in place in U), then the outputs, which read S0 and Delta.
        for (int64_t t = 0; t < n; ++t) {
            float* u = &U[static_cast<size_t>(t * dv)];
            const float* w = &W[static_cast<size_t>(t * dk)];
            for (int64_t i = 0; i < dk; ++i) axpy(-w[i], &St[static_cast<size_t>(i * dv)], u, dv);
        }
        for (int64_t t = 0; t < n; ++t) {
            float* o = seq.out + (c0 + t) * seq.out_stride;
            std::fill(o, o + dv, 0.0f);
            for (int64_t i = 0; i < dk; ++i) axpy(q(t)[i], &St[static_cast<size_t>(i * dv)], o, dv);
            const float eg = egamma[static_cast<size_t>(t)];
            for (int64_t j = 0; j < dv; ++j) o[j] *= eg;
            for (int64_t s = 0; s <= t; ++s)
                axpy(B[static_cast<size_t>(t * C + s)], &U[static_cast<size_t>(s * dv)], o, dv);
        }

        // S <- e^gamma_last S0 + sum_s e^(gamma_last - gamma_s) k_s delta_s^T.
        const float g_last = gamma[static_cast<size_t>(n - 1)], e_last = egamma[static_cast<size_t>(n - 1)];
        std::vector<float>& coef = A;  // reuse: coef[s] = e^(gamma_last - gamma_s)
        for (int64_t s = 0; s < n; ++s)
            coef[static_cast<size_t>(s)] = std::exp(g_last - gamma[static_cast<size_t>(s)]);
        for (int64_t i = 0; i < dk; ++i) {
            float* row = &St[static_cast<size_t>(i * dv)];
            for (int64_t j = 0; j < dv; ++j) row[j] *= e_last;
            for (int64_t s = 0; s < n; ++s)
                axpy(coef[static_cast<size_t>(s)] * Kt[static_cast<size_t>(i * C + s)],
                     &U[static_cast<size_t>(s * dv)], row, dv);
        }
    }

    for (int64_t j = 0; j < dv; ++j)
        for (int64_t i = 0; i < dk; ++i) S[j * dk + i] = St[static_cast<size_t>(i * dv + j)];
}

}  // namespace mox::ops

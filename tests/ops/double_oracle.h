// Double-precision evaluations of the ops, written from their formulas (shared/spec/qwen35moe.md) and
// sharing no code with src/ops: the op tests hold the reference ops and the fast kernels against
// these, so a run at MOX_ISA=scalar, where the fast path is the reference, still checks something.
// Block-format weights and KV rows mean what the type's reference dequantizer says (quant/types.h,
// tested on its own against the gguf package); everything after that is double.
#pragma once

#include "ops/attention.h"
#include "ops/moe.h"
#include "ops/weight.h"
#include "quant/types.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace mox::ops::oracle {

inline double silu(double x) {
    return x / (1.0 + std::exp(-x));
}
inline double sigmoid(double x) {
    return 1.0 / (1.0 + std::exp(-x));
}
inline double softplus(double x) {
    return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));  // no threshold: exact
}

// Row r of a block-format row, dequantized: n floats.
inline std::vector<float> dequantize(quant::TypeId type, const uint8_t* row, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    quant::traits(type).dequantize(row, out.data(), n);
    return out;
}

// A weight matrix (one expert of a stack) dequantized: [n_out][n_in].
struct Matrix {
    int64_t n_in = 0, n_out = 0;
    std::vector<float> w;
    float at(int64_t r, int64_t c) const { return w[static_cast<size_t>(r * n_in + c)]; }
};

inline Matrix matrix(const Weight& weight, int64_t expert = 0) {
    const Weight e = weight.n_expert > 1 ? weight.expert(expert) : weight;
    Matrix m{e.n_in, e.n_out, std::vector<float>(static_cast<size_t>(e.n_in * e.n_out))};
    for (int64_t r = 0; r < e.n_out; ++r)
        quant::traits(e.type).dequantize(e.row(r), m.w.data() + r * e.n_in, e.n_in);
    return m;
}

// y = W x for one vector: [n_out]. x has n_in elements (float or double).
template <typename T>
std::vector<double> matvec(const Matrix& m, const T* x) {
    std::vector<double> y(static_cast<size_t>(m.n_out), 0.0);
    for (int64_t r = 0; r < m.n_out; ++r) {
        double s = 0;
        for (int64_t c = 0; c < m.n_in; ++c) s += static_cast<double>(m.at(r, c)) * static_cast<double>(x[c]);
        y[static_cast<size_t>(r)] = s;
    }
    return y;
}

// sum_c |W_rc x_c| per row: the scale a single dot's rounding error is measured against (the dot
// itself can cancel to near zero).
inline std::vector<double> matvec_magnitude(const Matrix& m, const float* x) {
    std::vector<double> y(static_cast<size_t>(m.n_out), 0.0);
    for (int64_t r = 0; r < m.n_out; ++r)
        for (int64_t c = 0; c < m.n_in; ++c)
            y[static_cast<size_t>(r)] += std::fabs(double(m.at(r, c)) * x[c]);
    return y;
}

// down(silu(gate x) * up x) for one token: [down.n_out].
inline std::vector<double> swiglu(const Matrix& gate, const Matrix& up, const Matrix& down, const float* x) {
    const std::vector<double> g = matvec(gate, x), u = matvec(up, x);
    std::vector<double> h(g.size());
    for (size_t f = 0; f < h.size(); ++f) h[f] = silu(g[f]) * u[f];
    return matvec(down, h.data());
}

// The routed experts of a batch: out[t] = sum_i weights[t,i] * swiglu_e(x_t), e = ids[t,i].
// x: [n_tokens][n_embd]; the result likewise.
inline std::vector<double> moe(const ExpertStack& stack, const Routing& r, const float* x) {
    const int64_t n_embd = stack.gate.n_in;
    std::vector<Matrix> gate, up, down;
    for (int64_t e = 0; e < stack.gate.n_expert; ++e) {
        gate.push_back(matrix(stack.gate, e));
        up.push_back(matrix(stack.up, e));
        down.push_back(matrix(stack.down, e));
    }
    std::vector<double> out(static_cast<size_t>(r.n_tokens * n_embd), 0.0);
    for (int64_t t = 0; t < r.n_tokens; ++t)
        for (int64_t i = 0; i < r.k; ++i) {
            const auto e = static_cast<size_t>(r.ids[static_cast<size_t>(t * r.k + i)]);
            const std::vector<double> y = swiglu(gate[e], up[e], down[e], x + t * n_embd);
            for (int64_t c = 0; c < n_embd; ++c)
                out[static_cast<size_t>(t * n_embd + c)] +=
                    r.weights[static_cast<size_t>(t * r.k + i)] * y[c];
        }
    return out;
}

// Softmax over n logits, then the k most probable (ties: lower id), weights renormalised to sum 1
// when `renormalize`: ids and weights of one token.
struct TopK {
    std::vector<int32_t> ids;
    std::vector<double> weights;
};
inline TopK softmax_topk(const float* logits, int64_t n, int64_t k, bool renormalize) {
    const double mx = *std::max_element(logits, logits + n);
    std::vector<double> p(static_cast<size_t>(n));
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (p[static_cast<size_t>(i)] = std::exp(logits[i] - mx));
    for (double& v : p) v /= sum;
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)] ||
               (p[static_cast<size_t>(a)] == p[static_cast<size_t>(b)] && a < b);
    });
    TopK out;
    double kept = 0;
    for (int64_t i = 0; i < k; ++i) kept += p[static_cast<size_t>(order[static_cast<size_t>(i)])];
    for (int64_t i = 0; i < k; ++i) {
        out.ids.push_back(order[static_cast<size_t>(i)]);
        out.weights.push_back(p[static_cast<size_t>(order[static_cast<size_t>(i)])] /
                              (renormalize ? kept : 1.0));
    }
    return out;
}

// softmax(q K^T * scale) V over cache positions [0, n_keys), for every query head (KV head
// h / (n_head / n_head_kv)): [n_head * head_dim].
inline std::vector<double> attention(const KvView& kv, const AttentionShape& s, const float* q,
                                     int64_t n_keys) {
    const int64_t d = s.head_dim, group = s.n_head / s.n_head_kv;
    std::vector<std::vector<float>> keys, values;
    for (int64_t j = 0; j < n_keys; ++j) {
        keys.push_back(dequantize(kv.k_type, kv.k + static_cast<size_t>(j) * kv.k_row_bytes, kv.row_elems));
        values.push_back(dequantize(kv.v_type, kv.v + static_cast<size_t>(j) * kv.v_row_bytes, kv.row_elems));
    }
    std::vector<double> out(static_cast<size_t>(s.n_head * d), 0.0), p(static_cast<size_t>(n_keys));
    for (int64_t h = 0; h < s.n_head; ++h) {
        const int64_t off = (h / group) * d;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n_keys; ++j) {
            double dot = 0;
            for (int64_t i = 0; i < d; ++i)
                dot += double(q[h * d + i]) * keys[static_cast<size_t>(j)][off + i];
            p[static_cast<size_t>(j)] = dot * static_cast<double>(s.scale);
            mx = std::max(mx, p[static_cast<size_t>(j)]);
        }
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < n_keys; ++j)
            for (int64_t i = 0; i < d; ++i)
                out[static_cast<size_t>(h * d + i)] +=
                    p[static_cast<size_t>(j)] / sum * values[static_cast<size_t>(j)][off + i];
    }
    return out;
}

// One gated delta-rule step for one value head, S [dv][dk] (as the op stores it):
//   S <- e^g S;  S <- S + k (beta (v - S^T k))^T;  out = S^T q.
inline void delta_rule_step(std::vector<double>& S, const float* q, const float* k, const float* v, double g,
                            double beta, int64_t dk, int64_t dv, double* out) {
    const double decay = std::exp(g);
    for (double& x : S) x *= decay;
    for (int64_t j = 0; j < dv; ++j) {
        double* col = S.data() + j * dk;
        double u = 0;
        for (int64_t i = 0; i < dk; ++i) u += col[i] * k[i];
        const double delta = beta * (v[j] - u);
        double o = 0;
        for (int64_t i = 0; i < dk; ++i) o += (col[i] += k[i] * delta) * q[i];
        out[j] = o;
    }
}

}  // namespace mox::ops::oracle

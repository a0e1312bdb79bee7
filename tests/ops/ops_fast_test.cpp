// The op-level harness: linear, the shared-expert FFN and the grouped MoE operator,
// through the fast kernels (this CPU's best tier, or the tier MOX_ISA caps it to) and through the
// scalar reference kernels, each against a double-precision evaluation of the same formula
// (double_oracle.h) over the dequantized weights and the fp32 inputs, for every weight type and odd
// shapes: one token, a large batch, experts that receive no token, every token on one expert. At
// MOX_ISA=scalar the fast path is the reference and both checks hold it to the fp32 bound. Outputs sit
// between guard regions that must stay untouched.
#include "double_oracle.h"

#include "core/thread_pool.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "quant/dot.h"
#include "quant/types.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace mox::ops {
namespace {

using quant::TypeId;

constexpr float kGuard = -7777.0f;
constexpr size_t kGuardLen = 16;

// A vector with guard values before and after the n usable floats.
struct Guarded {
    std::vector<float> buf;
    explicit Guarded(size_t n) : buf(n + 2 * kGuardLen, kGuard) {}
    float* data() { return buf.data() + kGuardLen; }
    bool guards_intact() const {
        for (size_t i = 0; i < kGuardLen; ++i)
            if (buf[i] != kGuard || buf[buf.size() - 1 - i] != kGuard) return false;
        return true;
    }
};

// Random weights of `type` for n_expert matrices of [n_out, n_in].
struct OwnedWeight {
    std::vector<uint8_t> bytes;
    Weight w;
};

OwnedWeight make_weight(TypeId type, int64_t n_in, int64_t n_out, int64_t n_expert, std::mt19937& rng) {
    const quant::TypeTraits& t = quant::traits(type);
    OwnedWeight o;
    const size_t rb = quant::row_bytes(type, n_in);
    o.bytes.resize(rb * static_cast<size_t>(n_out * n_expert));
    std::normal_distribution<float> gauss(0.0f, 0.05f);
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t r = 0; r < n_out * n_expert; ++r) {
        uint8_t* dst = o.bytes.data() + static_cast<size_t>(r) * rb;
        if (t.quantize) {
            for (float& v : row) v = gauss(rng);
            t.quantize(row.data(), dst, n_in);
        } else {  // grid i-quants: random codes, small fp16 scale at each block's start
            std::uniform_int_distribution<int> byte(0, 255);
            for (size_t i = 0; i < rb; ++i) dst[i] = static_cast<uint8_t>(byte(rng));
            for (size_t b = 0; b < rb; b += t.block_bytes) {
                const uint16_t d = 0x1C00;  // 2^-8
                if (type == TypeId::iq1_m) {
                    uint16_t w[4];
                    std::memcpy(w, dst + b + t.block_bytes - 8, 8);
                    for (int i = 0; i < 4; ++i) w[i] = static_cast<uint16_t>((w[i] & 0x0FFF) | (((d >> (4 * i)) & 0xF) << 12));
                    std::memcpy(dst + b + t.block_bytes - 8, w, 8);
                } else {
                    std::memcpy(dst + b, &d, 2);
                }
            }
        }
    }
    o.w = Weight{o.bytes.data(), type, n_in, n_out, n_expert, rb};
    return o;
}

// Relative RMS error of got against the double-precision want, over want's RMS.
double rel_rms(const float* got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

// The activation format the op's kernels read for `type` at `isa`.
TypeId act_type(TypeId type, quant::Isa isa) {
    return quant::dot_kernel(type, isa).act;
}

// Bound on |y - exact| / sum_i |w_ri x_ti| for one output of linear (a single dot can cancel to near
// zero, so its own value is no scale). fp32 activations (the reference kernels at every tier, float
// weights at every tier) only round the fp32 sums: worst measured 4.0e-7 (IQ2_S through the
// reference, n_in up to 768). 8-bit activations add <= 1/254 of each |x_i| per element: worst
// measured 4.5e-3 (Q5_1), the same at avx2 and avx512. Bounds ~5x the worst.
double linear_bound(TypeId act) {
    return act == TypeId::f32 ? 2e-6 : 2e-2;
}

// Bound on the RMS error of an FFN's outputs over their RMS (n_embd outputs per token average out
// single cancellations). fp32 throughout: worst measured 7.6e-7 (the reference, Q4_0 weights). Two
// 8-bit activation stages (x, and the hidden h) compound, and random weights make the outputs small
// next to their terms: worst measured 1.4e-2 with Q8_0/Q8_1 activations, 2.4e-2 with Q8_K ones
// (256-element blocks span more of h's range than 32-element ones), the same at avx2 and avx512.
// Bounds ~5x the worst.
double ffn_bound(TypeId act) {
    if (act == TypeId::f32) return 4e-6;
    return act == TypeId::q8_k ? 1.2e-1 : 7e-2;
}

std::vector<TypeId> weight_types() {
    std::vector<TypeId> out;
    for (const quant::DotKernel& k : quant::all_dot_kernels())
        if (k.isa == quant::Isa::scalar && k.weight != TypeId::q8_k && k.weight != TypeId::q8_1) out.push_back(k.weight);
    return out;
}

class FastOpTest : public ::testing::TestWithParam<TypeId> {
protected:
    ThreadPool pool{2, /*pin=*/false};
    Context fast{&pool, quant::host_isa()};
    Context ref{&pool, quant::Isa::scalar};
};

TEST_P(FastOpTest, LinearMatchesDoublePrecision) {
    const TypeId type = GetParam();
    const int64_t blk = quant::traits(type).block_elems;
    std::mt19937 rng(7 + static_cast<unsigned>(type));
    const double bound_fast = linear_bound(act_type(type, fast.isa)), bound_ref = linear_bound(TypeId::f32);
    for (int64_t n_in : {std::max<int64_t>(blk, 256), 3 * std::max<int64_t>(blk, 32)}) {
        if (n_in % blk) continue;
        for (int64_t n_out : {1, 37, 300}) {
            const OwnedWeight w = make_weight(type, n_in, n_out, 1, rng);
            const oracle::Matrix m = oracle::matrix(w.w);
            for (int64_t n_tokens : {1, 5, 9, 40}) {
                std::normal_distribution<float> gauss(0.0f, 1.0f);
                std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
                for (float& v : x) v = gauss(rng);
                Guarded y_fast(static_cast<size_t>(n_tokens * n_out)), y_ref(static_cast<size_t>(n_tokens * n_out));
                linear(fast, w.w, x.data(), n_tokens, y_fast.data());
                linear(ref, w.w, x.data(), n_tokens, y_ref.data());
                ASSERT_TRUE(y_fast.guards_intact() && y_ref.guards_intact());
                for (int64_t t = 0; t < n_tokens; ++t) {
                    const std::vector<double> want = oracle::matvec(m, &x[static_cast<size_t>(t * n_in)]);
                    const std::vector<double> mag =
                        oracle::matvec_magnitude(m, &x[static_cast<size_t>(t * n_in)]);
                    for (int64_t r = 0; r < n_out; ++r) {
                        const size_t o = static_cast<size_t>(t * n_out + r);
                        const double scale = mag[static_cast<size_t>(r)] + 1e-30;
                        const double e_fast =
                            std::fabs(y_fast.data()[o] - want[static_cast<size_t>(r)]) / scale;
                        const double e_ref =
                            std::fabs(y_ref.data()[o] - want[static_cast<size_t>(r)]) / scale;
                        ASSERT_LE(e_fast, bound_fast)
                            << quant::type_name(type) << " " << quant::isa_name(fast.isa) << " n_in " << n_in
                            << " n_out " << n_out << " tokens " << n_tokens << " at " << t << "," << r;
                        ASSERT_LE(e_ref, bound_ref)
                            << quant::type_name(type) << " reference n_in " << n_in << " n_out " << n_out
                            << " tokens " << n_tokens << " at " << t << "," << r;
                    }
                }
            }
        }
    }
}

// Routings that stress the grouping: random top-k (most experts idle at 1 token), all tokens on the
// same k experts, and one token.
Routing make_routing(int64_t n_tokens, int64_t n_expert, int64_t k, bool all_same, std::mt19937& rng) {
    Routing r;
    r.n_tokens = n_tokens;
    r.k = k;
    r.expert_counts.assign(static_cast<size_t>(n_expert), 0);
    std::uniform_real_distribution<float> w(0.05f, 1.0f);
    for (int64_t t = 0; t < n_tokens; ++t) {
        std::vector<int32_t> ids(static_cast<size_t>(n_expert));
        for (int64_t e = 0; e < n_expert; ++e) ids[static_cast<size_t>(e)] = static_cast<int32_t>(e);
        if (!all_same) std::shuffle(ids.begin(), ids.end(), rng);
        for (int64_t i = 0; i < k; ++i) {
            r.ids.push_back(ids[static_cast<size_t>(i)]);
            r.weights.push_back(w(rng));
            r.expert_counts[static_cast<size_t>(ids[static_cast<size_t>(i)])]++;
        }
    }
    return r;
}

TEST_P(FastOpTest, MoeMatchesDoublePrecision) {
    const TypeId type = GetParam();
    const int64_t blk = quant::traits(type).block_elems;
    const int64_t n_embd = std::max<int64_t>(blk, 256), n_ff = std::max<int64_t>(blk, 64) * (blk == 256 ? 1 : 3);
    const int64_t n_expert = 10, k = 3;
    std::mt19937 rng(99 + static_cast<unsigned>(type));
    const OwnedWeight gate = make_weight(type, n_embd, n_ff, n_expert, rng);
    const OwnedWeight up = make_weight(type, n_embd, n_ff, n_expert, rng);
    const OwnedWeight down = make_weight(type, n_ff, n_embd, n_expert, rng);
    const ExpertStack stack{gate.w, up.w, down.w};
    const oracle::Matrix g0 = oracle::matrix(gate.w, 0), u0 = oracle::matrix(up.w, 0),
                         d0 = oracle::matrix(down.w, 0);
    const double bound_fast = ffn_bound(act_type(type, fast.isa)), bound_ref = ffn_bound(TypeId::f32);
    for (int64_t n_tokens : {1, 2, 13, 70}) {
        for (bool all_same : {false, true}) {
            const Routing r = make_routing(n_tokens, n_expert, k, all_same, rng);
            std::normal_distribution<float> gauss(0.0f, 1.0f);
            std::vector<float> x(static_cast<size_t>(n_tokens * n_embd));
            for (float& v : x) v = gauss(rng);
            Guarded o_fast(static_cast<size_t>(n_tokens * n_embd)), o_ref(static_cast<size_t>(n_tokens * n_embd));
            moe_ffn(fast, stack, r, x.data(), o_fast.data());
            moe_ffn(ref, stack, r, x.data(), o_ref.data());
            ASSERT_TRUE(o_fast.guards_intact() && o_ref.guards_intact());
            const std::vector<double> want = oracle::moe(stack, r, x.data());
            const std::string what = std::string(quant::type_name(type)) + " tokens " +
                                     std::to_string(n_tokens) + (all_same ? " all on the same experts" : "");
            EXPECT_LE(rel_rms(o_fast.data(), want), bound_fast) << what << " " << quant::isa_name(fast.isa);
            EXPECT_LE(rel_rms(o_ref.data(), want), bound_ref) << what << " reference";

            // The shared-expert FFN is the same operator with one expert.
            Guarded s_fast(static_cast<size_t>(n_tokens * n_embd)), s_ref(static_cast<size_t>(n_tokens * n_embd));
            swiglu_ffn(fast, gate.w.expert(0), up.w.expert(0), down.w.expert(0), x.data(), n_tokens, s_fast.data());
            swiglu_ffn(ref, gate.w.expert(0), up.w.expert(0), down.w.expert(0), x.data(), n_tokens, s_ref.data());
            ASSERT_TRUE(s_fast.guards_intact() && s_ref.guards_intact());
            std::vector<double> s_want;
            for (int64_t t = 0; t < n_tokens; ++t) {
                const std::vector<double> y = oracle::swiglu(g0, u0, d0, &x[static_cast<size_t>(t * n_embd)]);
                s_want.insert(s_want.end(), y.begin(), y.end());
            }
            EXPECT_LE(rel_rms(s_fast.data(), s_want), bound_fast)
                << what << " shared " << quant::isa_name(fast.isa);
            EXPECT_LE(rel_rms(s_ref.data(), s_want), bound_ref) << what << " shared reference";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, FastOpTest, ::testing::ValuesIn(weight_types()),
                         [](const ::testing::TestParamInfo<TypeId>& info) {
                             return std::string(quant::type_name(info.param));
                         });

// The grouped operator on the reference kernels against a direct per-token, per-expert evaluation
// (checks the grouping itself: a slot summed twice or missed is off by a whole term).
TEST(MoeOperator, GroupedEqualsPerTokenLoop) {
    std::mt19937 rng(5);
    const int64_t n_embd = 64, n_ff = 32, n_expert = 6, k = 2, n_tokens = 9;
    const OwnedWeight gate = make_weight(TypeId::f32, n_embd, n_ff, n_expert, rng);
    const OwnedWeight up = make_weight(TypeId::f32, n_embd, n_ff, n_expert, rng);
    const OwnedWeight down = make_weight(TypeId::f32, n_ff, n_embd, n_expert, rng);
    const Routing r = make_routing(n_tokens, n_expert, k, false, rng);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n_tokens * n_embd));
    for (float& v : x) v = gauss(rng);
    ThreadPool pool(2, false);
    const Context ctx{&pool, quant::Isa::scalar};
    std::vector<float> out(static_cast<size_t>(n_tokens * n_embd));
    const ExpertStack stack{gate.w, up.w, down.w};
    moe_ffn(ctx, stack, r, x.data(), out.data());
    const std::vector<double> want = oracle::moe(stack, r, x.data());
    for (size_t i = 0; i < out.size(); ++i)
        EXPECT_NEAR(out[i], want[i], 1e-5) << i / n_embd << "," << i % n_embd;
}

}  // namespace
}  // namespace mox::ops

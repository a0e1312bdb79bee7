// The op-level harness: linear, the shared-expert FFN and the grouped MoE operator
// through the fast kernels (this CPU's best tier) against the same ops on the scalar reference
// kernels, for every weight type and odd shapes: one token, a large batch, experts that receive no
// token, every token on one expert. Outputs sit between guard regions that must stay untouched.
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

// Relative RMS error of got vs ref, over ref's RMS.
double rel_rms(const float* got, const float* ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
        num += (got[i] - ref[i]) * static_cast<double>(got[i] - ref[i]);
        den += static_cast<double>(ref[i]) * ref[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

double tolerance(TypeId type) {
    // Float weights keep fp32 activations; quantized ones meet 8-bit activations (<= 1/254 per element).
    const TypeId act = quant::dot_kernel(type, quant::host_isa()).act;
    return act == TypeId::f32 ? 1e-5 : 1e-2;
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

TEST_P(FastOpTest, LinearMatchesReference) {
    const TypeId type = GetParam();
    const int64_t blk = quant::traits(type).block_elems;
    std::mt19937 rng(7 + static_cast<unsigned>(type));
    for (int64_t n_in : {std::max<int64_t>(blk, 256), 3 * std::max<int64_t>(blk, 32)}) {
        if (n_in % blk) continue;
        for (int64_t n_out : {1, 37, 300}) {
            const OwnedWeight w = make_weight(type, n_in, n_out, 1, rng);
            for (int64_t n_tokens : {1, 5, 9, 40}) {
                std::normal_distribution<float> gauss(0.0f, 1.0f);
                std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
                for (float& v : x) v = gauss(rng);
                Guarded y_fast(static_cast<size_t>(n_tokens * n_out)), y_ref(static_cast<size_t>(n_tokens * n_out));
                linear(fast, w.w, x.data(), n_tokens, y_fast.data());
                linear(ref, w.w, x.data(), n_tokens, y_ref.data());
                ASSERT_TRUE(y_fast.guards_intact() && y_ref.guards_intact());
                // Per output: |fast - ref| against the magnitude sum_i |w_ri x_ti| (a single dot can
                // cancel to near zero, so its own value is no scale).
                std::vector<float> wf(static_cast<size_t>(n_out * n_in));
                dequantize_rows(w.w, 0, n_out, wf.data());
                for (int64_t t = 0; t < n_tokens; ++t)
                    for (int64_t r = 0; r < n_out; ++r) {
                        double mag = 0;
                        for (int64_t i = 0; i < n_in; ++i)
                            mag += std::fabs(wf[static_cast<size_t>(r * n_in + i)] * x[static_cast<size_t>(t * n_in + i)]);
                        const size_t o = static_cast<size_t>(t * n_out + r);
                        ASSERT_LE(std::fabs(y_fast.data()[o] - y_ref.data()[o]), tolerance(type) * mag + 1e-30)
                            << quant::type_name(type) << " n_in " << n_in << " n_out " << n_out << " tokens " << n_tokens
                            << " at " << t << "," << r;
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

TEST_P(FastOpTest, MoeMatchesReference) {
    const TypeId type = GetParam();
    const int64_t blk = quant::traits(type).block_elems;
    const int64_t n_embd = std::max<int64_t>(blk, 256), n_ff = std::max<int64_t>(blk, 64) * (blk == 256 ? 1 : 3);
    const int64_t n_expert = 10, k = 3;
    std::mt19937 rng(99 + static_cast<unsigned>(type));
    const OwnedWeight gate = make_weight(type, n_embd, n_ff, n_expert, rng);
    const OwnedWeight up = make_weight(type, n_embd, n_ff, n_expert, rng);
    const OwnedWeight down = make_weight(type, n_ff, n_embd, n_expert, rng);
    const ExpertStack stack{gate.w, up.w, down.w};
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
            // RMS over all outputs (n_embd per token averages out cancellations); two quantized
            // activation stages (x and the hidden h, whose 256-blocks span a wide range) compound, and
            // random weights make the outputs small next to their terms: 2-2.5% RMS seen for 8-bit types.
            EXPECT_LE(rel_rms(o_fast.data(), o_ref.data(), static_cast<size_t>(n_tokens * n_embd)), 4 * tolerance(type))
                << quant::type_name(type) << " tokens " << n_tokens << (all_same ? " all on the same experts" : "");

            // The shared-expert FFN is the same operator with one expert.
            Guarded s_fast(static_cast<size_t>(n_tokens * n_embd)), s_ref(static_cast<size_t>(n_tokens * n_embd));
            swiglu_ffn(fast, gate.w.expert(0), up.w.expert(0), down.w.expert(0), x.data(), n_tokens, s_fast.data());
            swiglu_ffn(ref, gate.w.expert(0), up.w.expert(0), down.w.expert(0), x.data(), n_tokens, s_ref.data());
            ASSERT_TRUE(s_fast.guards_intact() && s_ref.guards_intact());
            EXPECT_LE(rel_rms(s_fast.data(), s_ref.data(), static_cast<size_t>(n_tokens * n_embd)), 4 * tolerance(type));
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, FastOpTest, ::testing::ValuesIn(weight_types()),
                         [](const ::testing::TestParamInfo<TypeId>& info) {
                             return std::string(quant::type_name(info.param));
                         });

// The grouped operator against a direct per-token, per-expert evaluation on the reference kernels
// (checks the grouping itself, independent of the kernels).
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
    moe_ffn(ctx, ExpertStack{gate.w, up.w, down.w}, r, x.data(), out.data());
    auto at = [](const OwnedWeight& w, int64_t e, int64_t row, int64_t col) {
        return reinterpret_cast<const float*>(w.w.expert(e).row(row))[col];
    };
    for (int64_t t = 0; t < n_tokens; ++t) {
        std::vector<double> want(static_cast<size_t>(n_embd), 0.0);
        for (int64_t i = 0; i < k; ++i) {
            const int64_t e = r.ids[static_cast<size_t>(t * k + i)];
            std::vector<double> h(static_cast<size_t>(n_ff));
            for (int64_t f = 0; f < n_ff; ++f) {
                double g = 0, u = 0;
                for (int64_t c = 0; c < n_embd; ++c) {
                    g += at(gate, e, f, c) * x[static_cast<size_t>(t * n_embd + c)];
                    u += at(up, e, f, c) * x[static_cast<size_t>(t * n_embd + c)];
                }
                h[static_cast<size_t>(f)] = g / (1 + std::exp(-g)) * u;
            }
            for (int64_t c = 0; c < n_embd; ++c) {
                double y = 0;
                for (int64_t f = 0; f < n_ff; ++f) y += at(down, e, c, f) * h[static_cast<size_t>(f)];
                want[static_cast<size_t>(c)] += r.weights[static_cast<size_t>(t * k + i)] * y;
            }
        }
        for (int64_t c = 0; c < n_embd; ++c)
            EXPECT_NEAR(out[static_cast<size_t>(t * n_embd + c)], want[static_cast<size_t>(c)], 1e-5) << t << "," << c;
    }
}

}  // namespace
}  // namespace mox::ops

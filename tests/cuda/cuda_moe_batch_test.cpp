// Batched (prefill) MoE on the GPU against ops::moe_ffn with the scalar reference kernels
// (dequantize, fp32 dot): routing patterns with experts that get no token, every token on one
// expert, k = 1 and k = n_expert, 1..600 tokens; bitwise repeatability. (The timing at the model's
// sizes: mox_cuda_bench, CudaBench.MoeBatchTflops.)
#include "cuda_test_util.h"
#include "expert_stack.h"

#include "core/tuning.h"
#include "ops/context.h"
#include "ops/cuda_moe.h"
#include "ops/moe.h"
#include "quant/cuda_matmul.h"
#include "quant/types.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <utility>

namespace mox::cuda {

namespace {

using quant::TypeId;

using test::HostStack;
using test::make_stack;

enum class Pattern { random, few_experts, one_expert, cyclic };

// k distinct experts per token with positive weights summing to 1. few_experts: only the first
// max(k, 5) experts are ever chosen (the rest get no token); one_expert: slot 0 of every token is
// expert n_expert / 2; cyclic: slot i of token t is expert (t k + i) % n_expert, so every expert
// gets floor or ceil of n_tokens k / n_expert pairs.
ops::Routing make_routing(int64_t n_tokens, int64_t n_expert, int64_t k, Pattern pattern, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uw(0.1f, 1.0f);
    ops::Routing r;
    r.n_tokens = n_tokens;
    r.k = k;
    r.expert_counts.assign(static_cast<size_t>(n_expert), 0);
    const int64_t pool = pattern == Pattern::few_experts ? std::max<int64_t>(k, 5) : n_expert;
    std::vector<int32_t> all(static_cast<size_t>(pool));
    for (int64_t t = 0; t < n_tokens; ++t) {
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        if (pattern == Pattern::cyclic)
            for (int64_t i = 0; i < k; ++i)
                all[static_cast<size_t>(i)] = static_cast<int32_t>((t * k + i) % n_expert);
        if (pattern == Pattern::one_expert) {
            const auto fixed = static_cast<int32_t>(n_expert / 2);
            std::iter_swap(all.begin(), std::find(all.begin(), all.end(), fixed));
        }
        float sum = 0;
        std::vector<float> w(static_cast<size_t>(k));
        for (auto& v : w) sum += (v = uw(rng));
        for (int64_t i = 0; i < k; ++i) {
            r.ids.push_back(all[static_cast<size_t>(i)]);
            r.weights.push_back(w[static_cast<size_t>(i)] / sum);
            r.expert_counts[static_cast<size_t>(all[static_cast<size_t>(i)])]++;
        }
    }
    return r;
}

// out vs ref: relative L2 error below 3e-3 (two fp16-rounded products in a row, each ~1e-3 at
// worst, typically a few 1e-4), and no element off by more than 1% of the largest |ref| (a lost or
// doubled slot moves elements by a sizeable part of their value).
// Precise mode: relative L2 below 3e-5 and elements within 1e-4 of the largest |ref| (both operands
// carried to ~2^-22; the rest is fp32 summation, here and in the CPU reference).
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, bool precise = false) {
    ASSERT_EQ(got.size(), ref.size());
    double err2 = 0, ref2 = 0, ref_max = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        err2 += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
        ref2 += double(ref[i]) * ref[i];
        ref_max = std::max(ref_max, std::fabs(double(ref[i])));
    }
    EXPECT_LT(std::sqrt(err2 / ref2), precise ? 3e-5 : 3e-3);
    int bad = 0;
    for (size_t i = 0; i < ref.size(); ++i)
        if (!(std::fabs(double(got[i]) - ref[i]) <= (precise ? 1e-4 : 1e-2) * ref_max) && bad++ < 5)
            ADD_FAILURE() << "element " << i << ": got " << got[i] << ", reference " << ref[i];
}

void check_batch(TypeId gate_up_type, TypeId down_type, int64_t n_embd, int64_t n_ff, int64_t n_expert,
                 int64_t k, int64_t n_tokens, Pattern pattern, uint32_t seed, bool precise = false) {
    SCOPED_TRACE(
        fmt::format("gate/up {} down {} n_embd={} n_ff={} experts={} k={} tokens={} pattern={} precise={}",
                    quant::type_name(gate_up_type), quant::type_name(down_type), n_embd, n_ff, n_expert, k,
                    n_tokens, static_cast<int>(pattern), precise));
    HostStack gate = make_stack(gate_up_type, n_embd, n_ff, n_expert, seed, 0.05f);
    HostStack up = make_stack(gate_up_type, n_embd, n_ff, n_expert, seed + 1, 0.05f);
    HostStack down = make_stack(down_type, n_ff, n_embd, n_expert, seed + 2, 0.05f);
    auto x = test::randn(static_cast<size_t>(n_embd * n_tokens), seed + 3);
    for (int64_t t = 0; t < n_tokens; ++t)  // tokens of different magnitude
        for (int64_t i = 0; i < n_embd; ++i) x[t * n_embd + i] *= 1.0f + static_cast<float>(t % 5);
    const ops::Routing routing = make_routing(n_tokens, n_expert, k, pattern, seed + 4);

    ops::Context ctx;
    ctx.isa = quant::Isa::scalar;  // the reference dot kernels: dequantize, fp32 dot
    std::vector<float> ref(static_cast<size_t>(n_embd * n_tokens));
    ops::moe_ffn(ctx, ops::ExpertStack{gate.w, up.w, down.w}, routing, x.data(), ref.data());

    DeviceWeight dg = upload_weight(gate.w), du = upload_weight(up.w), dd = upload_weight(down.w);
    DeviceBuffer dx = test::to_device(x), di = test::to_device(routing.ids),
                 dw = test::to_device(routing.weights);
    DeviceBuffer ws(std::max<size_t>(1, moe_batch_workspace_bytes(dg.view, dd.view, n_tokens, k)));
    std::vector<std::vector<float>> runs;
    for (int run = 0; run < 2; ++run) {
        const std::vector<float> poison(ref.size(), std::nanf(""));
        DeviceBuffer dout = test::to_device(poison);  // unwritten outputs stay NaN and fail
        moe_batch(dg.view, du.view, dd.view, di.as<int32_t>(), dw.as<float>(), n_tokens, k, dx.as<float>(),
                  dout.as<float>(), ws.data(), nullptr, precise);
        runs.push_back(test::to_host<float>(dout, ref.size()));
    }
    expect_close(runs[0], ref, precise);
    EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[1].data(), ref.size() * sizeof(float)))
        << "two runs differ";
}

}  // namespace

TEST(CudaMoeBatch, MatchesCpuMoeFfn) {
    MOX_REQUIRE_CUDA_DEVICE();
    check_batch(TypeId::q4_k, TypeId::q6_k, 256, 256, 32, 8, 600, Pattern::random, 10);  // Q4_K_M mix
    check_batch(TypeId::q8_0, TypeId::q8_0, 160, 96, 16, 4, 100, Pattern::few_experts, 20);
    check_batch(TypeId::iq4_xs, TypeId::q5_k, 256, 256, 8, 1, 333, Pattern::random, 30);
    check_batch(TypeId::mxfp4, TypeId::mxfp4, 256, 64, 10, 2, 130, Pattern::one_expert, 40);
    check_batch(TypeId::f16, TypeId::bf16, 96, 40, 6, 6, 7, Pattern::random,
                50);  // odd float sizes, k = n_expert
    check_batch(TypeId::q2_k, TypeId::q3_k, 256, 256, 12, 8, 1, Pattern::random, 60);
    check_batch(TypeId::f32, TypeId::q4_0, 64, 64, 5, 1, 65, Pattern::one_expert,
                70);  // 65 tokens on one expert
    check_batch(TypeId::iq4_nl, TypeId::q4_k, 512, 256, 20, 8, 200, Pattern::few_experts, 80);
}

// Version 2 picks a token tile of 32 when the experts average <= 24 pairs, else 64. These cases put
// tile boundaries where they can break: every expert with 1..3 pairs, one expert with exactly 32,
// 33, 64 or 65 pairs (the rest few), both tile sizes, odd n_ff / n_embd of float types.
TEST(CudaMoeBatch, TileBoundaries) {
    MOX_REQUIRE_CUDA_DEVICE();
    // Tile 32, every expert 1 (k = 1) / 2 / 3 pairs.
    check_batch(TypeId::q4_k, TypeId::q6_k, 256, 256, 16, 1, 16, Pattern::cyclic, 110);
    check_batch(TypeId::q4_k, TypeId::q6_k, 512, 256, 16, 2, 16, Pattern::cyclic, 111);
    check_batch(TypeId::q8_0, TypeId::q5_k, 256, 256, 16, 3, 16, Pattern::cyclic, 112);
    // Tile 32: expert 4 gets exactly 32, then 33 pairs (8 experts, 64 / 66 pairs).
    check_batch(TypeId::q4_k, TypeId::q6_k, 256, 256, 8, 2, 32, Pattern::one_expert, 113);
    check_batch(TypeId::q4_k, TypeId::q6_k, 256, 256, 8, 2, 33, Pattern::one_expert, 114);
    // Tile 64 (2 experts, > 24 pairs each): expert 1 gets exactly 64, then 65 pairs.
    check_batch(TypeId::iq4_xs, TypeId::q4_k, 256, 256, 2, 1, 64, Pattern::one_expert, 115);
    check_batch(TypeId::iq4_xs, TypeId::q4_k, 256, 256, 2, 1, 65, Pattern::one_expert, 116);
    // Tile 64 with every expert at 32 / 33 pairs (cyclic), float types with odd sizes.
    check_batch(TypeId::bf16, TypeId::f32, 200, 136, 4, 2, 64, Pattern::cyclic, 117);
    check_batch(TypeId::f16, TypeId::q8_0, 96, 160, 4, 3, 44, Pattern::cyclic, 118);
}

// Precise mode (token tile 32, hi + lo operands) against the fp32 CPU reference.
TEST(CudaMoeBatch, Precise) {
    MOX_REQUIRE_CUDA_DEVICE();
    check_batch(TypeId::q4_k, TypeId::q6_k, 256, 256, 32, 8, 100, Pattern::random, 130, true);
    check_batch(TypeId::q8_0, TypeId::q5_k, 256, 256, 16, 3, 16, Pattern::cyclic, 131, true);
    check_batch(TypeId::q4_k, TypeId::q6_k, 256, 256, 8, 2, 33, Pattern::one_expert, 132, true);
    check_batch(TypeId::bf16, TypeId::f32, 200, 136, 4, 2, 64, Pattern::cyclic, 133, true);
    check_batch(TypeId::q4_k, TypeId::q6_k, 2048, 512, 10, 8, 40, Pattern::random, 134, true);
}

// The direct-load twins of the raw-staged tiles (set_direct_tiles; GPUs with ~100 KB of shared
// memory per SM take them), both token tiles.
TEST(CudaMoeBatch, DirectLoadTiles) {
    MOX_REQUIRE_CUDA_DEVICE();
    set_direct_tiles(true);
    check_batch(TypeId::q4_k, TypeId::q6_k, 256, 256, 32, 8, 100, Pattern::random, 150);      // tile 32
    check_batch(TypeId::iq4_xs, TypeId::q4_k, 256, 256, 2, 1, 65, Pattern::one_expert, 151);  // tile 64
    check_batch(TypeId::q8_0, TypeId::q5_k, 256, 256, 16, 3, 16, Pattern::cyclic, 152);
    set_direct_tiles(false);
}

// The version-1 kernels (tuning().matmul_v1, MOX_MATMUL_V1=1) stay available as a fallback and stay
// correct.
TEST(CudaMoeBatch, Version1Fallback) {
    MOX_REQUIRE_CUDA_DEVICE();
    Tuning t = tuning();
    t.matmul_v1 = true;
    const ScopedTuning v1(t);
    check_batch(TypeId::q4_k, TypeId::q6_k, 256, 256, 32, 8, 100, Pattern::random, 120);
}

TEST(CudaMoeBatch, ModelSizes) {
    MOX_REQUIRE_CUDA_DEVICE();
    // Qwen3.6-35B-A3B's expert shapes (fewer experts, to keep the CPU reference short).
    check_batch(TypeId::q4_k, TypeId::q6_k, 2048, 512, 10, 8, 64, Pattern::random, 90);  // tile 64
    check_batch(TypeId::q4_k, TypeId::q6_k, 2048, 512, 32, 8, 64, Pattern::random, 91);  // tile 32, ~16 each
}

}  // namespace mox::cuda

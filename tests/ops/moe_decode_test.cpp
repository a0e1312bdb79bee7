// The one-job MoE path (few tokens: decode) against the two-job path it replaces for small batches.
// Both run the same kernels on the same bytes in the same order per output, so they must agree bit
// for bit, whatever the task size, prefetch distance, thread count or routing (duplicated ids, all
// tokens on one expert, mixed gate/down types). ops_fast_test checks both against double precision.
#include "core/thread_pool.h"
#include "ops/moe.h"
#include "quant/dot.h"
#include "quant/random_blocks.h"
#include "quant/types.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace mox::ops {
namespace {

using quant::TypeId;

struct Stack {
    std::vector<uint8_t> bytes;
    Weight w;
};

// n_expert matrices [n_out, n_in] of valid random blocks (quant::random_valid_blocks).
Stack make_stack(TypeId type, int64_t n_in, int64_t n_out, int64_t n_expert, std::mt19937& rng) {
    Stack s;
    const int64_t blocks_per_row = n_in / quant::traits(type).block_elems;
    s.bytes = quant::random_valid_blocks(type, blocks_per_row * n_out * n_expert, static_cast<uint32_t>(rng()));
    s.w = Weight{s.bytes.data(), type, n_in, n_out, n_expert, quant::row_bytes(type, n_in)};
    return s;
}

Routing random_routing(int64_t n_tokens, int64_t n_expert, int64_t k, int pattern, std::mt19937& rng) {
    Routing r;
    r.n_tokens = n_tokens;
    r.k = k;
    r.expert_counts.assign(static_cast<size_t>(n_expert), 0);
    std::uniform_real_distribution<float> w(0.05f, 1.0f);
    std::vector<int32_t> ids(static_cast<size_t>(n_expert));
    for (int64_t e = 0; e < n_expert; ++e) ids[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    for (int64_t t = 0; t < n_tokens; ++t) {
        if (pattern != 1) std::shuffle(ids.begin(), ids.end(), rng);  // 1: every token on the same experts
        for (int64_t i = 0; i < k; ++i) {
            // 2: the first two ranks name the same expert (the runtime never does, the operator allows it)
            const int32_t e = ids[static_cast<size_t>(pattern == 2 && i == 1 ? 0 : i)];
            r.ids.push_back(e);
            r.weights.push_back(w(rng));
            r.expert_counts[static_cast<size_t>(e)]++;
        }
    }
    return r;
}

struct TypeSet {
    TypeId gate, up, down;
};

class MoeDecodeTest : public ::testing::TestWithParam<TypeSet> {};

TEST_P(MoeDecodeTest, OneJobEqualsTwoJobsBitForBit) {
    const TypeSet ts = GetParam();
    const int64_t n_embd = 512, n_ff = 256, n_expert = 12, k = 4;
    std::mt19937 rng(31 + static_cast<unsigned>(ts.gate) * 7 + static_cast<unsigned>(ts.down));
    const Stack gate = make_stack(ts.gate, n_embd, n_ff, n_expert, rng);
    const Stack up = make_stack(ts.up, n_embd, n_ff, n_expert, rng);
    const Stack down = make_stack(ts.down, n_ff, n_embd, n_expert, rng);
    const ExpertStack stack{gate.w, up.w, down.w};
    ThreadPool pool1(1), pool3(3, /*pin=*/false);
    MoeOptions two_jobs;
    two_jobs.fused_max_tokens = 0;
    for (ThreadPool* pool : {&pool1, &pool3}) {
        const Context ctx{pool, quant::host_isa()};
        for (int64_t n_tokens : {1, 2, 5, 8}) {
            for (int pattern : {0, 1, 2}) {
                const Routing r = random_routing(n_tokens, n_expert, k, pattern, rng);
                std::normal_distribution<float> gauss(0.0f, 1.0f);
                std::vector<float> x(static_cast<size_t>(n_tokens * n_embd));
                for (float& v : x) v = gauss(rng);
                std::vector<float> want(x.size());
                moe_ffn(ctx, stack, r, x.data(), want.data(), two_jobs);
                // Tasks of one row (down: one reduction block) to whole experts, guided sizes in
                // between; no prefetch, short and long distances.
                const std::pair<int64_t, int64_t> sizes[] = {
                    {1, 1}, {1024, 65536}, {4096, 4096}, {int64_t{1} << 30, int64_t{1} << 30}};
                for (const auto& [lo, hi] : sizes)
                    for (int64_t prefetch : {0, 256, 8192}) {
                        MoeOptions one_job;
                        one_job.min_task_bytes = lo;
                        one_job.max_task_bytes = hi;
                        one_job.prefetch_bytes = prefetch;
                        std::vector<float> got(x.size() + 16, -1234.5f);  // tail: guard values
                        moe_ffn(ctx, stack, r, x.data(), got.data(), one_job);
                        ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
                            << quant::type_name(ts.gate) << "/" << quant::type_name(ts.up) << "/"
                            << quant::type_name(ts.down) << " threads " << pool->size() << " tokens "
                            << n_tokens << " pattern " << pattern << " tasks " << lo << "-" << hi
                            << " prefetch " << prefetch;
                        for (size_t i = want.size(); i < got.size(); ++i) ASSERT_EQ(got[i], -1234.5f);
                    }
            }
            // The shared-expert FFN takes the same path.
            std::vector<float> x(static_cast<size_t>(n_tokens * n_embd));
            std::normal_distribution<float> gauss(0.0f, 1.0f);
            for (float& v : x) v = gauss(rng);
            std::vector<float> a(x.size()), b(x.size());
            swiglu_ffn(ctx, gate.w.expert(3), up.w.expert(3), down.w.expert(3), x.data(), n_tokens, a.data());
            swiglu_ffn(ctx, gate.w.expert(3), up.w.expert(3), down.w.expert(3), x.data(), n_tokens, b.data(),
                       two_jobs);
            ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
                << "swiglu tokens " << n_tokens;
        }
    }
}

// Gate/up activation formats Q8_K, Q8_0 and Q8_1, gate and up in different formats (two conversions).
INSTANTIATE_TEST_SUITE_P(Types, MoeDecodeTest,
                         ::testing::Values(TypeSet{TypeId::q4_k, TypeId::q4_k, TypeId::q6_k},
                                           TypeSet{TypeId::q4_k, TypeId::q4_k, TypeId::q4_k},
                                           TypeSet{TypeId::q5_k, TypeId::q5_k, TypeId::q8_0},
                                           TypeSet{TypeId::q8_0, TypeId::q8_0, TypeId::q4_k},
                                           TypeSet{TypeId::q4_1, TypeId::q4_1, TypeId::q4_1},
                                           TypeSet{TypeId::q4_k, TypeId::q8_0, TypeId::q6_k},
                                           TypeSet{TypeId::f32, TypeId::f32, TypeId::f32}),
                         [](const ::testing::TestParamInfo<TypeSet>& info) {
                             return std::string(quant::type_name(info.param.gate)) + "_" +
                                    std::string(quant::type_name(info.param.up)) + "_" +
                                    std::string(quant::type_name(info.param.down));
                         });

// Many decode calls back to back and with pauses long enough for the workers to sleep: every call
// must give the same output for the same input (no state leaks between calls through the counters).
TEST(MoeDecode, RepeatedCallsAcrossSleepingWorkers) {
    std::mt19937 rng(3);
    const int64_t n_embd = 256, n_ff = 256, n_expert = 8, k = 3;
    const Stack gate = make_stack(TypeId::q4_k, n_embd, n_ff, n_expert, rng);
    const Stack up = make_stack(TypeId::q4_k, n_embd, n_ff, n_expert, rng);
    const Stack down = make_stack(TypeId::q6_k, n_ff, n_embd, n_expert, rng);
    const ExpertStack stack{gate.w, up.w, down.w};
    ThreadPool pool(4, /*pin=*/false);
    pool.set_spin(std::chrono::microseconds(0));
    const Context ctx{&pool, quant::host_isa()};
    MoeOptions opt;
    opt.min_task_bytes = opt.max_task_bytes = 2048;  // many tasks per call
    const Routing r = random_routing(1, n_expert, k, 0, rng);
    std::vector<float> x(static_cast<size_t>(n_embd), 0.5f), first(x.size()), again(x.size());
    moe_ffn(ctx, stack, r, x.data(), first.data(), opt);
    for (int call = 0; call < 300; ++call) {
        moe_ffn(ctx, stack, r, x.data(), again.data(), opt);
        ASSERT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0)
            << "call " << call;
        if (call % 60 == 59) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

}  // namespace
}  // namespace mox::ops

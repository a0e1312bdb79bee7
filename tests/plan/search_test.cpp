// The planner's search as a pure function: full-size Qwen3.6-35B-A3B tensor tables (sparse files)
// and made-up hardware profiles (plan_fixtures.h). Properties: the budget is never exceeded (each
// plan re-checked with predict_memory, each refusal checked to be real), more VRAM never predicts
// slower decode, constraints hold, `--ctx max` is the largest context that fits, quantized KV only
// when it buys enough, deterministic output.
#include "plan/search.h"
#include "plan_fixtures.h"

#include "place/flags.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

namespace mox::plan {

namespace {

using fixtures::h200_like;
using fixtures::kGiB;
using fixtures::kMiB;
using fixtures::q36_q4km;
using fixtures::rtx3090_like;

PlanRequest request(const fixtures::SparseModel& m, const HardwareProfile& prof, std::optional<uint64_t> vram,
                    std::optional<int64_t> n_ctx) {
    return PlanRequest{.base = m.all_gpu(),
                       .hparams = m.hp,
                       .profile = prof,
                       .vram_budget = vram,
                       .ram_budget = std::nullopt,
                       .vram_margin = std::nullopt,
                       .ram_margin = std::nullopt,
                       .n_ctx = n_ctx,
                       .n_seq = 1,
                       .goal = Goal::decode,
                       .prompt_tokens = 0,
                       .constraints = {}};
}

// What the runtime requires of any plan, and the budgets, recomputed from the result's own
// placement with predict_memory.
void expect_valid(const PlanResult& r, const models::Hparams& hp, uint64_t budget) {
    const place::MemoryPrediction m = place::predict_memory(r.placement, hp, r.cache, r.allowance, r.run);
    EXPECT_EQ(m.gpu_total(), r.memory.gpu_total());
    EXPECT_LE(m.gpu_total() + r.vram_margin, std::min(budget, r.vram_budget));
    EXPECT_GE(r.vram_margin, std::max<uint64_t>(r.vram_budget / 50, 256 * kMiB));
    EXPECT_LE(m.host_locked() + m.host_ram() + r.ram_margin, r.ram_budget);
    std::vector<int64_t> host;
    for (int64_t l = 0; l < hp.n_trunk(); ++l) {
        const auto counts = r.placement.expert_counts(l);
        const int64_t n = r.placement.n_expert();
        ASSERT_TRUE(counts[0] == n || counts[1] == n || counts[2] == n) << "layer " << l << " split";
        if (counts[0] != n) host.push_back(l);
    }
    EXPECT_EQ(host, r.host_layers);
    for (const place::TensorEntry& e : r.placement.tensors())
        if (e.part == place::ExpertPart::none && e.cls != models::TensorClass::embedding) {
            EXPECT_EQ(e.tier, place::Tier::gpu) << e.name;
        }
    int chosen = 0;
    for (const PlanCandidate& c : r.table) chosen += c.chosen;
    EXPECT_EQ(chosen, 1);
}

// The leanest configuration the search can build: every expert layer on the host, the given KV
// type, the smallest micro-batch, streaming on.
place::MemoryPrediction leanest(const fixtures::SparseModel& m, const HardwareProfile& prof, quant::TypeId kv,
                                int64_t n_ctx) {
    place::Placement p = m.all_gpu();
    p.set_tier("token_embd.weight", place::Tier::mmap_host);
    for (int64_t l = 0; l < m.hp.n_trunk(); ++l) p.set_layer_experts(l, place::Tier::mmap_host);
    return place::predict_memory(p, m.hp, {.n_ctx = n_ctx, .k_type = kv, .v_type = kv, .n_seq = 1},
                                 allowance_from_profile(prof), {.n_ubatch = 512, .stream_experts = true});
}

}  // namespace

TEST(PlanSearch, ParseBudget) {
    EXPECT_EQ(parse_budget("--vram-budget", "24GiB"), 24 * kGiB);
    EXPECT_EQ(parse_budget("--vram-budget", "16G"), 16 * kGiB);
    EXPECT_EQ(parse_budget("--vram-budget", "8000MiB"), 8000 * kMiB);
    EXPECT_EQ(parse_budget("--vram-budget", "24GB"), 24000000000ull);
    EXPECT_EQ(parse_budget("--ram-budget", "123456789"), 123456789ull);
    for (const char* bad : {"", "0", "0GiB", "lots", "16 parsecs", "-3G"}) {
        try {
            parse_budget("--vram-budget", bad);
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("--vram-budget"), std::string::npos) << e.what();
        }
    }
    EXPECT_EQ(default_margin(10 * kGiB), 256 * kMiB);
    EXPECT_EQ(default_margin(100 * kGiB), 2 * kGiB);
    EXPECT_EQ(default_ram_margin(8 * kGiB), 2 * kGiB);
    EXPECT_EQ(default_ram_margin(100 * kGiB), 10 * kGiB);
}

TEST(PlanSearch, BudgetSweepNeverExceedsTheBudget) {
    const auto& m = q36_q4km();
    for (int64_t n_ctx : {4096, 65536, 262144}) {
        double last_fixed = 0;  // f16 KV fixed: decode can only grow with the budget
        double last_free = 0;   // KV searched: it may trade speed for precision, within the tolerance
        for (uint64_t gib = 1; gib <= 80; gib += 3) {
            SCOPED_TRACE(::testing::Message() << gib << " GiB, ctx " << n_ctx);
            PlanRequest req = request(m, h200_like(), gib * kGiB, n_ctx);
            PlanResult free_kv;
            try {
                free_kv = plan_auto(req);
            } catch (const Error& e) {
                // A refusal must be real: the leanest configuration does not fit either.
                EXPECT_NE(std::string(e.what()).find("nothing fits"), std::string::npos) << e.what();
                EXPECT_GT(leanest(m, h200_like(), quant::TypeId::q4_0, n_ctx).gpu_total() +
                              default_margin(gib * kGiB),
                          gib * kGiB);
                EXPECT_EQ(last_free, 0) << "a smaller budget had a plan";
                continue;
            }
            expect_valid(free_kv, m.hp, gib * kGiB);
            EXPECT_EQ(free_kv.cache.n_ctx, n_ctx);
            EXPECT_GE(free_kv.speed.decode.tokens_per_s, (1 - kKvTolerance) * last_free);
            last_free = std::max(last_free, free_kv.speed.decode.tokens_per_s);

            req.constraints.k_type = req.constraints.v_type = quant::TypeId::f16;
            try {
                const PlanResult fixed = plan_auto(req);
                expect_valid(fixed, m.hp, gib * kGiB);
                EXPECT_EQ(fixed.cache.k_type, quant::TypeId::f16);
                EXPECT_GE(fixed.speed.decode.tokens_per_s, last_fixed);
                last_fixed = fixed.speed.decode.tokens_per_s;
            } catch (const Error& e) {
                EXPECT_GT(leanest(m, h200_like(), quant::TypeId::f16, n_ctx).gpu_total() +
                              default_margin(gib * kGiB),
                          gib * kGiB)
                    << e.what();
                EXPECT_EQ(last_fixed, 0);
            }
        }
        EXPECT_GT(last_free, 0);
    }
}

TEST(PlanSearch, EverythingOnTheGpuWhenItFits) {
    const auto& m = q36_q4km();
    const PlanResult r = plan_auto(request(m, h200_like(), std::nullopt, 32768));
    expect_valid(r, m.hp, 140 * kGiB);
    EXPECT_TRUE(r.host_layers.empty());
    EXPECT_EQ(r.cache.k_type, quant::TypeId::f16);  // nothing to gain from a quantized cache
    EXPECT_EQ(r.vram_budget, 140 * kGiB);
    // A budget above the GPU's memory is clipped to it.
    const PlanResult big = plan_auto(request(m, h200_like(), 500 * kGiB, 32768));
    EXPECT_EQ(big.vram_budget, 140 * kGiB);
}

// 24 GiB at 32768 tokens, with the decode-attention probe's points of the H200 (the calibration
// of bench/results/2026-11-30-decode-fusions-h200): both f16 and q8_0 caches fit and decode alike, so
// the plan keeps f16. Charged by its bytes alone, q8_0 came out ahead by more than kKvTolerance and
// the plan took it; it measured 4% slower.
TEST(PlanSearch, ProbedAttentionKeepsTheF16Cache) {
    const auto& m = q36_q4km();
    HardwareProfile prof = h200_like();
    prof.gpu->attention_decode_f16 = {{256, 18.6e-6}, {1024, 26.3e-6}, {4096, 25.0e-6}, {32768, 46.5e-6}};
    const PlanResult r = plan_auto(request(m, prof, 24 * kGiB, 32768));
    expect_valid(r, m.hp, 24 * kGiB);
    EXPECT_TRUE(r.host_layers.empty());
    EXPECT_EQ(r.cache.k_type, quant::TypeId::f16);
    EXPECT_EQ(r.cache.v_type, quant::TypeId::f16);
}

TEST(PlanSearch, ConsumerGpuPlanIsSensible) {
    const auto& m = q36_q4km();
    const PlanResult r = plan_auto(request(m, rtx3090_like(), 16 * kGiB, 32768));
    expect_valid(r, m.hp, 16 * kGiB);
    EXPECT_GT(r.host_layers.size(), 0u);
    EXPECT_LT(r.host_layers.size(), 40u);
    // Pinned host memory fits in 64 GiB of RAM and streams faster: prefer it.
    EXPECT_EQ(r.host_tier, place::Tier::pinned_host);
    EXPECT_GT(r.speed.decode.tokens_per_s, 0);
    EXPECT_GT(r.speed.prefill.tokens_per_s, 0);
    // No host layer is wasted: giving the thinnest one back to the GPU no longer fits.
    int64_t thinnest = r.host_layers.front();
    for (int64_t l : r.host_layers)
        if (r.placement.expert_bytes(l) < r.placement.expert_bytes(thinnest)) thinnest = l;
    place::Placement fewer = r.placement;
    fewer.set_layer_experts(thinnest, place::Tier::gpu);
    const place::MemoryPrediction mm = place::predict_memory(fewer, m.hp, r.cache, r.allowance, r.run);
    EXPECT_GT(mm.gpu_total() + r.vram_margin, 16 * kGiB);
    // Determinism: the same request gives the same plan and table.
    const PlanResult again = plan_auto(request(m, rtx3090_like(), 16 * kGiB, 32768));
    EXPECT_EQ(again.host_layers, r.host_layers);
    ASSERT_EQ(again.table.size(), r.table.size());
    for (size_t i = 0; i < r.table.size(); ++i) {
        EXPECT_EQ(again.table[i].vram_bytes, r.table[i].vram_bytes);
        EXPECT_EQ(again.table[i].decode_tps, r.table[i].decode_tps);
        EXPECT_EQ(again.table[i].chosen, r.table[i].chosen);
    }
}

// A dense model: its layers' FFNs are what the plan moves to the host (attention and DeltaNet stay).
TEST(PlanSearch, DenseModelMovesWholeFfns) {
    const auto& m = fixtures::q36_27b_q4km();
    const PlanResult fits = plan_auto(request(m, rtx3090_like(), 24 * kGiB, 4096));
    expect_valid(fits, m.hp, 24 * kGiB);
    EXPECT_TRUE(fits.host_layers.empty()) << "Qwen3.6-27B at Q4_K_M fits 24 GiB";
    const PlanResult r = plan_auto(request(m, rtx3090_like(), 12 * kGiB, 4096));
    expect_valid(r, m.hp, 12 * kGiB);
    ASSERT_FALSE(r.host_layers.empty());
    for (int64_t l : r.host_layers) {
        EXPECT_EQ(r.placement.tier_of(fmt::format("blk.{}.ffn_up.weight", l)), r.host_tier);
        EXPECT_EQ(r.placement.tier_of(fmt::format("blk.{}.attn_norm.weight", l)), place::Tier::gpu);
    }
    EXPECT_GT(r.speed.decode.tokens_per_s, 0);
    EXPECT_LT(r.speed.decode.tokens_per_s, fits.speed.decode.tokens_per_s);
}

// Layers with more expert bytes leave the GPU first (fewer hand-offs per byte freed).
TEST(PlanSearch, FatLayersGoToTheHostFirst) {
    const auto& m = fixtures::q36_ud_like();
    HardwareProfile prof = rtx3090_like();
    prof.gpu->total_bytes = 40 * kGiB;
    // Equal rates for both expert types, so only the bytes and the fixed hand-off differ.
    prof.gpu->matvec_gbps["Q8_0"] = prof.gpu->matvec_gbps["Q4_K"];
    prof.cpu.expert_gbps["Q8_0"] = prof.cpu.expert_gbps["Q4_K"];
    // The micro-batch is fixed: its activations would otherwise shrink to make room instead.
    PlanRequest all_req = request(m, prof, std::nullopt, 4096);
    all_req.constraints.n_ubatch = 512;
    const PlanResult all = plan_auto(all_req);
    ASSERT_TRUE(all.host_layers.empty()) << "the UD-like file fits 40 GiB";
    const uint64_t need = all.memory.gpu_total();
    // A budget that forces a couple of layers off the GPU.
    const uint64_t fat = m.all_gpu().expert_bytes(0) * 256;
    PlanRequest req = request(m, prof, need + default_margin(need) - fat, 4096);
    req.constraints.n_ubatch = 512;
    const PlanResult r = plan_auto(req);
    expect_valid(r, m.hp, need + default_margin(need) - fat);
    ASSERT_FALSE(r.host_layers.empty());
    ASSERT_LE(r.host_layers.size(), static_cast<size_t>(fixtures::kFatLayers));
    for (int64_t l : r.host_layers)
        EXPECT_LT(l, fixtures::kFatLayers) << "a thin layer left before a fat one";
}

TEST(PlanSearch, ForcedLayersAreRespected) {
    const auto& m = q36_q4km();
    for (uint64_t gib : {12, 16, 24, 60}) {
        PlanRequest req = request(m, rtx3090_like(), gib * kGiB, 16384);
        req.profile.gpu->total_bytes = 80 * kGiB;
        req.constraints.layer_experts = {
            {5, place::Tier::mmap_host}, {6, place::Tier::gpu}, {0, place::Tier::gpu}};
        const PlanResult r = plan_auto(req);
        expect_valid(r, m.hp, gib * kGiB);
        EXPECT_EQ(r.placement.expert_tier(5, 0), place::Tier::mmap_host);
        EXPECT_EQ(r.placement.expert_tier(6, 0), place::Tier::gpu);
        EXPECT_EQ(r.placement.expert_tier(0, 0), place::Tier::gpu);
        EXPECT_TRUE(std::count(r.host_layers.begin(), r.host_layers.end(), 5));
    }
    PlanRequest req = request(m, rtx3090_like(), 16 * kGiB, 4096);
    req.constraints.n_ubatch = 1024;
    req.constraints.k_type = quant::TypeId::q8_0;
    const PlanResult r = plan_auto(req);
    EXPECT_EQ(r.run.n_ubatch, 1024);
    EXPECT_EQ(r.cache.k_type, quant::TypeId::q8_0);
    for (const PlanCandidate& c : r.table) {
        EXPECT_EQ(c.n_ubatch, 1024);
        EXPECT_EQ(c.k_type, quant::TypeId::q8_0);
    }
    req.constraints.layer_experts = {{40, place::Tier::gpu}};
    EXPECT_THROW(plan_auto(req), Error);
}

TEST(PlanSearch, ConstraintsFromLlamaCppFlags) {
    const auto& m = q36_q4km();
    const PlanConstraints c = constraints_from_flags(
        m.file, {.n_gpu_layers = 0, .overrides = [] {
                     auto r = place::n_cpu_moe_rules(3, 40);
                     auto more = place::parse_override_tensor(
                         "blk\\.7\\.ffn_.*_exps=CUDA0,blk\\.9\\.ffn_.*_exps=pinned_host");
                     r.insert(r.end(), more.begin(), more.end());
                     return r;
                 }()});
    const std::map<int64_t, place::Tier> want{{0, place::Tier::mmap_host},
                                              {1, place::Tier::mmap_host},
                                              {2, place::Tier::mmap_host},
                                              {7, place::Tier::gpu},
                                              {9, place::Tier::pinned_host}};
    EXPECT_EQ(c.layer_experts, want);
    EXPECT_FALSE(c.token_embd.has_value());
    EXPECT_THROW(constraints_from_flags(m.file, {.n_gpu_layers = 10, .overrides = {}}), Error);
    EXPECT_NO_THROW(constraints_from_flags(m.file, {.n_gpu_layers = -1, .overrides = {}}));
    try {
        constraints_from_flags(m.file,
                               {.n_gpu_layers = 0, .overrides = place::parse_override_tensor("attn_q=CPU")});
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("attn_q"), std::string::npos) << e.what();
    }
    const PlanConstraints e = constraints_from_flags(
        m.file, {.n_gpu_layers = 0, .overrides = place::parse_override_tensor("token_embd=CUDA0")});
    EXPECT_EQ(e.token_embd, place::Tier::gpu);
}

TEST(PlanSearch, CtxMaxIsTheLargestThatFits) {
    const auto& m = q36_q4km();
    for (uint64_t gib : {3, 4, 6, 10}) {
        SCOPED_TRACE(::testing::Message() << gib << " GiB");
        PlanRequest req = request(m, rtx3090_like(), gib * kGiB, std::nullopt);
        PlanResult r;
        try {
            r = plan_auto(req);
        } catch (const Error& e) {
            EXPECT_GT(leanest(m, rtx3090_like(), quant::TypeId::q4_0, kCtxStep).gpu_total() +
                          default_margin(gib * kGiB),
                      gib * kGiB)
                << e.what();
            continue;
        }
        expect_valid(r, m.hp, gib * kGiB);
        const int64_t c = r.cache.n_ctx;
        EXPECT_TRUE(c == m.hp.n_ctx_train || c % kCtxStep == 0) << c;
        if (c < m.hp.n_ctx_train) {
            // One step more does not fit even the leanest configuration with the smallest KV type.
            EXPECT_GT(leanest(m, rtx3090_like(), quant::TypeId::q4_0, c + kCtxStep).gpu_total() +
                          default_margin(gib * kGiB),
                      gib * kGiB);
            EXPECT_EQ(r.cache.k_type, quant::TypeId::q4_0);
        }
    }
}

TEST(PlanSearch, ContextGoalQuantizesTheCacheOnlyWhenNeeded) {
    const auto& m = q36_q4km();
    // Plenty of memory: the trained context with an f16 cache.
    PlanRequest roomy = request(m, h200_like(), std::nullopt, std::nullopt);
    roomy.goal = Goal::context;
    const PlanResult a = plan_auto(roomy);
    EXPECT_EQ(a.cache.n_ctx, m.hp.n_ctx_train);
    EXPECT_EQ(a.cache.k_type, quant::TypeId::f16);
    EXPECT_EQ(a.cache.v_type, quant::TypeId::f16);
    // A budget where f16 cannot hold the trained context but q4_0 can (KV at 262144 tokens:
    // f16 5 GiB, q4_0 1.4 GiB; the leanest plan keeps the non-expert weights and buffers).
    const uint64_t lean_q4 = leanest(m, rtx3090_like(), quant::TypeId::q4_0, m.hp.n_ctx_train).gpu_total();
    const uint64_t budget = lean_q4 + 512 * kMiB;
    ASSERT_GT(
        leanest(m, rtx3090_like(), quant::TypeId::f16, m.hp.n_ctx_train).gpu_total() + default_margin(budget),
        budget);
    PlanRequest tight = request(m, rtx3090_like(), budget, std::nullopt);
    tight.goal = Goal::context;
    const PlanResult b = plan_auto(tight);
    expect_valid(b, m.hp, budget);
    EXPECT_EQ(b.cache.n_ctx, m.hp.n_ctx_train);
    EXPECT_EQ(b.cache.k_type, quant::TypeId::q4_0);
    // The context goal with a fixed context is a contradiction.
    tight.n_ctx = 4096;
    EXPECT_THROW(plan_auto(tight), Error);
}

TEST(PlanSearch, NothingFitsSaysWhatIsNeeded) {
    const auto& m = q36_q4km();
    try {
        plan_auto(request(m, rtx3090_like(), 1 * kGiB, 4096));
        FAIL() << "no error";
    } catch (const Error& e) {
        const std::string s = e.what();
        EXPECT_NE(s.find("nothing fits"), std::string::npos) << s;
        EXPECT_NE(s.find("budget 1.00 GiB"), std::string::npos) << s;
    }
    PlanRequest req = request(m, rtx3090_like(), 1 * kGiB, std::nullopt);
    EXPECT_THROW(plan_auto(req), Error);
    // RAM too: pinned memory beyond the RAM budget falls back to mapped pages.
    req = request(m, rtx3090_like(), 8 * kGiB, 4096);
    req.ram_budget = 4 * kGiB;
    const PlanResult r = plan_auto(req);
    EXPECT_EQ(r.host_tier, place::Tier::mmap_host);
    EXPECT_FALSE(r.notes.empty());  // the mapped experts exceed the RAM budget
}

// A small locked-memory limit (8 MiB is a common RLIMIT_MEMLOCK) rules out pinned weights, not plans:
// the runtime's own pinned buffers do not count against it.
TEST(PlanSearch, SmallLockLimitFallsBackToMappedExperts) {
    const auto& m = q36_q4km();
    PlanRequest req = request(m, rtx3090_like(), 16 * kGiB, 4096);
    req.profile.host_lockable_bytes = 8 * kMiB;
    const PlanResult r = plan_auto(req);
    expect_valid(r, m.hp, 16 * kGiB);
    EXPECT_FALSE(r.host_layers.empty());
    EXPECT_EQ(r.host_tier, place::Tier::mmap_host);
    EXPECT_EQ(r.memory.weights[place::Tier::pinned_host], 0u);
}

TEST(PlanSearch, WithoutAGpuEverythingStaysOnTheHost) {
    const auto& m = q36_q4km();
    const PlanResult r = plan_auto(request(m, fixtures::cpu_only_like(), std::nullopt, 8192));
    EXPECT_TRUE(r.speed.cpu_only);
    EXPECT_EQ(r.placement.bytes_per_tier()[place::Tier::gpu], 0u);
    EXPECT_EQ(r.memory.gpu_total(), 0u);
    EXPECT_GT(r.speed.decode.tokens_per_s, 0);
}

TEST(PlanSearch, PrefillGoalPrefersBiggerBatches) {
    const auto& m = q36_q4km();
    PlanRequest req = request(m, rtx3090_like(), 14 * kGiB, 8192);
    req.goal = Goal::prefill;
    req.prompt_tokens = 8192;
    const PlanResult p = plan_auto(req);
    expect_valid(p, m.hp, 14 * kGiB);
    for (const PlanCandidate& c : p.table)
        if (c.fits && c.k_type == p.cache.k_type && c.v_type == p.cache.v_type) {
            EXPECT_LE(c.prefill_tps, p.speed.prefill.tokens_per_s * (1 + 1e-12));
        }
}

}  // namespace mox::plan

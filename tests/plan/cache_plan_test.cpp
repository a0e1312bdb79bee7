// The expert cache as a plan dimension: the speed model with a pool at hit rates 0 and 1 against
// numbers worked out from the file's tensor table, the hit-rate prediction on hand-written traces,
// the pool's bytes against the runtime's arithmetic, and the search on synthetic routing profiles of
// the full-size Qwen3.6-35B-A3B table: uniform routing keeps whole layers, local routing buys a pool.
#include "models/gpu_memory.h"
#include "place/synthetic_trace.h"
#include "plan/cache_hits.h"
#include "plan/search.h"
#include "plan/speed.h"
#include "plan_fixtures.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace mox::plan {

namespace {

using fixtures::h200_like;
using fixtures::kGiB;
using fixtures::q36_q4km;

const models::Hparams& hp() {
    return q36_q4km().hp;
}

place::Placement hybrid(const std::vector<int64_t>& host) {
    place::Placement p = q36_q4km().all_gpu();
    p.set_tier("token_embd.weight", place::Tier::mmap_host);
    for (int64_t l : host) p.set_layer_experts(l, place::Tier::pinned_host);
    return p;
}

place::CacheOptions kv(int64_t n_ctx = 32768) {
    return {.n_ctx = n_ctx, .k_type = quant::TypeId::f16, .v_type = quant::TypeId::f16, .n_seq = 1};
}

// h200_like() with the fused MoE launches' decode rates (made up, like the rest of it).
HardwareProfile with_moe_rates() {
    HardwareProfile p = h200_like();
    p.gpu->moe_decode_gbps = {{"Q4_K", 700}, {"Q6_K", 650}, {"Q8_0", 750}};
    return p;
}

double rate(const std::map<std::string, double>& m, quant::TypeId t) {
    return m.at(std::string(quant::type_name(t))) * 1e9;
}

// A trace of the model's shape, as `mox trace-synth --like` makes them.
std::shared_ptr<const models::RoutingTrace> synthetic_profile(double skew, double reuse,
                                                              int64_t tokens = 1500) {
    models::RoutingTrace t = place::synthetic_routing_trace(hp().n_trunk(), hp().n_expert, hp().n_expert_used,
                                                            tokens, skew, reuse, 7);
    t.arch = hp().arch_name();
    t.model = "synthetic";
    return std::make_shared<const models::RoutingTrace>(std::move(t));
}

PlanRequest request(uint64_t vram, std::shared_ptr<const models::RoutingTrace> profile,
                    const HardwareProfile& prof = h200_like()) {
    PlanRequest r{.base = q36_q4km().all_gpu(), .hparams = hp(), .profile = prof};
    r.vram_budget = vram;
    r.n_ctx = 32768;
    r.constraints.k_type = quant::TypeId::f16;
    r.constraints.v_type = quant::TypeId::f16;
    r.routing_profile = std::move(profile);
    return r;
}

}  // namespace

// Hit rate 0 is the plan without a cache plus one lookup launch per host layer; hit rate 1 moves
// every host expert to the GPU's side stream, where it hides under the hand-off, and leaves the CPU
// only the admissions' share of DRAM.
TEST(PlanCacheSpeed, HitRatesZeroAndOneAgainstTheTensorTable) {
    const std::vector<int64_t> host{3, 17, 30};
    const HardwareProfile prof = with_moe_rates();
    const place::Placement p = hybrid(host);
    const int64_t k = hp().n_expert_used;
    const DecodePrediction none = predict_decode(p, hp(), kv(), 0, prof);
    const double gap = prof.gpu->launch_gap_s, rt = prof.gpu->host_roundtrip_s;

    const DecodePrediction zero = predict_decode(p, hp(), kv(), 0, prof, ExpertCacheLoad{});
    EXPECT_EQ(zero.cpu_bytes, none.cpu_bytes);
    EXPECT_EQ(zero.cpu_s, none.cpu_s);
    EXPECT_EQ(zero.gpu_s, none.gpu_s);
    EXPECT_EQ(zero.handoffs, 3);
    EXPECT_EQ(zero.kernels, none.kernels + 3 * kDecodeKernelsCacheLookup);
    EXPECT_NEAR(zero.total_s, none.total_s + 3 * gap, 1e-15);
    EXPECT_EQ(zero.cache_copy_bytes, 0);

    // Hit rate 1, 4 admissions per token: the GPU reads the k experts of each host layer at the MoE
    // rate of each part's type; the copies are 4 mean host experts at the DRAM rate.
    double hits_s = 0, hit_bytes = 0, expert_bytes = 0;
    for (int64_t l : host) {
        for (place::ExpertPart part :
             {place::ExpertPart::gate, place::ExpertPart::up, place::ExpertPart::down}) {
            const char* name = part == place::ExpertPart::gate ? "gate"
                               : part == place::ExpertPart::up ? "up"
                                                               : "down";
            const quant::TypeId type = p.tensor(fmt::format("blk.{}.ffn_{}_exps.weight", l, name)).type;
            const auto slice = static_cast<double>(p.expert_slice_bytes(l, part));
            hits_s += static_cast<double>(k) * slice / rate(prof.gpu->moe_decode_gbps, type);
            hit_bytes += static_cast<double>(k) * slice;
        }
        expert_bytes += static_cast<double>(p.expert_bytes(l)) / static_cast<double>(host.size());
    }
    const DecodePrediction one = predict_decode(p, hp(), kv(), 0, prof, ExpertCacheLoad{1.0, 4.0});
    EXPECT_EQ(one.cpu_bytes, 0);
    EXPECT_NEAR(one.cache_copy_bytes, 4 * expert_bytes, 1e-6);
    EXPECT_NEAR(one.cache_copy_s, 4 * expert_bytes / (prof.cpu.dram_gbps * 1e9), 1e-15);
    EXPECT_NEAR(one.cpu_s, one.cache_copy_s, 1e-15);
    EXPECT_NEAR(one.gpu_weight_bytes, none.gpu_weight_bytes + hit_bytes, 1.0);
    EXPECT_NEAR(one.gpu_s, none.gpu_s + hits_s, 1e-12);
    EXPECT_NEAR(one.handoff_s, 3 * rt, 1e-15);
    // Without a cache each layer's shared expert hides under its hand-off (overlap = the shared
    // experts); the hits join it on the side stream and, shorter than the round trip, hide as well.
    ASSERT_LT(none.overlap_s + hits_s, 3 * rt);
    EXPECT_NEAR(one.overlap_s, none.overlap_s + hits_s, 1e-12);
    EXPECT_NEAR(one.total_s,
                none.gpu_s + one.cache_copy_s + 3 * rt + none.launch_s + 3 * gap - none.overlap_s, 1e-12);
    EXPECT_GT(one.tokens_per_s, none.tokens_per_s);
}

TEST(PlanCacheSpeed, WithoutACacheNothingChanges) {
    const place::Placement p = hybrid({0, 9, 21});
    const SpeedOptions plain{.run = {.n_ubatch = 512, .stream_experts = true}, .stream_min_tokens = 0};
    const SpeedPrediction a = predict_speed(p, hp(), kv(), plain, h200_like());
    SpeedOptions cached = plain;
    cached.expert_cache = ExpertCacheLoad{0.5, 2};
    const SpeedPrediction b = predict_speed(p, hp(), kv(), cached, h200_like());
    EXPECT_LT(b.decode.cpu_s, a.decode.cpu_s);
    EXPECT_EQ(a.decode.cache_hit_rate, 0);
    EXPECT_EQ(b.decode.cache_hit_rate, 0.5);
    EXPECT_EQ(b.prefill.total_s, a.prefill.total_s);  // prefill streams as without the pool
    EXPECT_THROW(predict_decode(p, hp(), kv(), 0, h200_like(), ExpertCacheLoad{1.5, 0}), Error);
    EXPECT_THROW(predict_decode(p, hp(), kv(), 0, h200_like(), ExpertCacheLoad{0.5, -1}), Error);
}

// The pool as the runtime allocates it (models/gpu/gpu_expert_cache.cpp): slots of the largest gate,
// up and down slices of the host layers, each part 256-aligned with 16 bytes of slack, one more slot
// of zeros, and an int32 table of every trunk layer's experts.
TEST(PlanCacheMemory, PoolBytesAreTheRuntimes) {
    const place::Placement p = hybrid({0, 1, 2, 3});
    auto align = [](uint64_t b) { return (b + 16 + 255) / 256 * 256; };
    uint64_t g = 0, u = 0, d = 0;
    for (int64_t l = 0; l < 4; ++l) {
        g = std::max(g, p.expert_slice_bytes(l, place::ExpertPart::gate));
        u = std::max(u, p.expert_slice_bytes(l, place::ExpertPart::up));
        d = std::max(d, p.expert_slice_bytes(l, place::ExpertPart::down));
    }
    const models::ExpertSlotLayout slot = place::expert_slot_layout(p, hp());
    EXPECT_EQ(slot.up_at, align(g));
    EXPECT_EQ(slot.down_at, align(g) + align(u));
    EXPECT_EQ(slot.bytes, align(g) + align(u) + align(d));
    EXPECT_EQ(models::expert_cache_slots(models::expert_cache_pool_bytes(100, slot.bytes), slot.bytes), 100);
    EXPECT_EQ(models::expert_cache_slots(models::expert_cache_pool_bytes(100, slot.bytes) - 1, slot.bytes),
              99);
    EXPECT_EQ(models::expert_cache_device_bytes(100, slot.bytes, hp().n_trunk(), hp().n_expert),
              101 * slot.bytes + static_cast<uint64_t>(hp().n_trunk() * hp().n_expert) * 4);
    // The memory model counts it on the GPU, with the lookup's k slot ids and weights.
    const place::MemoryPrediction without = place::predict_memory(p, hp(), kv(), {}, {});
    const place::MemoryPrediction with =
        place::predict_memory(p, hp(), kv(), {}, {.expert_cache_slots = 100});
    EXPECT_EQ(with.gpu_total() - without.gpu_total(),
              models::expert_cache_device_bytes(100, slot.bytes, hp().n_trunk(), hp().n_expert) +
                  static_cast<uint64_t>(hp().n_expert_used) * 8);
    // Nothing on the host: nothing to cache, nothing counted.
    EXPECT_EQ(place::predict_memory(hybrid({}), hp(), kv(), {}, {.expert_cache_slots = 100}).gpu_total(),
              place::predict_memory(hybrid({}), hp(), kv(), {}, {}).gpu_total());
}

TEST(PlanCacheHits, HandWrittenTraces) {
    // Layer 0 cycles through experts 0..3, layer 1 always selects expert 2 (k = 1, 20 tokens; the
    // first 2 warm up).
    auto trace = std::make_shared<models::RoutingTrace>();
    trace->arch = "qwen35moe";
    trace->n_expert = 4;
    trace->k = 1;
    trace->layers = {0, 1};
    trace->n_tokens = 20;
    for (int64_t t = 0; t < 20; ++t) trace->ids.insert(trace->ids.end(), {static_cast<uint16_t>(t % 4), 2});
    const models::RoutingTrace only1 = restrict_trace(*trace, {1});
    EXPECT_EQ(only1.layers, std::vector<int32_t>{1});
    EXPECT_EQ(only1.ids, std::vector<uint16_t>(20, 2));
    EXPECT_THROW(restrict_trace(*trace, {2}), Error);

    CacheHitPredictor lru(trace, "lru");
    // One slot for layer 1's one expert: every token after the first hits, nothing is copied.
    const ExpertCacheLoad steady = lru.predict({1}, 1);
    EXPECT_DOUBLE_EQ(steady.hit_rate, 1.0);
    EXPECT_DOUBLE_EQ(steady.admissions_per_token, 0.0);
    // One slot for layer 0's cycle: LRU always holds the expert just used, never the next one, and
    // copies every miss.
    const ExpertCacheLoad cycle = lru.predict({0}, 1);
    EXPECT_DOUBLE_EQ(cycle.hit_rate, 0.0);
    EXPECT_DOUBLE_EQ(cycle.admissions_per_token, 1.0);
    // Both layers, five slots: everything fits after the first cycle (tokens 0..3).
    const ExpertCacheLoad both = lru.predict({0, 1}, 5);
    EXPECT_DOUBLE_EQ(both.hit_rate, (2.0 * 18 - 2) / (2.0 * 18));  // tokens 2 and 3 miss in layer 0
    EXPECT_EQ(lru.simulations(), 3);
    EXPECT_DOUBLE_EQ(lru.predict({0}, 1).hit_rate, 0.0);  // kept, not simulated again
    EXPECT_EQ(lru.simulations(), 3);
    EXPECT_THROW(CacheHitPredictor(trace, "fifo"), Error);
}

// Uniform routing: a slot is any expert's, hit about as often as its share of the host experts, while
// every layer moved to the host adds a hand-off: the plan keeps whole layers, as without a profile.
TEST(PlanCacheSearch, UniformRoutingKeepsTheStaticPlan) {
    const PlanResult plain = plan_auto(request(8 * kGiB, nullptr));
    ASSERT_FALSE(plain.host_layers.empty());
    const PlanResult r = plan_auto(request(8 * kGiB, synthetic_profile(0, 0)));
    EXPECT_EQ(r.expert_cache.slots, 0) << r.expert_cache.why_none;
    EXPECT_FALSE(r.expert_cache.why_none.empty());
    EXPECT_EQ(r.host_layers, plain.host_layers);
    EXPECT_EQ(r.speed.decode.tokens_per_s, plain.speed.decode.tokens_per_s);
    EXPECT_EQ(r.memory.gpu_total(), plain.memory.gpu_total());
    EXPECT_EQ(r.run.expert_cache_slots, 0);
    // The pools it weighed are in the table, each slower than the plan.
    int pools = 0;
    for (const PlanCandidate& c : r.table)
        if (c.cache_slots > 0) {
            ++pools;
            EXPECT_LT(c.decode_tps, r.speed.decode.tokens_per_s * (1 + kCacheMinGain));
            EXPECT_LT(c.cache_hit_rate, 0.5);
        }
    EXPECT_GT(pools, 0);
}

// Skewed, local routing: a pool of every layer's hot experts beats whole layers; the chosen plan's
// memory counts the pool exactly and stays in the budget.
TEST(PlanCacheSearch, LocalRoutingBuysAPool) {
    const uint64_t budget = 8 * kGiB;
    const PlanResult plain = plan_auto(request(budget, nullptr));
    const PlanResult r = plan_auto(request(budget, synthetic_profile(1.2, 0.4)));
    const ExpertCachePlan& c = r.expert_cache;
    ASSERT_GT(c.slots, 0) << c.why_none;
    EXPECT_EQ(c.policy, "lru");
    EXPECT_GT(r.host_layers.size(), plain.host_layers.size());
    EXPECT_GT(r.speed.decode.tokens_per_s, plain.speed.decode.tokens_per_s * (1 + kCacheMinGain));
    EXPECT_GT(c.hit_rate, 0.3);
    EXPECT_EQ(r.speed.decode.cache_hit_rate, c.hit_rate);
    EXPECT_EQ(r.run.expert_cache_slots, c.slots);
    EXPECT_EQ(c.slot_bytes, place::expert_slot_layout(r.placement, hp()).bytes);
    EXPECT_EQ(models::expert_cache_slots(c.pool_bytes, c.slot_bytes), c.slots);
    const uint64_t without =
        place::predict_memory(r.placement, hp(), r.cache, r.allowance,
                              {.n_ubatch = r.run.n_ubatch, .stream_min_tokens = r.run.stream_min_tokens})
            .gpu_total();
    EXPECT_EQ(c.device_bytes,
              models::expert_cache_device_bytes(c.slots, c.slot_bytes, hp().n_trunk(), hp().n_expert) +
                  static_cast<uint64_t>(hp().n_expert_used) * 8);
    EXPECT_EQ(r.memory.gpu_total(), without + c.device_bytes);
    EXPECT_LE(r.memory.gpu_total() + r.vram_margin, budget);
    // The pool took what the budget had left: one more slot would not fit.
    EXPECT_GT(r.memory.gpu_total() + c.slot_bytes + r.vram_margin, budget);
    int chosen = 0;
    for (const PlanCandidate& row : r.table) chosen += row.chosen;
    EXPECT_EQ(chosen, 1);
}

TEST(PlanCacheSearch, OnlyTheDecodeGoalWithHostLayersWeighsAPool) {
    const auto local = synthetic_profile(1.2, 0.4, 400);
    PlanRequest prefill = request(8 * kGiB, local);
    prefill.goal = Goal::prefill;
    const PlanResult p = plan_auto(prefill);
    EXPECT_EQ(p.expert_cache.slots, 0);
    EXPECT_NE(p.expert_cache.why_none.find("prefill"), std::string::npos) << p.expert_cache.why_none;
    const PlanResult all_gpu = plan_auto(request(80 * kGiB, local));
    EXPECT_TRUE(all_gpu.host_layers.empty());
    EXPECT_EQ(all_gpu.expert_cache.slots, 0);
    EXPECT_NE(all_gpu.expert_cache.why_none.find("fits on the GPU"), std::string::npos);
}

TEST(PlanCacheSearch, AProfileOfAnotherModelIsRefused) {
    models::RoutingTrace other = place::synthetic_routing_trace(hp().n_trunk(), 128, 8, 50, 0, 0, 1);
    other.arch = hp().arch_name();
    other.model = "other";
    try {
        plan_auto(request(8 * kGiB, std::make_shared<const models::RoutingTrace>(other)));
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(
            std::string(e.what()).find("--routing-profile: the trace is of a qwen35moe model with 40 layers "
                                       "of 128 experts"),
            std::string::npos)
            << e.what();
    }
    PlanRequest bad_policy = request(8 * kGiB, synthetic_profile(0, 0, 50));
    bad_policy.cache_policy = "fifo";
    EXPECT_THROW(plan_auto(bad_policy), Error);
}

}  // namespace mox::plan

// The speed model on a full-size Qwen3.6-35B-A3B tensor table with made-up hardware profiles
// (plan_fixtures.h): byte counts against an independent recount from the file's tensor list,
// breakdowns that add up, orderings that must hold (GPU beats CPU on the H200-like profile, more
// host layers never decode faster), the streaming crossover, and the refusals.
#include "plan/speed.h"
#include "plan_fixtures.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <string>

namespace mox::plan {

namespace {

using fixtures::h200_like;
using fixtures::q36_q4km;

const models::Hparams& hp() {
    return q36_q4km().hp;
}

// What the runtime loads for a hybrid plan: every weight on the GPU but token_embd; the experts
// of `host` layers on `tier`.
place::Placement hybrid(const std::vector<int64_t>& host, place::Tier tier = place::Tier::mmap_host) {
    place::Placement p = q36_q4km().all_gpu();
    p.set_tier("token_embd.weight", place::Tier::mmap_host);
    for (int64_t l : host) p.set_layer_experts(l, tier);
    return p;
}

std::vector<int64_t> first_layers(int64_t n) {
    std::vector<int64_t> v;
    for (int64_t l = 0; l < n; ++l) v.push_back(l);
    return v;
}

place::CacheOptions cache(int64_t n_ctx = 32768) {
    return {.n_ctx = n_ctx, .k_type = quant::TypeId::f16, .v_type = quant::TypeId::f16, .n_seq = 1};
}

SpeedOptions options(int64_t ub = 512, int64_t prompt = 4096) {
    return {.run = {.n_ubatch = ub, .stream_experts = true}, .stream_min_tokens = 0, .prompt_tokens = prompt};
}

// Weight bytes straight from the file's tensor table.
struct FileBytes {
    double experts = 0;  // routed-expert stacks
    double dense = 0;    // every other tensor but token_embd
};
FileBytes file_bytes() {
    FileBytes b;
    for (const gguf::TensorInfo& t : q36_q4km().file.tensors()) {
        if (t.name == "token_embd.weight") continue;
        (t.name.find("_exps.") != std::string::npos ? b.experts : b.dense) += static_cast<double>(t.n_bytes);
    }
    return b;
}

void expect_decode_sums(const DecodePrediction& d) {
    EXPECT_NEAR(d.total_s, d.gpu_s + d.cpu_s + d.handoff_s + d.launch_s - d.overlap_s, 1e-12 * d.total_s);
    EXPECT_NEAR(d.tokens_per_s * d.total_s, 1.0, 1e-12);
    EXPECT_GE(d.overlap_s, 0);
    EXPECT_LE(d.overlap_s, d.handoff_s + d.cpu_s);
}

void expect_prefill_sums(const PrefillPrediction& p) {
    EXPECT_NEAR(p.total_s, p.gpu_compute_s + p.copy_stall_s + p.cpu_s + p.handoff_s + p.launch_s,
                1e-12 * p.total_s);
    EXPECT_NEAR(p.tokens_per_s * p.total_s, static_cast<double>(p.prompt_tokens), 1e-9 * p.tokens_per_s);
    EXPECT_LE(p.copy_stall_s, p.copy_s + 1e-15);
}

}  // namespace

TEST(PlanSpeed, AllOnGpuReadsTheFileBytes) {
    const SpeedPrediction s = predict_speed(hybrid({}), hp(), cache(), options(), h200_like());
    const FileBytes f = file_bytes();
    const double k_over_n = static_cast<double>(hp().n_expert_used) / static_cast<double>(hp().n_expert);
    EXPECT_FALSE(s.cpu_only);
    EXPECT_EQ(s.host_layers, 0);
    EXPECT_NEAR(s.decode.gpu_weight_bytes, f.dense + k_over_n * f.experts, 1.0);
    EXPECT_EQ(s.decode.cpu_bytes, 0);
    EXPECT_EQ(s.decode.handoffs, 0);
    EXPECT_EQ(s.decode.kernels, (hp().n_trunk() - hp().n_trunk() / 4) * kDecodeKernelsRecurrent +
                                    hp().n_trunk() / 4 * kDecodeKernelsAttention + kDecodeKernelsOutput);
    EXPECT_EQ(s.decode.probed_kernels, 0);  // the profile has no MoE or DeltaNet probe
    // Depth 0: the KV cache holds nothing; the DeltaNet state is read and written once per token.
    EXPECT_EQ(s.decode.gpu_cache_bytes, 2.0 * static_cast<double>(hp().recurrent_state_bytes()));
    // Half the context: K and V rows of every attention layer up to the depth (inspect's KV/token).
    EXPECT_NEAR(s.decode_half.gpu_cache_bytes - s.decode.gpu_cache_bytes,
                hp().kv_cache_bytes_per_token(quant::TypeId::f16) * 16384.0, 1.0);
    EXPECT_LT(s.decode_half.tokens_per_s, s.decode.tokens_per_s);
    expect_decode_sums(s.decode);
    expect_decode_sums(s.decode_half);
    expect_prefill_sums(s.prefill);
    EXPECT_EQ(s.prefill.copy_bytes, 0);
    EXPECT_EQ(s.prefill.micro_batches, 8);  // 4096 tokens in batches of 512
}

TEST(PlanSpeed, HostLayersMoveTheirSelectedExpertsToTheCpu) {
    const std::vector<int64_t> host{3, 17, 30};
    const SpeedPrediction all = predict_speed(hybrid({}), hp(), cache(), options(), h200_like());
    const SpeedPrediction s = predict_speed(hybrid(host), hp(), cache(), options(), h200_like());
    const place::Placement p = hybrid(host);
    double moved = 0;  // k experts of each host layer
    for (int64_t l : host) moved += static_cast<double>(hp().n_expert_used * p.expert_bytes(l));
    EXPECT_EQ(s.host_layers, 3);
    EXPECT_EQ(s.decode.handoffs, 3);
    EXPECT_NEAR(s.decode.cpu_bytes, moved, 1.0);
    EXPECT_NEAR(all.decode.gpu_weight_bytes - s.decode.gpu_weight_bytes, moved, 1.0);
    EXPECT_NEAR(s.decode.handoff_s, 3 * h200_like().gpu->host_roundtrip_s, 1e-15);
    expect_decode_sums(s.decode);
    expect_prefill_sums(s.prefill);
    // Prefill streams the whole stacks of the host layers once per micro-batch (4096 / 512 = 8).
    double stacks = 0;
    for (int64_t l : host)
        stacks += static_cast<double>(p.expert_bytes(l) * static_cast<uint64_t>(p.n_expert()));
    EXPECT_TRUE(s.prefill.streaming);
    EXPECT_NEAR(s.prefill.copy_bytes, 8 * stacks, 8.0);
}

TEST(PlanSpeed, GpuBeatsCpuOnTheH200LikeProfile) {
    const HardwareProfile prof = h200_like();
    const SpeedPrediction gpu = predict_speed(hybrid({}), hp(), cache(), options(), prof);
    const SpeedPrediction hyb = predict_speed(hybrid(first_layers(40)), hp(), cache(), options(), prof);
    const SpeedPrediction cpu = predict_speed(
        place::Placement::uniform(q36_q4km().file, place::Tier::mmap_host), hp(), cache(), options(), prof);
    EXPECT_TRUE(cpu.cpu_only);
    EXPECT_GT(gpu.decode.tokens_per_s, hyb.decode.tokens_per_s);
    EXPECT_GT(hyb.decode.tokens_per_s, cpu.decode.tokens_per_s);
    EXPECT_GT(gpu.prefill.tokens_per_s, hyb.prefill.tokens_per_s);
    EXPECT_GT(hyb.prefill.tokens_per_s, cpu.prefill.tokens_per_s);
    expect_decode_sums(cpu.decode);
    expect_prefill_sums(cpu.prefill);
    // The CPU forward reads every active byte from DRAM or through its expert operator.
    const FileBytes f = file_bytes();
    const double k_over_n = static_cast<double>(hp().n_expert_used) / static_cast<double>(hp().n_expert);
    EXPECT_NEAR(cpu.decode.cpu_bytes,
                f.dense + k_over_n * f.experts + 2.0 * static_cast<double>(hp().recurrent_state_bytes()),
                1.0);
}

TEST(PlanSpeed, EachHostLayerSlowsDecode) {
    double last = 1e30;
    for (int64_t n = 0; n <= 40; n += 5) {
        const SpeedPrediction s =
            predict_speed(hybrid(first_layers(n)), hp(), cache(), options(), h200_like());
        EXPECT_LT(s.decode.tokens_per_s, last) << n << " host layers";
        last = s.decode.tokens_per_s;
    }
}

// The runtime locks mapped expert stacks in place before streaming them, so the copy engine reads
// both host tiers at the pinned rate (the pageable rate would be cudaMemcpy from unlocked pages).
TEST(PlanSpeed, MappedStacksStreamAtThePinnedRate) {
    const auto host = first_layers(10);
    const SpeedPrediction pinned =
        predict_speed(hybrid(host, place::Tier::pinned_host), hp(), cache(), options(2048), h200_like());
    const SpeedPrediction mapped =
        predict_speed(hybrid(host, place::Tier::mmap_host), hp(), cache(), options(2048), h200_like());
    EXPECT_EQ(pinned.decode.tokens_per_s, mapped.decode.tokens_per_s);  // decode does not copy
    EXPECT_EQ(pinned.prefill.tokens_per_s, mapped.prefill.tokens_per_s);
    ASSERT_GT(pinned.prefill.copy_bytes, 0);
    EXPECT_NEAR(pinned.prefill.copy_s, pinned.prefill.copy_bytes / (h200_like().gpu->h2d_pinned_gbps * 1e9),
                1e-9 * pinned.prefill.copy_s);
}

// The crossover is where one micro-batch costs the same streamed or computed by the CPU: checked
// with the public prediction itself, forcing one way or the other.
TEST(PlanSpeed, StreamThresholdIsTheCrossover) {
    for (const HardwareProfile& prof : {h200_like(), fixtures::rtx3090_like()}) {
        SCOPED_TRACE(prof.machine);
        const place::Placement p = hybrid({0, 10, 20, 30});
        const int64_t t = best_stream_min(p, hp(), 4096, prof);
        ASSERT_GE(t, 1);
        ASSERT_LE(t, 4096);
        auto cost = [&](int64_t tokens, bool stream) {
            SpeedOptions o{.run = {.n_ubatch = tokens, .stream_experts = stream},
                           .stream_min_tokens = 1,
                           .prompt_tokens = tokens};
            return predict_speed(p, hp(), cache(), o, prof).prefill.total_s;
        };
        EXPECT_LE(cost(t, true), cost(t, false));
        if (t > 1) {
            EXPECT_GT(cost(t - 1, true), cost(t - 1, false));
        }
        // With no host layer there is nothing to stream: the default.
        EXPECT_EQ(best_stream_min(hybrid({}), hp(), 4096, prof), kDefaultStreamMinTokens);
    }
}

TEST(PlanSpeed, BelowTheThresholdTheCpuComputesTheExperts) {
    const place::Placement p = hybrid({1, 2});
    SpeedOptions o = options(512, 100);
    o.stream_min_tokens = 101;
    const SpeedPrediction s = predict_speed(p, hp(), cache(), o, h200_like());
    EXPECT_EQ(s.prefill.copy_bytes, 0);
    EXPECT_EQ(s.prefill.handoffs, 2);
    EXPECT_GT(s.prefill.cpu_s, 0);
    expect_prefill_sums(s.prefill);
}

TEST(PlanSpeed, MissingRatesNameTheTypes) {
    HardwareProfile prof = h200_like();
    prof.gpu->matvec_gbps.erase("Q6_K");
    try {
        predict_speed(hybrid({}), hp(), cache(), options(), prof);
        FAIL() << "no error";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("Q6_K"), std::string::npos) << m;
        EXPECT_NE(m.find("mox calibrate --types q6_k"), std::string::npos) << m;
    }
    // Plain float types (the F32 router) borrow the best measured rate, with a note.
    prof = h200_like();
    prof.gpu->matvec_gbps.erase("F32");
    prof.gpu->matmul_tflops.erase("F32");
    const SpeedPrediction borrowed = predict_speed(hybrid({}), hp(), cache(), options(), prof);
    EXPECT_TRUE(std::any_of(borrowed.notes.begin(), borrowed.notes.end(),
                            [](const std::string& n) { return n.find("F32") != std::string::npos; }))
        << fmt::format("{}", fmt::join(borrowed.notes, " | "));
    // CPU rates are needed only when some layer's experts are on the host.
    prof = h200_like();
    prof.cpu.expert_gbps.clear();
    EXPECT_NO_THROW(predict_speed(hybrid({}), hp(), cache(), options(), prof));
    EXPECT_THROW(predict_speed(hybrid({5}), hp(), cache(), options(), prof), Error);
    // Keys are compared without case ("q4_K" as well as "Q4_K").
    prof = h200_like();
    const double r = prof.gpu->matvec_gbps["Q4_K"];
    prof.gpu->matvec_gbps.erase("Q4_K");
    prof.gpu->matvec_gbps["q4_k"] = r;
    EXPECT_EQ(predict_speed(hybrid({}), hp(), cache(), options(), prof).decode.tokens_per_s,
              predict_speed(hybrid({}), hp(), cache(), options(), h200_like()).decode.tokens_per_s);
}

TEST(PlanSpeed, RefusesWhatTheRuntimeRefuses) {
    place::Placement split = hybrid({});
    split.set_expert_tier(7, 3, place::Tier::mmap_host);
    try {
        predict_speed(split, hp(), cache(), options(), h200_like());
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("layer 7"), std::string::npos) << e.what();
    }
    place::Placement attn_on_cpu = hybrid({});
    attn_on_cpu.set_tier("blk.3.attn_q.weight", place::Tier::mmap_host);
    EXPECT_THROW(predict_speed(attn_on_cpu, hp(), cache(), options(), h200_like()), Error);
    // Weights on the GPU with a profile that has none.
    EXPECT_THROW(predict_speed(hybrid({}), hp(), cache(), options(), fixtures::cpu_only_like()), Error);
}

// h200_like() plus the decode probes `mox calibrate` adds: the fused MoE launches' rate per type and
// the DeltaNet step, its state bytes those of this model's layers (made up, like the rest).
HardwareProfile with_decode_probes() {
    HardwareProfile prof = h200_like();
    prof.gpu->moe_decode_gbps = {{"Q4_K", 700}, {"Q6_K", 650}, {"Q8_0", 750}};
    prof.gpu->deltanet_step_s = 12e-6;
    const int64_t n_recurrent = hp().n_trunk() - hp().n_trunk() / 4;
    prof.gpu->deltanet_state_bytes = hp().recurrent_state_bytes() / static_cast<uint64_t>(n_recurrent);
    return prof;
}

TEST(PlanSpeed, HostLayerCostIsTheDecodeDifference) {
    for (const HardwareProfile& prof : {h200_like(), with_decode_probes()}) {
        const double base = predict_speed(hybrid({}), hp(), cache(), options(), prof).decode.total_s;
        for (int64_t l : {0, 4, 39}) {
            const double moved = predict_speed(hybrid({l}), hp(), cache(), options(), prof).decode.total_s;
            EXPECT_NEAR(host_layer_decode_cost(hybrid({}), hp(), l, prof), moved - base, 1e-12) << l;
        }
    }
}

// With the probes, a GPU expert layer's routed and shared experts cost their bytes at the MoE decode
// rate instead of the matvec rate, a DeltaNet layer its measured step instead of its state bytes at
// the streaming rate, and the launches the probes timed pay no separate launch gap.
TEST(PlanSpeed, DecodeProbesReplaceBytesAndGaps) {
    const HardwareProfile plain = h200_like(), probed = with_decode_probes();
    const int64_t n_layers = hp().n_trunk(), n_recurrent = n_layers - n_layers / 4;
    const SpeedPrediction a = predict_speed(hybrid({}), hp(), cache(), options(), plain);
    const SpeedPrediction b = predict_speed(hybrid({}), hp(), cache(), options(), probed);
    expect_decode_sums(b.decode);
    EXPECT_EQ(b.decode.kernels, a.decode.kernels);
    EXPECT_EQ(b.decode.probed_kernels, 2 * n_recurrent + 2 * n_layers);
    EXPECT_NEAR(b.decode.launch_s, static_cast<double>(b.decode.kernels - b.decode.probed_kernels) *
                                       probed.gpu->launch_gap_s, 1e-15);
    EXPECT_EQ(b.decode.gpu_weight_bytes, a.decode.gpu_weight_bytes);  // the same bytes, other rates
    // Expected GPU seconds, rebuilt from the placement: dense weights but the shared experts'
    // matrices at the matvec rate (vectors at the best one), then per layer the probes.
    const place::Placement p = hybrid({});
    const double best = 3500e9;  // h200_like's best matvec rate (F32)
    double want = 0;
    for (const place::TensorEntry& e : p.tensors()) {
        if (e.layer >= hp().n_trunk() || e.cls == models::TensorClass::mtp) continue;
        if (e.cls == models::TensorClass::embedding) continue;  // a row lookup with an output head
        const auto bytes = static_cast<double>(e.n_bytes);
        const bool matrix = e.ne[1] > 1 && e.ne[0] >= 32;
        const std::string type(quant::type_name(e.type));
        if (e.part != place::ExpertPart::none) {  // k of n experts at the MoE rate
            want += bytes * static_cast<double>(hp().n_expert_used) / static_cast<double>(hp().n_expert) /
                    (probed.gpu->moe_decode_gbps.at(type) * 1e9);
        } else if (e.cls == models::TensorClass::shared_expert && matrix) {
            want += bytes / (probed.gpu->moe_decode_gbps.at(type) * 1e9);
        } else {
            const auto it = probed.gpu->matvec_gbps.find(type);
            want += bytes / (matrix ? it->second * 1e9 : best);
        }
    }
    want += static_cast<double>(n_recurrent) * probed.gpu->deltanet_step_s;
    EXPECT_NEAR(b.decode.gpu_s, want, 1e-9 * want);
}

// With the hand-off probe, a host layer's decode pays the decode graph's own round trip (publish and
// collect launches included) instead of the copy + callback one, and those two launches no gap;
// prefill keeps the copy + callback round trip, which is what its micro-batches below the
// streaming threshold run.
TEST(PlanSpeed, DecodeHandOffProbeReplacesTheCallbackRoundTrip) {
    const std::vector<int64_t> host{3, 17, 30};
    const HardwareProfile plain = h200_like();
    HardwareProfile probed = plain;
    probed.gpu->handoff_roundtrip_s = plain.gpu->host_roundtrip_s / 8;
    const SpeedPrediction a = predict_speed(hybrid(host), hp(), cache(), options(), plain);
    const SpeedPrediction b = predict_speed(hybrid(host), hp(), cache(), options(), probed);
    expect_decode_sums(b.decode);
    EXPECT_NEAR(b.decode.handoff_s, 3 * probed.gpu->handoff_roundtrip_s, 1e-15);
    EXPECT_EQ(b.decode.kernels, a.decode.kernels);
    EXPECT_EQ(b.decode.probed_kernels, a.decode.probed_kernels + 2 * 3);
    EXPECT_LT(b.decode.total_s, a.decode.total_s);
    SpeedOptions cpu_prefill = options(512, 100);
    cpu_prefill.stream_min_tokens = 101;
    const SpeedPrediction c = predict_speed(hybrid(host), hp(), cache(), cpu_prefill, probed);
    EXPECT_EQ(c.prefill.handoffs, 3);
    EXPECT_NEAR(c.prefill.handoff_s, 3 * plain.gpu->host_roundtrip_s, 1e-15);
    for (int64_t l : {0, 17})  // still the decode difference
        EXPECT_NEAR(host_layer_decode_cost(hybrid({}), hp(), l, probed),
                    predict_speed(hybrid({l}), hp(), cache(), options(), probed).decode.total_s -
                        predict_speed(hybrid({}), hp(), cache(), options(), probed).decode.total_s,
                    1e-12);
}

// Prefill probes: every DeltaNet layer adds its measured conv + chunked rule per token (absent
// before: not charged), and a GPU expert layer's routed products run at the batched MoE's measured
// rate instead of the dense matmul's, never faster than reading the selected experts once.
TEST(PlanSpeed, PrefillProbesChargeDeltaNetAndTheBatchedMoe) {
    const HardwareProfile plain = h200_like();
    const int64_t n_recurrent = hp().n_trunk() - hp().n_trunk() / 4;
    const int64_t prompt = 4096;
    HardwareProfile dn = plain;
    dn.gpu->deltanet_state_bytes = hp().recurrent_state_bytes() / static_cast<uint64_t>(n_recurrent);
    dn.gpu->deltanet_prefill_token_s = 4e-7;
    const SpeedPrediction a = predict_speed(hybrid({}), hp(), cache(), options(512, prompt), plain);
    const SpeedPrediction b = predict_speed(hybrid({}), hp(), cache(), options(512, prompt), dn);
    expect_prefill_sums(b.prefill);
    EXPECT_NEAR(b.prefill.gpu_compute_s - a.prefill.gpu_compute_s,
                static_cast<double>(n_recurrent * prompt) * dn.gpu->deltanet_prefill_token_s,
                1e-9 * b.prefill.gpu_compute_s);
    // A batched-MoE rate a quarter of the matmul rate slows prefill; the decode is untouched.
    HardwareProfile slow = plain, fast = plain;
    for (const auto& [type, tflops] : plain.gpu->matmul_tflops) {
        slow.gpu->moe_prefill_tflops[type] = tflops / 4;
        fast.gpu->moe_prefill_tflops[type] = tflops * 1e6;
    }
    const SpeedPrediction s = predict_speed(hybrid({}), hp(), cache(), options(512, prompt), slow);
    const SpeedPrediction f = predict_speed(hybrid({}), hp(), cache(), options(512, prompt), fast);
    expect_prefill_sums(s.prefill);
    EXPECT_GT(s.prefill.gpu_compute_s, 1.2 * a.prefill.gpu_compute_s);
    EXPECT_EQ(s.decode.total_s, a.decode.total_s);
    // An absurd rate leaves the weight reads, which already bound the fixture's matmul-rate experts at
    // 512 tokens: the same time as without the probe.
    EXPECT_NEAR(f.prefill.gpu_compute_s, a.prefill.gpu_compute_s, 1e-12);
}

// With the batched MoE's rate also measured at a larger micro-batch, the rate for T tokens is
// interpolated in log2(T) between the two sizes and held beyond them: at 512 and below the small
// rate, at the large size and above the large one, halfway (in log2) the mean.
TEST(PlanSpeed, BatchedMoeRateInterpolatesBetweenMeasuredSizes) {
    HardwareProfile small_only = h200_like();
    for (const auto& [type, tflops] : small_only.gpu->matmul_tflops)
        small_only.gpu->moe_prefill_tflops[type] = tflops / 8;
    HardwareProfile both = small_only, at_large = small_only, at_mid = small_only;
    both.gpu->moe_prefill_large_tokens = 2048;
    for (const auto& [type, tflops] : small_only.gpu->moe_prefill_tflops) {
        both.gpu->moe_prefill_large_tflops[type] = 2 * tflops;
        at_large.gpu->moe_prefill_tflops[type] = 2 * tflops;  // the large rate everywhere
        at_mid.gpu->moe_prefill_tflops[type] = 1.5 * tflops;  // the mean of the two
    }
    // Prompts of one micro-batch of T tokens, all experts on the GPU.
    auto experts_s = [&](const HardwareProfile& prof, int64_t t) {
        return predict_speed(hybrid({}), hp(), cache(), options(4096, t), prof).prefill.gpu_compute_s;
    };
    for (int64_t t : {256, 512}) EXPECT_NEAR(experts_s(both, t), experts_s(small_only, t), 1e-12) << t;
    for (int64_t t : {2048, 4096}) EXPECT_NEAR(experts_s(both, t), experts_s(at_large, t), 1e-12) << t;
    EXPECT_NEAR(experts_s(both, 1024), experts_s(at_mid, 1024), 1e-12);
    EXPECT_LT(experts_s(both, 1024), experts_s(small_only, 1024));
}

// predict_decode is predict_speed's decode at any depth: the same numbers at 0 and n_ctx / 2, more
// KV cache read (and so more time) deeper in the context, a negative depth refused.
TEST(PlanSpeed, DecodeAtAnyDepth) {
    const place::Placement p = hybrid({3, 17});
    const SpeedPrediction s = predict_speed(p, hp(), cache(), options(), h200_like());
    const DecodePrediction d0 = predict_decode(p, hp(), cache(), 0, h200_like());
    const DecodePrediction dh = predict_decode(p, hp(), cache(), cache().n_ctx / 2, h200_like());
    EXPECT_EQ(d0.total_s, s.decode.total_s);
    EXPECT_EQ(dh.total_s, s.decode_half.total_s);
    EXPECT_EQ(dh.depth, cache().n_ctx / 2);
    const DecodePrediction d1 = predict_decode(p, hp(), cache(), 1000, h200_like());
    EXPECT_GT(d1.gpu_cache_bytes, d0.gpu_cache_bytes);
    EXPECT_GT(d1.total_s, d0.total_s);
    EXPECT_LT(d1.total_s, dh.total_s);
    EXPECT_THROW(predict_decode(p, hp(), cache(), -1, h200_like()), Error);
}

// With the attention probe's points, an attention layer's decode costs the interpolated launch time
// (f16 caches) instead of its cache bytes at the matvec rate, and its launch pays no gap; a quantized
// cache costs the larger of the probe's time and its bytes (never less than f16: q8_0 measured 4% slower,
// and bytes alone had predicted it faster; bench/results/2026-11-30-decode-fusions-h200).
TEST(PlanSpeed, AttentionProbeReplacesTheCacheBytes) {
    const place::Placement p = hybrid({});
    HardwareProfile probed = h200_like();
    probed.gpu->attention_decode_f16 = {{256, 6e-6}, {1024, 14e-6}, {4096, 20e-6}};
    const int64_t n_attn = hp().n_trunk() / 4;  // every 4th layer is full attention
    const double scale = static_cast<double>(hp().n_head_kv * (hp().head_dim_k + hp().head_dim_v)) / 1024.0;
    // At 640 keys (depth 639): halfway between 256 and 1024, 10 us, in place of the plain model's
    // cache bytes (its depth-dependent part: depth 0 reads no keys).
    const DecodePrediction plain = predict_decode(p, hp(), cache(), 639, h200_like());
    const DecodePrediction with = predict_decode(p, hp(), cache(), 639, probed);
    const double cache_bytes_s = plain.gpu_s - predict_decode(p, hp(), cache(), 0, h200_like()).gpu_s;
    EXPECT_NEAR(with.gpu_s, plain.gpu_s - cache_bytes_s + static_cast<double>(n_attn) * 10e-6 * scale,
                1e-12 + 1e-9 * with.gpu_s);
    EXPECT_EQ(with.probed_kernels, plain.probed_kernels + n_attn);
    // Below the first point: its time (6 us); beyond the last, the last segment's slope (6 us per 3072
    // keys): 7168 keys cost 6 us more than 4096.
    EXPECT_NEAR(predict_decode(p, hp(), cache(), 0, probed).gpu_s -
                    predict_decode(p, hp(), cache(), 0, h200_like()).gpu_s,
                static_cast<double>(n_attn) * 6e-6 * scale, 1e-12);
    const double far = predict_decode(p, hp(), cache(), 7167, probed).gpu_s -
                       predict_decode(p, hp(), cache(), 4095, probed).gpu_s;
    EXPECT_NEAR(far, static_cast<double>(n_attn) * 6e-6 * scale, 1e-12 + 1e-9 * far);
    // q8_0 caches: at 640 keys the probe's 10 us per layer, above the bytes of its cache rows, so the
    // same time as f16 (where a q8_0 row's bytes would cost more than the probe, those count).
    place::CacheOptions q8 = cache();
    q8.k_type = q8.v_type = quant::TypeId::q8_0;
    const DecodePrediction q8_with = predict_decode(p, hp(), q8, 639, probed);
    EXPECT_NEAR(q8_with.gpu_s, with.gpu_s, 1e-12 + 1e-9 * with.gpu_s);
    EXPECT_EQ(q8_with.probed_kernels, with.probed_kernels);
    EXPECT_LT(predict_decode(p, hp(), q8, 639, h200_like()).gpu_s, q8_with.gpu_s);
    // Far beyond the probe's reach in bytes (a huge context): the bytes term wins.
    probed.gpu->attention_decode_f16 = {{256, 1e-9}, {1024, 1e-9}};
    EXPECT_EQ(predict_decode(p, hp(), q8, 639, probed).gpu_s, predict_decode(p, hp(), q8, 639, h200_like()).gpu_s);
}

}  // namespace mox::plan

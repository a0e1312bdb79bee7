// mox_cuda_bench: timings of the CUDA kernels on model-sized problems, printed as [bench] lines
// (CUDA-event medians after warm-ups; bandwidth against the device's peak from its memory clock and
// bus). Not a test: built next to mox_cuda_tests, never run by ctest; each case is a GoogleTest case
// so one can be picked, e.g. `mox_cuda_bench --gtest_filter=CudaBench.Attention`. The kernels'
// correctness is mox_cuda_tests' job. Weight bytes are zeros where the speed does not depend on them.
#include "cuda_test_util.h"
#include "delta_net_layer.h"

#include "core/tuning.h"
#include "ops/cuda_attention.h"
#include "ops/cuda_delta_net.h"
#include "ops/cuda_device.h"
#include "ops/cuda_moe.h"
#include "ops/moe.h"
#include "quant/cuda_matmul.h"
#include "quant/cuda_matvec.h"
#include "quant/types.h"

#include <fmt/format.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>

namespace mox::cuda {

namespace {

using quant::TypeId;

double peak_gbs() {
    const auto devs = ops::cuda_devices();
    return devs.empty() ? 0.0 : devs[0].peak_bandwidth / 1e9;
}

// Median milliseconds of `reps` timed runs of fn after 3 warm-ups.
template <typename Fn>
float time_ms(int reps, Fn&& fn) {
    for (int i = 0; i < 3; ++i) fn(i);
    std::vector<float> ms;
    Event a, b;
    for (int i = 0; i < reps; ++i) {
        a.record();
        fn(i);
        b.record();
        b.synchronize();
        ms.push_back(Event::elapsed_ms(a, b));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

void report(const char* what, double bytes, float ms) {
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    const double peak = peak_gbs();
    std::printf("[bench] %-48s %8.1f MB  %8.3f ms  %7.1f GB/s  (%.0f%% of %.0f GB/s peak)\n", what,
                bytes / 1e6, ms, gbs, peak > 0 ? 100.0 * gbs / peak : 0.0, peak);
}

void bench_matvec(TypeId type, int64_t n_in, int64_t n_out, int n_cols, const char* what) {
    const size_t rb = quant::row_bytes(type, n_in);
    DeviceBuffer w(rb * static_cast<size_t>(n_out) + 16), x(static_cast<size_t>(n_in * n_cols) * 4),
        y(static_cast<size_t>(n_out * n_cols) * 4);
    w.zero();
    x.zero();
    const float ms = time_ms(
        20, [&](int) { matvec(type, w.data(), rb, n_in, n_out, x.as<float>(), n_cols, y.as<float>()); });
    report(what, static_cast<double>(rb) * static_cast<double>(n_out), ms);
}

int32_t* device_pos(DeviceBuffer& buf, int32_t pos) {
    buf.upload(&pos, sizeof pos);
    return buf.as<int32_t>();
}

// k distinct random experts per token, positive weights summing to 1.
ops::Routing random_routing(int64_t n_tokens, int64_t n_expert, int64_t k, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uw(0.1f, 1.0f);
    ops::Routing r;
    r.n_tokens = n_tokens;
    r.k = k;
    r.expert_counts.assign(static_cast<size_t>(n_expert), 0);
    std::vector<int32_t> all(static_cast<size_t>(n_expert));
    for (int64_t t = 0; t < n_tokens; ++t) {
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
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

void bench_matmul(TypeId type, int64_t n_in, int64_t n_out, int64_t n_tokens, bool precise = false) {
    const size_t rb = quant::row_bytes(type, n_in);
    DeviceBuffer w(rb * static_cast<size_t>(n_out) + 16), x(static_cast<size_t>(n_in * n_tokens) * 4),
        y(static_cast<size_t>(n_out * n_tokens) * 4),
        ws(std::max<size_t>(1, matmul_workspace_bytes(type, n_in, n_out, n_tokens)));
    w.zero();  // speed does not depend on the values
    x.zero();
    const float ms = time_ms(10, [&](int) {
        matmul(type, w.data(), rb, n_in, n_out, x.as<float>(), n_tokens, y.as<float>(), ws.data(), nullptr,
               precise);
    });
    const double flops = 2.0 * static_cast<double>(n_in) * static_cast<double>(n_out) * n_tokens;
    std::printf(
        "%s",
        fmt::format("[bench] matmul {:<6} {:>5} -> {:>5}, {:>4} tokens{}: {:8.3f} ms  {:7.1f} TFLOP/s\n",
                    quant::traits(type).name, n_in, n_out, n_tokens, precise ? " precise" : "", ms,
                    flops / (ms * 1e-3) / 1e12)
            .c_str());
}

}  // namespace

TEST(CudaBench, MatvecBandwidth) {
    MOX_REQUIRE_CUDA_DEVICE();
    // All 256 experts' gate projections of one Qwen3.5-MoE layer as one 131072 x 2048 Q4_K matrix.
    bench_matvec(TypeId::q4_k, 2048, 512 * 256, 1, "Q4_K 2048 -> 512x256 (expert stack), batch 1");
    bench_matvec(TypeId::q4_k, 2048, 512 * 256, 8, "Q4_K 2048 -> 512x256 (expert stack), batch 8");
    // The output layer: 248320 x 2048 Q6_K.
    bench_matvec(TypeId::q6_k, 2048, 248320, 1, "Q6_K 2048 -> 248320 (output layer), batch 1");
    bench_matvec(TypeId::q8_0, 2048, 248320, 1, "Q8_0 2048 -> 248320, batch 1");
    bench_matvec(TypeId::q5_k, 2048, 131072, 1, "Q5_K 2048 -> 131072, batch 1");
    bench_matvec(TypeId::iq4_xs, 2048, 131072, 1, "IQ4_XS 2048 -> 131072, batch 1");
    bench_matvec(TypeId::mxfp4, 2048, 131072, 1, "MXFP4 2048 -> 131072, batch 1");
    bench_matvec(TypeId::bf16, 2048, 32768, 1, "BF16 2048 -> 32768, batch 1");
    // The small per-layer projections of a decode step: latency-bound, so these show per-launch cost.
    bench_matvec(TypeId::q4_k, 2048, 8192, 1, "Q4_K 2048 -> 8192, batch 1");
    bench_matvec(TypeId::q4_k, 2048, 4096, 1, "Q4_K 2048 -> 4096, batch 1");
    bench_matvec(TypeId::q4_k, 4096, 2048, 1, "Q4_K 4096 -> 2048, batch 1");
    bench_matvec(TypeId::q8_0, 2048, 32, 1, "Q8_0 2048 -> 32, batch 1");
    bench_matvec(TypeId::f32, 2048, 257, 1, "F32 2048 -> 256+1 (router + shared gate), batch 1");
}

// The decode projections of the dense Qwen3.6-27B and of the 4096-wide attention of Mixtral and
// Phi-3.5-MoE: wide inputs, which every block of the matvec stages and quantizes in full.
TEST(CudaBench, MatvecWideInputs) {
    MOX_REQUIRE_CUDA_DEVICE();
    bench_matvec(TypeId::q4_k, 5120, 2 * 17408, 1, "Q4_K 5120 -> 2x17408 (27B FFN gate+up), batch 1");
    bench_matvec(TypeId::q4_k, 17408, 5120, 1, "Q4_K 17408 -> 5120 (27B FFN down), batch 1");
    bench_matvec(TypeId::q6_k, 17408, 5120, 1, "Q6_K 17408 -> 5120 (27B FFN down), batch 1");
    bench_matvec(TypeId::q4_k, 5120, 10240 + 6144, 1, "Q4_K 5120 -> 16384 (27B DeltaNet qkv+gate), batch 1");
    bench_matvec(TypeId::q4_k, 6144, 5120, 1, "Q4_K 6144 -> 5120 (27B DeltaNet out), batch 1");
    bench_matvec(TypeId::q4_k, 17408, 5120, 4, "Q4_K 17408 -> 5120 (27B FFN down), batch 4");
    bench_matvec(TypeId::q4_k, 4096, 4096, 1, "Q4_K 4096 -> 4096 (Mixtral/Phi attention q), batch 1");
    bench_matvec(TypeId::q8_0, 4096, 1024, 1, "Q8_0 4096 -> 1024 (Mixtral attention k), batch 1");
}

TEST(CudaBench, MoeDecodeBandwidth) {
    MOX_REQUIRE_CUDA_DEVICE();
    // One Qwen3.5-MoE layer at batch 1: 256 experts, top 8, n_embd 2048, n_ff 512, Q4_K gate/up and
    // Q6_K down. Each repetition routes different logits, so the 8 experts change (the whole stack is
    // 3x larger than L2; a fixed set of experts would be served from L2).
    const int64_t n_embd = 2048, n_ff = 512, n_expert = 256, k = 8;
    const size_t rb_gu = quant::row_bytes(TypeId::q4_k, n_embd), rb_d = quant::row_bytes(TypeId::q6_k, n_ff);
    DeviceBuffer g(rb_gu * n_ff * n_expert + 16), u(rb_gu * n_ff * n_expert + 16),
        d(rb_d * n_embd * n_expert + 16);
    g.zero();
    u.zero();
    d.zero();
    const ops::Weight gate{.data = g.as<uint8_t>(),
                           .type = TypeId::q4_k,
                           .n_in = n_embd,
                           .n_out = n_ff,
                           .n_expert = n_expert,
                           .row_bytes = rb_gu};
    ops::Weight up = gate;
    up.data = u.as<uint8_t>();
    const ops::Weight down{.data = d.as<uint8_t>(),
                           .type = TypeId::q6_k,
                           .n_in = n_ff,
                           .n_out = n_embd,
                           .n_expert = n_expert,
                           .row_bytes = rb_d};
    const int reps = 32;
    DeviceBuffer logits = test::to_device(test::randn(static_cast<size_t>(n_expert * (reps + 3)), 1, 3.0f));
    DeviceBuffer x = test::to_device(test::randn(static_cast<size_t>(n_embd), 2));
    DeviceBuffer ids(k * 4), w(k * 4), h(static_cast<size_t>(k * n_ff) * 4),
        out(static_cast<size_t>(n_embd) * 4);
    const double bytes = static_cast<double>(k) * (2.0 * rb_gu * n_ff + 1.0 * rb_d * n_embd);
    auto route = [&](int i) {
        route_softmax_topk(logits.as<float>() + i * n_expert, 1, n_expert, k, true, ids.as<int32_t>(),
                           w.as<float>());
    };
    auto gate_up = [&] { moe_gate_up(gate, up, ids.as<int32_t>(), k, x.as<float>(), h.as<float>()); };
    auto down_fn = [&] {
        moe_down(down, ids.as<int32_t>(), w.as<float>(), k, h.as<float>(), out.as<float>());
    };
    const float ms_route = time_ms(reps, route);
    // gate/up and down alone, each after routing (outside the timed range) to fresh experts.
    auto timed_after_route = [&](auto&& fn) {
        std::vector<float> ms;
        Event a, b;
        for (int i = 0; i < reps; ++i) {
            route(i);
            a.record();
            fn();
            b.record();
            b.synchronize();
            ms.push_back(Event::elapsed_ms(a, b));
        }
        std::sort(ms.begin(), ms.end());
        return ms[ms.size() / 2];
    };
    const float ms_gu = timed_after_route(gate_up);
    const float ms_down = timed_after_route(down_fn);
    const float ms_all = time_ms(reps, [&](int i) {
        route(i);
        gate_up();
        down_fn();
    });
    // 40 layers back to back (as in one decode step of the 40-layer model, without graphs): launch
    // latency overlaps with execution, so this is the per-layer cost the decode loop would see.
    const int layers = 40;
    const float ms_40 = time_ms(5, [&](int) {
        for (int l = 0; l < layers; ++l) {
            route(l % reps);
            gate_up();
            down_fn();
        }
    });
    // The same layer with the shared expert fused (Qwen3.6: Q4_K gate/up, Q6_K down, n_ff 512): router
    // rows of 257 logits (the shared gate logit last), one gate/up and one down launch.
    DeviceBuffer sg(rb_gu * n_ff + 16), su(rb_gu * n_ff + 16), sd(rb_d * n_embd + 16);
    sg.zero();
    su.zero();
    sd.zero();
    ops::Weight sh_gate = gate, sh_up = gate, sh_down = down;
    sh_gate.data = sg.as<uint8_t>();
    sh_gate.n_expert = 1;
    sh_up.data = su.as<uint8_t>();
    sh_up.n_expert = 1;
    sh_down.data = sd.as<uint8_t>();
    sh_down.n_expert = 1;
    const int64_t stride = n_expert + 1;
    DeviceBuffer logits_s = test::to_device(test::randn(static_cast<size_t>(stride * (reps + 3)), 3, 3.0f));
    DeviceBuffer h_s(static_cast<size_t>((k + 1) * n_ff) * 4);
    const double bytes_s = static_cast<double>(k + 1) * (2.0 * rb_gu * n_ff + 1.0 * rb_d * n_embd);
    auto fused_layer = [&](int i) {
        const float* l = logits_s.as<float>() + (i % (reps + 3)) * stride;
        const MoeDecodeShared sh{
            .gate = &sh_gate, .up = &sh_up, .down = &sh_down, .gate_logit = l + n_expert};
        route_softmax_topk(l, 1, n_expert, k, true, ids.as<int32_t>(), w.as<float>(), nullptr, stride);
        moe_gate_up(gate, up, ids.as<int32_t>(), k, x.as<float>(), h_s.as<float>(), nullptr, &sh);
        moe_down(down, ids.as<int32_t>(), w.as<float>(), k, h_s.as<float>(), out.as<float>(), nullptr, &sh);
    };
    // The router inside the gate/up launch: 2 launches per layer.
    auto fused_route_layer = [&](int i) {
        const float* l = logits_s.as<float>() + (i % (reps + 3)) * stride;
        const MoeDecodeShared sh{
            .gate = &sh_gate, .up = &sh_up, .down = &sh_down, .gate_logit = l + n_expert};
        moe_route_gate_up(l, true, ids.as<int32_t>(), w.as<float>(), gate, up, k, x.as<float>(),
                          h_s.as<float>(), nullptr, &sh);
        moe_down(down, ids.as<int32_t>(), w.as<float>(), k, h_s.as<float>(), out.as<float>(), nullptr, &sh);
    };
    const float ms_fused = time_ms(reps, fused_layer);
    const float ms_fused_40 = time_ms(5, [&](int) {
        for (int l = 0; l < layers; ++l) fused_layer(l);
    });
    const float ms_fr = time_ms(reps, fused_route_layer);
    const float ms_fr_40 = time_ms(5, [&](int) {
        for (int l = 0; l < layers; ++l) fused_route_layer(l);
    });
    std::printf("[bench] router softmax/top-8 of 256: %.4f ms\n", ms_route);
    report("MoE gate+up Q4_K, 8 experts (2 x 8 x 512 x 2048)", 2.0 * k * rb_gu * n_ff, ms_gu);
    report("MoE down Q6_K, 8 experts (8 x 2048 x 512)", 1.0 * k * rb_d * n_embd, ms_down);
    report("MoE layer k=8 (router + gate/up + down)", bytes, ms_all);
    report("MoE layer k=8, per layer of 40 back to back", bytes, ms_40 / layers);
    report("MoE layer k=8 + shared expert (3 launches)", bytes_s, ms_fused);
    report("MoE layer k=8 + shared, per layer of 40 back to back", bytes_s, ms_fused_40 / layers);
    report("MoE layer k=8 + shared, router fused (2 launches)", bytes_s, ms_fr);
    report("MoE layer k=8 + shared, router fused, per layer of 40", bytes_s, ms_fr_40 / layers);
}

// Batch-1 matvec 2048 -> 32768 per block type, on random bytes so the i-quants' grid lookups scatter
// as in real weights (all-zero bytes would hit one entry).
TEST(CudaBench, MatvecBlockTypes) {
    MOX_REQUIRE_CUDA_DEVICE();
    const int64_t n_in = 2048, n_out = 32768;
    for (TypeId type :
         {TypeId::q4_k, TypeId::q6_k, TypeId::q8_0, TypeId::q4_1, TypeId::q5_0, TypeId::q5_1, TypeId::iq2_xxs,
          TypeId::iq2_xs, TypeId::iq2_s, TypeId::iq3_xxs, TypeId::iq3_s, TypeId::iq1_s, TypeId::iq1_m}) {
        const size_t rb = quant::row_bytes(type, n_in), bytes = rb * static_cast<size_t>(n_out);
        std::mt19937 rng(5);
        std::vector<uint32_t> words((bytes + 3) / 4);
        for (auto& v : words) v = rng();
        std::vector<uint8_t> host(bytes + 16);
        std::memcpy(host.data(), words.data(), bytes);
        DeviceBuffer w = test::to_device(host);
        DeviceBuffer x = test::to_device(test::randn(static_cast<size_t>(n_in), 6));
        DeviceBuffer y(static_cast<size_t>(n_out) * sizeof(float));
        const auto run = [&] { matvec(type, w.data(), rb, n_in, n_out, x.as<float>(), 1, y.as<float>()); };
        for (int i = 0; i < 3; ++i) run();
        std::vector<float> ms;
        Event a, b;
        for (int i = 0; i < 20; ++i) {
            a.record();
            run();
            b.record();
            b.synchronize();
            ms.push_back(Event::elapsed_ms(a, b));
        }
        std::sort(ms.begin(), ms.end());
        const float med = ms[ms.size() / 2];
        std::printf("[bench] matvec %-8s 2048 -> 32768, batch 1: %7.1f MB %8.3f ms %7.1f GB/s\n",
                    std::string(quant::type_name(type)).c_str(), static_cast<double>(bytes) / 1e6, med,
                    static_cast<double>(bytes) / (med * 1e-3) / 1e9);
    }
}

// Each size twice: the default (cuBLAS from kCublasMinTokens tokens) and the tile kernels alone.
TEST(CudaBench, MatmulTflops) {
    MOX_REQUIRE_CUDA_DEVICE();
    for (const int64_t min_tokens : {kCublasMinTokens, int64_t{1} << 30}) {
        Tuning t = tuning();
        t.cublas_min_tokens = min_tokens;
        const ScopedTuning scoped(t);
        std::printf("[bench] cuBLAS from %lld tokens\n", static_cast<long long>(min_tokens));
        for (int64_t n_tokens : {128, 256, 512, 4096}) {
            bench_matmul(TypeId::q4_k, 2048, 8192, n_tokens);
            bench_matmul(TypeId::q8_0, 2048, 4096, n_tokens);
            bench_matmul(TypeId::q6_k, 4096, 2048, n_tokens);
            bench_matmul(TypeId::q4_k, 2048, 512, n_tokens);
            bench_matmul(TypeId::q5_k, 512, 2048, n_tokens);
            bench_matmul(TypeId::bf16, 2048, 8192, n_tokens);
        }
    }
    bench_matmul(TypeId::q4_k, 2048, 8192, 512, true);
    bench_matmul(TypeId::q4_k, 2048, 512, 512, true);
}

TEST(CudaBench, MoeBatchTflops) {
    MOX_REQUIRE_CUDA_DEVICE();
    // One Qwen3.5-MoE layer's routed experts: 256 experts, top 8, n_embd 2048, n_ff 512, Q4_K gate/up,
    // Q6_K down. Zero weights and activations (speed does not depend on them); random routing.
    const int64_t n_expert = 256, k = 8, n_embd = 2048, n_ff = 512;
    const auto stack = [&](TypeId type, int64_t n_in, int64_t n_out) {
        const size_t rb = quant::row_bytes(type, n_in);
        auto buf = std::make_unique<DeviceBuffer>(rb * static_cast<size_t>(n_out * n_expert) + 16);
        buf->zero();
        return std::pair{std::move(buf), ops::Weight{.data = nullptr,
                                                     .type = type,
                                                     .n_in = n_in,
                                                     .n_out = n_out,
                                                     .n_expert = n_expert,
                                                     .row_bytes = rb}};
    };
    auto [gbuf, gate] = stack(TypeId::q4_k, n_embd, n_ff);
    auto [ubuf, up] = stack(TypeId::q4_k, n_embd, n_ff);
    auto [dbuf, down] = stack(TypeId::q6_k, n_ff, n_embd);
    gate.data = static_cast<const uint8_t*>(gbuf->data());
    up.data = static_cast<const uint8_t*>(ubuf->data());
    down.data = static_cast<const uint8_t*>(dbuf->data());
    const std::pair<int64_t, bool> cases[] = {{512, false}, {4096, false}, {512, true}};  // tokens, precise
    for (const auto& [n_tokens, precise] : cases) {
        const ops::Routing r = random_routing(n_tokens, n_expert, k, 7);
        DeviceBuffer di = test::to_device(r.ids), dw = test::to_device(r.weights);
        DeviceBuffer x(static_cast<size_t>(n_tokens * n_embd) * 4),
            out(static_cast<size_t>(n_tokens * n_embd) * 4);
        x.zero();
        DeviceBuffer ws(moe_batch_workspace_bytes(gate, down, n_tokens, k));
        const auto once = [&] {
            moe_batch(gate, up, down, di.as<int32_t>(), dw.as<float>(), n_tokens, k, x.as<float>(),
                      out.as<float>(), ws.data(), nullptr, precise);
        };
        for (int i = 0; i < 3; ++i) once();
        std::vector<float> ms;
        Event a, b;
        for (int i = 0; i < 10; ++i) {
            a.record();
            once();
            b.record();
            b.synchronize();
            ms.push_back(Event::elapsed_ms(a, b));
        }
        std::sort(ms.begin(), ms.end());
        const double flops =
            2.0 * 3.0 * static_cast<double>(n_tokens * k) * static_cast<double>(n_embd * n_ff);
        std::printf("%s",
                    fmt::format("[bench] moe_batch Q4_K/Q6_K 256 experts top-8 2048x512, {:>4} tokens{}: "
                                "{:8.3f} ms  {:7.1f} TFLOP/s\n",
                                n_tokens, precise ? " precise" : "", ms[ms.size() / 2],
                                flops / (ms[ms.size() / 2] * 1e-3) / 1e12)
                        .c_str());
    }
}

// Decode over a 32768-key cache (f16 and q8_0) and a 2048-token causal prefill block, at the model's
// attention shape (16 heads, 2 KV heads, head dim 256).
TEST(CudaBench, Attention) {
    MOX_REQUIRE_CUDA_DEVICE();
    const auto devs = ops::cuda_devices();
    const double peak = devs.empty() ? 0.0 : devs[0].peak_bandwidth / 1e9;
    const int64_t H = 16, Hkv = 2, D = 256, row = Hkv * D, ctx = 32768;
    const ops::AttentionShape shape{H, Hkv, D, 1.0f / 16.0f};
    DeviceBuffer posd(4);
    for (TypeId t : {TypeId::f16, TypeId::q8_0}) {
        const size_t rb = quant::row_bytes(t, row);
        // Random bytes are fine for timing except the q8_0 scales (keep them finite): fill from a
        // real quantized row.
        std::vector<uint8_t> cache(rb * ctx);
        const std::vector<float> src = test::randn(static_cast<size_t>(row), 5);
        for (int64_t p = 0; p < ctx; ++p)
            quant::traits(t).quantize(src.data(), &cache[static_cast<size_t>(p) * rb], row);
        DeviceBuffer kd = test::to_device(cache), vd = test::to_device(cache);
        const std::vector<float> q = test::randn(static_cast<size_t>(H * D), 6);
        DeviceBuffer qd = test::to_device(q), od(q.size() * 4);
        const size_t ws_bytes = attention_workspace_bytes(shape, 1, ctx);
        DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
        const ops::KvView kv{kd.as<uint8_t>(), vd.as<uint8_t>(), t, t, row, rb, rb, ctx};
        const int32_t* pd = device_pos(posd, static_cast<int32_t>(ctx - 1));
        const float ms = time_ms(20, [&](int) {
            attention(kv, shape, qd.as<float>(), 1, pd, ctx, {}, od.as<float>(), ws.data(), ws.size());
        });
        const double bytes = 2.0 * static_cast<double>(rb) * ctx;
        const double gbs = bytes / (ms * 1e-3) / 1e9;
        fmt::print(
            "[bench] attention decode ctx {} {:<5} {:8.1f} MB  {:8.3f} ms  {:7.1f} GB/s  ({:.0f}% of {:.0f} "
            "GB/s peak)\n",
            ctx, quant::traits(t).name, bytes / 1e6, ms, gbs, peak > 0 ? 100 * gbs / peak : 0.0, peak);
    }
    {
        const int64_t n_q = 2048;
        const TypeId t = TypeId::f16;
        const size_t rb = quant::row_bytes(t, row);
        std::vector<uint8_t> cache(rb * n_q);
        const std::vector<float> src = test::randn(static_cast<size_t>(row * n_q), 9);
        for (int64_t p = 0; p < n_q; ++p)
            quant::traits(t).quantize(&src[static_cast<size_t>(p * row)], &cache[static_cast<size_t>(p) * rb],
                                      row);
        DeviceBuffer kd = test::to_device(cache), vd = test::to_device(cache);
        const std::vector<float> q = test::randn(static_cast<size_t>(n_q * H * D), 10);
        const std::vector<float> g = test::randn(static_cast<size_t>(n_q * H * 2 * D), 11);
        DeviceBuffer qd = test::to_device(q), gd = test::to_device(g), od(q.size() * 4);
        const size_t ws_bytes = attention_workspace_bytes(shape, n_q, n_q);
        DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
        const ops::KvView kv{kd.as<uint8_t>(), vd.as<uint8_t>(), t, t, row, rb, rb, n_q};
        const int32_t* pd = device_pos(posd, 0);
        const AttentionGate gate{gd.as<float>() + D, 2 * H * D, 2 * D};
        const float ms = time_ms(5, [&](int) {
            attention(kv, shape, qd.as<float>(), n_q, pd, n_q, gate, od.as<float>(), ws.data(), ws.size());
        });
        // QK and PV: 2 flops per multiply-add, D each, over the causal triangle of every head.
        const double flops = 4.0 * H * D * (static_cast<double>(n_q) * (n_q + 1) / 2);
        fmt::print("[bench] attention prefill {} tokens f16  {:8.3f} ms  {:7.2f} TFLOP/s\n", n_q, ms,
                   flops / (ms * 1e-3) / 1e12);
    }
}

// Gated DeltaNet at the real shape (tests/cuda/delta_net_layer.h): decode reads and writes the whole
// state of the layer (32 heads x 128 x 128 fp32 = 2 MiB) once per call; prefill blocks of 16..4096
// tokens, sequential against chunked.
TEST(CudaBench, DeltaNet) {
    MOX_REQUIRE_CUDA_DEVICE();
    test::DeltaNetLayer L(test::kDeltaNetReal, 31);
    test::GpuDeltaNetLayer G(L);
    const int64_t max_n = 4096, inner = test::kDeltaNetReal.hv * test::kDeltaNetReal.dv;
    const test::DeltaNetInputs in = test::make_inputs(L, max_n, 32);
    DeviceBuffer x = test::to_device(in.x), b = test::to_device(in.b), alpha = test::to_device(in.alpha),
                 z = test::to_device(in.z);
    DeviceBuffer conv_out(static_cast<size_t>(max_n * G.C) * 4), out(static_cast<size_t>(max_n * inner) * 4);
    auto time_us = [&](int reps, auto&& fn) {
        for (int i = 0; i < 3; ++i) fn();
        std::vector<float> ms;
        Event e0, e1;
        for (int i = 0; i < reps; ++i) {
            e0.record();
            fn();
            e1.record();
            e1.synchronize();
            ms.push_back(Event::elapsed_ms(e0, e1));
        }
        std::sort(ms.begin(), ms.end());
        return 1e3 * ms[ms.size() / 2];
    };
    auto conv = [&](int64_t n) {
        conv_silu(G.conv_state.as<float>(), G.conv_w.as<float>(), x.as<float>(), G.C, n, G.C, 4,
                  conv_out.as<float>());
    };
    DeviceBuffer work(delta_net_workspace_bytes(G.shape(), max_n));
    auto dnet = [&](int64_t n, DeltaNetMethod m = DeltaNetMethod::automatic) {
        delta_net(G.S.as<float>(), conv_out.as<float>(), b.as<float>(), alpha.as<float>(), z.as<float>(),
                  G.weights(), G.shape(), n, out.as<float>(), work.data(), work.size(), nullptr, m);
    };
    conv(max_n);  // the delta rule reads real conv outputs
    const double state_bytes = 2.0 * static_cast<double>(L.S.size()) * 4;
    const double us_dec = time_us(50, [&] { dnet(1); });
    std::printf("[bench] delta_net decode (Hv 32, 128x128): %7.2f us  (state r+w %.1f MB: %.0f GB/s)\n",
                us_dec, state_bytes / 1e6, state_bytes / (us_dec * 1e-6) / 1e9);
    const double us_conv = time_us(50, [&] { conv(1); });
    std::printf("[bench] conv_silu decode (8192 channels):  %7.2f us\n", us_conv);
    const double us_both = time_us(50, [&] {
        conv(1);
        dnet(1);
    });
    std::printf("[bench] conv_silu + delta_net decode:      %7.2f us\n", us_both);
    for (int64_t n : {16, 64, 512, 2048, 4096}) {
        const double us_c = time_us(5, [&] { conv(n); });
        const double us_s = time_us(5, [&] { dnet(n, DeltaNetMethod::sequential); });
        const double us_k = time_us(5, [&] { dnet(n, DeltaNetMethod::chunked); });
        std::printf(
            "[bench] prefill %4lld tokens: conv_silu %8.1f us, delta_net sequential %8.1f us (%.2f "
            "us/token), "
            "chunked %8.1f us (%.3f us/token)\n",
            static_cast<long long>(n), us_c, us_s, us_s / static_cast<double>(n), us_k,
            us_k / static_cast<double>(n));
    }
}

}  // namespace mox::cuda

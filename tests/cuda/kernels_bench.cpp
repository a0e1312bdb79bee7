// Timings that print (no timed asserts): achieved bandwidth of the matvec and MoE kernels on
// model-sized problems, from CUDA events, against the device's peak from its memory clock and bus.
// Weight bytes are zeros: the kernels' speed does not depend on the values.
#include "cuda_test_util.h"

#include "ops/cuda_device.h"
#include "ops/cuda_moe.h"
#include "quant/cuda_matvec.h"
#include "quant/types.h"

#include <algorithm>
#include <cstdio>

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

}  // namespace mox::cuda

// mox_cuda_bench: the MoE decode step at four models' expert shapes, the narrow kernels (tuned at
// Qwen3.6's 2048 -> 512) and the wide ones (Mixtral, Phi-3.5-MoE) side by side (ops/cuda_moe.h,
// MoeDecodePath). Each line: microseconds per call and GB/s of the expert weight bytes one call
// reads (the selected experts' gate, up and down rows, plus the shared expert's), for gate/up
// alone (with the router where the model fuses it), down alone and the whole layer as the GPU
// forward runs it at batch 1 (router + gate/up + down). Calls run back to back over enough copies of
// the layer's weights that each call's experts have left L2 (50 MB on the H200) before they come
// round again, as in a decode step, whose other layers evict them. Weight bytes are zeros: the speed
// of these types does not depend on them.
#include "cuda_test_util.h"

#include "ops/cuda_device.h"
#include "ops/cuda_moe.h"
#include "quant/types.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

namespace mox::cuda {

namespace {

using quant::TypeId;

struct MoeShape {
    const char* name;
    int64_t n_embd, n_ff, n_expert, k;
    TypeId gate_up, down;
    int64_t n_ff_shared;  // 0: no shared expert
    bool sparsemixer;     // Phi-3.5-MoE's router: a launch of its own, then gate/up and down
};

// One layer's expert stacks (and shared expert) on the device.
struct Layer {
    DeviceBuffer g, u, d, sg, su, sd;
    ops::Weight gate, up, down, sh_gate, sh_up, sh_down;
};

ops::Weight stack_view(DeviceBuffer& buf, TypeId type, int64_t n_in, int64_t n_out, int64_t n_expert) {
    const size_t rb = quant::row_bytes(type, n_in);
    buf = DeviceBuffer(rb * static_cast<size_t>(n_out * n_expert) + 16);
    buf.zero();
    return ops::Weight{.data = buf.as<uint8_t>(),
                       .type = type,
                       .n_in = n_in,
                       .n_out = n_out,
                       .n_expert = n_expert,
                       .row_bytes = rb};
}

std::unique_ptr<Layer> make_layer(const MoeShape& s) {
    auto l = std::make_unique<Layer>();
    l->gate = stack_view(l->g, s.gate_up, s.n_embd, s.n_ff, s.n_expert);
    l->up = stack_view(l->u, s.gate_up, s.n_embd, s.n_ff, s.n_expert);
    l->down = stack_view(l->d, s.down, s.n_ff, s.n_embd, s.n_expert);
    if (s.n_ff_shared > 0) {
        l->sh_gate = stack_view(l->sg, s.gate_up, s.n_embd, s.n_ff_shared, 1);
        l->sh_up = stack_view(l->su, s.gate_up, s.n_embd, s.n_ff_shared, 1);
        l->sh_down = stack_view(l->sd, s.down, s.n_ff_shared, s.n_embd, 1);
    }
    return l;
}

const char* path_label(MoeDecodePath p) {
    return p == MoeDecodePath::narrow ? "narrow" : p == MoeDecodePath::wide ? "wide" : "by-shape";
}

double peak_gbs() {
    const auto devs = ops::cuda_devices();
    return devs.empty() ? 0.0 : devs[0].peak_bandwidth / 1e9;
}

// Mean milliseconds per call of fn(layer) over `rounds` rounds of all layers, after one round.
template <class Fn>
double ms_per_call(int n_layers, int rounds, Fn&& fn) {
    for (int l = 0; l < n_layers; ++l) fn(l);
    Event a, b;
    a.record();
    for (int r = 0; r < rounds; ++r)
        for (int l = 0; l < n_layers; ++l) fn(l);
    b.record();
    b.synchronize();
    return Event::elapsed_ms(a, b) / (rounds * n_layers);
}

void bench_shape(const MoeShape& s) {
    const bool shared = s.n_ff_shared > 0;
    const size_t rb_gu = quant::row_bytes(s.gate_up, s.n_embd), rb_d = quant::row_bytes(s.down, s.n_ff);
    const double gu_bytes = static_cast<double>(s.k) * 2.0 * static_cast<double>(s.n_ff * rb_gu) +
                            (shared ? 2.0 * static_cast<double>(s.n_ff_shared * rb_gu) : 0.0);
    const double down_bytes =
        static_cast<double>(s.k) * static_cast<double>(s.n_embd * rb_d) +
        (shared ? static_cast<double>(s.n_embd * quant::row_bytes(s.down, s.n_ff_shared)) : 0.0);
    // Enough layers that 200 MB (4x L2) pass between two calls on the same one.
    const int n_layers = static_cast<int>(std::clamp(200e6 / (gu_bytes + down_bytes), 2.0, 16.0) + 0.999);
    const int rounds = std::max(3, 64 / n_layers);
    std::vector<std::unique_ptr<Layer>> layers;
    for (int l = 0; l < n_layers; ++l) layers.push_back(make_layer(s));

    // Router rows of n_expert logits (+ the shared gate logit), one per layer: each layer its own experts.
    const int64_t stride = s.n_expert + (shared ? 1 : 0);
    DeviceBuffer logits = test::to_device(test::randn(static_cast<size_t>(stride * n_layers), 7, 3.0f));
    DeviceBuffer x = test::to_device(test::randn(static_cast<size_t>(s.n_embd), 8));
    DeviceBuffer ids(static_cast<size_t>(s.k * n_layers) * 4), w(static_cast<size_t>(s.k * n_layers) * 4);
    DeviceBuffer h(static_cast<size_t>(s.k * s.n_ff + s.n_ff_shared) * 4),
        out(static_cast<size_t>(s.n_embd) * 4);
    h.zero();
    const auto lg = [&](int l) { return logits.as<float>() + l * stride; };
    const auto li = [&](int l) { return ids.as<int32_t>() + l * s.k; };
    const auto lw = [&](int l) { return w.as<float>() + l * s.k; };
    const auto route = [&](int l) {
        if (s.sparsemixer)
            route_sparsemixer(lg(l), 1, s.n_expert, 0.01f, li(l), lw(l), nullptr, stride);
        else
            route_softmax_topk(lg(l), 1, s.n_expert, s.k, true, li(l), lw(l), nullptr, stride);
    };
    for (int l = 0; l < n_layers; ++l) route(l);

    for (const MoeDecodePath path : {MoeDecodePath::narrow, MoeDecodePath::wide, MoeDecodePath::by_shape}) {
        const auto sh = [&](int l) {
            const Layer& L = *layers[static_cast<size_t>(l)];
            return MoeDecodeShared{
                .gate = &L.sh_gate, .up = &L.sh_up, .down = &L.sh_down, .gate_logit = lg(l) + s.n_expert};
        };
        // gate/up as the model launches it: the router fused (softmax top-k), else after its own launch.
        const auto gate_up = [&](int l) {
            const Layer& L = *layers[static_cast<size_t>(l)];
            const MoeDecodeShared shd = sh(l);
            const MoeDecodeShared* shp = shared ? &shd : nullptr;
            if (s.sparsemixer)
                moe_gate_up(L.gate, L.up, li(l), s.k, x.as<float>(), h.as<float>(), nullptr, shp, path);
            else
                moe_route_gate_up(lg(l), true, li(l), lw(l), L.gate, L.up, s.k, x.as<float>(), h.as<float>(),
                                  nullptr, shp, path);
        };
        const auto down = [&](int l) {
            const Layer& L = *layers[static_cast<size_t>(l)];
            const MoeDecodeShared shd = sh(l);
            moe_down(L.down, li(l), lw(l), s.k, h.as<float>(), out.as<float>(), nullptr,
                     shared ? &shd : nullptr, path);
        };
        const auto layer = [&](int l) {
            if (s.sparsemixer) route(l);
            gate_up(l);
            down(l);
        };
        try {
            const double ms_gu = ms_per_call(n_layers, rounds, gate_up);
            const double ms_d = ms_per_call(n_layers, rounds, down);
            const double ms_l = ms_per_call(n_layers, rounds, layer);
            const auto gbs = [](double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; };
            const double peak = peak_gbs();
            std::printf(
                "[bench] moe decode %-40s %-8s gate/up %7.1f us %6.0f GB/s | down %7.1f us %6.0f GB/s | "
                "layer %7.1f us %6.0f GB/s (%.0f%% of %.0f)\n",
                s.name, path_label(path), ms_gu * 1e3, gbs(gu_bytes, ms_gu), ms_d * 1e3,
                gbs(down_bytes, ms_d), ms_l * 1e3, gbs(gu_bytes + down_bytes, ms_l),
                peak > 0 ? 100.0 * gbs(gu_bytes + down_bytes, ms_l) / peak : 0.0, peak);
        } catch (const Error& e) {
            std::printf("[bench] moe decode %-40s %-8s not run: %s\n", s.name, path_label(path), e.what());
        }
    }
    std::printf(
        "[bench] moe decode %-40s   %.1f MB per layer call (gate/up %.1f, down %.1f), %d layer copies\n",
        s.name, (gu_bytes + down_bytes) / 1e6, gu_bytes / 1e6, down_bytes / 1e6, n_layers);
}

}  // namespace

// The four shapes of the decode comparison with llama.cpp (bench/results/2026-12-02-archs-vs-llama-h200):
// Q4_K_M's expert types (Q4_K gate/up; down Q4_K, or Q6_K in the layers llama.cpp gives more bits).
TEST(CudaBench, MoeDecodeShapes) {
    MOX_REQUIRE_CUDA_DEVICE();
    const MoeShape shapes[] = {
        {"Qwen3.6-35B-A3B 2048->512 256 top-8 + shared", 2048, 512, 256, 8, TypeId::q4_k, TypeId::q6_k, 512,
         false},
        {"Qwen3-30B-A3B 2048->768 128 top-8", 2048, 768, 128, 8, TypeId::q4_k, TypeId::q6_k, 0, false},
        {"Mixtral-8x7B 4096->14336 8 top-2, Q4_K down", 4096, 14336, 8, 2, TypeId::q4_k, TypeId::q4_k, 0,
         false},
        {"Mixtral-8x7B 4096->14336 8 top-2, Q6_K down", 4096, 14336, 8, 2, TypeId::q4_k, TypeId::q6_k, 0,
         false},
        {"Phi-3.5-MoE 4096->6400 16 top-2, Q4_K down", 4096, 6400, 16, 2, TypeId::q4_k, TypeId::q4_k, 0,
         true},
        {"Phi-3.5-MoE 4096->6400 16 top-2, Q6_K down", 4096, 6400, 16, 2, TypeId::q4_k, TypeId::q6_k, 0,
         true},
    };
    for (const MoeShape& s : shapes) bench_shape(s);
}

}  // namespace mox::cuda

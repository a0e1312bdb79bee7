// CUDA MoE decode kernels against references: the router against ops::route_softmax_topk; gate/up
// and down against the MoE math in double precision on dequantized weights, with the activations
// the kernels use (8-bit ones for the int8 types, kernel_activations.h). The down check quantizes
// the kernels' own h, so it does not inherit gate/up's rounding.
#include "cuda_test_util.h"
#include "expert_stack.h"
#include "kernel_activations.h"

#include "ops/cuda_moe.h"
#include "ops/moe.h"
#include "quant/types.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace mox::cuda {

namespace {

using quant::TypeId;

using test::HostStack;
using test::make_stack;

void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double rel) {
    ASSERT_EQ(got.size(), ref.size());
    double err2 = 0, ref2 = 0, ref_max = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        err2 += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
        ref2 += double(ref[i]) * ref[i];
        ref_max = std::max(ref_max, std::fabs(double(ref[i])));
    }
    EXPECT_LT(std::sqrt(err2 / ref2), rel);
    int bad = 0;
    for (size_t i = 0; i < ref.size(); ++i)
        if (!(std::fabs(double(got[i]) - ref[i]) <= 20 * rel * ref_max) && bad++ < 5)
            ADD_FAILURE() << "element " << i << ": got " << got[i] << ", reference " << ref[i];
}

// One slot of the reference: a routed expert or the shared one, with its output weight.
struct RefSlot {
    const ops::Weight* gate;
    const ops::Weight* up;
    const ops::Weight* down;
    int64_t expert;
    double weight;
};

double row_dot(const ops::Weight& w, int64_t expert, int64_t row, const double* x) {
    std::vector<float> v(static_cast<size_t>(w.n_in));
    const auto* bytes = static_cast<const uint8_t*>(w.data) + (expert * w.n_out + row) * w.row_bytes;
    quant::traits(w.type).dequantize(bytes, v.data(), w.n_in);
    double acc = 0;
    for (int64_t i = 0; i < w.n_in; ++i) acc += static_cast<double>(v[static_cast<size_t>(i)]) * x[i];
    return acc;
}

// Checks the kernels' h (slot s at h_got + s * n_ff of the routed stacks) and out against the
// reference of the slots.
void check_moe_reference(const std::vector<RefSlot>& slots, const std::vector<float>& x,
                         const std::vector<float>& h_got, const std::vector<float>& out_got) {
    std::vector<float> h_ref;
    std::vector<double> out_ref(out_got.size(), 0.0);
    size_t at = 0;
    for (const RefSlot& sl : slots) {
        const int64_t n_ff = sl.gate->n_out;
        const std::vector<double> xk = test::kernel_activations(sl.gate->type, x.data(), sl.gate->n_in);
        for (int64_t r = 0; r < n_ff; ++r) {
            const double g = row_dot(*sl.gate, sl.expert, r, xk.data());
            const double u = row_dot(*sl.up, sl.expert, r, xk.data());
            h_ref.push_back(static_cast<float>(g / (1.0 + std::exp(-g)) * u));
        }
        ASSERT_LE(at + static_cast<size_t>(n_ff), h_got.size());
        const std::vector<double> hk = test::kernel_activations(sl.down->type, h_got.data() + at, n_ff);
        for (size_t o = 0; o < out_ref.size(); ++o)
            out_ref[o] += sl.weight * row_dot(*sl.down, sl.expert, static_cast<int64_t>(o), hk.data());
        at += static_cast<size_t>(n_ff);
    }
    {
        SCOPED_TRACE("h (gate/up)");
        expect_close(std::vector<float>(h_got.begin(), h_got.begin() + static_cast<std::ptrdiff_t>(at)),
                     h_ref, 1e-4);
    }
    SCOPED_TRACE("out (down)");
    expect_close(out_got, std::vector<float>(out_ref.begin(), out_ref.end()), 1e-4);
}

// Routes `n_tokens` random logit rows on the GPU and the CPU.
void check_router(int64_t n_tokens, int64_t n_expert, int64_t k, bool renormalize, uint32_t seed) {
    SCOPED_TRACE(fmt::format("n_expert={} k={} renorm={}", n_expert, k, renormalize));
    const auto logits = test::randn(static_cast<size_t>(n_tokens * n_expert), seed, 2.0f);
    ops::Routing cpu;
    ops::route_softmax_topk(logits.data(), n_tokens, n_expert, k, renormalize, cpu);
    DeviceBuffer dl = test::to_device(logits);
    DeviceBuffer ids(static_cast<size_t>(n_tokens * k) * 4), weights(static_cast<size_t>(n_tokens * k) * 4);
    route_softmax_topk(dl.as<float>(), n_tokens, n_expert, k, renormalize, ids.as<int32_t>(),
                       weights.as<float>());
    const auto gi = test::to_host<int32_t>(ids, static_cast<size_t>(n_tokens * k));
    const auto gw = test::to_host<float>(weights, static_cast<size_t>(n_tokens * k));
    EXPECT_EQ(gi, cpu.ids);
    for (size_t i = 0; i < gw.size(); ++i)
        EXPECT_NEAR(gw[i], cpu.weights[i], 2e-6f * std::max(1.0f, cpu.weights[i]));
}

}  // namespace

TEST(CudaMoe, RouterMatchesCpu) {
    MOX_REQUIRE_CUDA_DEVICE();
    check_router(5, 256, 8, true, 1);  // Qwen3.5-MoE: 256 experts, top 8, renormalised
    check_router(3, 256, 8, false, 2);
    check_router(4, 60, 4, true, 3);     // fewer experts than threads
    check_router(2, 257, 8, true, 6);    // one past the 8-slot router: the 32-slot one
    check_router(2, 1000, 32, true, 4);  // most experts per thread, largest k
    check_router(1, 7, 7, true, 5);      // k = n_expert
}

TEST(CudaMoe, RouterTiesGoToLowerId) {
    MOX_REQUIRE_CUDA_DEVICE();
    const std::vector<float> logits(64, 0.5f);  // all equal
    DeviceBuffer dl = test::to_device(logits);
    DeviceBuffer ids(4 * 4), weights(4 * 4);
    route_softmax_topk(dl.as<float>(), 1, 64, 4, true, ids.as<int32_t>(), weights.as<float>());
    EXPECT_EQ(test::to_host<int32_t>(ids, 4), (std::vector<int32_t>{0, 1, 2, 3}));
    for (float w : test::to_host<float>(weights, 4)) EXPECT_NEAR(w, 0.25f, 1e-6f);
}

// The kernels each launch runs (ops/cuda_moe.h): by shape as in the model, or forced.
struct Paths {
    MoeDecodePath gate_up = MoeDecodePath::by_shape;
    MoeDecodePath down = MoeDecodePath::by_shape;
};
constexpr Paths kWide{MoeDecodePath::wide, MoeDecodePath::wide};
constexpr Paths kNarrow{MoeDecodePath::narrow, MoeDecodePath::narrow};

const char* path_name(MoeDecodePath p) {
    return p == MoeDecodePath::wide ? "wide" : p == MoeDecodePath::narrow ? "narrow" : "by shape";
}

// Router -> gate/up -> down on the device, no host round trip in between, against the reference,
// once per entry of `paths` on the same weights; returns each run's out.
std::vector<std::vector<float>> check_moe(TypeId gate_up_type, TypeId down_type, int64_t n_embd, int64_t n_ff,
                                          int64_t n_expert, int64_t k, uint32_t seed,
                                          const std::vector<Paths>& paths = {Paths{}}) {
    SCOPED_TRACE(fmt::format("gate/up {} down {} n_embd={} n_ff={} experts={} k={}",
                             quant::type_name(gate_up_type), quant::type_name(down_type), n_embd, n_ff,
                             n_expert, k));
    HostStack gate = make_stack(gate_up_type, n_embd, n_ff, n_expert, seed, 0.05f);
    HostStack up = make_stack(gate_up_type, n_embd, n_ff, n_expert, seed + 1, 0.05f);
    HostStack down = make_stack(down_type, n_ff, n_embd, n_expert, seed + 2, 0.05f);
    const auto x = test::randn(static_cast<size_t>(n_embd), seed + 3);
    const auto logits = test::randn(static_cast<size_t>(n_expert), seed + 4, 2.0f);

    ops::Routing routing;
    ops::route_softmax_topk(logits.data(), 1, n_expert, k, true, routing);
    std::vector<RefSlot> slots;
    for (int64_t i = 0; i < k; ++i)
        slots.push_back({&gate.w, &up.w, &down.w, routing.ids[static_cast<size_t>(i)],
                         routing.weights[static_cast<size_t>(i)]});

    Stream stream;
    const StreamHandle st = stream.handle();
    DeviceWeight dg = upload_weight(gate.w, st), du = upload_weight(up.w, st), dd = upload_weight(down.w, st);
    // Per-step buffers come from one arena, as in the decode loop.
    ScratchArena arena(1 << 20);
    auto* d_logits = arena.alloc<float>(static_cast<size_t>(n_expert));
    auto* d_x = arena.alloc<float>(static_cast<size_t>(n_embd));
    auto* d_ids = arena.alloc<int32_t>(static_cast<size_t>(k));
    auto* d_w = arena.alloc<float>(static_cast<size_t>(k));
    auto* d_h = arena.alloc<float>(static_cast<size_t>(k * n_ff));
    auto* d_out = arena.alloc<float>(static_cast<size_t>(n_embd));
    copy_to_device(d_logits, logits.data(), logits.size() * 4, st);
    copy_to_device(d_x, x.data(), x.size() * 4, st);
    std::vector<std::vector<float>> outs;
    for (const Paths& p : paths) {
        SCOPED_TRACE(fmt::format("paths {}/{}", path_name(p.gate_up), path_name(p.down)));
        // Poisoned h and out: an element the kernels leave unwritten shows as NaN.
        const std::vector<float> nan(static_cast<size_t>(k * n_ff + n_embd),
                                     std::numeric_limits<float>::quiet_NaN());
        copy_to_device(d_h, nan.data(), static_cast<size_t>(k * n_ff) * 4, st);
        copy_to_device(d_out, nan.data(), static_cast<size_t>(n_embd) * 4, st);
        route_softmax_topk(d_logits, 1, n_expert, k, true, d_ids, d_w, st);
        moe_gate_up(dg.view, du.view, d_ids, k, d_x, d_h, st, nullptr, p.gate_up);
        moe_down(dd.view, d_ids, d_w, k, d_h, d_out, st, nullptr, p.down);
        std::vector<float> got(static_cast<size_t>(n_embd)), got_h(static_cast<size_t>(k * n_ff));
        std::vector<int32_t> got_ids(static_cast<size_t>(k));
        copy_to_host(got.data(), d_out, got.size() * 4, st);
        copy_to_host(got_h.data(), d_h, got_h.size() * 4, st);
        copy_to_host(got_ids.data(), d_ids, got_ids.size() * 4, st);
        EXPECT_EQ(got_ids, routing.ids);
        check_moe_reference(slots, x, got_h, got);
        outs.push_back(std::move(got));
    }
    return outs;
}

TEST(CudaMoe, DecodeMatchesCpuMoeFfn) {
    MOX_REQUIRE_CUDA_DEVICE();
    check_moe(TypeId::q4_k, TypeId::q6_k, 512, 256, 32, 8, 10);  // a typical Q4_K_M mix
    check_moe(TypeId::q8_0, TypeId::q8_0, 256, 96, 16, 4, 20);
    check_moe(TypeId::mxfp4, TypeId::mxfp4, 256, 64, 8, 2, 30);
    check_moe(TypeId::iq4_xs, TypeId::q5_k, 256, 512, 12, 3, 40);
    check_moe(TypeId::q2_k, TypeId::q3_k, 256, 256, 10, 1, 50);
    check_moe(TypeId::f16, TypeId::bf16, 96, 40, 6, 6, 60);  // odd float sizes, k = n_expert
    // i-quant and legacy mixes as in Unsloth UD and older quants.
    check_moe(TypeId::iq2_xxs, TypeId::iq3_s, 256, 256, 8, 2, 70);
    check_moe(TypeId::iq1_m, TypeId::iq2_s, 512, 512, 12, 3, 80);
    check_moe(TypeId::q4_1, TypeId::q5_0, 256, 96, 6, 2, 90);
    check_moe(TypeId::q4_k, TypeId::q4_k, 2048, 512, 24, 8, 70);  // Qwen3.6-35B-A3B row sizes
    check_moe(TypeId::q4_k, TypeId::q6_k, 4096, 256, 20, 5, 80,
              {kNarrow});  // two passes of the gate/up lanes
}

TEST(CudaMoe, RouterLogitsStride) {
    MOX_REQUIRE_CUDA_DEVICE();
    // Rows of n_expert + 1 logits: the extra one (the shared expert's gate logit) is huge, so a
    // router that read it as an expert would pick id n_expert.
    const int64_t n_tokens = 3, n_expert = 256, k = 8, stride = n_expert + 1;
    auto logits = test::randn(static_cast<size_t>(n_tokens * stride), 90, 2.0f);
    std::vector<float> packed;
    for (int64_t t = 0; t < n_tokens; ++t) {
        logits[static_cast<size_t>(t * stride + n_expert)] = 1e4f;
        packed.insert(packed.end(), logits.begin() + t * stride, logits.begin() + t * stride + n_expert);
    }
    ops::Routing cpu;
    ops::route_softmax_topk(packed.data(), n_tokens, n_expert, k, true, cpu);
    DeviceBuffer dl = test::to_device(logits);
    DeviceBuffer ids(static_cast<size_t>(n_tokens * k) * 4), weights(static_cast<size_t>(n_tokens * k) * 4);
    route_softmax_topk(dl.as<float>(), n_tokens, n_expert, k, true, ids.as<int32_t>(), weights.as<float>(),
                       nullptr, stride);
    EXPECT_EQ(test::to_host<int32_t>(ids, static_cast<size_t>(n_tokens * k)), cpu.ids);
    const auto gw = test::to_host<float>(weights, static_cast<size_t>(n_tokens * k));
    for (size_t i = 0; i < gw.size(); ++i) EXPECT_NEAR(gw[i], cpu.weights[i], 2e-6f);
}

namespace {

struct SharedCase {
    TypeId gate_up, down;        // routed stacks
    TypeId sh_gate_up, sh_down;  // shared expert
    int64_t n_embd, n_ff, n_ff_s, n_expert, k;
};

// Router (logits row with the shared gate logit appended) -> gate/up -> down with the shared
// expert fused, all on the device; returns out [n_embd] and checks it against the CPU composition of
// Model::moe: routed experts + the shared expert weighted by sigmoid(g . x).
std::vector<float> run_moe_shared(const SharedCase& c, uint32_t seed, bool check, bool fused_route = false,
                                  Paths paths = {}) {
    SCOPED_TRACE(fmt::format(
        "routed {}/{} shared {}/{} n_embd={} n_ff={} n_ff_s={} experts={} k={} fused route={} paths {}/{}",
        quant::type_name(c.gate_up), quant::type_name(c.down), quant::type_name(c.sh_gate_up),
        quant::type_name(c.sh_down), c.n_embd, c.n_ff, c.n_ff_s, c.n_expert, c.k, fused_route,
        path_name(paths.gate_up), path_name(paths.down)));
    HostStack gate = make_stack(c.gate_up, c.n_embd, c.n_ff, c.n_expert, seed, 0.05f);
    HostStack up = make_stack(c.gate_up, c.n_embd, c.n_ff, c.n_expert, seed + 1, 0.05f);
    HostStack down = make_stack(c.down, c.n_ff, c.n_embd, c.n_expert, seed + 2, 0.05f);
    HostStack sg = make_stack(c.sh_gate_up, c.n_embd, c.n_ff_s, 1, seed + 3, 0.05f);
    HostStack su = make_stack(c.sh_gate_up, c.n_embd, c.n_ff_s, 1, seed + 4, 0.05f);
    HostStack sd = make_stack(c.sh_down, c.n_ff_s, c.n_embd, 1, seed + 5, 0.05f);
    const auto x = test::randn(static_cast<size_t>(c.n_embd), seed + 6);
    const auto g = test::randn(static_cast<size_t>(c.n_embd), seed + 7, 0.03f);
    auto logits = test::randn(static_cast<size_t>(c.n_expert + 1), seed + 8, 2.0f);
    float gate_logit = 0.0f;
    for (int64_t i = 0; i < c.n_embd; ++i)
        gate_logit += g[static_cast<size_t>(i)] * x[static_cast<size_t>(i)];
    logits[static_cast<size_t>(c.n_expert)] = gate_logit;

    Stream stream;
    const StreamHandle st = stream.handle();
    DeviceWeight dg = upload_weight(gate.w, st), du = upload_weight(up.w, st), dd = upload_weight(down.w, st);
    DeviceWeight dsg = upload_weight(sg.w, st), dsu = upload_weight(su.w, st), dsd = upload_weight(sd.w, st);
    ScratchArena arena(4 << 20);
    const int64_t h_len = c.k * c.n_ff + c.n_ff_s;
    auto* d_logits = arena.alloc<float>(static_cast<size_t>(c.n_expert + 1));
    auto* d_x = arena.alloc<float>(static_cast<size_t>(c.n_embd));
    auto* d_ids = arena.alloc<int32_t>(static_cast<size_t>(c.k));
    auto* d_w = arena.alloc<float>(static_cast<size_t>(c.k));
    auto* d_h = arena.alloc<float>(static_cast<size_t>(h_len));
    auto* d_out = arena.alloc<float>(static_cast<size_t>(c.n_embd));
    copy_to_device(d_logits, logits.data(), logits.size() * 4, st);
    copy_to_device(d_x, x.data(), x.size() * 4, st);
    // Poison h and out: an element the kernels leave unwritten shows as NaN.
    const std::vector<float> nan_h(static_cast<size_t>(h_len), std::numeric_limits<float>::quiet_NaN());
    const std::vector<float> nan_out(static_cast<size_t>(c.n_embd), std::numeric_limits<float>::quiet_NaN());
    copy_to_device(d_h, nan_h.data(), nan_h.size() * 4, st);
    copy_to_device(d_out, nan_out.data(), nan_out.size() * 4, st);

    const MoeDecodeShared shared{
        .gate = &dsg.view, .up = &dsu.view, .down = &dsd.view, .gate_logit = d_logits + c.n_expert};
    // Poison the routing too: ids of -1 trap in the kernels, NaN weights fail the comparison.
    const std::vector<int32_t> bad_ids(static_cast<size_t>(c.k), -1);
    copy_to_device(d_ids, bad_ids.data(), bad_ids.size() * 4, st);
    copy_to_device(d_w, nan_out.data(), static_cast<size_t>(c.k) * 4, st);
    if (fused_route) {
        moe_route_gate_up(d_logits, true, d_ids, d_w, dg.view, du.view, c.k, d_x, d_h, st, &shared,
                          paths.gate_up);
    } else {
        route_softmax_topk(d_logits, 1, c.n_expert, c.k, true, d_ids, d_w, st, c.n_expert + 1);
        moe_gate_up(dg.view, du.view, d_ids, c.k, d_x, d_h, st, &shared, paths.gate_up);
    }
    moe_down(dd.view, d_ids, d_w, c.k, d_h, d_out, st, &shared, paths.down);
    std::vector<float> got(static_cast<size_t>(c.n_embd));
    copy_to_host(got.data(), d_out, got.size() * 4, st);
    if (!check) return got;

    ops::Routing routing;
    ops::route_softmax_topk(logits.data(), 1, c.n_expert, c.k, true, routing);
    std::vector<int32_t> got_ids(static_cast<size_t>(c.k));
    std::vector<float> got_w(static_cast<size_t>(c.k));
    copy_to_host(got_ids.data(), d_ids, got_ids.size() * 4, st);
    copy_to_host(got_w.data(), d_w, got_w.size() * 4, st);
    EXPECT_EQ(got_ids, routing.ids);
    for (size_t i = 0; i < got_w.size(); ++i) EXPECT_NEAR(got_w[i], routing.weights[i], 2e-6f);
    std::vector<float> got_h(static_cast<size_t>(h_len));
    copy_to_host(got_h.data(), d_h, got_h.size() * 4, st);
    std::vector<RefSlot> slots;
    for (int64_t i = 0; i < c.k; ++i)
        slots.push_back({&gate.w, &up.w, &down.w, routing.ids[static_cast<size_t>(i)],
                         routing.weights[static_cast<size_t>(i)]});
    slots.push_back({&sg.w, &su.w, &sd.w, 0, 1.0 / (1.0 + std::exp(-static_cast<double>(gate_logit)))});
    check_moe_reference(slots, x, got_h, got);
    return got;
}

}  // namespace

TEST(CudaMoe, DecodeWithSharedExpertMatchesCpu) {
    MOX_REQUIRE_CUDA_DEVICE();
    // Qwen3.6-35B-A3B: shared expert of the routed types (one launch each for gate/up and down).
    run_moe_shared({TypeId::q4_k, TypeId::q6_k, TypeId::q4_k, TypeId::q6_k, 2048, 512, 512, 24, 8}, 100,
                   true);
    run_moe_shared({TypeId::q4_k, TypeId::q4_k, TypeId::q4_k, TypeId::q4_k, 2048, 512, 512, 24, 8}, 110,
                   true);
    // Shared expert of other types: second launches (gate/up and down both, then down only).
    run_moe_shared({TypeId::q4_k, TypeId::q6_k, TypeId::q8_0, TypeId::q8_0, 2048, 512, 512, 24, 8}, 120,
                   true);
    run_moe_shared({TypeId::q4_k, TypeId::q6_k, TypeId::q4_k, TypeId::q8_0, 512, 256, 256, 32, 8}, 130, true);
    run_moe_shared({TypeId::q5_k, TypeId::q6_k, TypeId::q6_k, TypeId::q6_k, 512, 256, 256, 32, 4}, 135, true);
    // Another shared n_ff (not fusable), odd float sizes, k = 1 and a large k.
    run_moe_shared({TypeId::q8_0, TypeId::q8_0, TypeId::q8_0, TypeId::q8_0, 256, 96, 160, 16, 4}, 140, true);
    run_moe_shared({TypeId::f16, TypeId::bf16, TypeId::f32, TypeId::f16, 96, 40, 24, 6, 1}, 150, true);
    run_moe_shared({TypeId::iq4_xs, TypeId::q5_k, TypeId::iq4_xs, TypeId::q5_k, 256, 512, 512, 40, 32}, 160,
                   true);
}

TEST(CudaMoe, FusedRoutingMatchesCpu) {
    MOX_REQUIRE_CUDA_DEVICE();
    // moe_route_gate_up: the router inside the gate/up launch, 256 experts as in the model.
    run_moe_shared({TypeId::q4_k, TypeId::q6_k, TypeId::q4_k, TypeId::q6_k, 256, 256, 256, 256, 8}, 300, true,
                   true);
    run_moe_shared({TypeId::q4_k, TypeId::q6_k, TypeId::q8_0, TypeId::q8_0, 512, 256, 256, 60, 8}, 310, true,
                   true);
    run_moe_shared({TypeId::f16, TypeId::bf16, TypeId::f32, TypeId::f16, 96, 40, 24, 7, 7}, 320, true, true);
    run_moe_shared({TypeId::q8_0, TypeId::q8_0, TypeId::q8_0, TypeId::q8_0, 256, 64, 64, 40, 32}, 330, true,
                   true);
}

TEST(CudaMoe, DecodeIsDeterministic) {
    MOX_REQUIRE_CUDA_DEVICE();
    const SharedCase c{TypeId::q4_k, TypeId::q6_k, TypeId::q4_k, TypeId::q6_k, 2048, 512, 512, 24, 8};
    for (bool fused_route : {false, true}) {
        const auto a = run_moe_shared(c, 200, false, fused_route);
        const auto b = run_moe_shared(c, 200, false, fused_route);
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
        for (float v : a) ASSERT_TRUE(std::isfinite(v));
    }
}

// ---- the wide kernels (Mixtral, Phi-3.5-MoE shapes), forced at small sizes. A piece is 32
// segments of a row (K-quants: 4 super-blocks, 1024 values; 32-value blocks: 32 of them), so these
// sizes give rows of several chunks with a shorter last one, rows that start at every alignment
// (blocks of 17, 18, 22, 34, 84, 110, 210 bytes) and warps with several tasks each.

TEST(CudaMoe, WideDecodeMatchesCpu) {
    MOX_REQUIRE_CUDA_DEVICE();
    // int8 activations: Q4_0, Q8_0, Q4_K, Q5_K, Q6_K.
    check_moe(TypeId::q4_k, TypeId::q6_k, 1280, 2816, 6, 2, 400, {kWide});  // last chunks 1 and 3 of 4 blocks
    check_moe(TypeId::q4_k, TypeId::q4_k, 2048, 1024, 8, 1, 410, {kWide});  // whole chunks, k = 1
    check_moe(TypeId::q8_0, TypeId::q8_0, 1056, 1088, 10, 8, 420,
              {kWide});                                                    // 1122- and 1156-byte rows, k = 8
    check_moe(TypeId::q4_0, TypeId::q5_k, 1024, 768, 5, 2, 430, {kWide});  // down: one short chunk
    check_moe(TypeId::q5_k, TypeId::q6_k, 768, 512, 4, 3, 440, {kWide});
    // fp32 activations.
    check_moe(TypeId::q2_k, TypeId::q3_k, 1280, 1280, 6, 2, 450, {kWide});
    check_moe(TypeId::iq4_xs, TypeId::q4_1, 1024, 1056, 5, 2, 460, {kWide});
    check_moe(TypeId::mxfp4, TypeId::iq4_nl, 1088, 1056, 4, 2, 470, {kWide});
    check_moe(TypeId::q5_0, TypeId::q5_1, 1024, 1120, 4, 4, 480, {kWide});
    // An odd n_ff (the last row pair is one row): wide gate/up, narrow F16 down (no wide kernel).
    check_moe(TypeId::q4_k, TypeId::f16, 512, 97, 4, 2, 490, {{MoeDecodePath::wide, MoeDecodePath::narrow}});
}

TEST(CudaMoe, WideDecodeWithSharedExpertMatchesCpu) {
    MOX_REQUIRE_CUDA_DEVICE();
    for (bool fused_route : {false, true}) {
        // Shared expert of the routed types: one more slot of each launch.
        run_moe_shared({TypeId::q4_k, TypeId::q6_k, TypeId::q4_k, TypeId::q6_k, 1024, 1280, 1280, 16, 8}, 500,
                       true, fused_route, kWide);
        run_moe_shared({TypeId::q4_k, TypeId::q4_k, TypeId::q4_k, TypeId::q4_k, 1280, 1024, 1024, 8, 2}, 510,
                       true, fused_route, kWide);
        // Another type, another n_ff: second wide launches for the shared expert.
        run_moe_shared({TypeId::q4_k, TypeId::q6_k, TypeId::q8_0, TypeId::q8_0, 1024, 1280, 1280, 16, 8}, 520,
                       true, fused_route, kWide);
        run_moe_shared({TypeId::q4_k, TypeId::q6_k, TypeId::q4_k, TypeId::q6_k, 1024, 1280, 768, 12, 1}, 530,
                       true, fused_route, kWide);
    }
}

TEST(CudaMoe, WideDecodeRefusesTypesWithoutIt) {
    MOX_REQUIRE_CUDA_DEVICE();
    HostStack gate = make_stack(TypeId::f16, 256, 64, 4, 600, 0.05f);
    Stream stream;
    DeviceWeight dg = upload_weight(gate.w, stream.handle());
    DeviceBuffer ids = test::to_device(std::vector<int32_t>{0, 1});
    DeviceBuffer x(256 * 4), h(2 * 64 * 4);
    EXPECT_THROW(moe_gate_up(dg.view, dg.view, ids.as<int32_t>(), 2, x.as<float>(), h.as<float>(),
                             stream.handle(), nullptr, MoeDecodePath::wide),
                 Error);
}

// By shape: the wide kernels from rows of 4096 values (Mixtral's and Phi-3.5-MoE's gate/up and
// down, here with fewer experts; n_ff 4352 and 6400 end in a short chunk), the narrow ones below
// (Qwen3.6's 2048 -> 512). Each is checked against the reference and equals the forced path's bits.
TEST(CudaMoe, DecodePathByShape) {
    MOX_REQUIRE_CUDA_DEVICE();
    const auto same = [](const std::vector<std::vector<float>>& outs) {
        ASSERT_EQ(outs.size(), 2u);
        ASSERT_EQ(outs[0].size(), outs[1].size());
        EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(float)), 0);
    };
    same(check_moe(TypeId::q4_k, TypeId::q6_k, 4096, 4352, 2, 2, 700, {Paths{}, kWide}));
    same(check_moe(TypeId::q4_k, TypeId::q4_k, 4096, 6400, 2, 2, 710, {Paths{}, kWide}));
    same(check_moe(TypeId::q4_k, TypeId::q6_k, 2048, 512, 24, 8, 720, {Paths{}, kNarrow}));
    // Wide gate/up (4096 inputs), narrow down (1024 inputs).
    same(check_moe(TypeId::q4_k, TypeId::q6_k, 4096, 1024, 4, 2, 730,
                   {Paths{}, {MoeDecodePath::wide, MoeDecodePath::narrow}}));
}

TEST(CudaMoe, WideDecodeIsDeterministic) {
    MOX_REQUIRE_CUDA_DEVICE();
    const SharedCase c{TypeId::q4_k, TypeId::q6_k, TypeId::q4_k, TypeId::q6_k, 1024, 2816, 2816, 16, 8};
    for (bool fused_route : {false, true}) {
        const auto a = run_moe_shared(c, 800, false, fused_route, kWide);
        const auto b = run_moe_shared(c, 800, false, fused_route, kWide);
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
        for (float v : a) ASSERT_TRUE(std::isfinite(v));
    }
}

}  // namespace mox::cuda

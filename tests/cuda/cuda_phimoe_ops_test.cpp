// The kernels Phi-3.5-MoE adds against the CPU reference ops: residual add + LayerNorm with a bias
// (ops/cuda_basic.h add_layer_norm vs ops::layer_norm), the bias add, q/k rotation with frequency
// factors and an attention factor (qk_norm_rope vs ops::rope_neox), and sparsemixer routing
// (cuda::route_sparsemixer vs ops::route_sparsemixer).
#include "cuda_test_util.h"

#include "ops/basic.h"
#include "ops/cuda_basic.h"
#include "ops/cuda_moe.h"
#include "ops/moe.h"

#include <cmath>

namespace mox::cuda {
namespace {

TEST(CudaPhimoeOps, AddLayerNormMatchesTheReference) {
    MOX_REQUIRE_CUDA_DEVICE();
    for (const int64_t d : {128, 4096, 6000}) {  // in registers up to 4096, the strided loop beyond
        const int64_t n = 5;
        auto x = test::randn(static_cast<size_t>(n * d), 1, 2.0f);
        for (float& v : x) v += 20.0f;  // a large mean: the centring must be exact enough
        const auto add = test::randn(x.size(), 2), add2 = test::randn(x.size(), 3);
        const auto w = test::randn(static_cast<size_t>(d), 4, 0.3f),
                   b = test::randn(static_cast<size_t>(d), 5, 0.1f);
        DeviceBuffer dx = test::to_device(x), da = test::to_device(add), da2 = test::to_device(add2);
        DeviceBuffer dw = test::to_device(w), db = test::to_device(b),
                     dout = test::to_device(std::vector<float>(x.size()));
        add_layer_norm(dx.as<float>(), da.as<float>(), dw.as<float>(), db.as<float>(), n, d, 1e-5f,
                       dout.as<float>(), nullptr, da2.as<float>());
        const auto got = test::to_host<float>(dout, x.size());
        const auto got_x = test::to_host<float>(dx, x.size());
        std::vector<float> sum(x.size()), ref(x.size());
        for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + add[i] + add2[i];
        for (int64_t t = 0; t < n; ++t)
            ops::layer_norm(&sum[t * d], w.data(), b.data(), d, 1e-5f, &ref[t * d]);
        double err = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            EXPECT_EQ(got_x[i], sum[i]) << "the residual stream, element " << i;
            err = std::max(err, std::abs(static_cast<double>(got[i]) - ref[i]));
        }
        EXPECT_LT(err, 1e-4) << "d " << d;  // fp32 block sums against the reference's double sums
    }
}

TEST(CudaPhimoeOps, AddBiasAddsOneRowToEveryRow) {
    MOX_REQUIRE_CUDA_DEVICE();
    const int64_t rows = 7, width = 1031;
    const auto y = test::randn(static_cast<size_t>(rows * width), 6),
               bias = test::randn(static_cast<size_t>(width), 7);
    DeviceBuffer dy = test::to_device(y), db = test::to_device(bias);
    add_bias(dy.as<float>(), db.as<float>(), rows, width);
    const auto got = test::to_host<float>(dy, y.size());
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < width; ++i) ASSERT_EQ(got[r * width + i], y[r * width + i] + bias[i]);
}

TEST(CudaPhimoeOps, RopeFactorsAndAttentionFactorMatchTheReference) {
    MOX_REQUIRE_CUDA_DEVICE();
    const int64_t H = 4, Hkv = 2, hd = 128, n = 3;
    std::vector<float> factors(hd / 2);
    for (int64_t i = 0; i < hd / 2; ++i) factors[i] = 1.0f + 0.17f * static_cast<float>(i);
    DeviceBuffer dfactors = test::to_device(factors);
    const auto q_in = test::randn(static_cast<size_t>(n * H * hd), 8),
               k_in = test::randn(static_cast<size_t>(n * Hkv * hd), 9);
    for (const int32_t pos0 : {0, 4000, 131000}) {
        QkPrepShape sh{H, Hkv, hd, hd, 1e-5f, 10000.0f, hd};
        sh.qk_norm = false;
        sh.rope_factors = dfactors.as<float>();
        sh.attn_factor = 1.243f;
        DeviceBuffer dq_in = test::to_device(q_in), dk = test::to_device(k_in),
                     dq = test::to_device(std::vector<float>(q_in.size()));
        DeviceBuffer dpos = test::to_device(std::vector<int32_t>{pos0});
        qk_norm_rope(dq_in.as<float>(), nullptr, dk.as<float>(), nullptr, dpos.as<int32_t>(), n, sh,
                     dq.as<float>());
        const auto q = test::to_host<float>(dq, q_in.size()), k = test::to_host<float>(dk, k_in.size());
        const ops::RopeScaling scaling{factors.data(), 1.243f};
        for (int64_t t = 0; t < n; ++t) {
            for (int64_t h = 0; h < H + Hkv; ++h) {
                const bool is_q = h < H;
                std::vector<float> ref(
                    is_q ? q_in.begin() + (t * H + h) * hd : k_in.begin() + (t * Hkv + h - H) * hd,
                    is_q ? q_in.begin() + (t * H + h + 1) * hd : k_in.begin() + (t * Hkv + h - H + 1) * hd);
                ops::rope_neox(ref.data(), hd, pos0 + t, 10000.0, scaling);
                const float* got = is_q ? &q[(t * H + h) * hd] : &k[(t * Hkv + h - H) * hd];
                for (int64_t i = 0; i < hd; ++i)
                    ASSERT_NEAR(got[i], ref[i], 2e-5) << pos0 << " " << t << " " << h << " " << i;
            }
        }
    }
}

TEST(CudaPhimoeOps, SparsemixerMatchesTheReference) {
    MOX_REQUIRE_CUDA_DEVICE();
    for (const int64_t E : {16, 64}) {
        const int64_t T = 300, stride = E + 1;  // a router matvec's extra row, as in decode
        auto logits = test::randn(static_cast<size_t>(T * stride), 10 + static_cast<uint32_t>(E), 0.3f);
        for (float& v : logits) v += 6.0f;  // several experts inside the 2% margin
        std::vector<float> packed(static_cast<size_t>(T * E));
        for (int64_t t = 0; t < T; ++t)
            for (int64_t e = 0; e < E; ++e) packed[t * E + e] = logits[t * stride + e];
        ops::Routing ref;
        ops::route_sparsemixer(packed.data(), T, E, 0.01f, ref);
        DeviceBuffer dl = test::to_device(logits);
        DeviceBuffer ids(static_cast<size_t>(T * 2) * sizeof(int32_t)),
            w(static_cast<size_t>(T * 2) * sizeof(float));
        route_sparsemixer(dl.as<float>(), T, E, 0.01f, ids.as<int32_t>(), w.as<float>(), nullptr, stride);
        const auto got_ids = test::to_host<int32_t>(ids, static_cast<size_t>(T * 2));
        const auto got_w = test::to_host<float>(w, static_cast<size_t>(T * 2));
        EXPECT_EQ(got_ids, ref.ids);
        for (size_t i = 0; i < got_w.size(); ++i) EXPECT_NEAR(got_w[i], ref.weights[i], 1e-6) << i;
    }
}

}  // namespace
}  // namespace mox::cuda

// The small forward-pass kernels (ops/cuda_basic.h) against the CPU reference ops (ops/basic.h):
// embedding rows bit-exact with the reference dequantizer, residual add + RMSNorm, q/k norm + partial
// NEOX RoPE at small and large positions, the shared expert's gate, SwiGLU.
#include "cuda_test_util.h"

#include "ops/basic.h"
#include "ops/cuda_attention.h"
#include "ops/cuda_basic.h"
#include "quant/cuda_matvec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace mox::cuda {

namespace {

using quant::TypeId;

double max_rel(const std::vector<float>& got, const std::vector<float>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
        num = std::max(num, std::abs(static_cast<double>(got[i]) - ref[i]));
        den = std::max(den, std::abs(static_cast<double>(ref[i])));
    }
    return num / den;
}

DeviceBuffer poisoned(size_t count) {
    std::vector<float> nan(count, std::numeric_limits<float>::quiet_NaN());
    return test::to_device(nan);
}

TEST(CudaBasic, EmbedRowsEqualTheReferenceDequantizer) {
    MOX_REQUIRE_CUDA_DEVICE();
    for (TypeId type : {TypeId::f32, TypeId::f16, TypeId::bf16, TypeId::q8_0, TypeId::q4_0, TypeId::q4_k, TypeId::q5_k,
                        TypeId::q6_k, TypeId::iq4_xs, TypeId::q2_k, TypeId::q3_k, TypeId::q4_1, TypeId::q5_0,
                        TypeId::q5_1}) {
        const auto& tr = quant::traits(type);
        SCOPED_TRACE(tr.name);
        const int64_t n_in = 512, n_rows = 37;
        const size_t rb = quant::row_bytes(type, n_in);
        const auto wf = test::randn(static_cast<size_t>(n_in * n_rows), 11);
        std::vector<uint8_t> wq(rb * n_rows);
        for (int64_t r = 0; r < n_rows; ++r) tr.quantize(wf.data() + r * n_in, wq.data() + r * rb, n_in);
        const ops::Weight host{.data = wq.data(), .type = type, .n_in = n_in, .n_out = n_rows, .n_expert = 1, .row_bytes = rb};
        DeviceWeight dw = upload_weight(host);
        const std::vector<int32_t> ids = {0, 36, 5, 5, 17};
        DeviceBuffer did = test::to_device(ids);
        DeviceBuffer out = poisoned(ids.size() * n_in);
        embed_rows(dw.view, did.as<int32_t>(), static_cast<int64_t>(ids.size()), out.as<float>());
        const auto got = test::to_host<float>(out, ids.size() * n_in);
        std::vector<float> ref(static_cast<size_t>(n_in));
        for (size_t t = 0; t < ids.size(); ++t) {
            tr.dequantize(wq.data() + ids[t] * rb, ref.data(), n_in);
            ASSERT_EQ(std::memcmp(got.data() + t * n_in, ref.data(), n_in * sizeof(float)), 0) << "row " << t;
        }
    }
}

TEST(CudaBasic, AddRmsNormMatchesReference) {
    MOX_REQUIRE_CUDA_DEVICE();
    // 5000: wider than the register-resident path (kNormThreads * kNormPer = 4096), the loop path.
    for (int64_t d : {128, 2048, 1000, 4096, 5000}) {
        const int64_t n = 9;
        auto x = test::randn(static_cast<size_t>(n * d), 3, 4.0f);
        const auto add = test::randn(x.size(), 4);
        const auto w = test::randn(static_cast<size_t>(d), 5);
        DeviceBuffer dx = test::to_device(x), da = test::to_device(add), dw = test::to_device(w);
        DeviceBuffer out = poisoned(x.size());
        add_rms_norm(dx.as<float>(), da.as<float>(), dw.as<float>(), n, d, 1e-6f, out.as<float>());
        const auto got_x = test::to_host<float>(dx, x.size());
        const auto got = test::to_host<float>(out, x.size());
        std::vector<float> ref(x.size());
        for (size_t i = 0; i < x.size(); ++i) x[i] += add[i];
        for (int64_t t = 0; t < n; ++t) ops::rms_norm(&x[t * d], w.data(), d, 1e-6f, &ref[t * d]);
        EXPECT_EQ(got_x, x) << "the residual add is one fp32 addition per element";
        EXPECT_LT(max_rel(got, ref), 2e-6) << "d=" << d;
        // Without the add: x untouched.
        DeviceBuffer out2 = poisoned(x.size());
        add_rms_norm(dx.as<float>(), nullptr, dw.as<float>(), n, d, 1e-6f, out2.as<float>());
        EXPECT_LT(max_rel(test::to_host<float>(out2, x.size()), ref), 2e-6);
        EXPECT_EQ(test::to_host<float>(dx, x.size()), x);
    }
}

// add2: x = (x + add) + add2 in one launch, bit for bit two launches adding one each (the second
// one's norm is the one that counts), for both the register path and the loop path.
TEST(CudaBasic, AddRmsNormSecondAddendEqualsTwoAdds) {
    MOX_REQUIRE_CUDA_DEVICE();
    for (int64_t d : {2048, 5000}) {
        SCOPED_TRACE(d);
        const int64_t n = 3;
        const auto x = test::randn(static_cast<size_t>(n * d), 6, 4.0f);
        const auto a = test::randn(x.size(), 7), b = test::randn(x.size(), 8);
        const auto w = test::randn(static_cast<size_t>(d), 9);
        DeviceBuffer da = test::to_device(a), db = test::to_device(b), dw = test::to_device(w);
        DeviceBuffer x1 = test::to_device(x), x2 = test::to_device(x);
        DeviceBuffer out1 = poisoned(x.size()), out2 = poisoned(x.size());
        add_rms_norm(x1.as<float>(), da.as<float>(), dw.as<float>(), n, d, 1e-6f, out1.as<float>());
        add_rms_norm(x1.as<float>(), db.as<float>(), dw.as<float>(), n, d, 1e-6f, out1.as<float>());
        add_rms_norm(x2.as<float>(), da.as<float>(), dw.as<float>(), n, d, 1e-6f, out2.as<float>(), nullptr,
                     db.as<float>());
        EXPECT_EQ(test::to_host<float>(x1, x.size()), test::to_host<float>(x2, x.size()));
        EXPECT_EQ(test::to_host<float>(out1, x.size()), test::to_host<float>(out2, x.size()));
    }
    const float second = 0.0f;  // an add2 without an add
    EXPECT_THROW(add_rms_norm(nullptr, nullptr, nullptr, 1, 8, 1e-6f, nullptr, nullptr, &second), Error);
}

// add_rms_norm_matvec: one launch, bit for bit add_rms_norm's out and matvec's y (the router of a
// decode step: 2048 -> 257 F32), x left as it was; every float weight type, widths from one segment to
// the register path's 4096, row counts that end inside a block's row pair.
TEST(CudaBasic, AddRmsNormMatvecEqualsNormThenMatvec) {
    MOX_REQUIRE_CUDA_DEVICE();
    struct Case {
        TypeId type;
        int64_t d, n_out;
    };
    for (const Case c :
         {Case{TypeId::f32, 2048, 257}, Case{TypeId::f16, 2048, 129}, Case{TypeId::bf16, 1024, 64},
          Case{TypeId::f32, 4096, 513}, Case{TypeId::f32, 32, 1}, Case{TypeId::f16, 96, 3}}) {
        const auto& tr = quant::traits(c.type);
        SCOPED_TRACE(fmt::format("{} d={} rows={}", tr.name, c.d, c.n_out));
        const auto x = test::randn(static_cast<size_t>(c.d), 21, 3.0f);
        const auto add = test::randn(x.size(), 22), nw = test::randn(x.size(), 23);
        const size_t rb = quant::row_bytes(c.type, c.d);
        const auto wf = test::randn(static_cast<size_t>(c.d * c.n_out), 24, 0.05f);
        std::vector<uint8_t> wq(rb * static_cast<size_t>(c.n_out));
        for (int64_t r = 0; r < c.n_out; ++r) tr.quantize(wf.data() + r * c.d, wq.data() + r * rb, c.d);
        const ops::Weight host{
            .data = wq.data(), .type = c.type, .n_in = c.d, .n_out = c.n_out, .n_expert = 1, .row_bytes = rb};
        const DeviceWeight w = upload_weight(host);
        ASSERT_TRUE(add_rms_norm_matvec_supported(w.view));
        DeviceBuffer dadd = test::to_device(add), dnw = test::to_device(nw);
        // Reference: the two launches a decode step ran before (x updated by the first).
        DeviceBuffer x_ref = test::to_device(x), u_ref = poisoned(x.size()), y_ref = poisoned(c.n_out);
        add_rms_norm(x_ref.as<float>(), dadd.as<float>(), dnw.as<float>(), 1, c.d, 1e-6f, u_ref.as<float>());
        matvec(c.type, w.view.data, rb, c.d, c.n_out, u_ref.as<float>(), 1, y_ref.as<float>());
        DeviceBuffer x_fused = test::to_device(x), u_fused = poisoned(x.size()), y_fused = poisoned(c.n_out);
        add_rms_norm_matvec(x_fused.as<float>(), dadd.as<float>(), dnw.as<float>(), 1e-6f,
                            u_fused.as<float>(), w.view, y_fused.as<float>());
        EXPECT_EQ(test::to_host<float>(u_fused, x.size()), test::to_host<float>(u_ref, x.size()));
        EXPECT_EQ(test::to_host<float>(y_fused, static_cast<size_t>(c.n_out)),
                  test::to_host<float>(y_ref, static_cast<size_t>(c.n_out)));
        EXPECT_EQ(test::to_host<float>(x_fused, x.size()), x) << "x is the caller's to update";
    }
    // Quantized weights, widths past 4096 or not a multiple of 32: not this kernel's.
    const ops::Weight q4{.data = nullptr,
                         .type = TypeId::q4_k,
                         .n_in = 2048,
                         .n_out = 257,
                         .n_expert = 1,
                         .row_bytes = quant::row_bytes(TypeId::q4_k, 2048)};
    EXPECT_FALSE(add_rms_norm_matvec_supported(q4));
    EXPECT_THROW(add_rms_norm_matvec(nullptr, nullptr, nullptr, 1e-6f, nullptr, q4, nullptr), Error);
    ops::Weight wide{
        .data = nullptr, .type = TypeId::f32, .n_in = 4128, .n_out = 4, .n_expert = 1, .row_bytes = 4128 * 4};
    EXPECT_FALSE(add_rms_norm_matvec_supported(wide));
    wide.n_in = 1000;
    wide.row_bytes = 4000;
    EXPECT_FALSE(add_rms_norm_matvec_supported(wide));
}

TEST(CudaBasic, QkNormRopeMatchesReference) {
    MOX_REQUIRE_CUDA_DEVICE();
    struct Case {
        int64_t H, Hkv, hd, n_rot;
        float theta;
        int32_t pos0;
        int64_t n;
        bool gated = true;  // q rows [query | gate] per head (Qwen3.5), else the query alone (Qwen3)
        bool norm = true;   // q/k RMSNorm (Qwen), none (Mixtral)
        bool adjacent = false;  // NORM rotary (Mixtral) instead of NEOX
    };
    for (const Case c : {Case{16, 2, 256, 64, 1e7f, 0, 5}, Case{16, 2, 256, 64, 1e7f, 262100, 3},
                         Case{4, 2, 64, 16, 1e4f, 77, 12}, Case{2, 2, 32, 32, 1e4f, 3, 2},
                         Case{32, 4, 128, 128, 1e6f, 40000, 9, false},
                         Case{32, 8, 128, 128, 1e6f, 30000, 7, false, false, true}}) {
        SCOPED_TRACE(fmt::format("H={} hd={} n_rot={} pos0={} gated={} norm={} adjacent={}", c.H, c.hd, c.n_rot, c.pos0,
                                 c.gated, c.norm, c.adjacent));
        const int64_t stride = c.gated ? 2 * c.hd : c.hd;
        const auto qg = test::randn(static_cast<size_t>(c.n * c.H * stride), 7, 3.0f);
        auto k = test::randn(static_cast<size_t>(c.n * c.Hkv * c.hd), 8, 2.0f);
        const auto qn = test::randn(static_cast<size_t>(c.hd), 9), kn = test::randn(static_cast<size_t>(c.hd), 10);
        DeviceBuffer dqg = test::to_device(qg), dk = test::to_device(k), dqn = test::to_device(qn), dkn = test::to_device(kn);
        DeviceBuffer dpos = test::to_device(std::vector<int32_t>{c.pos0});
        DeviceBuffer dq = poisoned(static_cast<size_t>(c.n * c.H * c.hd));
        const QkPrepShape sh{c.H, c.Hkv, c.hd, c.n_rot, 1e-6f, c.theta, stride, c.norm, c.adjacent};
        qk_norm_rope(dqg.as<float>(), dqn.as<float>(), dk.as<float>(), dkn.as<float>(), dpos.as<int32_t>(), c.n, sh,
                     dq.as<float>());
        const auto q = test::to_host<float>(dq, static_cast<size_t>(c.n * c.H * c.hd));
        const auto kg = test::to_host<float>(dk, k.size());
        std::vector<float> qref(q.size());
        for (int64_t t = 0; t < c.n; ++t) {
            for (int64_t h = 0; h < c.H; ++h) {
                float* qh = &qref[(t * c.H + h) * c.hd];
                std::memcpy(qh, &qg[(t * c.H + h) * stride], c.hd * sizeof(float));
                if (c.norm) ops::rms_norm(qh, qn.data(), c.hd, 1e-6f, qh);
                if (c.adjacent) ops::rope_norm(qh, c.n_rot, c.pos0 + t, c.theta);
                else ops::rope_neox(qh, c.n_rot, c.pos0 + t, c.theta);
            }
            for (int64_t h = 0; h < c.Hkv; ++h) {
                float* kh = &k[(t * c.Hkv + h) * c.hd];
                if (c.norm) ops::rms_norm(kh, kn.data(), c.hd, 1e-6f, kh);
                if (c.adjacent) ops::rope_norm(kh, c.n_rot, c.pos0 + t, c.theta);
                else ops::rope_neox(kh, c.n_rot, c.pos0 + t, c.theta);
            }
        }
        EXPECT_LT(max_rel(q, qref), 1e-5);
        EXPECT_LT(max_rel(kg, k), 1e-5);
    }
}

// qk_norm_rope writing k and v straight into an f32/f16/bf16 cache (QkCacheStore) leaves exactly the
// bytes that qk_norm_rope + kv_store leave, the same q, and no row at or past the capacity.
TEST(CudaBasic, QkNormRopeStoresIntoTheCache) {
    MOX_REQUIRE_CUDA_DEVICE();
    const int64_t H = 16, Hkv = 2, hd = 256, n = 5, row = Hkv * hd, capacity = 40;
    const QkPrepShape sh{H, Hkv, hd, 64, 1e-6f, 1e7f, 2 * hd};
    for (const quant::TypeId kt : {quant::TypeId::f16, quant::TypeId::bf16, quant::TypeId::f32})
        for (const int32_t pos0 : {0, 17, 37}) {  // 37: the last two rows fall past the capacity
            const quant::TypeId vt = kt == quant::TypeId::f32 ? quant::TypeId::f16 : kt;
            SCOPED_TRACE(fmt::format("K {} V {} pos0 {}", quant::type_name(kt), quant::type_name(vt), pos0));
            const auto qg = test::randn(static_cast<size_t>(n * H * 2 * hd), 11, 3.0f);
            const auto k = test::randn(static_cast<size_t>(n * row), 12, 2.0f), v = test::randn(k.size(), 13);
            const auto qn = test::randn(static_cast<size_t>(hd), 14), kn = test::randn(static_cast<size_t>(hd), 15);
            DeviceBuffer dqg = test::to_device(qg), dqn = test::to_device(qn), dkn = test::to_device(kn),
                         dv = test::to_device(v), dpos = test::to_device(std::vector<int32_t>{pos0});
            const size_t krb = quant::row_bytes(kt, row), vrb = quant::row_bytes(vt, row);
            std::vector<uint8_t> fill(std::max(krb, vrb) * capacity, 0xA5);
            auto cache = [&](size_t rb) {
                DeviceBuffer b(rb * capacity);
                b.upload(fill.data(), rb * capacity);
                return b;
            };
            DeviceBuffer k1 = test::to_device(k), k2 = test::to_device(k);
            DeviceBuffer kc1 = cache(krb), vc1 = cache(vrb), kc2 = cache(krb), vc2 = cache(vrb);
            DeviceBuffer q1 = poisoned(static_cast<size_t>(n * H * hd)), q2 = poisoned(static_cast<size_t>(n * H * hd));
            const ops::KvView kv1{kc1.as<uint8_t>(), vc1.as<uint8_t>(), kt, vt, row, krb, vrb, capacity};
            const ops::KvView kv2{kc2.as<uint8_t>(), vc2.as<uint8_t>(), kt, vt, row, krb, vrb, capacity};
            ASSERT_TRUE(qk_cache_store_supported(kv1));
            qk_norm_rope(dqg.as<float>(), dqn.as<float>(), k1.as<float>(), dkn.as<float>(), dpos.as<int32_t>(), n, sh,
                         q1.as<float>());
            kv_store(kv1, dpos.as<int32_t>(), n, k1.as<float>(), row, dv.as<float>(), row);
            const QkCacheStore store{kv2, dv.as<float>(), row};
            qk_norm_rope(dqg.as<float>(), dqn.as<float>(), k2.as<float>(), dkn.as<float>(), dpos.as<int32_t>(), n, sh,
                         q2.as<float>(), nullptr, &store);
            EXPECT_EQ(test::to_host<uint8_t>(kc2, krb * capacity), test::to_host<uint8_t>(kc1, krb * capacity)) << "K";
            EXPECT_EQ(test::to_host<uint8_t>(vc2, vrb * capacity), test::to_host<uint8_t>(vc1, vrb * capacity)) << "V";
            EXPECT_EQ(test::to_host<float>(q2, static_cast<size_t>(n * H * hd)),
                      test::to_host<float>(q1, static_cast<size_t>(n * H * hd)));
        }
    EXPECT_FALSE(qk_cache_store_supported({nullptr, nullptr, quant::TypeId::q8_0, quant::TypeId::f16, 512, 0, 0, 1}));
}

TEST(CudaBasic, SharedExpertAddAndSwiglu) {
    MOX_REQUIRE_CUDA_DEVICE();
    const int64_t n = 6, d = 2048;
    auto out = test::randn(static_cast<size_t>(n * d), 1);
    const auto shared = test::randn(out.size(), 2), u = test::randn(out.size(), 3);
    const auto gi = test::randn(static_cast<size_t>(d), 4, 0.05f);
    DeviceBuffer dout = test::to_device(out), ds = test::to_device(shared), du = test::to_device(u), dg = test::to_device(gi);
    shared_expert_add(dout.as<float>(), ds.as<float>(), du.as<float>(), dg.as<float>(), n, d);
    const auto got = test::to_host<float>(dout, out.size());
    for (int64_t t = 0; t < n; ++t) {
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += static_cast<double>(gi[i]) * u[t * d + i];
        const double g = 1.0 / (1.0 + std::exp(-dot));
        for (int64_t i = 0; i < d; ++i)
            ASSERT_NEAR(got[t * d + i], out[t * d + i] + g * shared[t * d + i], 1e-5) << t << "," << i;
    }
    const int64_t count = 100003;
    const auto g = test::randn(count, 5, 3.0f), v = test::randn(count, 6);
    DeviceBuffer dgg = test::to_device(g), dv = test::to_device(v), dy = poisoned(count);
    swiglu(dgg.as<float>(), dv.as<float>(), 1, count, count, dy.as<float>());
    const auto y = test::to_host<float>(dy, count);
    for (int64_t i = 0; i < count; ++i) ASSERT_NEAR(y[i], ops::silu(g[i]) * v[i], 1e-5 * (1 + std::abs(y[i]))) << i;
    // Gate and up side by side in one row of 2 * width (the fused shared-expert projection).
    const int64_t rows = 37, width = 512;
    const auto gu = test::randn(static_cast<size_t>(rows * 2 * width), 7, 2.0f);
    DeviceBuffer dgu = test::to_device(gu), dy2 = poisoned(static_cast<size_t>(rows * width));
    swiglu(dgu.as<float>(), dgu.as<float>() + width, rows, width, 2 * width, dy2.as<float>());
    const auto y2 = test::to_host<float>(dy2, static_cast<size_t>(rows * width));
    for (int64_t t = 0; t < rows; ++t)
        for (int64_t j = 0; j < width; ++j) {
            const float want = ops::silu(gu[t * 2 * width + j]) * gu[t * 2 * width + width + j];
            ASSERT_NEAR(y2[t * width + j], want, 1e-5 * (1 + std::abs(want))) << t << "," << j;
        }
}

TEST(CudaBasic, ArgmaxIsTheFirstLargestValue) {
    MOX_REQUIRE_CUDA_DEVICE();
    DeviceBuffer slot(sizeof(uint64_t));
    auto device_argmax = [&](const std::vector<float>& x) {
        DeviceBuffer dx = test::to_device(x);
        argmax(dx.as<float>(), static_cast<int64_t>(x.size()), slot.as<uint64_t>());
        return argmax_index(test::to_host<uint64_t>(slot, 1)[0]);
    };
    auto host_argmax = [](const std::vector<float>& x) {
        return static_cast<int64_t>(std::max_element(x.begin(), x.end()) - x.begin());
    };
    // A vocabulary's worth of logits, and sizes around the block and thread counts.
    for (int64_t n : {1, 31, 257, 4099, 248320}) {
        auto x = test::randn(static_cast<size_t>(n), 40 + static_cast<uint32_t>(n), 4.0f);
        EXPECT_EQ(device_argmax(x), host_argmax(x)) << n;
        // Ties go to the lowest index, as std::max_element's do; so do -0 against +0.
        if (n >= 4099) {
            const float top = *std::max_element(x.begin(), x.end()) + 1.0f;
            x[3000] = top, x[17] = top, x[n - 1] = top;
            EXPECT_EQ(device_argmax(x), 17) << n;
        }
    }
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(device_argmax({-0.0f, 0.0f, -1.0f}), 0);
    EXPECT_EQ(device_argmax({-inf, -inf, -5.0f, -inf}), 2);
    EXPECT_EQ(device_argmax({nan, -3.0f, nan, -2.0f}), 3);  // NaN is never the pick
    EXPECT_EQ(device_argmax({-inf, inf, 1e30f}), 1);
    EXPECT_EQ(device_argmax({nan, nan}), -1);  // nothing to pick
    // Captured in a graph (the decode step): the memset restarts the search at every replay.
    const int64_t n = 1000;
    DeviceBuffer dx(n * sizeof(float));
    Stream stream;
    Graph::begin_capture(stream.handle());
    argmax(dx.as<float>(), n, slot.as<uint64_t>(), stream.handle());
    Graph g = Graph::end_capture(stream.handle());
    for (uint32_t seed : {5u, 6u, 7u}) {
        const auto x = test::randn(n, seed);
        dx.upload(x.data(), n * sizeof(float), 0, stream.handle());
        g.launch(stream.handle());
        stream.synchronize();
        EXPECT_EQ(argmax_index(test::to_host<uint64_t>(slot, 1)[0]), host_argmax(x)) << seed;
    }
}

TEST(CudaGraph, ReplaysCapturedLaunchesWithNewDeviceInputs) {
    MOX_REQUIRE_CUDA_DEVICE();
    // A captured add_rms_norm reads x from device memory on every replay: changing the input
    // between replays changes the output (the decode step relies on this for token and position).
    const int64_t d = 256;
    const auto w = test::randn(d, 1);
    DeviceBuffer dw = test::to_device(w), dx(d * sizeof(float)), out(d * sizeof(float));
    Stream stream;
    Graph::begin_capture(stream.handle());
    add_rms_norm(dx.as<float>(), nullptr, dw.as<float>(), 1, d, 1e-6f, out.as<float>(), stream.handle());
    Graph g = Graph::end_capture(stream.handle());
    for (uint32_t seed : {2u, 3u}) {
        const auto x = test::randn(d, seed);
        dx.upload(x.data(), d * sizeof(float), 0, stream.handle());
        g.launch(stream.handle());
        stream.synchronize();
        std::vector<float> ref(d);
        ops::rms_norm(x.data(), w.data(), d, 1e-6f, ref.data());
        EXPECT_LT(max_rel(test::to_host<float>(out, d), ref), 2e-6) << seed;
    }
}

}  // namespace

}  // namespace mox::cuda

// cuda::conv_projection (a DeltaNet input projection at decode with the causal conv in its store)
// against the two launches it replaces, matvec + conv_silu, which the matvec and DeltaNet tests
// check against the CPU reference: every output row, the conv output and the conv state must be
// bit for bit the same, over several tokens in a row (the state carries over).
#include "cuda_test_util.h"

#include "ops/cuda_delta_net.h"
#include "quant/cuda_matvec.h"
#include "quant/types.h"

#include <cstring>
#include <limits>

namespace mox::cuda {

namespace {

using quant::TypeId;

struct Case {
    TypeId type;
    int64_t n_in, channels, extra_rows, kernel;
};

std::vector<uint8_t> quantized_rows(TypeId type, int64_t n_in, int64_t n_out, uint32_t seed) {
    const auto& tr = quant::traits(type);
    const size_t rb = quant::row_bytes(type, n_in);
    const std::vector<float> wf = test::randn(static_cast<size_t>(n_in * n_out), seed, 0.3f);
    std::vector<uint8_t> wq(rb * static_cast<size_t>(n_out));
    for (int64_t r = 0; r < n_out; ++r) tr.quantize(wf.data() + r * n_in, wq.data() + r * rb, n_in);
    return wq;
}

void check_case(const Case& c) {
    SCOPED_TRACE(fmt::format("{} n_in={} channels={} extra={} kernel={}", quant::type_name(c.type), c.n_in,
                             c.channels, c.extra_rows, c.kernel));
    ASSERT_TRUE(conv_projection_supported(c.type));
    const int64_t n_out = c.channels + c.extra_rows;
    const size_t rb = quant::row_bytes(c.type, c.n_in);
    // 16 bytes of slack after the last row, as cuda::upload_weight leaves (quant/cuda_matvec.h).
    std::vector<uint8_t> wq = quantized_rows(c.type, c.n_in, n_out, 11);
    wq.resize(wq.size() + 16, 0);
    const DeviceBuffer w = test::to_device(wq);
    const DeviceBuffer taps =
        test::to_device(test::randn(static_cast<size_t>(c.channels * c.kernel), 12, 0.5f));
    const std::vector<float> state0 = test::randn(static_cast<size_t>((c.kernel - 1) * c.channels), 13);
    const size_t state_floats = std::max<size_t>(state0.size(), 1);
    DeviceBuffer state_ref(state_floats * 4), state_fused(state_floats * 4);
    if (!state0.empty()) {
        state_ref.upload(state0.data(), state0.size() * 4);
        state_fused.upload(state0.data(), state0.size() * 4);
    }
    DeviceBuffer y_ref(static_cast<size_t>(n_out) * 4), y_fused(static_cast<size_t>(n_out) * 4);
    DeviceBuffer conv_ref(static_cast<size_t>(c.channels) * 4),
        conv_fused(static_cast<size_t>(c.channels) * 4);
    for (int step = 0; step < 3; ++step) {
        SCOPED_TRACE(fmt::format("token {}", step));
        const DeviceBuffer x = test::to_device(test::randn(static_cast<size_t>(c.n_in), 20 + step));
        matvec(c.type, w.data(), rb, c.n_in, n_out, x.as<float>(), 1, y_ref.as<float>());
        conv_silu(state_ref.as<float>(), taps.as<float>(), y_ref.as<float>(), c.channels, 1, c.channels,
                  c.kernel, conv_ref.as<float>());
        // NaN: a row it should write and leaves out shows up.
        const std::vector<float> nan_y(static_cast<size_t>(n_out), std::numeric_limits<float>::quiet_NaN());
        y_fused.upload(nan_y.data(), nan_y.size() * 4);
        conv_fused.upload(nan_y.data(), static_cast<size_t>(c.channels) * 4);
        conv_projection(c.type, w.data(), rb, c.n_in, n_out, x.as<float>(), y_fused.as<float>(),
                        state_fused.as<float>(), taps.as<float>(), c.kernel, c.channels,
                        conv_fused.as<float>());
        const auto yr = test::to_host<float>(y_ref, static_cast<size_t>(n_out));
        const auto yf = test::to_host<float>(y_fused, static_cast<size_t>(n_out));
        for (int64_t r = c.channels; r < n_out; ++r) ASSERT_EQ(yr[r], yf[r]) << "row " << r;
        const auto cr = test::to_host<float>(conv_ref, static_cast<size_t>(c.channels));
        const auto cf = test::to_host<float>(conv_fused, static_cast<size_t>(c.channels));
        for (int64_t ch = 0; ch < c.channels; ++ch) ASSERT_EQ(cr[ch], cf[ch]) << "conv channel " << ch;
        const auto sr = test::to_host<float>(state_ref, state0.size());
        const auto sf = test::to_host<float>(state_fused, state0.size());
        ASSERT_EQ(0, std::memcmp(sr.data(), sf.data(), sr.size() * 4)) << "conv state";
    }
}

}  // namespace

TEST(CudaConvProjection, MatchesMatvecThenConv) {
    MOX_REQUIRE_CUDA_DEVICE();
    // Qwen3.6's DeltaNet: 2048 -> 8192 conv channels + 4096 (z) + 2 x 32 (b, alpha) rows, kernel 4;
    // odd channel counts and rows that end inside a warp's row pair; kernels 1..4 (1: no state).
    const Case cases[] = {
        {TypeId::q4_k, 2048, 8192, 4096 + 64, 4},
        {TypeId::q6_k, 2048, 8192, 0, 4},
        {TypeId::q5_k, 512, 333, 37, 4},
        {TypeId::q8_0, 96, 301, 2, 3},
        {TypeId::q4_0, 64, 17, 1, 2},
        {TypeId::q4_k, 256, 5, 0, 1},
    };
    for (const Case& c : cases) check_case(c);
}

TEST(CudaConvProjection, RejectsWhatItCannotDo) {
    MOX_REQUIRE_CUDA_DEVICE();
    // Types without 8-bit activations keep matvec + conv_silu.
    EXPECT_FALSE(conv_projection_supported(TypeId::f32));
    EXPECT_FALSE(conv_projection_supported(TypeId::iq2_xxs));
    const size_t rb = quant::row_bytes(TypeId::f32, 64);
    EXPECT_THROW(
        conv_projection(TypeId::f32, nullptr, rb, 64, 8, nullptr, nullptr, nullptr, nullptr, 4, 8, nullptr),
        Error);
    const size_t rbk = quant::row_bytes(TypeId::q4_k, 256);
    // More conv channels than rows; a kernel past conv_silu's limit.
    EXPECT_THROW(conv_projection(TypeId::q4_k, nullptr, rbk, 256, 8, nullptr, nullptr, nullptr, nullptr, 4, 9,
                                 nullptr),
                 Error);
    EXPECT_THROW(conv_projection(TypeId::q4_k, nullptr, rbk, 256, 8, nullptr, nullptr, nullptr, nullptr, 9, 8,
                                 nullptr),
                 Error);
}

}  // namespace mox::cuda

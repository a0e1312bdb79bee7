// The calibration probes (ops/cuda_probe.h) on the real device: each returns a finite, positive
// number, refuses what it cannot measure, and reports the state sizes it models. Nothing here is
// asserted about a time or a rate beyond that: on a shared GPU another process can slow any
// measurement by any factor, so comparisons between probes or against limits would flake. The
// values are printed for the record (mox calibrate is where they are used and judged).
#include "cuda_test_util.h"

#include "core/error.h"
#include "ops/cuda_device.h"
#include "ops/cuda_probe.h"
#include "quant/types.h"

#include <cmath>
#include <cstdio>

namespace mox::cuda {
namespace {

using quant::TypeId;

bool finite_positive(double v) {
    return std::isfinite(v) && v > 0;
}

TEST(CudaProbe, MemoryUse) {
    MOX_REQUIRE_CUDA_DEVICE();
    const DeviceMemoryUse m = probe_memory_use();
    std::printf("[probe] %s: %.1f MiB of %.1f GiB in use (all processes)\n", m.name.c_str(),
                m.used_bytes / 1048576.0, m.total_bytes / 1073741824.0);
    EXPECT_FALSE(m.name.empty());
    EXPECT_GT(m.total_bytes, uint64_t{1} << 30);
    EXPECT_GT(m.used_bytes, 0u);  // a context always costs something
    EXPECT_LT(m.used_bytes, m.total_bytes);
    // An allocation of ours shows up in the next reading (other processes may change it too, so only
    // a lower bound of half of it is asserted).
    const uint64_t before = m.used_bytes;
    DeviceBuffer b(size_t{256} << 20);
    b.zero();
    device_synchronize();
    EXPECT_GE(probe_memory_use().used_bytes, before + (uint64_t{128} << 20));
}

TEST(CudaProbe, HostToDeviceCopies) {
    MOX_REQUIRE_CUDA_DEVICE();
    const double pinned = probe_h2d_gbps(true, size_t{64} << 20, 3);
    const double pageable = probe_h2d_gbps(false, size_t{64} << 20, 3);
    std::printf("[probe] host->device: pinned %.1f GB/s, pageable %.1f GB/s\n", pinned, pageable);
    EXPECT_TRUE(finite_positive(pinned));
    EXPECT_TRUE(finite_positive(pageable));
}

TEST(CudaProbe, LaunchGapAndHostRoundTrip) {
    MOX_REQUIRE_CUDA_DEVICE();
    const double gap = probe_launch_gap_s(400, 5);
    const double rt = probe_host_roundtrip_s(20, 5);
    std::printf("[probe] graph launch gap %.2f us per kernel, host round trip %.2f us\n", gap * 1e6,
                rt * 1e6);
    EXPECT_TRUE(finite_positive(gap));
    EXPECT_TRUE(finite_positive(rt));
    const double handoff = probe_handoff_roundtrip_s(20, 5);
    std::printf("[probe] decode hand-off %.2f us\n", handoff * 1e6);
    EXPECT_TRUE(finite_positive(handoff));
}

TEST(CudaProbe, MatvecAndMatmulRates) {
    MOX_REQUIRE_CUDA_DEVICE();
    const auto devs = ops::cuda_devices();
    ASSERT_FALSE(devs.empty());
    const double peak_gbps = devs[0].peak_bandwidth / 1e9;
    for (const TypeId t : {TypeId::q4_k, TypeId::q8_0, TypeId::iq2_xxs, TypeId::mxfp4}) {
        const double gbps = probe_matvec_gbps(t, size_t{128} << 20, 5);
        const double tflops = probe_matmul_tflops(t, 512, 3);
        std::printf("[probe] %-8s matvec %.1f GB/s (peak %.0f), matmul 512 tokens %.2f TFLOP/s\n",
                    std::string(quant::type_name(t)).c_str(), gbps, peak_gbps, tflops);
        EXPECT_TRUE(finite_positive(gbps)) << quant::type_name(t);
        EXPECT_TRUE(finite_positive(tflops)) << quant::type_name(t);
    }
    EXPECT_THROW(probe_matvec_gbps(TypeId::q8_k, size_t{1} << 20, 1), Error);
}

// The decode probes of latency-bound launches: positive and finite, and the DeltaNet step's state
// size is Qwen3.6's layer state.
TEST(CudaProbe, MoeDecodeAndDeltaNetStep) {
    MOX_REQUIRE_CUDA_DEVICE();
    for (const TypeId t : {TypeId::q4_k, TypeId::q6_k}) {
        const double moe = probe_moe_decode_gbps(t, 3);
        const double matvec = probe_matvec_gbps(t, size_t{128} << 20, 3);
        std::printf("[probe] %-8s MoE decode layer %.1f GB/s, matvec %.1f GB/s\n",
                    std::string(quant::type_name(t)).c_str(), moe, matvec);
        EXPECT_TRUE(finite_positive(moe)) << quant::type_name(t);
        EXPECT_TRUE(finite_positive(matvec)) << quant::type_name(t);
    }
    EXPECT_THROW(probe_moe_decode_gbps(TypeId::q8_k, 1), Error);
    uint64_t state = 0;
    const double step = probe_deltanet_step_s(&state, 3);
    std::printf("[probe] DeltaNet decode step %.2f us per layer, %llu bytes of state\n", step * 1e6,
                static_cast<unsigned long long>(state));
    EXPECT_TRUE(finite_positive(step));
    EXPECT_EQ(state, static_cast<uint64_t>((3 * 8192 + 32 * 128 * 128) * 4));
}

TEST(CudaProbe, AttentionDecode) {
    MOX_REQUIRE_CUDA_DEVICE();
    for (const int64_t keys : {1, 256, 512, 1024, 1025, 2048, 32768}) {
        const double s = probe_attention_decode_s(keys, 3);
        std::printf("[probe] decode attention over %lld keys: %.2f us per layer\n",
                    static_cast<long long>(keys), s * 1e6);
        EXPECT_TRUE(finite_positive(s)) << keys;
    }
    EXPECT_THROW(probe_attention_decode_s(0, 1), Error);
}

TEST(CudaProbe, GridBarrier) {
    MOX_REQUIRE_CUDA_DEVICE();
    for (const int per_sm : {1, 2}) {
        const double s = probe_grid_barrier_s(per_sm, 1000, 3);
        std::printf("[probe] grid-wide barrier, %d block(s) of 256 threads per SM: %.2f us\n", per_sm,
                    s * 1e6);
        EXPECT_TRUE(finite_positive(s)) << per_sm;
    }
    EXPECT_THROW(probe_grid_barrier_s(0, 10, 1), Error);
    EXPECT_THROW(probe_grid_barrier_s(1, 1, 1), Error);
}

TEST(CudaProbe, MoePrefillAndDeltaNetPrefill) {
    MOX_REQUIRE_CUDA_DEVICE();
    const double moe = probe_moe_prefill_tflops(TypeId::q4_k, 512, 3);
    const double dense = probe_matmul_tflops(TypeId::q4_k, 512, 3);
    std::printf("[probe] MoE prefill Q4_K %.2f TFLOP/s at 512 tokens (dense matmul %.2f)\n", moe, dense);
    EXPECT_TRUE(finite_positive(moe));
    EXPECT_TRUE(finite_positive(dense));
    EXPECT_THROW(probe_moe_prefill_tflops(TypeId::q8_k, 16, 1), Error);
    const double moe_4k = probe_moe_prefill_tflops(TypeId::q4_k, 4096, 2);  // calibrate's larger size
    std::printf("[probe] MoE prefill Q4_K %.2f TFLOP/s at 4096 tokens\n", moe_4k);
    EXPECT_TRUE(finite_positive(moe_4k));
    uint64_t state = 0;
    const double per_token = probe_deltanet_prefill_token_s(&state, 512, 3);
    const double step = probe_deltanet_step_s(nullptr, 3);
    std::printf("[probe] DeltaNet prefill %.3f us per token and layer (decode step %.2f us)\n",
                per_token * 1e6, step * 1e6);
    EXPECT_TRUE(finite_positive(per_token));
    EXPECT_TRUE(finite_positive(step));
    EXPECT_EQ(state, static_cast<uint64_t>((3 * 8192 + 32 * 128 * 128) * 4));
}

}  // namespace
}  // namespace mox::cuda

// A Gated DeltaNet layer of random constants and states for the CUDA DeltaNet tests and timings:
// host side (DeltaNetLayer, whose states the CPU composition updates) and its copy resident on the
// device (GpuDeltaNetLayer), plus one call's random inputs.
#pragma once

#include "cuda_test_util.h"

#include "ops/cuda_delta_net.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace mox::cuda::test {

struct DeltaNetCase {
    int64_t hk, hv, dk, dv;
    int64_t kernel = 4;
    int64_t x_pad = 0;  // x rows are channels + x_pad floats apart
};

// Layer constants and the running states, host side.
struct DeltaNetLayer {
    DeltaNetCase cs;
    int64_t C = 0;  // conv channels: 2 hk dk + hv dv
    std::vector<float> conv_w, a, dt_bias, norm;
    std::vector<float> conv_state, S;  // [(kernel-1)][C], [hv][dv][dk]

    DeltaNetLayer(const DeltaNetCase& c, uint32_t seed) : cs(c), C(2 * c.hk * c.dk + c.hv * c.dv) {
        conv_w = randn(static_cast<size_t>(C * c.kernel), seed, 0.5f);
        a = randn(static_cast<size_t>(c.hv), seed + 1, 0.5f);
        // ssm_a = -exp(A_log) < 0; small, so decays are near 1 (about 0.97) as in trained models and
        // the state remembers tens of tokens (rounding differences can accumulate).
        for (float& x : a) x = -std::exp(x - 3.0f);
        dt_bias = randn(static_cast<size_t>(c.hv), seed + 2, 0.5f);
        norm = randn(static_cast<size_t>(c.dv), seed + 3, 0.1f);
        for (float& x : norm) x += 1.0f;
        conv_state = randn(static_cast<size_t>((c.kernel - 1) * C), seed + 4);
        S = randn(static_cast<size_t>(c.hv * c.dv * c.dk), seed + 5, 0.1f);
    }
};

// One call's inputs: x [n][C + x_pad] (the qkv projection), b / alpha [n][hv], z [n][hv dv].
struct DeltaNetInputs {
    int64_t n;
    std::vector<float> x, b, alpha, z;
};

inline DeltaNetInputs make_inputs(const DeltaNetLayer& L, int64_t n, uint32_t seed) {
    const DeltaNetCase& c = L.cs;
    return DeltaNetInputs{.n = n,
                          .x = randn(static_cast<size_t>(n * (L.C + c.x_pad)), seed),
                          .b = randn(static_cast<size_t>(n * c.hv), seed + 1),
                          .alpha = randn(static_cast<size_t>(n * c.hv), seed + 2),
                          .z = randn(static_cast<size_t>(n * c.hv * c.dv), seed + 3)};
}

// The same layer on the GPU: weights and states resident, inputs uploaded per call.
struct GpuDeltaNetLayer {
    DeltaNetCase cs;
    int64_t C;
    DeviceBuffer conv_w, a, dt_bias, norm, conv_state, S;

    explicit GpuDeltaNetLayer(const DeltaNetLayer& L)
        : cs(L.cs),
          C(L.C),
          conv_w(to_device(L.conv_w)),
          a(to_device(L.a)),
          dt_bias(to_device(L.dt_bias)),
          norm(to_device(L.norm)),
          conv_state(to_device(L.conv_state)),
          S(to_device(L.S)) {}

    DeltaNetShape shape() const { return {.n_k_heads = cs.hk, .n_v_heads = cs.hv, .dk = cs.dk, .dv = cs.dv}; }
    DeltaNetWeights weights() const {
        return {.a = a.as<float>(), .dt_bias = dt_bias.as<float>(), .norm = norm.as<float>()};
    }
};

// The shape of Qwen3.5/3.6-MoE's DeltaNet layers.
inline const DeltaNetCase kDeltaNetReal{.hk = 16, .hv = 32, .dk = 128, .dv = 128};

}  // namespace mox::cuda::test

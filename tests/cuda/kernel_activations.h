// The activations the batch-1 CUDA kernels actually multiply with: for weight types with 8-bit
// activations (cuda::int8_activations), x quantized per 32-value segment by the rule documented in
// quant/cuda_matvec.h, emulated here on the host with the same fp32 operations; otherwise x itself.
// References built on these check the kernels to fp32 summation order instead of to the (much
// larger) error of 8-bit activations.
#pragma once

#include "quant/cuda_matvec.h"
#include "quant/types.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace mox::cuda::test {

inline std::vector<double> kernel_activations(quant::TypeId type, const float* x, int64_t n) {
    std::vector<double> out(x, x + n);
    if (!int8_activations(type)) return out;
    const std::vector<int64_t> elems = activation_segments(type, n);
    for (size_t g = 0; g < elems.size() / 32; ++g) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j)
            if (const int64_t e = elems[32 * g + j]; e >= 0) amax = std::max(amax, std::fabs(x[e]));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        const float dx = amax / 127.0f;
        for (int j = 0; j < 32; ++j)
            if (const int64_t e = elems[32 * g + j]; e >= 0)
                out[static_cast<size_t>(e)] = static_cast<double>(dx) * std::nearbyint(x[e] * inv);
    }
    return out;
}

}  // namespace mox::cuda::test

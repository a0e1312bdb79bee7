// Shared helpers of the CUDA tests (mox_cuda_tests, built only with -DMOX_CUDA=ON).
#pragma once

#include "ops/cuda_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

// Every CUDA test starts with this: a CUDA-enabled build's ctest on a machine without a GPU (CI,
// laptops) skips instead of failing.
#define MOX_REQUIRE_CUDA_DEVICE()                                                                           \
    do {                                                                                                    \
        if (::mox::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device (or driver) on this machine"; \
    } while (0)

namespace mox::cuda::test {

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

template <typename T>
DeviceBuffer to_device(const std::vector<T>& host) {
    DeviceBuffer buf(host.size() * sizeof(T));
    buf.upload(host.data(), host.size() * sizeof(T));
    return buf;
}

template <typename T>
std::vector<T> to_host(const DeviceBuffer& buf, size_t count) {
    std::vector<T> host(count);
    buf.download(host.data(), count * sizeof(T));
    return host;
}

}  // namespace mox::cuda::test

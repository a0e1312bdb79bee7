// Shared helpers of the CUDA tests (mox_cuda_tests, built only with -DMOX_CUDA=ON).
#pragma once

#include "ops/cuda_memory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

// Every CUDA test starts with this: a CUDA-enabled build's ctest on a machine without a GPU (CI,
// laptops) skips instead of failing.
#define MOX_REQUIRE_CUDA_DEVICE()                                                                           \
    do {                                                                                                    \
        if (::mox::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device (or driver) on this machine"; \
    } while (0)

namespace mox::cuda::test {

// fn(i) for every i in [0, n), spread over the machine's hardware threads: the tests' host-side
// quantization and double-precision references, which took most of the CUDA suite's time on the GPU
// machine (one core of sixteen). fn must only write state of its own i.
template <class Fn>
void parallel_for(int64_t n, Fn&& fn) {
    const int64_t n_threads =
        std::max<int64_t>(1, std::min<int64_t>(n, static_cast<int64_t>(std::thread::hardware_concurrency())));
    std::atomic<int64_t> next{0};
    auto worker = [&] {
        for (int64_t i = next++; i < n; i = next++) fn(i);
    };
    std::vector<std::thread> pool;
    for (int64_t t = 1; t < n_threads; ++t) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();
}

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

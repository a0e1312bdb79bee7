#include "core/error.h"
#include "ops/cuda_device.h"

#include "quant/cuda/check.cuh"

namespace mox::ops {

std::vector<CudaDeviceInfo> cuda_devices() {
    int count = 0;
    MOX_CUDA_CHECK(cudaGetDeviceCount(&count));
    std::vector<CudaDeviceInfo> out;
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop{};
        MOX_CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
        CudaDeviceInfo info;
        info.index = i;
        info.name = prop.name;
        info.cc_major = prop.major;
        info.cc_minor = prop.minor;
        info.sm_count = prop.multiProcessorCount;
        int clock_khz = 0, bus_bits = 0;
        MOX_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, i));
        MOX_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, i));
        info.peak_bandwidth = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0);  // double data rate
        MOX_CUDA_CHECK(cudaSetDevice(i));
        size_t free_b = 0, total_b = 0;
        MOX_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        info.free_bytes = free_b;
        info.total_bytes = total_b;
        out.push_back(info);
    }
    return out;
}

}  // namespace mox::ops

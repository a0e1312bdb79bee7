// CUDA devices as seen by the runtime. Plain C++: the rest of mox never includes CUDA headers
// (STYLE.md #8); the implementation lives in ops/cuda/*.cu and is linked only with -DMOX_CUDA=ON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mox::ops {

struct CudaDeviceInfo {
    int index = 0;
    std::string name;
    int cc_major = 0, cc_minor = 0;
    int sm_count = 0;
    uint64_t total_bytes = 0;
    uint64_t free_bytes = 0;
    double peak_bandwidth = 0;  // bytes/s from memory clock and bus width, as the driver reports them
};

// All visible devices. Throws mox::Error naming the failing CUDA call (e.g. no driver).
std::vector<CudaDeviceInfo> cuda_devices();

}  // namespace mox::ops

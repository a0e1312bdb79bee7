// What the CPU kernel benchmarks (mox_kernel_bench, mox_moe_bench) share: weight bytes to time
// kernels on, and the process's CPU time.
#pragma once

#include "quant/random_blocks.h"
#include "quant/types.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <vector>

namespace mox::bench {

// `rows` rows of `type` ([rows, n_in]) at dst: a seed of up to `seed_rows` distinct valid rows
// (quant::random_valid_blocks: quantized Gaussian values, or random grid codes with sane scales)
// tiled in a scrambled order, so neighbouring rows differ and filling gigabytes stays quick.
inline void fill_weight_rows(quant::TypeId type, int64_t n_in, size_t rows, uint8_t* dst, uint32_t seed,
                             size_t seed_rows = 256) {
    const quant::TypeTraits& t = quant::traits(type);
    const size_t rb = quant::row_bytes(type, n_in);
    seed_rows = std::max<size_t>(1, std::min(seed_rows, rows));
    const std::vector<uint8_t> blocks =
        quant::random_valid_blocks(type, static_cast<int64_t>(seed_rows) * (n_in / t.block_elems), seed);
    for (size_t r = 0; r < rows; ++r)
        std::memcpy(dst + r * rb, blocks.data() + ((r * 97 + r / seed_rows) % seed_rows) * rb, rb);
}

// CPU seconds of the whole process. Over a timed pass, this divided by (wall time x threads) is the
// share of the cores the run actually got: on a shared machine a share well below 1 means the GB/s
// are scaled down by other processes, not by the kernel.
inline double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace mox::bench

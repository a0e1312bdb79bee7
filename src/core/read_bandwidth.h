// The host memory read bandwidth (STREAM-style): what `mox bench` sets CPU decode against, taken in
// the same run as the benchmark (a datasheet figure or another day's measurement would hide what
// this machine, with this load and these threads, can actually stream), and what `mox calibrate`
// records as the profile's DRAM rate. One measurement for both, so the two agree.
#pragma once

#include <cstdint>

namespace mox {

// Bytes of the last-level cache (the largest /sys/devices/system/cpu/cpu0/cache/index*/size); 0
// when it cannot be read.
uint64_t last_level_cache_bytes();

// The buffer the measurement reads: twice the last-level cache so that most reads come from DRAM,
// at least 256 MiB, and rounded up to a multiple of 4 KiB.
uint64_t bandwidth_buffer_bytes();

struct ReadBandwidth {
    double bytes_per_s = 0;  // best of the passes (as STREAM reports)
    uint64_t buffer_bytes = 0;
    int threads = 0;
    int passes = 0;
};

// STREAM-style read: `threads` threads each sum their contiguous slice of a buffer of
// `buffer_bytes` (first touched by the same threads, so pages sit where they are read), `passes`
// times; a pass is timed from start until the last thread is done.
ReadBandwidth measure_read_bandwidth(int threads, uint64_t buffer_bytes, int passes = 4);

}  // namespace mox
